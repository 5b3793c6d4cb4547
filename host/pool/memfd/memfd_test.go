package memfd

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
	"github.com/kvpilot/kvpilot/host/tier"
)

func testLayout() *layout.Layout {
	l := layout.MHA("test-model", 4, layout.FP16, 3, 2, 8, 8, layout.HalfSplit)
	return &l
}

// fill writes a page whose every byte depends on seed and position, so a
// page landing in the wrong slot or a segment in the wrong place is seen.
func fill(p []byte, seed uint64) []byte {
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range p {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
	return p
}

func newArena(t testing.TB, arr layout.Arrangement, pages int) *Arena {
	t.Helper()
	a, err := New(Options{Tier: tier.Host, Layout: testLayout(), Pages: pages, Arrangement: arr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestRoundTrip(t *testing.T) {
	for _, arr := range []layout.Arrangement{layout.PageMajor, layout.LayerMajor} {
		t.Run(arr.String(), func(t *testing.T) {
			a := newArena(t, arr, 5)
			pb := a.Layout().PageBytes()
			s, err := a.Alloc(nil, 5)
			if err != nil {
				t.Fatal(err)
			}
			for i, slot := range s {
				if err := a.WritePage(slot, fill(make([]byte, pb), uint64(i))); err != nil {
					t.Fatal(err)
				}
			}
			got := make([]byte, pb)
			for i, slot := range s {
				if err := a.ReadPage(slot, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, fill(make([]byte, pb), uint64(i))) {
					t.Fatalf("slot %d read back different bytes", slot)
				}
			}
			if arr == layout.LayerMajor {
				// The arena really is layer-major: layer 0's K segment of
				// slot 1 sits right after slot 0's.
				want := fill(make([]byte, pb), 1)[:a.Layout().SegmentBytes(0)]
				off := a.Layout().SegmentBytes(0)
				if !bytes.Equal(a.Bytes()[off:off+len(want)], want) {
					t.Fatal("layer-major arena does not place slot 1's first segment after slot 0's")
				}
				if _, err := a.PageView(s[0]); !errors.Is(err, errors.ErrUnsupported) {
					t.Fatalf("PageView on layer-major: %v", err)
				}
			} else {
				v, err := a.PageView(s[2])
				if err != nil || !bytes.Equal(v, fill(make([]byte, pb), 2)) {
					t.Fatalf("PageView: %v", err)
				}
			}
			if st := a.Stats(); st.Used != 5 || st.Free != 0 || st.Capacity != 5 || st.PageBytes != pb {
				t.Fatalf("stats %+v", st)
			}
			if _, err := a.Alloc(nil, 1); !errors.Is(err, pool.ErrFull) {
				t.Fatalf("alloc on full arena: %v", err)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	a := newArena(t, layout.PageMajor, 2)
	pb := a.Layout().PageBytes()
	if err := a.WritePage(0, make([]byte, pb-1)); !errors.Is(err, pool.ErrPageSize) {
		t.Fatalf("short page: %v", err)
	}
	if err := a.ReadPage(2, make([]byte, pb)); !errors.Is(err, pool.ErrBadSlot) {
		t.Fatalf("slot out of range: %v", err)
	}
	if err := a.Free(0); !errors.Is(err, pool.ErrDoubleFree) {
		t.Fatalf("free of a free slot: %v", err)
	}
	if _, err := New(Options{Tier: tier.Host, Layout: testLayout(), Pages: 0}); err == nil {
		t.Fatal("zero pages accepted")
	}
	bad := testLayout()
	bad.PageSize = 0
	if _, err := New(Options{Tier: tier.Host, Layout: bad, Pages: 1}); !errors.Is(err, layout.ErrInvalid) {
		t.Fatalf("invalid layout: %v", err)
	}
	s, _ := a.Alloc(nil, 1)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.ReadPage(s[0], make([]byte, pb)); !errors.Is(err, pool.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestSealed checks the engine cannot shrink the arena under the host.
func TestSealed(t *testing.T) {
	a := newArena(t, layout.PageMajor, 2)
	v, err := OpenView(a.Handle().FD, a.Handle(), a.Layout())
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := unix.Ftruncate(a.Handle().FD, 0); err == nil {
		t.Fatal("arena memfd could be truncated")
	}
	other := *a.Layout()
	other.Model = "another"
	if _, err := OpenView(a.Handle().FD, a.Handle(), &other); err == nil {
		t.Fatal("view opened under a different layout")
	}
}

func TestConcurrentCopies(t *testing.T) {
	a := newArena(t, layout.LayerMajor, 64)
	pb := a.Layout().PageBytes()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			buf, got := make([]byte, pb), make([]byte, pb)
			for i := 0; i < 200; i++ {
				s, err := a.Alloc(nil, 1)
				if err != nil {
					t.Error(err)
					return
				}
				fill(buf, uint64(g*1000+i))
				if err := a.WritePage(s[0], buf); err != nil {
					t.Error(err)
				}
				if err := a.ReadPage(s[0], got); err != nil || !bytes.Equal(buf, got) {
					t.Errorf("slot %d: %v or bytes differ", s[0], err)
				}
				if err := a.Free(s...); err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
}
