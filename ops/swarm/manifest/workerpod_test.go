package manifest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The application container of a worker pod gets no ServiceAccount token:
// the pod does not automount it, and only the sidecar mounts the projected
// one; the ConfigMap is mounted for the sidecar only.
func TestWorkerPodSpecGivesTheAppNoToken(t *testing.T) {
	spec := WorkerPodSpec(corev1.Container{Name: "app", Image: "example/app"}, "slipway:test")
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Fatal("the pod automounts the ServiceAccount token into every container")
	}
	for _, c := range spec.Containers {
		token := false
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.MountPath, TokenPath) || m.Name == "swarm-token" {
				token = true
			}
		}
		if want := c.Name == "swarm"; token != want {
			t.Errorf("container %s has the token: %v, want %v", c.Name, token, want)
		}
	}
}
