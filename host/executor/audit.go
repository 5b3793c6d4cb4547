package executor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// Record is one audit log entry: one directive of one turn, applied or
// refused. Refused turns are recorded too: who tried what matters most then.
type Record struct {
	Time   time.Time `json:"time"`
	TurnID string    `json:"turn_id,omitempty"`
	Source string    `json:"source"`
	Tenant string    `json:"tenant"`
	Index  int       `json:"index"`
	// Verb is the directive's verb, or the cache_control action.
	Verb   string           `json:"verb"`
	Mode   string           `json:"mode,omitempty"`
	Target string           `json:"target,omitempty"` // a short description: hashes, lease, span
	Status string           `json:"status"`
	Effect directive.Effect `json:"effect"`
	Code   errcode.Code     `json:"code,omitempty"`
	Detail string           `json:"detail,omitempty"`
}

// Refused completes rec as the record of a call refused before it reached
// the executor (a Control uid's or a NATS subject's tenant binding): the
// time, an error status, e's code and text. The control planes append it
// to the executor's own log, so an operator reads one trail.
func Refused(rec Record, e *errcode.Error) Record {
	rec.Time, rec.Status, rec.Code, rec.Detail = time.Now(), directive.StatusError, e.Code, e.Error()
	return rec
}

// AuditLog receives the records of each turn, in order. Append is called
// once per turn, after the turn was applied or refused, outside the index
// lock; implementations must be safe for concurrent use.
type AuditLog interface {
	Append(recs []Record) error
}

// FileAudit appends JSON lines to a file opened O_APPEND with mode 0600.
// A turn's lines are always written together, in order, so concurrent
// writers (or a crash) never interleave a turn's lines with another's.
//
// With Sync set, Append writes and fsyncs each turn before it returns.
// Without it, Append queues the lines and returns, and they are written
// in one call with those of the next WriteBehind: a write is several
// microseconds of a directive's round trip, while the audit log is a
// trail for operators, not the host's state (pins and leases are saved
// apart, host/meta). A crash can lose the last WriteBehind of lines;
// Flush writes them now, and Close writes what is left.
type FileAudit struct {
	mu   sync.Mutex
	f    *os.File
	sync bool
	// pending are the records appended and not yet written; encoding them
	// waits for the write too. Records are values: a caller never changes
	// one it appended.
	pending []Record
	spare   []Record
	buf     []byte // Flush's encoding buffer (under wmu)
	timer   *time.Timer
	// werr is the last write's failure, reported by the next Append.
	werr error
	// wmu orders writes: lines reach the file in the order of Append.
	wmu       sync.Mutex
	closeOnce sync.Once
	closeErr  error
}

// WriteBehind is how long a FileAudit without Sync holds lines before it
// writes them.
const WriteBehind = time.Millisecond

// OpenFileAudit opens (creating if needed) the audit log at path.
func OpenFileAudit(path string, fsync bool) (*FileAudit, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	a := &FileAudit{f: f, sync: fsync}
	a.timer = time.AfterFunc(time.Hour, a.Flush)
	a.timer.Stop()
	return a, nil
}

// Append writes recs as JSON lines (see FileAudit for when).
func (a *FileAudit) Append(recs []Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return fmt.Errorf("audit log: %w", os.ErrClosed)
	}
	if a.sync {
		lines, err := encodeRecords(nil, recs)
		if err != nil {
			return err
		}
		if _, err := a.f.Write(lines); err != nil {
			return fmt.Errorf("audit log: write %s: %w", a.f.Name(), err)
		}
		if err := a.f.Sync(); err != nil {
			return fmt.Errorf("audit log: fsync %s: %w", a.f.Name(), err)
		}
		return nil
	}
	if len(a.pending) == 0 {
		a.timer.Reset(WriteBehind)
	}
	a.pending = append(a.pending, recs...)
	err := a.werr
	a.werr = nil
	return err
}

// encodeRecords appends recs to buf as JSON lines.
func encodeRecords(buf []byte, recs []Record) ([]byte, error) {
	for i := range recs {
		line, err := json.Marshal(&recs[i])
		if err != nil {
			return buf, fmt.Errorf("audit log: encode record: %w", err)
		}
		buf = append(append(buf, line...), '\n')
	}
	return buf, nil
}

// Flush writes every record appended so far.
func (a *FileAudit) Flush() {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	a.mu.Lock()
	recs, f := a.pending, a.f
	a.pending, a.spare = a.spare[:0], nil
	a.mu.Unlock()
	if len(recs) == 0 || f == nil {
		return
	}
	var err error
	if a.buf, err = encodeRecords(a.buf[:0], recs); err == nil {
		if _, werr := f.Write(a.buf); werr != nil {
			err = fmt.Errorf("audit log: write %s: %w", f.Name(), werr)
		}
	}
	clear(recs) // drop the strings they hold
	a.mu.Lock()
	defer a.mu.Unlock()
	a.spare = recs[:0]
	if err != nil {
		a.werr = err
	}
}

// Close writes what is queued and closes the file.
func (a *FileAudit) Close() error {
	a.closeOnce.Do(func() {
		a.timer.Stop()
		a.Flush()
		a.wmu.Lock()
		defer a.wmu.Unlock()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.closeErr = errors.Join(a.werr, a.f.Close())
		a.f = nil
	})
	return a.closeErr
}

// ReadAuditFile reads a JSON-lines audit log back, for tools and tests.
func ReadAuditFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("read audit log %s line %d: %w", path, line, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// Ring keeps the last N records in memory: for tests, and for a `ctl` view
// of recent directives without reading the file.
type Ring struct {
	mu    sync.Mutex
	recs  []Record
	next  int
	full  bool
	total uint64
}

// NewRing returns a ring holding the last n records (n >= 1).
func NewRing(n int) *Ring {
	if n < 1 {
		n = 1
	}
	return &Ring{recs: make([]Record, n)}
}

// Append adds recs, overwriting the oldest.
func (r *Ring) Append(recs []Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range recs {
		r.recs[r.next] = rec
		r.next++
		r.total++
		if r.next == len(r.recs) {
			r.next, r.full = 0, true
		}
	}
	return nil
}

// Records returns the held records, oldest first.
func (r *Ring) Records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]Record(nil), r.recs[:r.next]...)
	}
	return append(append([]Record(nil), r.recs[r.next:]...), r.recs[:r.next]...)
}

// Total counts every record ever appended.
func (r *Ring) Total() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// Tee appends to every log in order and returns the first error, after
// trying them all.
type Tee []AuditLog

// Append implements AuditLog.
func (t Tee) Append(recs []Record) error {
	var first error
	for _, l := range t {
		if err := l.Append(recs); err != nil && first == nil {
			first = err
		}
	}
	return first
}
