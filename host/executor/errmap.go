package executor

import (
	"github.com/kvpilot/kvpilot/host/errmap"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// fromCache wraps an index error as a registry error (host/errmap holds
// the one table of codes), keeping the index's message (which names the
// block, tier or budget) as the detail.
func fromCache(err error) *errcode.Error {
	if err == nil {
		return nil
	}
	if errmap.Code(err) == errcode.Internal {
		return errcode.Wrap(errcode.Internal, err, "cache index")
	}
	return errmap.Wrap(err, "")
}
