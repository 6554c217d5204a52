package oldkube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/controller"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade/layout"
	"slipway.dev/slipway/upgrade/releasetest"
)

// The k3s of the last k3os releases, and one that meets slipway's 1.30.
const (
	oldK3s = "v1.23.17+k3s1"
	newK3s = "v1.30.14+k3s1"
)

// TestRolloutOnTheOldServer upgrades a fleet's k3s from the last k3os
// releases' 1.23 to 1.30 on kube-apiserver v1.23.17: three nodes at
// release v1 (k3s v1.23.17+k3s1, installed by `slipway ops upgrade`) roll
// out release v2 (k3s v1.30.14+k3s1) from a file:// mirror that `latest`
// names, with `components: {k3s: true}`. The agents run with their own
// pods' bound tokens and the controller with its own, under the manifest's
// RBAC and the webhook isolation (the policies served by slipway's
// webhook). Each Job the agents create is run as its pod would run it: the
// slipway binary with the Job's own arguments, on the node's system
// directory (only --remount is left out: the directory is no mount here).
// A node's kubelet version is what its k3s/current names at each boot, as
// k3s's kubelet would report. The test checks that every upgrade Job asks
// for k3s, that each node's k3s/current moved to the new k3s, and that the
// agent (its k3s-version annotation) and the kubelet report it.
func TestRolloutOnTheOldServer(t *testing.T) {
	e := testenv.Need(t, env)
	t.Setenv(process.IsolationEnv, process.IsolationWebhook)
	bin := slipwayBin(t)
	mirror := t.TempDir()
	for _, r := range []releasetest.Options{{Mirror: mirror, Version: "v1", K3sVersion: oldK3s}, {Mirror: mirror, Version: "v2", K3sVersion: newK3s}} {
		if _, err := releasetest.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	admin := kubernetes.NewForConfigOrDie(e.Config)
	k := &kubelets{admin: admin, boots: map[string]string{}}
	programs := fleettest.Programs{
		Agent: func(r fleettest.AgentRun) func(context.Context) error {
			o := agent.Options{NodeName: r.Node, Namespace: r.Namespace, SystemDir: r.SystemDir, Config: r.Config, Image: "slipway:test",
				BootIDFile: r.BootIDFile, Rebooter: r.Rebooter, LeaseDuration: 3 * time.Second, Resync: 5 * time.Second, Log: r.Log}
			return func(ctx context.Context) error {
				if err := k.boot(ctx, r); err != nil {
					return err
				}
				return agent.Run(ctx, o)
			}
		},
		Controller: func(r fleettest.ControllerRun) func(context.Context) error {
			o := controller.Options{Identity: r.Identity, Namespace: r.Namespace, Config: r.Config, Log: r.Log,
				Resync: 5 * time.Second, LeaseDuration: 3 * time.Second}
			return func(ctx context.Context) error { return controller.Run(ctx, o) }
		},
	}
	f := fleettest.New(t, e, 3, programs)
	mo := manifest.Options{Namespace: f.NS, Image: "slipway:test", Isolation: manifest.IsolationWebhook, MirrorDirs: []string{mirror}}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	addr, ca := serveInProcess(t, e.Config, mo)
	install(ctx, t, e.Config, mo, addr, ca)

	nodes := make([]string, 3)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("%s-n%d", f.NS, i)
		// The node as k3os installed it: release v1, its k3s 1.23.
		if err := os.RemoveAll(f.SystemDir(nodes[i])); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.CommandContext(ctx, bin, "ops", "upgrade", "--system-dir", f.SystemDir(nodes[i]), "--source", mirror, "--version", "v1",
			"--rootfs", "--kernel", "--k3s", "--reboot=false", "--lock-file", filepath.Join(f.Root, nodes[i], "lock")).CombinedOutput(); err != nil {
			t.Fatalf("install v1 on %s: %v\n%s", nodes[i], err, out)
		}
	}
	f.Mu.Lock()
	f.RunJob = func(j *batchv1.Job) bool { return runJobCommand(t, f, bin, j) }
	f.Mu.Unlock()

	// As fleettest's AsServiceAccount, with the webhook in place of the policies.
	f.Configs = map[string]*rest.Config{}
	for _, node := range nodes {
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

	for _, node := range nodes {
		f.Start(node)
	}
	for _, node := range nodes {
		f.WaitNode(t, node, "its agent reports k3s "+oldK3s, func(n *corev1.Node) bool {
			booted, _ := f.Versions(node)
			return booted.K3s == oldK3s && n.Status.NodeInfo.KubeletVersion == oldK3s
		})
	}
	f.Channel(v1.UpdateChannelSpec{URL: "file://" + mirror, Concurrency: 1, RebootDelay: fleettest.ZeroDelay(),
		Components:   &v1.Components{Rootfs: ptr.To(true), Kernel: ptr.To(true), K3s: ptr.To(true)},
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": f.NS}}})
	f.WaitFor("all nodes at v2", 6*time.Minute, fleettest.Done(3))
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
	min130 := utilversion.MustParseGeneric(process.MinKubernetes)
	for _, node := range nodes {
		if got, err := layout.New(f.SystemDir(node)).Current(layout.K3s); err != nil || got != newK3s {
			t.Errorf("node %s: k3s/current is %q (%v), want %s", node, got, err, newK3s)
		}
		f.WaitNode(t, node, "it reports k3s "+newK3s, func(n *corev1.Node) bool {
			booted, _ := f.Versions(node)
			return booted.K3s == newK3s && n.Status.NodeInfo.KubeletVersion == newK3s
		})
		if v := utilversion.MustParseSemantic(f.Node(node).Status.NodeInfo.KubeletVersion); v.LessThan(min130) {
			t.Errorf("node %s's kubelet runs %s, below slipway's %s", node, v, min130)
		}
	}
}

// kubelets stands in for each node's k3s kubelet: at each boot it reports
// the k3s version the node's k3s/current names (status.nodeInfo.kubeletVersion).
type kubelets struct {
	admin *kubernetes.Clientset
	mu    sync.Mutex
	boots map[string]string // node -> the boot last reported
}

func (k *kubelets) boot(ctx context.Context, r fleettest.AgentRun) error {
	id, err := os.ReadFile(r.BootIDFile)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.boots[r.Node] == string(id) {
		return nil // the agent restarted, the node did not
	}
	v, err := layout.New(r.SystemDir).Current(layout.K3s)
	if err != nil {
		return fmt.Errorf("the kubelet of %s: %w", r.Node, err)
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]string{"kubeletVersion": v}}})
	if _, err := k.admin.CoreV1().Nodes().Patch(ctx, r.Node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("the kubelet of %s reports k3s %s: %w", r.Node, v, err)
	}
	k.boots[r.Node] = string(id)
	return nil
}

// runJobCommand runs Job j as its pod would on its node: the slipway
// binary with the Job's arguments, the node's system directory and lock
// in place of the container's paths, and no --remount.
func runJobCommand(t *testing.T, f *fleettest.Fleet, bin string, j *batchv1.Job) bool {
	node := j.Spec.Template.Spec.NodeName
	in := j.Spec.Template.Spec.Containers[0].Args
	var args []string
	for i := 0; i < len(in); i++ {
		switch a := in[i]; {
		case a == "--remount":
		case a == "--system-dir" && i+1 < len(in):
			args, i = append(args, a, f.SystemDir(node)), i+1
		case a == "--lock-file" && i+1 < len(in):
			args, i = append(args, a, filepath.Join(f.Root, node, "lock")), i+1
		default:
			args = append(args, a)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Logf("job %s on %s: slipway %v: %v\n%s", j.Name, node, args, err, out)
	}
	return err == nil
}
