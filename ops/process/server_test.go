package process

import (
	"strings"
	"testing"

	apiversion "k8s.io/apimachinery/pkg/version"
)

func TestSupportedServer(t *testing.T) {
	for _, c := range []struct {
		name      string
		info      apiversion.Info
		isolation string
		ok        bool
	}{
		{"1.30.0", apiversion.Info{Major: "1", Minor: "30", GitVersion: "v1.30.0"}, IsolationPolicy, true},
		{"1.36 k3s", apiversion.Info{Major: "1", Minor: "36", GitVersion: "v1.36.3+k3s1"}, IsolationPolicy, true},
		{"1.29.9", apiversion.Info{Major: "1", Minor: "29", GitVersion: "v1.29.9"}, IsolationPolicy, false},
		{"1.21 (k3os's last k3s)", apiversion.Info{Major: "1", Minor: "21", GitVersion: "v1.21.14+k3s1"}, IsolationPolicy, false},
		{"EKS-style minor with +", apiversion.Info{Major: "1", Minor: "31+", GitVersion: "custom-build"}, IsolationPolicy, true},
		{"old, only major and minor", apiversion.Info{Major: "1", Minor: "28+", GitVersion: ""}, IsolationPolicy, false},
		{"nothing readable", apiversion.Info{GitVersion: "unknown"}, IsolationPolicy, false},
		{"1.23 k3s (k3os), webhook", apiversion.Info{Major: "1", Minor: "23", GitVersion: "v1.23.17+k3s1"}, IsolationWebhook, true},
		{"1.22.0, webhook", apiversion.Info{Major: "1", Minor: "22", GitVersion: "v1.22.0"}, IsolationWebhook, true},
		{"1.21 (k3os's last k3s), webhook", apiversion.Info{Major: "1", Minor: "21", GitVersion: "v1.21.14+k3s1"}, IsolationWebhook, false},
		{"1.36, webhook", apiversion.Info{Major: "1", Minor: "36", GitVersion: "v1.36.3"}, IsolationWebhook, true},
		{"old, only major and minor, webhook", apiversion.Info{Major: "1", Minor: "23+", GitVersion: ""}, IsolationWebhook, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ok, why := supportedServer(c.info, c.isolation)
			if ok != c.ok || (!ok && !strings.Contains(why, minimum(c.isolation))) {
				t.Errorf("supportedServer(%+v) = %v, %q", c.info, ok, why)
			}
		})
	}
}

func TestSupportedServerNamesTheWebhookToOldServers(t *testing.T) {
	_, why := supportedServer(apiversion.Info{Major: "1", Minor: "23", GitVersion: "v1.23.17+k3s1"}, IsolationPolicy)
	if !strings.Contains(why, "--isolation=webhook") {
		t.Errorf("a 1.23 server under the policy isolation should point at the webhook manifest; got %q", why)
	}
}

func TestIsolation(t *testing.T) {
	for _, c := range []struct{ env, want string }{{"", IsolationPolicy}, {"policy", IsolationPolicy}, {"webhook", IsolationWebhook}, {"vap", ""}} {
		t.Setenv(IsolationEnv, c.env)
		got, err := Isolation()
		if got != c.want || (c.want == "") != (err != nil) {
			t.Errorf("%s=%q: Isolation() = %q, %v; want %q", IsolationEnv, c.env, got, err, c.want)
		}
	}
}
