package process

import (
	"strings"
	"testing"

	apiversion "k8s.io/apimachinery/pkg/version"
)

func TestSupportedServer(t *testing.T) {
	for _, c := range []struct {
		name string
		info apiversion.Info
		ok   bool
	}{
		{"1.30.0", apiversion.Info{Major: "1", Minor: "30", GitVersion: "v1.30.0"}, true},
		{"1.36 k3s", apiversion.Info{Major: "1", Minor: "36", GitVersion: "v1.36.3+k3s1"}, true},
		{"1.29.9", apiversion.Info{Major: "1", Minor: "29", GitVersion: "v1.29.9"}, false},
		{"1.21 (k3os's last k3s)", apiversion.Info{Major: "1", Minor: "21", GitVersion: "v1.21.14+k3s1"}, false},
		{"EKS-style minor with +", apiversion.Info{Major: "1", Minor: "31+", GitVersion: "custom-build"}, true},
		{"old, only major and minor", apiversion.Info{Major: "1", Minor: "28+", GitVersion: ""}, false},
		{"nothing readable", apiversion.Info{GitVersion: "unknown"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ok, why := supportedServer(c.info)
			if ok != c.ok || (!ok && !strings.Contains(why, MinKubernetes)) {
				t.Errorf("supportedServer(%+v) = %v, %q", c.info, ok, why)
			}
		})
	}
}
