package reboot

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// busConfig is a dbus-daemon of its own for the test: anyone may own any
// name and call anything, as polkit lets root.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=SOCKET</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// systemBus starts a dbus-daemon and returns its address.
func systemBus(t *testing.T) string {
	t.Helper()
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon not installed")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "system_bus_socket")
	cfg := filepath.Join(dir, "bus.conf")
	must(t, os.WriteFile(cfg, []byte(strings.Replace(busConfig, "SOCKET", sock, 1)), 0o644))
	cmd := exec.Command(daemon, "--nofork", "--nopidfile", "--print-address", "--config-file="+cfg)
	out, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon printed no address: %v", err)
	}
	return strings.TrimSpace(addr)
}

// fakeLogind owns org.freedesktop.login1 on the bus and answers Reboot as
// logind does: nothing, or an error (an inhibitor, polkit's refusal).
type fakeLogind struct {
	refuse *dbus.Error
	calls  chan bool
}

func (f *fakeLogind) Reboot(interactive bool) *dbus.Error {
	f.calls <- interactive
	return f.refuse
}

func serveLogind(t *testing.T, addr string, refuse *dbus.Error) *fakeLogind {
	t.Helper()
	conn, err := dbus.Connect(addr)
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	f := &fakeLogind{refuse: refuse, calls: make(chan bool, 4)}
	must(t, conn.Export(f, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"))
	if r, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own org.freedesktop.login1: %v %v", r, err)
	}
	return f
}

// TestLogindRebootsOverTheBusItIsGiven: DBUS_SYSTEM_BUS_ADDRESS is honoured
// and logind's Reboot is called, not interactively.
func TestLogindRebootsOverTheBusItIsGiven(t *testing.T) {
	addr := systemBus(t)
	f := serveLogind(t, addr, nil)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must(t, Logind{}.Reboot(ctx))
	if interactive := <-f.calls; interactive {
		t.Error("Reboot asked for interactive authorisation")
	}
}

// TestLogindRefusalIsReported: logind's error reply is the Reboot's error.
func TestLogindRefusalIsReported(t *testing.T) {
	addr := systemBus(t)
	serveLogind(t, addr, dbus.NewError("org.freedesktop.login1.BlockedByInhibitor", []interface{}{"Operation inhibited by \"backup\""}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Logind{Address: addr}.Reboot(ctx)
	if err == nil || !strings.Contains(err.Error(), "inhibited") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v, want logind's refusal", err)
	}
}

// TestLogindDefaultAddress: without DBUS_SYSTEM_BUS_ADDRESS the bus is
// dialled at /run/dbus/system_bus_socket (the agent's image has no
// /var/run), and a bus that is not there is an error naming it.
func TestLogindDefaultAddress(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "")
	if got := (Logind{}).address(); got != "unix:path=/run/dbus/system_bus_socket" {
		t.Errorf("address = %s", got)
	}
	missing := "unix:path=" + filepath.Join(t.TempDir(), "none")
	err := Logind{Address: missing}.Reboot(context.Background())
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("err = %v, want one naming %s", err, missing)
	}
}
