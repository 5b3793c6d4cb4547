package cudadrv

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// openOrSkip opens device 0, or skips when this machine has no CUDA driver.
// Where Load fails, the failure itself must be the documented ErrNoDriver.
func openOrSkip(t *testing.T) *Context {
	t.Helper()
	d, err := Load()
	if err != nil {
		if !errors.Is(err, ErrNoDriver) {
			t.Fatalf("Load failed with %v, want an error wrapping ErrNoDriver", err)
		}
		t.Skipf("no usable CUDA driver (%v): run it on a machine with an NVIDIA GPU and its driver (libcuda.so.1), e.g. make gpu-check", err)
	}
	c, err := d.Open(0)
	if err != nil {
		t.Fatalf("Open(0): %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestLoadWithoutDriverIsClearError(t *testing.T) {
	d, err := Load()
	if err == nil {
		if d.Version() <= 0 {
			t.Fatalf("driver loaded but Version() = %d", d.Version())
		}
		t.Skipf("CUDA driver %d present; absence path not testable here", d.Version())
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("err = %v, want ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), LibraryName) && !strings.Contains(err.Error(), "cuInit") {
		t.Fatalf("error %q names neither the library nor cuInit", err)
	}
	// Cached: the second call gives the same answer without retrying dlopen.
	if _, err2 := Load(); err2 != err {
		t.Fatalf("second Load returned %v, want the cached %v", err2, err)
	}
}

func TestResultError(t *testing.T) {
	if got := ErrorOutOfMemory.Error(); got != "CUDA_ERROR_OUT_OF_MEMORY (2)" {
		t.Fatalf("got %q", got)
	}
	if got := Result(12345).Error(); got != "CUresult 12345" {
		t.Fatalf("got %q", got)
	}
	err := check("cuMemAlloc", ErrorOutOfMemory)
	var r Result
	if !errors.As(err, &r) || r != ErrorOutOfMemory {
		t.Fatalf("errors.As(%v) = %v", err, r)
	}
	if check("x", Success) != nil {
		t.Fatal("Success is not an error")
	}
}

func TestDeviceRoundTrip(t *testing.T) {
	c := openOrSkip(t)
	info := c.Device()
	if info.Name == "" || info.TotalMem == 0 || info.ComputeMajor == 0 {
		t.Fatalf("device info incomplete: %+v", info)
	}
	const n = 1 << 20
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	a, err := c.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(a)
	b, err := c.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(b)
	if err := c.CopyHtoD(a, src); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoD(b, a, n); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := c.CopyDtoH(got, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("HtoD -> DtoD -> DtoH changed the bytes")
	}
	if err := c.MemsetD8(b, 0xAB, 16); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoH(got[:16], b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:16], bytes.Repeat([]byte{0xAB}, 16)) {
		t.Fatalf("memset: %x", got[:16])
	}
}

func TestAsyncCopiesRequirePinnedMemory(t *testing.T) {
	c := openOrSkip(t)
	p, err := c.MemAlloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(p)
	s, err := c.StreamCreate()
	if err != nil {
		t.Fatal(err)
	}
	defer c.StreamDestroy(s)
	if err := c.CopyHtoDAsync(p, make([]byte, 64), s); !errors.Is(err, ErrNotPinned) {
		t.Fatalf("async copy from Go memory: err = %v, want ErrNotPinned", err)
	}
	host, err := c.MemAllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	for i := range host {
		host[i] = byte(i)
	}
	start, _ := c.EventCreate()
	end, _ := c.EventCreate()
	defer c.EventDestroy(start)
	defer c.EventDestroy(end)
	if err := c.EventRecord(start, s); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyHtoDAsync(p, host, s); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 4096)
	if err := c.EventRecord(end, s); err != nil {
		t.Fatal(err)
	}
	if err := c.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EventElapsed(start, end); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoH(back, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, host) {
		t.Fatal("async HtoD from pinned memory lost bytes")
	}
	if err := c.MemFreeHost(host); err != nil {
		t.Fatal(err)
	}
	if err := c.MemFreeHost(host); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("double MemFreeHost: err = %v", err)
	}
}

// fillPTX is a hand-written kernel: out[i] = v for i < n.
const fillPTX = `
.version 7.0
.target sm_52
.address_size 64
.visible .entry fill(.param .u64 out, .param .u32 v, .param .u32 n)
{
	.reg .pred %p;
	.reg .b32 %r<6>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [out];
	ld.param.u32 %r1, [v];
	ld.param.u32 %r2, [n];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r3, %r3, %r4, %r5;
	setp.ge.u32 %p, %r3, %r2;
	@%p bra DONE;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r3, 4;
	add.s64 %rd2, %rd2, %rd3;
	st.global.u32 [%rd2], %r1;
DONE:
	ret;
}
`

func TestModuleLaunch(t *testing.T) {
	c := openOrSkip(t)
	m, err := c.ModuleLoadData([]byte(fillPTX))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	f, err := m.Function("fill")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Function("nope"); err == nil {
		t.Fatal("missing function found")
	}
	const n = 1000
	p, err := c.MemAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(p)
	if err := c.Launch(f, Dim3{4, 1, 1}, Dim3{256, 1, 1}, 0, 0, ArgPtr(p), ArgU32(0xDEADBEEF), ArgU32(n)); err != nil {
		t.Fatal(err)
	}
	if err := c.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4*n)
	if err := c.CopyDtoH(got, p); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if got[4*i] != 0xEF || got[4*i+3] != 0xDE {
			t.Fatalf("word %d = %x", i, got[4*i:4*i+4])
		}
	}
}

func TestClosedContext(t *testing.T) {
	c := openOrSkip(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MemAlloc(16); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}
