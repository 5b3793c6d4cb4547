package disk

import (
	"fmt"

	"github.com/kvpilot/kvpilot/host/pool"
)

// scan rebuilds the index from the page file. Valid records are reserved
// in the allocator; a key found twice keeps its higher generation (a Put
// that crashed before retiring the old copy); invalid records are
// tombstoned and counted as corrupt. The file is then sized to capacity.
func (s *Store) scan(verifyPayload bool) error {
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("disk store %s: %w", s.path, err)
	}
	records := st.Size() / s.rec
	if records > int64(s.alloc.Capacity()) {
		s.log.Warn("page file holds more records than the configured capacity; the excess is dropped",
			"file", s.path, "records", records, "capacity", s.alloc.Capacity())
		records = int64(s.alloc.Capacity())
	}
	fd := int(s.f.Fd())
	hb := make([]byte, headerSize)
	var page []byte
	if verifyPayload {
		page = make([]byte, s.pb)
	}
	var found, dropped int
	for slot := pool.Slot(0); int64(slot) < records; slot++ {
		off := int64(slot) * s.rec
		if err := preadvFull(fd, [][]byte{hb}, s.headerOffset(slot)); err != nil {
			return fmt.Errorf("disk store %s: scanning slot %d: %w", s.path, slot, err)
		}
		var h header
		err := h.decode(hb)
		if err == errFree {
			continue
		}
		if err == nil {
			switch {
			case h.fp != s.fp:
				err = fmt.Errorf("record is for layout %s, not %s", h.fp, s.fp)
			case int(h.length) != s.pb:
				err = fmt.Errorf("record length %d, page is %d", h.length, s.pb)
			}
		}
		if err == nil && verifyPayload {
			if rerr := preadvFull(fd, [][]byte{page}, off); rerr != nil {
				return fmt.Errorf("disk store %s: scanning slot %d: %w", s.path, slot, rerr)
			}
			err = s.verify(hb, h.entry.Key, h.gen, page, payloadSum(page))
		}
		if err != nil {
			dropped++
			s.corrupt++
			s.log.Warn("dropped corrupt page at start", "file", s.path, "slot", slot, "error", err)
			s.tombstone(slot)
			continue
		}
		if err := s.alloc.Reserve(slot); err != nil {
			return fmt.Errorf("disk store %s: %w", s.path, err)
		}
		found++
		if h.gen >= s.nextGen {
			s.nextGen = h.gen + 1
		}
		e := &entry{meta: h.entry, slot: slot, gen: h.gen}
		if old := s.index[h.entry.Key]; old != nil {
			if old.gen > e.gen {
				old, e = e, old
			}
			s.retireLocked(old)
			found--
		}
		s.index[h.entry.Key] = e
	}
	if want := int64(s.alloc.Capacity()) * s.rec; st.Size() != want {
		if err := s.f.Truncate(want); err != nil {
			return fmt.Errorf("disk store %s: sizing to %d pages: %w", s.path, s.alloc.Capacity(), err)
		}
	}
	s.log.Info("disk store opened", "file", s.path, "pages", found, "dropped", dropped, "capacity", s.alloc.Capacity())
	return nil
}
