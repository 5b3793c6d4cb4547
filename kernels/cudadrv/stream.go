package cudadrv

import (
	"time"
	"unsafe"
)

// Stream is a CUstream. The zero Stream is the context's default stream.
type Stream uintptr

// Event is a CUevent used to time work on a stream.
type Event uintptr

// streamNonBlocking is CU_STREAM_NON_BLOCKING: the stream does not
// synchronize with the legacy default stream.
const streamNonBlocking = 1

// StreamCreate creates a non-blocking stream.
func (c *Context) StreamCreate() (Stream, error) {
	var s Stream
	err := c.do(func() error {
		if err := check("cuStreamCreate", call(c.drv.fn.cuStreamCreate, c.scratchAddr(), streamNonBlocking)); err != nil {
			return err
		}
		s = Stream(c.scratchU64(0))
		return nil
	})
	return s, err
}

// StreamSynchronize waits until all work on s has finished.
func (c *Context) StreamSynchronize(s Stream) error {
	return c.do(func() error { return check("cuStreamSynchronize", call(c.drv.fn.cuStreamSynchronize, uintptr(s))) })
}

// StreamDestroy destroys s once its work has finished.
func (c *Context) StreamDestroy(s Stream) error {
	return c.do(func() error { return check("cuStreamDestroy", call(c.drv.fn.cuStreamDestroy, uintptr(s))) })
}

// EventCreate creates an event with timing enabled.
func (c *Context) EventCreate() (Event, error) {
	var e Event
	err := c.do(func() error {
		if err := check("cuEventCreate", call(c.drv.fn.cuEventCreate, c.scratchAddr(), 0)); err != nil {
			return err
		}
		e = Event(c.scratchU64(0))
		return nil
	})
	return e, err
}

// EventRecord records e on stream s.
func (c *Context) EventRecord(e Event, s Stream) error {
	return c.do(func() error { return check("cuEventRecord", call(c.drv.fn.cuEventRecord, uintptr(e), uintptr(s))) })
}

// EventSynchronize waits until e has completed.
func (c *Context) EventSynchronize(e Event) error {
	return c.do(func() error { return check("cuEventSynchronize", call(c.drv.fn.cuEventSynchronize, uintptr(e))) })
}

// EventElapsed is the device time between two completed events (about 0.5 µs resolution).
func (c *Context) EventElapsed(start, end Event) (time.Duration, error) {
	var d time.Duration
	err := c.do(func() error {
		if err := check("cuEventElapsedTime", call(c.drv.fn.cuEventElapsedTime, c.scratchAddr(), uintptr(start), uintptr(end))); err != nil {
			return err
		}
		ms := *(*float32)(unsafe.Pointer(&c.scratch[0]))
		d = time.Duration(float64(ms) * float64(time.Millisecond))
		return nil
	})
	return d, err
}

// EventDestroy destroys e.
func (c *Context) EventDestroy(e Event) error {
	return c.do(func() error { return check("cuEventDestroy", call(c.drv.fn.cuEventDestroy, uintptr(e))) })
}
