package reboot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDetectInitAndForInit(t *testing.T) {
	mk := func(t *testing.T, paths ...string) string {
		root := t.TempDir()
		for _, p := range paths {
			if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	for _, c := range []struct {
		name  string
		run   []string // directories under the host's /run
		host  []string // files under the host's root
		init  Init
		wants string // in the rebooter's String
	}{
		{"systemd", []string{"systemd/system"}, nil, InitSystemd, "logind"},
		{"openrc with openrc-shutdown (k3os)", []string{"openrc"}, []string{"sbin/openrc-shutdown"}, InitOpenRC, "openrc-shutdown"},
		{"openrc with reboot only", []string{"openrc"}, []string{"sbin/reboot"}, InitOpenRC, "/sbin/reboot"},
		{"a D-Bus socket alone is not systemd", []string{"dbus"}, nil, InitUnknown, "reboot(2)"},
		{"nothing known", nil, nil, InitUnknown, "reboot(2)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			run, host := mk(t, c.run...), mk(t)
			for _, f := range c.host {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(host, f)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(host, f), nil, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if got := DetectInit(run); got != c.init {
				t.Fatalf("DetectInit = %s, want %s", got, c.init)
			}
			if got := AutoAt(run, host).String(); !strings.Contains(got, c.wants) {
				t.Errorf("AutoAt = %s, want it to name %s", got, c.wants)
			}
		})
	}
}

func TestHostCommandRunsInTheHostRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root (CAP_SYS_CHROOT)")
	}
	// The running host is the "host root": its own true(1) runs chrooted.
	if err := (HostCommand{Root: "/", Argv: []string{"true"}}).Reboot(context.Background()); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir() // a root without the command: the error names it
	err := HostCommand{Root: root, Argv: []string{"/sbin/openrc-shutdown", "-r", "now"}}.Reboot(context.Background())
	if err == nil || !strings.Contains(err.Error(), "openrc-shutdown") {
		t.Fatalf("err = %v, want one naming the command", err)
	}
}
