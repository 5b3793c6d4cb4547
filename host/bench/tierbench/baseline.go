package tierbench

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/kvpilot/kvpilot/host/pool/memfd"
)

// The memory baseline is the best copy this machine makes of the same
// bytes (host arena to a second arena, the run's pages), measured in the
// same run by every method at hand: Go's copy (the runtime's memmove),
// REP MOVSB (what C memcpy does for large copies on CPUs with ERMS) and
// non-temporal AVX2 stores (what the arenas use for large pages). It is
// measured on one core and across the cores the mover may use (each share
// of the pages on a goroutine locked to its own thread), and each round's
// baseline is that round's fastest method, so a tier pair's ratio of 1
// means it moves pages as fast as this machine copies memory, on as many
// cores.

// copyMethod is one way to copy a page.
type copyMethod struct {
	name string
	fn   func(dst, src []byte)
}

// copyMethods are the methods this CPU has.
func copyMethods() []copyMethod {
	ms := []copyMethod{{"go", func(dst, src []byte) { copy(dst, src) }}}
	if hasERMS {
		ms = append(ms, copyMethod{"erms", func(dst, src []byte) { copyERMS(&dst[0], &src[0], len(src)) }})
	}
	probe := make([]byte, 256)
	if memfd.CopyStreaming(probe[128:], probe[:128]) {
		ms = append(ms, copyMethod{"nt", func(dst, src []byte) {
			if !memfd.CopyStreaming(dst, src) {
				copy(dst, src)
			}
		}})
	}
	return ms
}

// armName is an arm's name on cores cores: "memcpy_go", "memcpy_go_x2".
func armName(name string, cores int) string {
	if cores <= 1 {
		return name
	}
	return fmt.Sprintf("%s_x%d", name, cores)
}

// onCores is an arm that runs page on each of pages [0, n): in order on
// one core, or in cores contiguous shares, each on a goroutine locked to an
// OS thread. The first error of a share stops it and is returned.
func onCores(cores int, page func(i int) error) func(n int) error {
	share := func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			if err := page(i); err != nil {
				return err
			}
		}
		return nil
	}
	return func(n int) error {
		if cores <= 1 {
			return share(0, n)
		}
		var wg sync.WaitGroup
		errs := make([]error, cores)
		for k := range cores {
			wg.Go(func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				errs[k] = share(k*n/cores, (k+1)*n/cores)
			})
		}
		wg.Wait()
		return cmp.Or(errs...)
	}
}

// copyWith is a baseline arm: n host pages copied to the raw arena by m.
func (f *Fixture) copyWith(m copyMethod, cores int) func(n int) error {
	pb := f.lay.PageBytes()
	src, dst := f.host.Bytes(), f.raw.Bytes()
	return onCores(cores, func(i int) error {
		off := (i % f.pages) * pb
		m.fn(dst[off:off+pb], src[off:off+pb])
		return nil
	})
}

// deviceCopyOn moves n pages between the host and the device arena (a
// layer-major scatter or gather), shared among cores.
func (f *Fixture) deviceCopyOn(cores int, toDevice bool) func(n int) error {
	return onCores(cores, func(i int) error {
		if toDevice {
			return f.dev.WritePage(f.devSlots[i%f.pages], f.hostView(i))
		}
		return f.dev.ReadPage(f.devSlots[i%f.pages], f.hostView(i))
	})
}

// Baseline is the memory baseline on some cores: the fastest method's
// median GB/s, and the method fastest in most rounds.
type Baseline struct {
	Cores  int     `json:"cores"`
	Method string  `json:"method"`
	GBps   float64 `json:"gb_per_s"`
}

// bestOf returns, per round, the fastest of the named arms' seconds, and
// the index of the arm fastest in most rounds.
func bestOf(secs map[string][]float64, names []string) ([]float64, int) {
	rounds := len(secs[names[0]])
	best := make([]float64, rounds)
	wins := make([]int, len(names))
	for i := range rounds {
		who := 0
		for k := range names {
			if secs[names[k]][i] < secs[names[who]][i] {
				who = k
			}
		}
		best[i] = secs[names[who]][i]
		wins[who]++
	}
	return best, slices.Index(wins, slices.Max(wins))
}
