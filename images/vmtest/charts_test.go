//go:build vmnode

package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/images/build"
)

// chartInstall is one system's chart as docs/install.md installs it: the
// namespace (labelled privileged first when its pods need it), the
// chart's extra values, and the workloads that must turn Ready on the VM.
type chartInstall struct {
	chart, namespace string
	privileged       bool
	values           []string
	deployments      []string
	daemonSets       []string
}

// vmCharts are the four systems' charts. Each controller runs one replica:
// what the test proves is that a real kubelet starts the pod the chart
// renders (its securityContext against the image's user, its probes), which
// a second replica on the same node would not prove again.
var vmCharts = []chartInstall{
	{chart: "slipway-agent", namespace: "slipway-system", privileged: true,
		deployments: []string{"slipway-controller"}, daemonSets: []string{"slipway-agent"}},
	// The slipway platform's agent needs a release source (it exits 2
	// without one); nothing serves this one, which only delays the first
	// check: the agent is Ready once its informers synced.
	{chart: "slipway-update-operator", namespace: "slipway-update-operator", privileged: true,
		values:      []string{"agent.extraArgs={--source=http://10.96.0.2/releases}"},
		deployments: []string{"update-operator-controller"}, daemonSets: []string{"update-operator-agent"}},
	{chart: "slipway-eds", namespace: "slipway-system", deployments: []string{"slipway-eds-controller"}},
	{chart: "slipway-swarm", namespace: "streams", deployments: []string{"slipway-swarm-controller"}},
}

// chartsRun installs the four systems' charts with the node's image (the
// OCI archive `make image-oci` wrote, imported by containerd on the VM),
// one `helm install` each as docs/install.md says, and waits until every
// controller Deployment and agent DaemonSet of them is Ready on the VM:
// their pods started by a real kubelet from that image, their readiness
// probes answered.
func (n *node) chartsRun(ctx context.Context, s *stepTimer) {
	// The simulated node would run a pod of each chart as kwok does: only
	// the VM may count.
	s.step("only the VM is a node", func() error {
		if err := n.cs.CoreV1().Nodes().Delete(ctx, n.env.Nodes[0], metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the simulated node: %w", err)
		}
		return nil
	})
	// The update operator's agents run on the nodes that say which
	// interface they speak, as a node image would label its nodes.
	s.step("label the node for the update operator", func() error {
		patch := []byte(`{"metadata":{"labels":{"update.slipway.dev/updater-interface-version":"2.0.0"}}}`)
		_, err := n.cs.CoreV1().Nodes().Patch(ctx, vmNodeName, "application/merge-patch+json", patch, metav1.PatchOptions{})
		return err
	})
	tools, err := exec.Command(filepath.Join(n.root, "scripts", "install-tools"), "--print").Output()
	if err != nil {
		n.g.t.Fatalf("install-tools --print: %v", err)
	}
	helm := filepath.Join(strings.TrimSpace(string(tools)), "helm")
	for _, c := range vmCharts {
		s.step("helm install "+c.chart, func() error { return n.helmInstall(ctx, helm, c) })
	}
	s.step("every controller and agent Ready", func() error { return n.chartsReady(ctx, 15*time.Minute) })
}

// helmInstall creates and labels c's namespace as docs/install.md does
// and installs c's chart with the node's image.
func (n *node) helmInstall(ctx context.Context, helm string, c chartInstall) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}}
	if c.privileged {
		ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}
	}
	if _, err := n.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", c.namespace, err)
	}
	repo, tag, _ := strings.Cut(build.SlipwayImage, ":")
	args := []string{"install", c.chart, filepath.Join(n.root, "charts", c.chart), "--namespace", c.namespace,
		"--set", "image.repository=" + repo, "--set", "image.tag=" + tag, "--set", "controller.replicas=1",
		"--kubeconfig", n.env.Kubeconfig}
	for _, v := range c.values {
		args = append(args, "--set", v)
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	home := filepath.Join(n.dir, "helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm install %s: %w: %s", c.chart, err, out)
	}
	return nil
}

// chartsReady waits until each chart's Deployments have been seen with
// all their replicas Ready and its DaemonSets with a Ready pod on the VM
// (the only node), all of them running the node's image. Seen once is
// enough: under TCG a probe with a one-second timeout may fail now and
// then afterwards, which says nothing about the kubelet starting the pod.
func (n *node) chartsReady(ctx context.Context, d time.Duration) error {
	seen := map[string]bool{}
	pending := map[string]string{}
	check := func(key, why string) {
		if seen[key] {
			return
		}
		if why == "" {
			seen[key] = true
			delete(pending, key)
			n.g.t.Logf("%s Ready on %s", key, vmNodeName)
			return
		}
		pending[key] = why
	}
	err := poll(ctx, d, "every chart's controllers and agents Ready on "+vmNodeName, func() (bool, error) {
		for _, c := range vmCharts {
			for _, name := range c.deployments {
				key := c.namespace + "/" + name
				if seen[key] {
					continue
				}
				dep, err := n.cs.AppsV1().Deployments(c.namespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					check(key, err.Error())
					continue
				}
				why := deploymentNotReady(dep)
				if why != "" {
					why += n.podsOf(ctx, c.namespace, dep.Spec.Selector)
				}
				check(key, why)
			}
			for _, name := range c.daemonSets {
				key := c.namespace + "/" + name
				if seen[key] {
					continue
				}
				ds, err := n.cs.AppsV1().DaemonSets(c.namespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					check(key, err.Error())
					continue
				}
				why := daemonSetNotReady(ds)
				if why != "" {
					why += n.podsOf(ctx, c.namespace, ds.Spec.Selector)
				}
				check(key, why)
			}
		}
		return len(pending) == 0 && len(seen) == workloads(), nil
	})
	if err != nil {
		var out []string
		for k, why := range pending {
			out = append(out, k+": "+why)
		}
		sort.Strings(out)
		return fmt.Errorf("%w; never seen Ready:\n  %s", err, strings.Join(out, "\n  "))
	}
	return nil
}

// workloads counts the controllers and agents of vmCharts.
func workloads() int {
	n := 0
	for _, c := range vmCharts {
		n += len(c.deployments) + len(c.daemonSets)
	}
	return n
}

// deploymentNotReady says why dep is not Ready with the node's image ("":
// it is).
func deploymentNotReady(dep *appsv1.Deployment) string {
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != build.SlipwayImage {
		return "image " + img + ", not " + build.SlipwayImage
	}
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	if dep.Status.ObservedGeneration < dep.Generation || dep.Status.ReadyReplicas < want || dep.Status.UpdatedReplicas < want {
		return fmt.Sprintf("%d/%d replicas Ready", dep.Status.ReadyReplicas, want)
	}
	return ""
}

// daemonSetNotReady says why ds has no Ready pod with the node's image
// on every node it should run on ("": it has).
func daemonSetNotReady(ds *appsv1.DaemonSet) string {
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != build.SlipwayImage {
		return "image " + img + ", not " + build.SlipwayImage
	}
	st := ds.Status
	if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled < 1 || st.NumberReady < st.DesiredNumberScheduled {
		return fmt.Sprintf("%d/%d pods Ready", st.NumberReady, st.DesiredNumberScheduled)
	}
	return ""
}

// podsOf describes the pods sel picks in ns: node, phase and what their
// containers wait for (the kubelet's refusals show here).
func (n *node) podsOf(ctx context.Context, ns string, sel *metav1.LabelSelector) string {
	pods, err := n.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(sel)})
	if err != nil {
		return " (pods: " + err.Error() + ")"
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Name+"@"+p.Spec.NodeName+"="+string(p.Status.Phase)+podWaiting(&p))
	}
	sort.Strings(out)
	return " (pods: " + strings.Join(out, " ") + ")"
}
