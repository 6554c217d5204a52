package main

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKubectlEDSFlagsBeforeAndAfterTheName(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"kubectl-eds", "pods", "agent", "-n", "ops", "-o", "yaml", "--kubeconfig", "/nonexistent"}, "no cluster to talk to"},
		{[]string{"kubectl-eds", "-n", "ops", "canary", "validate", "agent", "--kubeconfig=/nonexistent"}, "no cluster to talk to"},
		{[]string{"kubectl-eds", "get", "-A", "--kubeconfig", "/nonexistent"}, "no cluster to talk to"},
		{[]string{"kubectl-eds", "pods", "agent", "--bogus"}, `"--bogus" is not a flag`},
		{[]string{"kubectl-eds", "pods", "agent", "other"}, "takes one ExtendedDaemonSet name"},
		{[]string{"kubectl-eds", "get", "-o", "xml"}, "unknown output format"},
		{[]string{"kubectl-eds", "pods", "agent", "-n"}, "needs a value"},
		// kubectl's connection flags reach the client.
		{[]string{"kubectl-eds", "get", "agent", "--server", "http://127.0.0.1:1", "--token", "t", "--as", "someone", "--kubeconfig", "EMPTY"}, "127.0.0.1:1"},
		{[]string{"kubectl-eds", "--context", "elsewhere", "get", "--kubeconfig", "/nonexistent"}, "no cluster to talk to"},
		{[]string{"kubectl-eds", "pods", "agent", "--insecure-skip-tls-verify", "-s", "http://127.0.0.1:1", "--kubeconfig", "EMPTY"}, "127.0.0.1:1"},
	}
	empty := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(empty, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		for i, a := range tt.args {
			if a == "EMPTY" {
				tt.args[i] = empty
			}
		}
		app := newApp()
		err := app.Run(dispatchArgs(app, tt.args))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

func TestEDSManifestCommand(t *testing.T) {
	app := newApp()
	var out strings.Builder
	app.Writer = &out
	if err := app.Run([]string{"slipway", "eds", "manifest", "--manifest-namespace", "ops", "--image", "img:1"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kind: Deployment") || !strings.Contains(out.String(), "extendeddaemonsets.eds.slipway.dev") {
		t.Errorf("manifest output:\n%.400s", out.String())
	}
}

// kubectl's connection flags as kubectl reads them: KUBECONFIG listing
// several files (merged, not read as one path), and the flags
// genericclioptions has that kubectl-eds lacked (--as-user-extra,
// --username, --password, --cache-dir, --disable-compression).
func TestKubectlEDSReadsKubeconfigAsKubectlDoes(t *testing.T) {
	type seen struct{ path, auth, extra, encoding string }
	got := make(chan seen, 10)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Impersonate-Extra-Scope"), r.Header.Get("Accept-Encoding")}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ExtendedDaemonSetList","apiVersion":"eds.slipway.dev/v1alpha1","metadata":{},"items":[]}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	// The usual split: clusters and users in one file, contexts in another.
	clusters := filepath.Join(dir, "clusters")
	contexts := filepath.Join(dir, "contexts")
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(clusters, "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    insecure-skip-tls-verify: true\n    server: "+srv.URL+"\nusers:\n- name: me\n  user:\n    token: from-file\n")
	write(contexts, "apiVersion: v1\nkind: Config\ncurrent-context: lab\ncontexts:\n- name: lab\n  context:\n    cluster: lab\n    user: me\n    namespace: ops\n")
	t.Setenv("KUBECONFIG", clusters+string(os.PathListSeparator)+contexts)

	run := func(args ...string) seen {
		t.Helper()
		app := newApp()
		app.Writer = io.Discard
		if err := app.Run(dispatchArgs(app, append([]string{"kubectl-eds"}, args...))); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		select {
		case s := <-got:
			return s
		default:
			t.Fatalf("%v: no request reached the server", args)
		}
		return seen{}
	}
	s := run("get")
	if s.path != "/apis/eds.slipway.dev/v1alpha1/namespaces/ops/extendeddaemonsets" || s.auth != "Bearer from-file" {
		t.Errorf("with KUBECONFIG listing two files: %+v, want the merged context's namespace ops and token", s)
	}
	anon := filepath.Join(dir, "anonymous") // --kubeconfig: one file, no user in it
	write(anon, "apiVersion: v1\nkind: Config\ncurrent-context: lab\nclusters:\n- name: lab\n  cluster:\n    insecure-skip-tls-verify: true\n    server: "+srv.URL+
		"\ncontexts:\n- name: lab\n  context:\n    cluster: lab\n")
	s = run("get", "--kubeconfig", anon, "--username", "u", "--password", "p", "--as", "x", "--as-user-extra", "scope=a",
		"--cache-dir", dir, "--disable-compression")
	if want := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:p")); s.auth != want {
		t.Errorf("--username/--password: Authorization %q, want %q", s.auth, want)
	}
	if s.extra != "a" {
		t.Errorf("--as-user-extra scope=a: Impersonate-Extra-Scope %q", s.extra)
	}
	if strings.Contains(s.encoding, "gzip") {
		t.Errorf("--disable-compression: Accept-Encoding %q", s.encoding)
	}
	app := newApp()
	if err := app.Run(dispatchArgs(app, []string{"kubectl-eds", "get", "--as-user-extra", "novalue"})); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Errorf("--as-user-extra novalue: %v, want a KEY=VALUE error", err)
	}
}
