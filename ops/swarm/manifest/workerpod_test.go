package manifest

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"slipway.dev/slipway/ops/swarm/worker"
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

// The sidecar is probed where `slipway swarm worker` serves by default:
// liveness /healthz, readiness /readyz.
func TestWorkerPodSpecProbesTheSidecar(t *testing.T) {
	if want := fmt.Sprintf(":%d", WorkerHTTPPort); worker.DefaultHTTPAddr != want {
		t.Fatalf("the worker serves on %s by default, the probes ask %s", worker.DefaultHTTPAddr, want)
	}
	spec := WorkerPodSpec(corev1.Container{Name: "app", Image: "example/app"}, "slipway:test")
	for _, c := range spec.Containers {
		if c.Name != "swarm" {
			continue
		}
		for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.IntValue() != WorkerHTTPPort {
				t.Errorf("sidecar probe for %s: %+v", path, probe)
			}
		}
		if len(c.Ports) != 1 || c.Ports[0].ContainerPort != WorkerHTTPPort {
			t.Errorf("sidecar ports %+v, want %d", c.Ports, WorkerHTTPPort)
		}
		return
	}
	t.Fatal("no swarm sidecar")
}
