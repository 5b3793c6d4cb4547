package memfd

import (
	"bytes"
	"testing"

	"golang.org/x/sys/cpu"
)

// The streaming copy moves every byte, whatever the destination's
// alignment and the length's remainder, and nothing outside its range.
func TestStreamCopy(t *testing.T) {
	if !cpu.X86.HasAVX2 {
		t.Skip("this CPU has no AVX2 (cpu.X86.HasAVX2 is false), so segment copies use copy and the streaming copy never runs: run it on an x86-64 CPU with AVX2 (Haswell or later)")
	}
	src := make([]byte, 8192)
	for i := range src {
		src[i] = byte(i*31 + i>>8)
	}
	for _, align := range []int{0, 1, 7, 31, 32, 33, 63} {
		for _, n := range []int{128, 129, 255, 256, 1000, 4096, 8000} {
			dst := bytes.Repeat([]byte{0xEE}, n+200)
			streamCopy(dst[align:align+n], src[:n])
			if !bytes.Equal(dst[align:align+n], src[:n]) {
				t.Fatalf("align %d, %d bytes: copy differs", align, n)
			}
			for i, b := range dst {
				if (i < align || i >= align+n) && b != 0xEE {
					t.Fatalf("align %d, %d bytes: byte %d outside the range written", align, n, i)
				}
			}
		}
	}
}

// A batch moves every segment to its own destination, whether it goes
// four at a time (equal, aligned, a multiple of 128), one by one (mixed
// lengths, an unaligned destination), or as the leftovers of a page.
func TestSegmentBatch(t *testing.T) {
	src := make([]byte, 1<<16)
	for i := range src {
		src[i] = byte(i*31 + i>>8)
	}
	for _, c := range []struct {
		name  string
		sizes []int
		skew  int // destination misalignment
	}{
		{"four equal", []int{1024, 1024, 1024, 1024}, 0},
		{"nine equal", []int{512, 512, 512, 512, 512, 512, 512, 512, 512}, 0},
		{"mixed", []int{1024, 1024, 256, 256, 256, 256, 4096}, 0},
		{"unaligned", []int{1024, 1024, 1024, 1024}, 3},
		{"odd length", []int{1000, 1000, 1000, 1000}, 0},
	} {
		dst := bytes.Repeat([]byte{0xEE}, len(src)+64)
		b := segmentBatch{pageBytes: streamingMin}
		var off int
		for _, n := range c.sizes {
			// Segments land in reverse order so a copy to the wrong place shows.
			at := len(src) - off - n
			b.add(dst[c.skew+at:c.skew+at+n], src[off:off+n])
			off += n
		}
		b.flush()
		off = 0
		for _, n := range c.sizes {
			at := len(src) - off - n
			if !bytes.Equal(dst[c.skew+at:c.skew+at+n], src[off:off+n]) {
				t.Fatalf("%s: segment at %d differs", c.name, off)
			}
			off += n
		}
		for i := range c.skew {
			if dst[i] != 0xEE {
				t.Fatalf("%s: byte %d outside every segment written", c.name, i)
			}
		}
	}
}
