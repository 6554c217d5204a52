package executor

import "testing"

func TestRewritePaths(t *testing.T) {
	mounts := []Mount{
		{Container: "/k3os/system", Local: "/tmp/n/node-1/k3os/system"},
		{Container: "/run/k3os", Local: "/tmp/n/node-1/run/k3os"},
		{Container: "/k3os", Local: "/tmp/n/node-1/k3os-root"},
	}
	tests := []struct{ in, want string }{
		{"/k3os/system", "/tmp/n/node-1/k3os/system"},
		{"--system-dir=/k3os/system", "--system-dir=/tmp/n/node-1/k3os/system"},
		{"/k3os/system/k3os/current", "/tmp/n/node-1/k3os/system/k3os/current"},
		{"/k3os/systemd", "/tmp/n/node-1/k3os-root/systemd"}, // only /k3os is a boundary match
		{"/run/k3os/upgrade.lock", "/tmp/n/node-1/run/k3os/upgrade.lock"},
		{"/run/k3osx", "/run/k3osx"},
		{"/var/run/k3os", "/var/run/k3os"}, // not at a path start
		{"a:/run/k3os,b", "a:/tmp/n/node-1/run/k3os,b"},
		{"--version=v1.2.3", "--version=v1.2.3"},
		{"", ""},
		{"/k3os/system /run/k3os", "/tmp/n/node-1/k3os/system /tmp/n/node-1/run/k3os"},
	}
	for _, tt := range tests {
		if got := rewritePaths(tt.in, mounts); got != tt.want {
			t.Errorf("rewritePaths(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestResolveCommand(t *testing.T) {
	have := map[string]bool{"/build/bin/slipway": true, "/bin/sh": true, "/opt/tool": true}
	exists := func(p string) bool { return have[p] }
	tests := []struct{ argv0, path, want string }{
		{"slipway", "/build/bin:/bin", "/build/bin/slipway"},
		{"/usr/local/bin/slipway", "/build/bin:/bin", "/build/bin/slipway"},
		{"sh", "/build/bin:/bin", "/bin/sh"},
		{"/opt/tool", "/build/bin", "/opt/tool"},
		{"missing", "/build/bin:/bin", ""},
		{"/usr/bin/missing", "", ""},
	}
	for _, tt := range tests {
		if got := resolveCommand(tt.argv0, tt.path, exists); got != tt.want {
			t.Errorf("resolveCommand(%q, %q) = %q, want %q", tt.argv0, tt.path, got, tt.want)
		}
	}
}
