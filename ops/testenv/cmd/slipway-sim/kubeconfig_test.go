package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"slipway.dev/slipway/ops/testenv"
)

func TestKubeconfigActsAsTheServiceAccount(t *testing.T) {
	admin := filepath.Join(t.TempDir(), "kubeconfig")
	base := clientcmdapi.NewConfig()
	base.Clusters["sim"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	base.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "secret"}
	base.Contexts["sim"] = &clientcmdapi.Context{Cluster: "sim", AuthInfo: "admin"}
	base.CurrentContext = "sim"
	if err := clientcmd.WriteToFile(*base, admin); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, node string
		wantExtra  []string
	}{
		{"cluster-wide", "", nil},
		{"bound to a node", "node-3", []string{"node-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			args := []string{"--as", "slipway-system/slipway-agent", "--kubeconfig", admin}
			if tc.node != "" {
				args = append(args, "--node", tc.node)
			}
			if err := kubeconfig(&out, args); err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.Load(out.Bytes())
			if err != nil {
				t.Fatalf("the output is no kubeconfig: %v\n%s", err, out.String())
			}
			auth := cfg.AuthInfos["admin"]
			if auth == nil || auth.Token != "secret" || auth.Impersonate != "system:serviceaccount:slipway-system:slipway-agent" {
				t.Fatalf("user %+v, want the admin token impersonating the ServiceAccount", auth)
			}
			if !slices.Contains(auth.ImpersonateGroups, "system:serviceaccounts:slipway-system") {
				t.Errorf("groups %v lack the namespace's service-account group", auth.ImpersonateGroups)
			}
			if got := auth.ImpersonateUserExtra[testenv.NodeNameExtra]; !slices.Equal(got, tc.wantExtra) {
				t.Errorf("node-name extra %v, want %v", got, tc.wantExtra)
			}
		})
	}
	for _, bad := range [][]string{
		{"--kubeconfig", admin},                          // no --as
		{"--as", "slipway-agent", "--kubeconfig", admin}, // no namespace
		{"--as", "a/b", "--kubeconfig", filepath.Join(t.TempDir(), "missing")},
	} {
		if err := kubeconfig(&bytes.Buffer{}, bad); err == nil {
			t.Errorf("kubeconfig %v: no error", bad)
		}
	}
}
