package disk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool"
)

// bigLayout has 1 MiB pages: past splitMin, so reads go as two halves.
func bigLayout() *layout.Layout {
	l := layout.MHA("big", 16, layout.BF16, 16, 8, 128, 128, layout.HalfSplit)
	return &l
}

// A flipped byte in either half of a split page is caught, and the page
// is dropped rather than handed out.
func TestSplitPageCorruptionInEitherHalf(t *testing.T) {
	l := bigLayout()
	pb := l.PageBytes()
	if pb < splitMin {
		t.Fatalf("page of %d bytes does not split", pb)
	}
	for _, at := range []int{3, pb/2 - 1, pb / 2, pb - 1} {
		dir := t.TempDir()
		s := open(t, dir, l, 2)
		k := pool.Key{Seq: 5}
		want := page(pb, 5)
		if err := s.Put(ctx, pool.Entry{Key: k}, want); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, pb)
		if err := s.Get(ctx, k, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("clean read: %v", err)
		}
		flipByte(t, s.Path(), int64(at))
		if err := s.Get(ctx, k, got); !errors.Is(err, pool.ErrCorrupt) {
			t.Fatalf("byte %d flipped: got %v, want ErrCorrupt", at, err)
		}
		if err := s.Get(ctx, k, got); !errors.Is(err, pool.ErrNotFound) {
			t.Fatalf("byte %d flipped: corrupt page still indexed: %v", at, err)
		}
		s.Close()
	}
}

// Records written before version 2 (one xxh3 over the whole page) are
// still found after a restart and still verified.
func TestVersion1RecordsStillRead(t *testing.T) {
	for _, l := range []*layout.Layout{testLayout("m"), bigLayout()} {
		pb := l.PageBytes()
		dir := t.TempDir()
		s := open(t, dir, l, 2)
		k := pool.Key{Namespace: "old", Seq: 7}
		want := page(pb, 7)
		if err := s.Put(ctx, pool.Entry{Key: k}, want); err != nil {
			t.Fatal(err)
		}
		s.Close()
		rewriteAsVersion1(t, s.Path(), pb, want)

		s = open(t, dir, l, 2)
		got := make([]byte, pb)
		if err := s.Get(ctx, k, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d-byte page: version 1 record not read back: %v", pb, err)
		}
		flipByte(t, s.Path(), int64(pb-1))
		if err := s.Get(ctx, k, got); !errors.Is(err, pool.ErrCorrupt) {
			t.Fatalf("%d-byte page: version 1 corruption not caught: %v", pb, err)
		}
		s.Close()
	}
}

// rewriteAsVersion1 turns slot 0's header into what a version 1 build
// wrote for page: version 1, the whole page's xxh3, a fresh header CRC.
func rewriteAsVersion1(t *testing.T, path string, pb int, page []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hb := make([]byte, headerSize)
	if _, err := f.ReadAt(hb, int64(pb)); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint16(hb[4:], versionWhole)
	binary.LittleEndian.PutUint64(hb[56:], xxh3.Hash(page))
	binary.LittleEndian.PutUint32(hb[hdrCRCOffset:], crc32.Checksum(hb[:hdrCRCOffset], castagnoli))
	if _, err := f.WriteAt(hb, int64(pb)); err != nil {
		t.Fatal(err)
	}
}
