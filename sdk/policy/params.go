package policy

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// DecodeParams decodes a policy's params strictly: an unknown key is an
// error naming it, so a typo in the host config fails at load instead of
// silently running with a default.
func DecodeParams(raw json.RawMessage, into any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		// In JSON's words, not Go's: an operator reads it in the host's log.
		return fmt.Errorf("params: %s", errcode.FromJSON(err, "params").Details())
	}
	return nil
}
