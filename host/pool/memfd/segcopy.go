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

// segmentBatch gathers a page's segment copies four at a time, so that
// four equal, aligned segments go through copyNT4 together: a layer-major
// page's segments lie an arena's layer apart (megabytes), and copying one
// at a time stalls on each segment's first misses. Measured on this
// project's 2-core machine, a 2 MiB page gathered from 64 segments went
// from about 0.8 of a contiguous memcpy to about 0.95 with four streams;
// two streams gave about 0.9, and two goroutines were slower than one.
type segmentBatch struct {
	pageBytes int
	n         int // copies held
	size      int // their common length
	dst, src  [4][]byte
}

// add queues one copy; the batch copies as soon as it holds four.
func (b *segmentBatch) add(dst, src []byte) {
	if b.n > 0 && len(src) != b.size {
		b.flush()
	}
	b.dst[b.n], b.src[b.n], b.size = dst, src, len(src)
	b.n++
	if b.n == len(b.dst) {
		b.flush()
	}
}

// flush copies what the batch holds: four at once where copyNT4 can take
// them, one by one otherwise.
func (b *segmentBatch) flush() {
	if b.n == len(b.dst) && b.quadOK() {
		var d, s [4]*byte
		for k := range d {
			d[k], s[k] = unsafe.SliceData(b.dst[k]), unsafe.SliceData(b.src[k])
		}
		copyNT4(&d, &s, b.size)
	} else {
		for k := range b.n {
			segmentCopy(b.dst[k], b.src[k], b.pageBytes)
		}
	}
	b.n = 0
}

func (b *segmentBatch) quadOK() bool {
	if !streamingStores || b.pageBytes < streamingMin || b.size < 128 || b.size%128 != 0 {
		return false
	}
	for k := range b.dst {
		if len(b.dst[k]) < b.size || uintptr(unsafe.Pointer(unsafe.SliceData(b.dst[k])))%32 != 0 {
			return false
		}
	}
	return true
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
