package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/urfave/cli/v2"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
)

// connection is what a client configuration decides about the connection:
// what kubectl-eds and kubectl must agree on.
type connection struct {
	Host, Username, Password, BearerToken, BearerTokenFile string
	Impersonate                                            rest.ImpersonationConfig
	Insecure                                               bool
	ServerName, CertFile, KeyFile, CAFile                  string
	CertData, KeyData, CAData                              string
	DisableCompression                                     bool
	Timeout                                                time.Duration
	Namespace                                              string
	Failed                                                 bool
}

func connectionOf(cfg *rest.Config, ns string, err error) connection {
	if err != nil {
		return connection{Failed: true}
	}
	imp := cfg.Impersonate
	if len(imp.Groups) == 0 {
		imp.Groups = nil
	}
	if len(imp.Extra) == 0 {
		imp.Extra = nil
	}
	t := cfg.TLSClientConfig
	return connection{Host: cfg.Host, Username: cfg.Username, Password: cfg.Password, BearerToken: cfg.BearerToken,
		BearerTokenFile: cfg.BearerTokenFile, Impersonate: imp, Insecure: t.Insecure, ServerName: t.ServerName,
		CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile, CertData: string(t.CertData), KeyData: string(t.KeyData),
		CAData: string(t.CAData), DisableCompression: cfg.DisableCompression, Timeout: cfg.Timeout, Namespace: ns}
}

// kubectlConnection is the connection cli-runtime's ConfigFlags (kubectl's
// own flags) makes of args. Only this test links cli-runtime: the binary
// may not (TestBinaryDoesNotLinkClientGoScheme), so its flags are proven
// kubectl's here.
func kubectlConnection(args []string) connection {
	flags := genericclioptions.NewConfigFlags(true).WithDeprecatedPasswordFlag() // as kubectl's own
	fs := pflag.NewFlagSet("kubectl", pflag.ContinueOnError)
	flags.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return connection{Failed: true}
	}
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return connectionOf(nil, "", err)
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	return connectionOf(cfg, ns, err)
}

// edsConnection is the connection kubectl-eds makes of args.
func edsConnection(args []string) connection {
	var got connection
	app := &cli.App{Name: "kubectl-eds", Commands: []*cli.Command{{Name: "get", Flags: kubectlFlags(), Action: func(c *cli.Context) error {
		cfg, ns, err := edsKubeConfig(c)
		got = connectionOf(cfg, ns, err)
		return nil
	}}}}
	if err := app.Run(append([]string{"kubectl-eds", "get"}, args...)); err != nil {
		return connection{Failed: true}
	}
	return got
}

// kubectl-eds's connection flags are kubectl's: for each row (flags, and
// KUBECONFIG listing files), the rest.Config and namespace kubectl-eds
// builds are those cli-runtime's ConfigFlags builds, the library kubectl
// and its plugins use.
func TestKubectlEDSConnectionIsConfigFlags(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir) // no ~/.kube/config
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_MASTER", "")
	path := func(name string) string { return filepath.Join(dir, name) }
	write := func(name, body string) {
		if err := os.WriteFile(path(name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"ca.crt", "client.crt", "client.key", "token"} {
		write(f, "-- "+f+" --\n")
	}
	// The usual split: clusters and users in one file, contexts in another.
	write("clusters", `apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://lab.example:6443", certificate-authority-data: "Q0E="}
- name: prod
  cluster: {server: "https://prod.example:6443", insecure-skip-tls-verify: true, tls-server-name: prod-api}
users:
- name: me
  user: {token: from-file}
- name: cert
  user: {client-certificate-data: "Q0VSVA==", client-key-data: "S0VZ"}
- name: tokenfile
  user: {tokenFile: `+path("token")+`}
- name: basic
  user: {username: bob, password: secret}
`)
	write("contexts", `apiVersion: v1
kind: Config
current-context: lab
contexts:
- name: lab
  context: {cluster: lab, user: me, namespace: ops}
- name: prod
  context: {cluster: prod, user: cert}
- name: files
  context: {cluster: lab, user: tokenfile, namespace: kube-system}
`)
	// Read after "contexts" in a list: its current-context loses.
	write("later", "apiVersion: v1\nkind: Config\ncurrent-context: prod\n")
	write("single", `apiVersion: v1
kind: Config
current-context: one
clusters:
- name: one
  cluster: {server: "https://one.example"}
contexts:
- name: one
  context: {cluster: one, user: basic}
users:
- name: basic
  user: {username: ann, password: pw}
`)
	list := func(names ...string) string {
		var out []string
		for _, n := range names {
			out = append(out, path(n))
		}
		return strings.Join(out, string(os.PathListSeparator))
	}
	rows := []struct {
		name, kubeconfig string
		args             []string
	}{
		{"KUBECONFIG lists two files", list("clusters", "contexts"), nil},
		{"the first file's current-context wins", list("contexts", "later", "clusters"), nil},
		{"a missing file in the list is skipped", list("clusters", "missing", "contexts"), nil},
		{"--context and -n", list("clusters", "contexts"), []string{"--context", "prod", "-n", "x"}},
		{"--namespace=", list("clusters", "contexts"), []string{"--namespace=y"}},
		{"no namespace anywhere", list("clusters", "contexts"), []string{"--context=prod"}},
		{"--kubeconfig is one file, KUBECONFIG ignored", list("clusters", "contexts"), []string{"--kubeconfig", path("single")}},
		{"--kubeconfig missing", "", []string{"--kubeconfig", path("missing")}},
		{"--cluster and --user", list("clusters", "contexts"), []string{"--cluster", "prod", "--user", "basic"}},
		{"--server and --token over the file", list("clusters", "contexts"), []string{"-s", "https://other.example", "--token", "flag"}},
		{"--token over a tokenFile", list("clusters", "contexts"), []string{"--context", "files", "--token", "flag"}},
		{"--username and --password", list("clusters", "contexts"), []string{"--user", "cert", "--username", "u", "--password", "p"}},
		{"impersonation with groups, uid and extra", list("clusters", "contexts"), []string{"--as", "x", "--as-group", "a", "--as-group", "b",
			"--as-uid", "42", "--as-user-extra", "scope=a", "--as-user-extra", "scope=b", "--as-user-extra", "team=c=d"}},
		{"TLS files over the file's data", list("clusters", "contexts"), []string{"--context", "prod", "--certificate-authority", path("ca.crt"),
			"--client-certificate", path("client.crt"), "--client-key", path("client.key"), "--tls-server-name", "api"}},
		{"--insecure-skip-tls-verify", list("clusters", "contexts"), []string{"--insecure-skip-tls-verify", "--context", "files"}},
		{"--disable-compression, --request-timeout and --cache-dir", list("clusters", "contexts"), []string{"--disable-compression",
			"--request-timeout", "5s", "--cache-dir", dir}},
		{"--request-timeout in seconds", list("clusters", "contexts"), []string{"--request-timeout=7"}},
		{"an unknown context", list("clusters", "contexts"), []string{"--context", "nowhere"}},
		{"only flags", list("missing"), []string{"--server", "https://flags.example", "--token", "t", "-n", "z"}},
	}
	// The one difference, deliberate: with no kubeconfig and no flag,
	// ConfigFlags talks to http://localhost:8080 (clientcmd's deprecated
	// default); kubectl-eds says there is no cluster and what to set.
	t.Setenv("KUBECONFIG", "")
	if c := kubectlConnection(nil); c.Host != "http://localhost:8080" {
		t.Errorf("ConfigFlags with no kubeconfig: %s; the difference documented is gone", show(c))
	}
	if c := edsConnection(nil); !c.Failed {
		t.Errorf("kubectl-eds with no kubeconfig: %s, want no cluster to talk to", show(c))
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", r.kubeconfig)
			want, got := kubectlConnection(r.args), edsConnection(r.args)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("KUBECONFIG=%s kubectl-eds %s:\n got  %s\n want %s (ConfigFlags)", r.kubeconfig, strings.Join(r.args, " "), show(got), show(want))
			}
		})
	}
}

func show(c connection) string { return fmt.Sprintf("%+v", c) }

// Every flag kubectl's ConfigFlags registers (with the password flags
// kubectl turns on), with its shorthand, is a kubectl-eds flag.
func TestKubectlEDSHasEveryConfigFlag(t *testing.T) {
	fs := pflag.NewFlagSet("kubectl", pflag.ContinueOnError)
	genericclioptions.NewConfigFlags(true).WithDeprecatedPasswordFlag().AddFlags(fs)
	ours := map[string]bool{}
	for _, f := range kubectlFlags() {
		for _, n := range f.Names() {
			ours[n] = true
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if !ours[f.Name] {
			t.Errorf("kubectl's --%s is not a kubectl-eds flag", f.Name)
		}
		if f.Shorthand != "" && !ours[f.Shorthand] {
			t.Errorf("kubectl's -%s (--%s) is not a kubectl-eds flag", f.Shorthand, f.Name)
		}
	})
}
