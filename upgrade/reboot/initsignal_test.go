package reboot

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalInitSendsItsSignal: the signal reaches the process, as the
// host's init would receive it.
func TestSignalInitSendsItsSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "got")
			name := map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGINT: "INT"}[sig]
			// An "init" that handles only its reboot signal.
			cmd := exec.Command("sh", "-c", `trap 'echo `+name+` > "$0"; exit 0' `+name+`; echo ready; while :; do sleep 0.05; done`, mark)
			out, err := cmd.StdoutPipe()
			must(t, err)
			must(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			buf := make([]byte, 6)
			if _, err := out.Read(buf); err != nil {
				t.Fatal(err)
			}
			r := SignalInit{Init: InitBusybox, Signal: sig, PID: cmd.Process.Pid}
			must(t, r.Reboot(context.Background()))
			deadline := time.Now().Add(10 * time.Second)
			for {
				if b, err := os.ReadFile(mark); err == nil && strings.TrimSpace(string(b)) == name {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s did not reach the process", sig)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	// A process that is gone: the error says what the agent needs.
	err := SignalInit{Init: InitBusybox, Signal: syscall.SIGTERM, PID: 1 << 22}.Reboot(context.Background())
	if err == nil || !strings.Contains(err.Error(), "hostPID") {
		t.Errorf("err = %v, want one naming hostPID", err)
	}
}

// TestInitctlWritesRunlevel6: the request sysvinit reads on its FIFO.
func TestInitctlWritesRunlevel6(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "initctl")
	must(t, syscall.Mkfifo(fifo, 0o600))
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo) // init holds it open for reading
		if err != nil {
			got <- nil
			return
		}
		defer f.Close()
		b := make([]byte, 1024)
		n, _ := f.Read(b)
		got <- b[:n]
	}()
	var err error
	for i := 0; i < 200; i++ { // until the reader opened it (ENXIO before)
		if err = (Initctl{Path: fifo}).Reboot(context.Background()); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(t, err)
	b := <-got
	if len(b) != 384 {
		t.Fatalf("request of %d bytes, want 384", len(b))
	}
	want := []uint32{0x03091969, 1, '6'}
	for i, w := range want {
		if v := binary.NativeEndian.Uint32(b[4*i:]); v != w {
			t.Errorf("word %d = %#x, want %#x", i, v, w)
		}
	}
	if !bytes.Equal(b[16:], make([]byte, 368)) {
		t.Error("request data not zero")
	}
	if err := (Initctl{Path: filepath.Join(t.TempDir(), "none")}).Reboot(context.Background()); err == nil {
		t.Error("no FIFO: no error")
	}
}
