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
		t.Skip("no AVX2: segment copies use copy")
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
