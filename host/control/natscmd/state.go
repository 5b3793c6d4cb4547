package natscmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// commandState is what the command plane remembers across restarts
// (Config.StateFile), so that no command is applied twice whatever the
// history of nats.jetstream_commands:
//
//   - JetStream: whether the last run took its commands through the
//     stream. A run without it applied commands directly, and the stream,
//     if it outlived a failed clean-up, may hold them too: a run with
//     JetStream after one without replays none of what the stream held
//     when it started (HeldBefore).
//   - Stream, Created: the stream incarnation the sequences below count
//     in (a stream created anew numbers its commands from 1 again).
//   - HeldBefore: commands up to this stream sequence are never applied
//     (see JetStream).
//   - Unsure: commands applied whose acknowledgement failed (a leader
//     change, a lost connection). The stream may deliver them again; they
//     are then acknowledged, not applied. A command is acknowledged before
//     it is applied, so one that was acknowledged is never delivered again,
//     and only these few need remembering.
type commandState struct {
	JetStream  bool     `json:"jetstream"`
	Stream     string   `json:"stream,omitempty"`
	Created    string   `json:"created,omitempty"`
	HeldBefore uint64   `json:"held_before,omitempty"`
	Unsure     []uint64 `json:"unsure,omitempty"`
}

// unsure reports whether seq was applied with its acknowledgement failed.
func (st *commandState) unsure(seq uint64) bool { return slices.Contains(st.Unsure, seq) }

// forget drops from Unsure what the consumer acknowledged: seq, and every
// sequence at or below its ack floor (those are never delivered again).
func (st *commandState) forget(seq, ackFloor uint64) {
	st.Unsure = slices.DeleteFunc(st.Unsure, func(u uint64) bool { return u == seq || u <= ackFloor })
}

// stateFile keeps a commandState in a file, or only in memory when it has
// no path. It is written whole (a temporary file renamed over it) at start
// and when Unsure changes, which only failed acknowledgements do.
type stateFile struct {
	path string
	cur  commandState
}

// openState reads the state file at path and returns what it held: had
// is false when there is none (or it cannot be read: no history).
func openState(path string) (s *stateFile, prev commandState, had bool, err error) {
	s = &stateFile{path: path}
	if path == "" {
		return s, prev, false, nil
	}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, prev, false, nil
	case err != nil:
		return nil, prev, false, fmt.Errorf("natscmd: state file: %w", err)
	}
	if json.Unmarshal(b, &prev) != nil {
		return s, commandState{}, false, nil // rewritten at the next save
	}
	s.cur = prev
	return s, prev, true, nil
}

// save records st (in memory even when the file cannot be written).
func (s *stateFile) save(st commandState) error {
	s.cur = st
	if s.path == "" {
		return nil
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("natscmd: state file: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("natscmd: state file: %w", err)
	}
	return nil
}
