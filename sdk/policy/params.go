package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
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
		return fmt.Errorf("params: %w", err)
	}
	return nil
}
