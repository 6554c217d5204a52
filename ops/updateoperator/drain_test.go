package updateoperator

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// barePod is a pod no controller owns on node, with an emptyDir volume
// when scratch (as the upstream metrics-server mounts one).
func barePod(name, node string, scratch bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/fake"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
	if scratch {
		p.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	return p
}

// The controller's default drain takes what the Bottlerocket update
// operator's takes: a pod with an emptyDir volume and a pod no controller
// owns. Told to leave unowned pods (--drain-unmanaged=false), the drain
// fails with a reason that names the controller's own flag.
func TestDefaultDrainTakesEmptyDirAndUnownedPods(t *testing.T) {
	f := newFleet(t, "drainpol", 1)
	name, ctx := f.nodes[0], context.Background()
	for _, p := range []*corev1.Pod{barePod("drainpol-scratch", name, true), barePod("drainpol-bare", name, false)} {
		if _, err := f.kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.kube.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}) })
	}
	stop := f.controller(func(o *ControllerOptions) { o.Drain.EvictUnmanaged = false })
	eventually(t, time.Minute, "the drain refused, naming the flag", func() (bool, string) {
		r := f.node(name).Annotations[f.keys.Key(KeyReason)]
		return strings.Contains(r, "--drain-unmanaged"), "reason " + r
	})
	stop()
	stop = f.controller(nil)
	defer stop()
	eventually(t, 90*time.Second, "the node updated with the default drain", f.done)
	for _, p := range []string{"drainpol-scratch", "drainpol-bare"} {
		_, err := f.kube.CoreV1().Pods("default").Get(ctx, p, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("pod %s still there after the drain (%v)", p, err)
		}
	}
	if n := f.node(name); n.Annotations[f.keys.Key(KeyFailures)] != "" {
		t.Errorf("failures %q left after the update", n.Annotations[f.keys.Key(KeyFailures)])
	}
}
