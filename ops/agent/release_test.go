package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/protocol"
)

// TestJobSourceSpec: what the upgrade Job carries for each kind of channel.
func TestJobSourceSpec(t *testing.T) {
	a := &Agent{opts: Options{NodeName: "n1", Namespace: "ns", HostSystemDir: "/k3os/system", HostLockDir: "/run/k3os",
		Image: "slipway:test", UpgradeCommand: []string{"slipway"}}}
	gh := &v1.SecretKeyRef{Name: "gh"}
	resolved := &v1.ResolvedRelease{Version: "v2", Source: "https://github.com/o/r/releases"}
	for _, tc := range []struct {
		name, url, wantSource, wantMount string
		token                            *v1.SecretKeyRef
		resolved                         *v1.ResolvedRelease
	}{
		{"github resolved, token", "github-releases://o/r", "https://github.com/o/r/releases", "", gh, resolved},
		{"github not resolved yet: the API, token", "github-releases://o/r", "github-releases://o/r", "", gh, nil},
		{"github resolved for another version", "github-releases://o/r", "github-releases://o/r", "", nil,
			&v1.ResolvedRelease{Version: "v1", Source: "https://github.com/o/r/releases"}},
		{"file mirror", "file:///srv/k3os-mirror", "file:///srv/k3os-mirror", "/srv/k3os-mirror", nil, nil},
		{"plain directory mirror", "/srv/mirror/", "/srv/mirror/", "/srv/mirror", nil, nil},
		{"https channel", "https://example.com/releases/latest", "https://example.com/releases/latest", "", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default"},
				Spec: v1.UpdateChannelSpec{URL: tc.url, Version: "v2", TokenSecretRef: tc.token}, Status: v1.UpdateChannelStatus{Resolved: tc.resolved}}
			j := a.buildJob(ch, mustResolve(ch), v1.Slot{Node: "n1", Version: "v2", Attempt: 1})
			c := j.Spec.Template.Spec.Containers[0]
			if got := protocol.ArgAfterFlag(c.Args, "--source"); got != tc.wantSource {
				t.Errorf("--source %q, want %q", got, tc.wantSource)
			}
			var env *corev1.EnvVar
			for i := range c.Env {
				if c.Env[i].Name == "GITHUB_TOKEN" {
					env = &c.Env[i]
				}
			}
			switch {
			case tc.token == nil && env != nil:
				t.Errorf("GITHUB_TOKEN without a tokenSecretRef: %+v", env)
			case tc.token != nil && (env == nil || env.Value != "" || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil ||
				env.ValueFrom.SecretKeyRef.Name != "gh" || env.ValueFrom.SecretKeyRef.Key != "token"):
				t.Errorf("GITHUB_TOKEN must come from Secret gh key token: %+v", env)
			}
			var mount *corev1.VolumeMount
			for i := range c.VolumeMounts {
				if c.VolumeMounts[i].Name == mirrorVolume {
					mount = &c.VolumeMounts[i]
				}
			}
			switch {
			case tc.wantMount == "" && mount != nil:
				t.Errorf("a mirror mount for %s: %+v", tc.url, mount)
			case tc.wantMount != "" && (mount == nil || mount.MountPath != tc.wantMount || !mount.ReadOnly):
				t.Errorf("mirror mount %+v, want %s read-only", mount, tc.wantMount)
			case tc.wantMount != "":
				for _, v := range j.Spec.Template.Spec.Volumes {
					if v.Name == mirrorVolume && (v.HostPath == nil || v.HostPath.Path != tc.wantMount) {
						t.Errorf("mirror volume %+v, want hostPath %s", v, tc.wantMount)
					}
				}
			}
		})
	}
}
