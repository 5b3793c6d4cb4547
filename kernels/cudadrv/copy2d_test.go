package cudadrv

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"
)

func TestMemcpy2DLayout(t *testing.T) {
	// CUDA_MEMCPY2D on 64-bit Linux: 16 eight-byte fields, the two memory
	// types padded to eight.
	if n := unsafe.Sizeof(memcpy2D{}); n != 128 {
		t.Fatalf("memcpy2D is %d bytes, want 128", n)
	}
	if o := unsafe.Offsetof(memcpy2D{}.dstMemoryType); o != 72 {
		t.Fatalf("dstMemoryType at %d, want 72", o)
	}
	if o := unsafe.Offsetof(memcpy2D{}.height); o != 120 {
		t.Fatalf("height at %d, want 120", o)
	}
}

// TestDescribe2D pins the descriptor of both directions to what ran on an
// H200 (TestCopy2DRoundTrip, TestDeviceArenaRoundTrip in host/pool/cuda).
func TestDescribe2D(t *testing.T) {
	p := Pitch{Width: 100, Height: 3, HostPitch: 128, DevicePitch: 4096}
	in := describe2D(0x1000, 0xd000, p, true)
	want := memcpy2D{
		srcMemoryType: memoryTypeHost, srcHost: 0x1000, srcPitch: 128,
		dstMemoryType: memoryTypeDevice, dstDevice: 0xd000, dstPitch: 4096,
		widthInBytes: 100, height: 3,
	}
	if in != want {
		t.Fatalf("host to device: %+v, want %+v", in, want)
	}
	out := describe2D(0x1000, 0xd000, p, false)
	want = memcpy2D{
		srcMemoryType: memoryTypeDevice, srcDevice: 0xd000, srcPitch: 4096,
		dstMemoryType: memoryTypeHost, dstHost: 0x1000, dstPitch: 128,
		widthInBytes: 100, height: 3,
	}
	if out != want {
		t.Fatalf("device to host: %+v, want %+v", out, want)
	}
}

func TestPitchChecks(t *testing.T) {
	for _, p := range []Pitch{
		{Width: 0, Height: 1, HostPitch: 1, DevicePitch: 1},
		{Width: 8, Height: 2, HostPitch: 4, DevicePitch: 8},
		{Width: 8, Height: 2, HostPitch: 8, DevicePitch: 4},
		{Width: 8, Height: 3, HostPitch: 16, DevicePitch: 8}, // needs 40 host bytes
	} {
		if err := p.check(39); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", p, err)
		}
	}
	if err := (Pitch{Width: 8, Height: 3, HostPitch: 16, DevicePitch: 8}).check(40); err != nil {
		t.Fatal(err)
	}
}

// TestCopy2DRoundTrip scatters three host rows to rows of the device far
// apart, gathers them back into another pitch, and checks the gaps on both
// sides were not written.
func TestCopy2DRoundTrip(t *testing.T) {
	c := openOrSkip(t)
	if c.Device().MaxPitch < 4096 {
		t.Fatalf("max pitch %d", c.Device().MaxPitch)
	}
	const width, rows, hostPitch, devPitch = 100, 3, 128, 4096
	d, err := c.MemAlloc(rows * devPitch)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(d)
	if err := c.MemsetD8(d, 0xEE, rows*devPitch); err != nil {
		t.Fatal(err)
	}
	src := make([]byte, (rows-1)*hostPitch+width)
	for i := range src {
		src[i] = byte(i*13 + 1)
	}
	if err := c.CopyHtoD2D(d, src, Pitch{Width: width, Height: rows, HostPitch: hostPitch, DevicePitch: devPitch}); err != nil {
		t.Fatal(err)
	}
	dev := make([]byte, rows*devPitch)
	if err := c.CopyDtoH(dev, d); err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		row := dev[r*devPitch : (r+1)*devPitch]
		if !bytes.Equal(row[:width], src[r*hostPitch:r*hostPitch+width]) {
			t.Fatalf("device row %d differs", r)
		}
		if !bytes.Equal(row[width:], bytes.Repeat([]byte{0xEE}, devPitch-width)) {
			t.Fatalf("device row %d: the gap after the row was written", r)
		}
	}
	back := bytes.Repeat([]byte{0x55}, rows*width+2)
	if err := c.CopyDtoH2D(back, d, Pitch{Width: width, Height: rows, HostPitch: width, DevicePitch: devPitch}); err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		if !bytes.Equal(back[r*width:(r+1)*width], src[r*hostPitch:r*hostPitch+width]) {
			t.Fatalf("gathered row %d differs", r)
		}
	}
	if back[rows*width] != 0x55 || back[rows*width+1] != 0x55 {
		t.Fatal("gather wrote past its rows")
	}
}
