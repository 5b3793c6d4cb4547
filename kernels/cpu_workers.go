package kernels

import (
	"sync"
	"sync/atomic"
)

// chunkRunner is one call's work, split by item ranges. Calls pass a pooled
// job pointer, so fanning out allocates nothing (a closure handed to a new
// goroutine would escape to the heap on every call).
type chunkRunner interface {
	runChunk(lo, hi int)
}

type chunkTask struct {
	r      chunkRunner
	wg     *sync.WaitGroup
	lo, hi int
}

// helpers are long-lived goroutines that run the chunks callers hand out.
// They are started on first need and grow to the most any CPU engine asked
// for (its worker count less one: the caller runs a chunk itself). Reusing
// them saves a goroutine start per chunk; an idle helper blocks on the
// channel and costs only its stack.
var helpers struct {
	mu    sync.Mutex
	n     atomic.Int32
	tasks chan chunkTask
}

func ensureHelpers(n int) {
	if int(helpers.n.Load()) >= n {
		return
	}
	helpers.mu.Lock()
	defer helpers.mu.Unlock()
	if helpers.tasks == nil {
		helpers.tasks = make(chan chunkTask, 64)
	}
	for int(helpers.n.Load()) < n {
		go helperLoop(helpers.tasks)
		helpers.n.Add(1)
	}
}

// helperLoop never blocks on anything but the task channel, so a caller
// waiting for its chunks always makes progress, however many calls share
// the helpers.
func helperLoop(tasks <-chan chunkTask) {
	for t := range tasks {
		t.r.runChunk(t.lo, t.hi)
		t.wg.Done()
	}
}

// minBytesPerWorker keeps small calls on one goroutine, where handing out
// chunks would cost more than it saves.
const minBytesPerWorker = 256 << 10

// parallel runs r over [0, n) in contiguous chunks on up to e.workers
// goroutines (the caller's included), given about bytesPerItem bytes of
// memory traffic per item. wg must be idle; it lives in the pooled job so
// that waiting allocates nothing either.
func (e *CPU) parallel(n, bytesPerItem int, r chunkRunner, wg *sync.WaitGroup) {
	w := min(e.workers, n*bytesPerItem/minBytesPerWorker+1, n)
	if w <= 1 {
		r.runChunk(0, n)
		return
	}
	ensureHelpers(w - 1)
	chunk := (n + w - 1) / w
	for lo := chunk; lo < n; lo += chunk {
		wg.Add(1)
		helpers.tasks <- chunkTask{r: r, wg: wg, lo: lo, hi: min(lo+chunk, n)}
	}
	r.runChunk(0, min(chunk, n))
	wg.Wait()
}
