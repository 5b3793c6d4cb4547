package cuda

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/kernels/cudadrv"
)

// An engine maps the device tier through the arena's IPC handle from a
// process of its own (a process cannot open its own handles), so the test
// runs this binary again as that engine: TestIPCEngineSide, given the
// handle in the environment, maps the arena and checks a page the host
// wrote, then writes one back for the host to read.
const (
	envIPCHandle = "KVPILOT_TEST_IPC_HANDLE"
	envIPCPage   = "KVPILOT_TEST_IPC_PAGE_BYTES"
	envIPCRead   = "KVPILOT_TEST_IPC_READ_SLOT"
	envIPCWrite  = "KVPILOT_TEST_IPC_WRITE_SLOT"
)

func ipcPattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31) ^ seed
	}
	return p
}

// TestIPCHandleMapsInAnotherProcess: the page-major arena's first page,
// written by the host, is read by another process through the handle, and
// the second page, written there, is read back here.
func TestIPCHandleMapsInAnotherProcess(t *testing.T) {
	ctx := openOrSkip(t)
	l := layout.MHA("m", 16, layout.BF16, 4, 2, 64, 64, layout.HalfSplit)
	a, err := New(Options{Context: ctx, Layout: &l, Pages: 4, Arrangement: layout.PageMajor})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s, err := a.Alloc(nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	pb := l.PageBytes()
	if err := a.WritePage(s[0], ipcPattern(pb, 1)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIPCEngineSide$", "-test.v")
	cmd.Env = append(os.Environ(), envIPCHandle+"="+hex.EncodeToString(a.Handle().IPC), envIPCPage+"="+strconv.Itoa(pb),
		envIPCRead+"="+strconv.Itoa(int(s[0])), envIPCWrite+"="+strconv.Itoa(int(s[1])))
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestIPCEngineSide")) {
		t.Fatalf("engine side: %v\n%s", err, out)
	}
	got := make([]byte, pb)
	if err := a.ReadPage(s[1], got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, ipcPattern(pb, 2)) {
		t.Fatal("the page the other process wrote through the handle is not in the arena")
	}
}

// TestIPCEngineSide is the other process of the test above; it skips when
// run on its own.
func TestIPCEngineSide(t *testing.T) {
	hexHandle := os.Getenv(envIPCHandle)
	if hexHandle == "" {
		t.Skip("run by TestIPCHandleMapsInAnotherProcess")
	}
	ctx := openOrSkip(t)
	raw, err := hex.DecodeString(hexHandle)
	pb, perr := strconv.Atoi(os.Getenv(envIPCPage))
	rd, rerr := strconv.Atoi(os.Getenv(envIPCRead))
	wr, werr := strconv.Atoi(os.Getenv(envIPCWrite))
	var h cudadrv.IpcMemHandle
	if err != nil || perr != nil || rerr != nil || werr != nil || len(raw) != len(h.Reserved) {
		t.Fatalf("bad handle, page size or slots in the environment: %v %v %v %v", err, perr, rerr, werr)
	}
	copy(h.Reserved[:], raw)
	p, err := ctx.IpcOpenMemHandle(h)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.IpcCloseMemHandle(p)
	got := make([]byte, pb)
	// Page-major: slot s is the page at s*pb.
	if err := ctx.CopyDtoH(got, p+cudadrv.DevicePtr(rd*pb)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, ipcPattern(pb, 1)) {
		t.Fatal("the host's page reads differently through the IPC handle")
	}
	if err := ctx.CopyHtoD(p+cudadrv.DevicePtr(wr*pb), ipcPattern(pb, 2)); err != nil {
		t.Fatal(err)
	}
}
