package vmtest

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestConsoleAgainstShell drives a real /bin/sh through pipes the way the VM
// test drives the guest's serial console (which echoes input; sh here does
// not, so the echo is emulated by tee-ing the input into the output).
func TestConsoleAgainstShell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		// A fake guest: echo each line, then run it with sh semantics we need.
		buf := make([]byte, 1024)
		var line strings.Builder
		_, _ = io.WriteString(outW, "booting...\nslipway: rootfs v1 running\n")
		for {
			n, err := inR.Read(buf)
			if err != nil {
				outW.Close()
				return
			}
			for _, b := range buf[:n] {
				line.WriteByte(b)
				if b == '\n' {
					s := line.String()
					line.Reset()
					_, _ = io.WriteString(outW, "/ # "+s)
					if strings.HasPrefix(s, "false;") {
						_, _ = io.WriteString(outW, "\r\n"+strings.Fields(s)[2]+" rc=1\r\n")
					} else {
						_, _ = io.WriteString(outW, "\r\nhello\r\n"+strings.Fields(s)[len(strings.Fields(s))-2]+" rc=0\r\n")
					}
				}
			}
		}
	}()
	c := NewConsole(inW, outR, nil)
	if m, err := c.Expect(ctx, regexp.MustCompile(`rootfs (\S+) running`)); err != nil || m[1] != "v1" {
		t.Fatalf("Expect = %v, %v", m, err)
	}
	out, rc, err := c.Run(ctx, "echo hello")
	if err != nil || rc != 0 || !strings.Contains(out, "hello") {
		t.Fatalf("Run = %q, %d, %v", out, rc, err)
	}
	if _, rc, err = c.Run(ctx, "false"); err != nil || rc != 1 {
		t.Fatalf("Run false = %d, %v; want rc 1", rc, err)
	}
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if _, err := c.Expect(short, regexp.MustCompile("never printed")); err == nil {
		t.Fatal("Expect of absent text: want a timeout error")
	}
}
