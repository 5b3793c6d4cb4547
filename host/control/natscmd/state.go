package natscmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// commandState is what the command plane remembers across restarts
// (Config.StateFile), so that no command is applied twice whatever the
// history of nats.jetstream_commands:
//
//   - JetStream: whether the last run took its commands through the
//     stream. A run without it applied commands directly, and the stream,
//     if it outlived a failed clean-up, may hold them too: the next run
//     with JetStream replays none of what the stream held when it starts.
//   - Stream, Created: the stream incarnation Taken counts in (a stream
//     created anew numbers its commands from 1 again).
//   - Taken: the stream sequence of the last command taken for
//     application. It is written before the command is applied, so a
//     command redelivered after a restart (its ack lost, or the host killed
//     before acknowledging) is recognised and acknowledged, never applied
//     again; a host killed between the two loses that one command instead.
type commandState struct {
	JetStream bool   `json:"jetstream"`
	Stream    string `json:"stream,omitempty"`
	Created   string `json:"created,omitempty"`
	Taken     uint64 `json:"taken,omitempty"`
}

// stateRecord is the file's fixed size: each save overwrites it with one
// write, which a process that dies mid-way cannot tear.
const stateRecord = 512

// stateFile keeps a commandState in a file, or only in memory when it has
// no path.
type stateFile struct {
	f   *os.File
	cur commandState
}

// openState opens (creating) the state file at path and returns what it
// held: had is false for a new file.
func openState(path string) (s *stateFile, prev commandState, had bool, err error) {
	s = &stateFile{}
	if path == "" {
		return s, prev, false, nil
	}
	s.f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, prev, false, fmt.Errorf("natscmd: state file: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(s.f, stateRecord))
	if err != nil {
		s.f.Close()
		return nil, prev, false, fmt.Errorf("natscmd: state file %s: %w", path, err)
	}
	if b = bytes.TrimSpace(b); len(b) == 0 {
		return s, prev, false, nil
	}
	if err := json.Unmarshal(b, &prev); err != nil {
		// Unreadable history is no history; the next save rewrites it.
		return s, commandState{}, false, nil
	}
	s.cur = prev
	return s, prev, true, nil
}

// save records st (in memory even when the file cannot be written).
func (s *stateFile) save(st commandState) error {
	s.cur = st
	if s.f == nil {
		return nil
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if len(b) >= stateRecord {
		return fmt.Errorf("natscmd: state of %d bytes", len(b))
	}
	b = append(b, strings.Repeat(" ", stateRecord-1-len(b))+"\n"...)
	if _, err := s.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("natscmd: state file %s: %w", s.f.Name(), err)
	}
	return nil
}

func (s *stateFile) close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	if errors.Is(err, fs.ErrClosed) {
		return nil
	}
	return err
}
