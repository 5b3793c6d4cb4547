package memfd

import "unsafe"

// streamingMin is the page size from which segment copies use streaming
// (non-temporal) stores. Go's copy switches to them itself for a single
// copy of 1 MiB or more, which is what a page-major page gets; a
// layer-major page is gathered from many smaller segments (32 KiB for an
// 8B model), which copy would write through the cache, paying a read of
// each destination line first. Below this size a page is better left in
// the cache for whoever reads it next.
const streamingMin = 1 << 20

// segmentCopy copies src into dst (same length) as part of a page of
// pageBytes, with streaming stores where the page is large and the
// destination allows them.
func segmentCopy(dst, src []byte, pageBytes int) {
	n := len(src)
	if !streamingStores || pageBytes < streamingMin || n < 128 || len(dst) < n {
		copy(dst, src)
		return
	}
	streamCopy(dst[:n], src)
}

// streamCopy copies src into dst (same length, at least 128 bytes): the
// unaligned head and the tail with copy, the body with streaming stores.
func streamCopy(dst, src []byte) {
	n := len(src)
	d := unsafe.Pointer(unsafe.SliceData(dst))
	head := int((32 - uintptr(d)%32) % 32)
	if head > 0 {
		copy(dst[:head], src[:head])
	}
	body := (n - head) &^ 127
	if body > 0 {
		copyNT(&dst[head], &src[head], body)
	}
	if rest := head + body; rest < n {
		copy(dst[rest:n], src[rest:n])
	}
}
