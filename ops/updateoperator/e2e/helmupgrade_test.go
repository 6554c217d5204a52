package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/chartproc"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// TestHelmUpgradeMidRollout upgrades the update operator's chart with
// `helm upgrade` while a rollout runs through the fake nodes (their agents
// on the command platform, reboots through the supervisor): the release's
// controller runs as the chart renders it (the Deployment's arguments, as
// its ServiceAccount, so its RBAC); the upgrade changes the image tag and a
// value (--prepare-ahead added by controller.extraArgs), the old process
// gets SIGTERM and the new one starts from the upgraded Deployment, as its
// rollout replaces the pod, and then every node's agent is restarted in
// turn, as the agents' DaemonSet rolls (the agents run from the test's
// binary: the image tag changes nothing in them). Sampled every 250 ms: never more than
// max-concurrent nodes cordoned or rebooting, the PDB-guarded Deployment
// never below its minAvailable; each node reboots exactly once (two boot
// IDs seen: no node updated twice); the rollout finishes with every node
// at the new version and none cordoned.
func TestHelmUpgradeMidRollout(t *testing.T) {
	e := testenv.Need(t, env)
	if mode != modeChaos {
		t.Skip("runs in a plain go test (not with the benchmark or the demo)")
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t)
		}
	})
	c, err := kube.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const release, ns = "uo-upgrade", "uo-upgrade-system"
	chart := filepath.Join("..", "..", "..", "charts", "slipway-update-operator")
	kubecfg := []string{"--kubeconfig", e.Kubeconfig, "--namespace", ns}
	// The rollout's settings; the upgrade adds --prepare-ahead.
	values := func(extra ...string) []string {
		args := append([]string{fmt.Sprintf("--max-concurrent=%d", chaosConcurrent), "--pause-between=0s", "--state-timeout=30s",
			"--drain-timeout=30s", "--failure-backoff=1s", "--failure-backoff-max=4s", "--lease-duration=5s"}, extra...)
		js, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		return []string{"--set", "controller.replicas=1", "--set-json", "controller.extraArgs=" + string(js)}
	}
	chartproc.Helm(t, append(append([]string{"install", release, chart, "--create-namespace", "--set", "image.tag=v1"}, values()...), kubecfg...)...)
	t.Cleanup(func() {
		chartproc.Helm(t, "uninstall", release, "--wait", "--kubeconfig", e.Kubeconfig, "--namespace", ns)
		// Gone before the next run installs into it again.
		nss := kubernetes.NewForConfigOrDie(e.Config).CoreV1().Namespaces()
		_ = nss.Delete(context.Background(), ns, metav1.DeleteOptions{})
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if _, err := nss.Get(context.Background(), ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
		}
		t.Errorf("namespace %s still there 2 minutes after its deletion", ns)
	})
	guarded(t, c, "default", "kill-web") // the Deployment the sampler watches
	waitAll(t, c, time.Minute, "every agent up to date", func(n *corev1.Node) bool {
		return n.Annotations[keys.State()] == string(uo.StateUpToDate) && !n.Spec.Unschedulable
	})
	want := fmt.Sprintf("helm-%d", time.Now().UnixNano())
	boots := &bootSampler{c: c, seen: map[string]map[string]bool{}}
	boots.take()
	old := startReleaseController(t, e, ns, "controller-v1")
	if err := setRelease(want); err != nil {
		t.Fatal(err)
	}
	s := &fleetSampler{c: c}
	t.Cleanup(func() {
		if t.Failed() {
			s.logSteps(t)
		}
	})
	stopSampling := s.every(250 * time.Millisecond)
	defer stopSampling()
	stopBoots := boots.every(250 * time.Millisecond)
	defer stopBoots()
	at := func(n *corev1.Node) bool {
		return n.Annotations[keys.Key(uo.KeyCurrentVersion)] == want && n.Annotations[keys.State()] == string(uo.StateUpToDate) &&
			!n.Spec.Unschedulable && drain.CordonedBy(n.Annotations) == ""
	}
	// Mid-rollout: some nodes done, at least one cordoned or rebooting.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testenv.NodeRoleLabel + "=true"})
		if err != nil {
			t.Fatal(err)
		}
		done, busy := 0, 0
		for i := range list.Items {
			n := &list.Items[i]
			switch {
			case at(n):
				done++
			case drain.CordonedBy(n.Annotations) == keys.CordonOwner() || n.Annotations[keys.State()] == string(uo.StateRebooting):
				busy++
			}
		}
		if done >= 1 && busy >= 1 && done < len(list.Items) {
			t.Logf("helm upgrade with %d of %d nodes updated, %d under way", done, len(list.Items), busy)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rollout never reached its middle: %d done, %d under way", done, busy)
		}
		time.Sleep(100 * time.Millisecond)
	}
	chartproc.Helm(t, append(append([]string{"upgrade", release, chart, "--set", "image.tag=v2",
		"--set", "controller.podAnnotations.example\\.com/upgraded=yes"}, values("--prepare-ahead")...), kubecfg...)...)
	// The upgraded Deployment: the new image and the changed value.
	dep, err := c.AppsV1().Deployments(ns).Get(ctx, "update-operator-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":v2") {
		t.Errorf("after helm upgrade the controller's image is %s", img)
	}
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--prepare-ahead") {
		t.Errorf("after helm upgrade the controller's arguments are %v, without --prepare-ahead", dep.Spec.Template.Spec.Containers[0].Args)
	}
	old.Stop()
	startReleaseController(t, e, ns, "controller-v2")
	// The agents' DaemonSet rolls too, one node at a time: here each
	// node's agent process is killed and started again by its node (harsher
	// than the kubelet's SIGTERM) while the rollout goes on.
	replaced := 0
	for _, n := range e.Nodes {
		ok, err := e.Crash(n)
		if err != nil {
			t.Fatalf("restart the agent of %s: %v", n, err)
		}
		if ok {
			replaced++
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d of %d agents restarted after the upgrade", replaced, len(e.Nodes))
	waitAll(t, c, 3*time.Minute, "every node at "+want+", uncordoned", at)
	// Both agents and controller leave the finished fleet alone.
	time.Sleep(2 * time.Second)
	waitAll(t, c, time.Second, "every node still at "+want, at)
	stopSampling()
	stopBoots()
	s.check(t)
	boots.check(t)
}

// bootSampler records every boot ID each fake node reported.
type bootSampler struct {
	c    *kube.Clientset
	mu   sync.Mutex
	seen map[string]map[string]bool
}

func (b *bootSampler) take() {
	list, err := b.c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: testenv.NodeRoleLabel + "=true"})
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range list.Items {
		if b.seen[n.Name] == nil {
			b.seen[n.Name] = map[string]bool{}
		}
		b.seen[n.Name][n.Status.NodeInfo.BootID] = true
	}
}

func (b *bootSampler) every(d time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			b.take()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done; b.take() }) }
}

// check: every node rebooted exactly once (its first boot and one more).
func (b *bootSampler) check(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	for n := range b.seen {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) != nodes {
		t.Errorf("boot IDs of %d nodes sampled, want %d", len(names), nodes)
	}
	for _, n := range names {
		if got := len(b.seen[n]); got != 2 {
			t.Errorf("node %s had %d boots during the rollout, want 2 (updated once)", n, got)
		}
	}
}

// startReleaseController runs the release's controller Deployment as pod, its
// metrics and health ports off (they would collide on this host).
func startReleaseController(t *testing.T, e *testenv.Env, ns, pod string) *chartproc.Process {
	t.Helper()
	return chartproc.Start(t, e, kubernetes.NewForConfigOrDie(e.Config), chartproc.Options{
		Bin: filepath.Join(bin, "slipway"), Namespace: ns, Name: "update-operator-controller", Pod: pod,
		Edit: func(args []string) []string { return append(args, "--metrics-addr", "", "--health-addr", "") },
	})
}
