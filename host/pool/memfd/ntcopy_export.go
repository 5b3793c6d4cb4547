package memfd

// CopyStreaming copies src into dst (the same length) with non-temporal
// stores, as the arenas copy large pages, and reports whether it could:
// false, having copied nothing, without AVX2, under the race detector, or
// for fewer than 128 bytes. Benchmarks measure it as a baseline.
func CopyStreaming(dst, src []byte) bool {
	if !streamingStores || len(src) < 128 || len(dst) < len(src) {
		return false
	}
	streamCopy(dst[:len(src)], src)
	return true
}
