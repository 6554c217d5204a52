package oldkube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/controller"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/testenv"
)

// TestRolloutOnTheOldServer rolls a release with the k3s component out to
// three nodes on kube-apiserver v1.23.17: the agents with their own pods'
// bound tokens and the controller with its own, under the manifest's RBAC
// and the webhook isolation (the policies served by slipway's webhook),
// from a file:// mirror that `latest` names. The Jobs are run by the fleet
// harness (it installs the release into each node's system directory); the
// test checks that every upgrade Job the agents wrote asks for k3s too.
func TestRolloutOnTheOldServer(t *testing.T) {
	e := testenv.Need(t, env)
	t.Setenv(process.IsolationEnv, process.IsolationWebhook)
	programs := fleettest.Programs{
		Agent: func(r fleettest.AgentRun) func(context.Context) error {
			o := agent.Options{NodeName: r.Node, Namespace: r.Namespace, SystemDir: r.SystemDir, Config: r.Config, Image: "slipway:test",
				BootIDFile: r.BootIDFile, Rebooter: r.Rebooter, LeaseDuration: 3 * time.Second, Resync: 5 * time.Second, Log: r.Log}
			return func(ctx context.Context) error { return agent.Run(ctx, o) }
		},
		Controller: func(r fleettest.ControllerRun) func(context.Context) error {
			o := controller.Options{Identity: r.Identity, Namespace: r.Namespace, Config: r.Config, Log: r.Log,
				Resync: 5 * time.Second, LeaseDuration: 3 * time.Second}
			return func(ctx context.Context) error { return controller.Run(ctx, o) }
		},
	}
	f := fleettest.New(t, e, 3, programs)
	mirror := t.TempDir()
	if err := os.WriteFile(filepath.Join(mirror, "latest"), []byte("v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(mirror, "v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	mo := manifest.Options{Namespace: f.NS, Image: "slipway:test", Isolation: manifest.IsolationWebhook, MirrorDirs: []string{mirror}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr, ca := serveInProcess(t, e.Config, mo)
	install(ctx, t, e.Config, mo, addr, ca)

	// As fleettest's AsServiceAccount, with the webhook in place of the policies.
	f.Configs = map[string]*rest.Config{}
	for i := range 3 {
		node := fmt.Sprintf("%s-n%d", f.NS, i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node, Namespace: f.NS, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: manifest.AgentName, UID: "0d1e7c5e-0000-4000-8000-0000000000da", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{ServiceAccountName: manifest.AgentName, NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: mo.Image}}}}
		if _, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg, err := testenv.PodToken(ctx, e.Config, f.NS, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		f.Configs[node] = cfg
	}
	ctrl := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: manifest.ControllerName, Namespace: f.NS},
		Spec: corev1.PodSpec{ServiceAccountName: manifest.ControllerName, Containers: []corev1.Container{{Name: "controller", Image: mo.Image}}}}
	if _, err := f.Kube.CoreV1().Pods(f.NS).Create(ctx, ctrl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := testenv.PodToken(ctx, e.Config, f.NS, ctrl.Name)
	if err != nil {
		t.Fatal(err)
	}
	f.ControllerAs(cfg)

	for i := range 3 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file://" + mirror, Concurrency: 1, RebootDelay: fleettest.ZeroDelay(),
		Components:   &v1.Components{Rootfs: ptr.To(true), Kernel: ptr.To(true), K3s: ptr.To(true)},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitFor("all nodes at v2", 4*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
	slots, _, _ := f.JobsByAction()
	if len(slots) != 3 {
		t.Errorf("upgrade Jobs on %d nodes, want 3: %v", len(slots), slots)
	}
	for node, jobs := range slots {
		for _, j := range jobs {
			if args := j.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--k3s") {
				t.Errorf("node %s's upgrade Job %s runs %v, without --k3s", node, j.Name, args)
			}
		}
	}
}
