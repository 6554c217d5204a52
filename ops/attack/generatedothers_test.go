package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/attack/mutate"
	"slipway.dev/slipway/ops/drain"
	swarmclient "slipway.dev/slipway/ops/generated/swarm/clientset/versioned"
	"slipway.dev/slipway/ops/protocol"
	swarmconfig "slipway.dev/slipway/ops/swarm/config"
	swarmmanifest "slipway.dev/slipway/ops/swarm/manifest"
	"slipway.dev/slipway/ops/swarm/member"
	"slipway.dev/slipway/ops/testenv"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// The generated attacks of the update operator and swarm, and of a node's
// kubelet on its own Node: as TestGeneratedAttacks does for the
// UpdateChannel operator, every object each component writes, mutated field
// by field, submitted as a dry run with the component's real bound token
// (the kubelet: impersonated as system:node:<name>, as the API server's Node
// authorizer and NodeRestriction see it).

// patchSubmit submits a mutation of base as the strategic merge patch from
// base to it (the components patch Nodes and pods: RBAC grants patch, not
// update), with get the patch call of one client.
func patchSubmit(t *testing.T, base, schema any, call func(ctx context.Context, patch []byte) (any, error)) func(context.Context, any) (any, error) {
	t.Helper()
	orig, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, obj any) (any, error) {
		mod, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		p, err := strategicpatch.CreateTwoWayMergePatch(orig, mod, schema)
		if err != nil {
			return nil, err
		}
		return call(ctx, p)
	}
}

func nodePatchOf(t *testing.T, c kubernetes.Interface, base *corev1.Node) func(context.Context, any) (any, error) {
	return patchSubmit(t, base, corev1.Node{}, func(ctx context.Context, p []byte) (any, error) {
		return c.CoreV1().Nodes().Patch(ctx, base.Name, types.StrategicMergePatchType, p, metav1.PatchOptions{DryRun: dryRun})
	})
}

func podPatchOf(t *testing.T, c kubernetes.Interface, base *corev1.Pod) func(context.Context, any) (any, error) {
	return patchSubmit(t, base, corev1.Pod{}, func(ctx context.Context, p []byte) (any, error) {
		return c.CoreV1().Pods(base.Namespace).Patch(ctx, base.Name, types.StrategicMergePatchType, p, metav1.PatchOptions{DryRun: dryRun})
	})
}

// runTargets runs every target and fails the test on each mutation
// admitted that no hole allows.
func runTargets(ctx context.Context, t *testing.T, targets ...mutate.Target) []mutate.Report {
	t.Helper()
	var reports []mutate.Report
	for _, tg := range targets {
		r, err := mutate.Run(ctx, tg, 8)
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, r)
		for _, w := range r.Wrong() {
			t.Errorf("%s, %s: %s %s admitted, and no hole allows it (stored: %v)", tg.Component, tg.Object, w.What, w.Path, w.Differs)
		}
	}
	return reports
}

// logReports logs the reports and their summary.
func logReports(t *testing.T, start time.Time, reports []mutate.Report) {
	t.Helper()
	sort.SliceStable(reports, func(i, j int) bool { return reports[i].String() < reports[j].String() })
	for _, r := range reports {
		t.Log(r)
	}
	t.Logf("generated attacks, by component (%s):\n%s", time.Since(start).Round(time.Second), mutate.Summary(reports))
}

// uoAnnotated is node with every key of keys (under the default prefix)
// set, as an administrator, so that each has a value to change and remove.
func uoAnnotated(ctx context.Context, t *testing.T, admin kubernetes.Interface, node string, annotations, labels []string) *corev1.Node {
	t.Helper()
	keys, err := uo.NewKeys("")
	if err != nil {
		t.Fatal(err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for _, k := range annotations {
		n.Annotations[keys.Key(k)] = "v"
	}
	for _, k := range labels {
		n.Labels[keys.Key(k)] = "v"
	}
	if n, err = admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return n
}

// fullKeys are the full keys of suffixes.
func fullKeys(k uo.Keys, suffixes []string) []string {
	out := make([]string, len(suffixes))
	for i, s := range suffixes {
		out[i] = k.Key(s)
	}
	return out
}

// keyHoles are the holes of a Node's labels and annotations: exactly the
// full keys named.
func keyHoles(field string, keys []string) mutate.Holes {
	var h mutate.Holes
	for _, k := range keys {
		h = append(h, fmt.Sprintf("metadata.%s[%s]", field, k))
	}
	return h
}

// uoRules are the update operator's manifest objects for namespace but its
// workloads (no controller runs them here: the tests make their pods).
func uoRules(t *testing.T, namespace string) []any {
	t.Helper()
	objs, err := uo.ManifestObjects(uo.ManifestOptions{Namespace: namespace, Platform: "bottlerocket-api"})
	if err != nil {
		t.Fatal(err)
	}
	var rules []any
	for _, o := range objs {
		switch o.(type) {
		case *appsv1.Deployment, *appsv1.DaemonSet:
		default:
			rules = append(rules, o)
		}
	}
	return rules
}

// TestGeneratedAttacksUpdateOperator runs the generator on what the update
// operator's agent (on uog-own) and controller write: the agent's patch of
// its own Node, the controller's patch of a Node, its fleet state
// ConfigMap (created, then patched) and its election Lease.
func TestGeneratedAttacksUpdateOperator(t *testing.T) {
	e := testenv.Need(t, env)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The namespace (and so the policies' users) of TestUpdateOperatorTokensReachOnlyTheirOwn:
	// the policies are cluster-wide objects, one per manifest.
	const ns = "uo-attack-own"
	apply(ctx, t, e.Config, uoRules(t, ns))
	admin := kubernetes.NewForConfigOrDie(e.Config)
	for _, n := range []string{"uog-own", "uog-other"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, testenv.FakeNode(n), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	asAgent := fast(podOn(ctx, t, ns, uo.AgentName, "uog-own"))
	asController := fast(podOn(ctx, t, ns, uo.ControllerName, "uog-other"))
	keys, _ := uo.NewKeys("")
	agentKeys, controllerKeys := fullKeys(keys, uo.AgentAnnotations), append(fullKeys(keys, uo.ControllerAnnotations), drain.AnnotationCordonedBy, drain.AnnotationSchedulableBefore)

	own := uoAnnotated(ctx, t, admin, "uog-own", append(slices.Clone(uo.AgentAnnotations), uo.ControllerAnnotations...), append(slices.Clone(uo.AgentLabels), uo.ControllerLabels...))
	other := uoAnnotated(ctx, t, admin, "uog-other", append(slices.Clone(uo.AgentAnnotations), uo.ControllerAnnotations...), append(slices.Clone(uo.AgentLabels), uo.ControllerLabels...))
	waitPolicy(t, "only the Node it runs on", func() error {
		labelled := other.DeepCopy()
		labelled.Labels["x"] = "y"
		_, err := nodePatchOf(t, asAgent, other)(ctx, labelled)
		return err
	})
	nodeOptions := mutate.Options{KeyPrefixes: []string{uo.DefaultPrefix + "/", "drain.slipway.dev/", "node-role.kubernetes.io/"}}

	fleetName := uo.FleetStateName("")
	cmAPI := func(c kubernetes.Interface) func(context.Context, any) (any, error) {
		return func(ctx context.Context, obj any) (any, error) {
			return c.CoreV1().ConfigMaps(ns).Create(ctx, obj.(*corev1.ConfigMap), metav1.CreateOptions{DryRun: dryRun})
		}
	}
	newFleet := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fleetName, Namespace: ns,
		Labels: map[string]string{"app.kubernetes.io/name": "slipway-update-operator", "app.kubernetes.io/part-of": "slipway", "app.kubernetes.io/component": uo.ControllerComponent}}}
	// The fleet state's data (the controller's records), and its labels and
	// annotations (the resume request: the controller acts on an
	// administrator's, and clears it).
	stateHoles := mutate.Holes{"data", "data[*]", "metadata.labels[*]", "metadata.annotations[*]"}
	waitPolicy(t, "fleet state ConfigMap", func() error {
		_, err := cmAPI(asController)(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "squat", Namespace: ns}})
		return err
	})
	// Created when missing: attacked while it is.
	if err := admin.CoreV1().ConfigMaps(ns).Delete(ctx, fleetName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	reports := runTargets(ctx, t, mutate.Target{Component: "update-operator controller", Object: "its fleet state ConfigMap (create)", Base: newFleet, Submit: cmAPI(asController),
		Holes: stateHoles})
	fleet, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: newFleet.ObjectMeta,
		Data: map[string]string{"fleet": `{}`, "node.uog-own": `{}`}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		fleet, err = admin.CoreV1().ConfigMaps(ns).Get(ctx, fleetName, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: uo.LeaseName, Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("controller-0"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: ptr.To(metav1.NowMicro())}}
	lease = leaseAsAdmin(ctx, t, admin, lease)
	// The other tests of this namespace create them.
	t.Cleanup(func() {
		_ = admin.CoordinationV1().Leases(ns).Delete(context.Background(), uo.LeaseName, metav1.DeleteOptions{})
		_ = admin.CoreV1().ConfigMaps(ns).Delete(context.Background(), fleetName, metav1.DeleteOptions{})
	})
	// As the ops controller's: the election's times and holder; labels and
	// annotations, which no reader looks at.
	leaseHoles := mutate.Holes{"spec.holderIdentity", "spec.renewTime", "spec.acquireTime", "spec.leaseDurationSeconds", "spec.leaseTransitions",
		"metadata.labels[*]", "metadata.annotations[*]"}

	targets := []mutate.Target{
		{Component: "update-operator agent", Object: "its own Node", Base: own, Options: nodeOptions, Submit: nodePatchOf(t, asAgent, own),
			Holes: append(keyHoles("annotations", agentKeys), keyHoles("labels", fullKeys(keys, uo.AgentLabels))...)},
		{Component: "update-operator controller", Object: "a Node", Base: other, Options: nodeOptions, Submit: nodePatchOf(t, asController, other),
			Holes: append(append(keyHoles("annotations", controllerKeys), keyHoles("labels", fullKeys(keys, uo.ControllerLabels))...), "spec.unschedulable")},
		{Component: "update-operator controller", Object: "its fleet state ConfigMap (patch)", Base: fleet,
			Submit: patchSubmit(t, fleet, corev1.ConfigMap{}, func(ctx context.Context, p []byte) (any, error) {
				return asController.CoreV1().ConfigMaps(ns).Patch(ctx, fleetName, types.StrategicMergePatchType, p, metav1.PatchOptions{DryRun: dryRun})
			}),
			Holes: stateHoles},
		{Component: "update-operator controller", Object: "its election Lease", Base: lease, Holes: leaseHoles,
			Submit: func(ctx context.Context, obj any) (any, error) {
				return asController.CoordinationV1().Leases(ns).Update(ctx, obj.(*coordinationv1.Lease), metav1.UpdateOptions{DryRun: dryRun})
			}},
	}
	logReports(t, start, append(reports, runTargets(ctx, t, targets...)...))
}

// TestGeneratedAttacksSwarm runs the generator on what a swarm worker (its
// pod's report) and the swarm controller (a worker's share, the workers'
// ConfigMap, a worker's fence) write, in a namespace holding the swarm
// manifest's RBAC and admission policy.
func TestGeneratedAttacksSwarm(t *testing.T) {
	e := testenv.Need(t, env)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "swarm-gen"
	admin := kubernetes.NewForConfigOrDie(e.Config)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	apply(ctx, t, e.Config, append(append(swarmmanifest.RBAC(ns), swarmmanifest.WorkerAdmission(ns)...), swarmmanifest.ControllerAdmission(ns)...))
	asWorker := fast(podOn(ctx, t, ns, swarmmanifest.WorkerName, "swg-node"))
	controllerCfg := podOn(ctx, t, ns, swarmmanifest.ControllerName, "swg-node")
	asController := fast(controllerCfg)
	worker, err := admin.CoreV1().Pods(ns).Get(ctx, swarmmanifest.WorkerName+"-swg-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	worker.Annotations = map[string]string{swarmv1.AppliedVersionAnnotation: "3", swarmconfig.ShareAnnotation: "version: 3\n"}
	worker.Labels = map[string]string{"app": "worker"}
	if worker, err = admin.CoreV1().Pods(ns).Update(ctx, worker, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, "swarm worker", func() error {
		labelled := worker.DeepCopy()
		labelled.Labels["app"] = "other"
		_, err := podPatchOf(t, asWorker, worker)(ctx, labelled)
		return err
	})
	waitPolicy(t, "swarm controller", func() error {
		labelled := worker.DeepCopy()
		labelled.Labels["app"] = "other"
		_, err := podPatchOf(t, asController, worker)(ctx, labelled)
		return err
	})
	election := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: swarmmanifest.ControllerName, Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("controller-0"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: ptr.To(metav1.NowMicro())}}
	election = leaseAsAdmin(ctx, t, admin, election)
	fence := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: member.LeaseName(worker.Name), Namespace: ns,
		Annotations: map[string]string{member.MinVersionAnnotation: "3"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(worker.Name), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: ptr.To(metav1.NowMicro())}}
	fence = leaseAsAdmin(ctx, t, admin, fence)
	leaseUpdate := func(c kubernetes.Interface) func(context.Context, any) (any, error) {
		return func(ctx context.Context, obj any) (any, error) {
			return c.CoordinationV1().Leases(ns).Update(ctx, obj.(*coordinationv1.Lease), metav1.UpdateOptions{DryRun: dryRun})
		}
	}
	// A Lease's holder and times; labels and annotations no reader looks
	// at (but the fence, which the worker may not write).
	electionHoles := mutate.Holes{"spec.holderIdentity", "spec.renewTime", "spec.acquireTime", "spec.leaseDurationSeconds", "spec.leaseTransitions",
		"metadata.labels[*]", "metadata.annotations[*]"}
	podOptions := mutate.Options{KeyPrefixes: []string{"swarm.slipway.dev/"}}
	targets := []mutate.Target{
		{Component: "swarm worker", Object: "its pod's report", Base: worker, Options: podOptions, Submit: podPatchOf(t, asWorker, worker),
			Holes: mutate.Holes{"metadata.annotations[" + swarmv1.AppliedVersionAnnotation + "]"}},
		{Component: "swarm worker", Object: "its Lease", Base: fence, Submit: leaseUpdate(asWorker), Holes: electionHoles},
		{Component: "swarm controller", Object: "a worker's fence (a new Lease)", Submit: func(ctx context.Context, obj any) (any, error) {
			return asController.CoordinationV1().Leases(ns).Create(ctx, obj.(*coordinationv1.Lease), metav1.CreateOptions{DryRun: dryRun})
		}, Base: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: member.LeaseName("swarm-gone-0"), Namespace: ns,
			Annotations: map[string]string{member.MinVersionAnnotation: "3"}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("")}},
			Options: mutate.Options{KeyPrefixes: []string{"swarm.slipway.dev/"}},
			// Its name: any worker's (the controller fences whichever is gone).
			Holes: mutate.Holes{"metadata.name", "metadata.annotations[" + member.MinVersionAnnotation + "]", "spec.holderIdentity"}},
		{Component: "swarm controller", Object: "its election Lease", Base: election, Submit: leaseUpdate(asController), Holes: electionHoles},
		{Component: "swarm controller", Object: "a worker's share (its pod)", Base: worker, Options: podOptions, Submit: podPatchOf(t, asController, worker),
			Holes: mutate.Holes{"metadata.annotations[" + swarmconfig.ShareAnnotation + "]"}},
		{Component: "swarm controller", Object: "a worker's fence (its Lease)", Base: fence, Submit: leaseUpdate(asController),
			Holes: mutate.Holes{"metadata.annotations[" + member.MinVersionAnnotation + "]"}},
	}
	logReports(t, start, runTargets(ctx, t, append(targets, swarmControllerWrites(ctx, t, ns, controllerCfg)...)...))
}

// swarmControllerWrites are the targets of the swarm controller's other
// writes: the workers' ConfigMap of a Swarm (created, updated: its
// content is the controller's, its name any a Swarm's spec.configMap may
// give; the owner's UID a policy cannot compare with the Swarm's) and a
// Swarm's status (all of it the controller's; the status subresource
// drops the rest).
func swarmControllerWrites(ctx context.Context, t *testing.T, ns string, controllerCfg *rest.Config) []mutate.Target {
	t.Helper()
	asController := fast(controllerCfg)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	swarms := swarmclient.NewForConfigOrDie(env.Config).SwarmV1alpha1().Swarms(ns)
	sw := &swarmv1.Swarm{ObjectMeta: metav1.ObjectMeta{Name: "gen", Namespace: ns},
		Spec: swarmv1.SwarmSpec{Workers: metav1.LabelSelector{MatchLabels: map[string]string{"app": "worker"}}, Jobs: []string{"a", "b"}}}
	if _, err := swarms.Create(ctx, sw, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sw, err := swarms.Get(ctx, sw.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sw.Status = swarmv1.SwarmStatus{ObservedGeneration: sw.Generation, Version: 3, WorkerCount: 1, Jobs: 2,
		Workers:    []swarmv1.WorkerStatus{{Pod: "worker-0", Jobs: 2}},
		Conditions: []metav1.Condition{{Type: swarmv1.ConditionBalanced, Status: metav1.ConditionTrue, Reason: "Balanced", LastTransitionTime: metav1.Now()}}}
	if sw, err = swarms.UpdateStatus(ctx, sw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gen" + swarmv1.ConfigMapSuffix, Namespace: ns, Labels: map[string]string{swarmv1.SwarmLabel: "gen"},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sw, swarmv1.SchemeGroupVersion.WithKind("Swarm"))}},
		Data:       map[string]string{swarmv1.ConfigMapKey: "version: 3\n"},
		BinaryData: map[string][]byte{"last-valid.json.gz": []byte("x")}}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if cm, err = admin.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := cm.DeepCopy()
	fresh.Name, fresh.ResourceVersion, fresh.UID, fresh.CreationTimestamp, fresh.ManagedFields = "gen-new"+swarmv1.ConfigMapSuffix, "", "", metav1.Time{}, nil
	waitPolicy(t, "workers' ConfigMaps", func() error {
		bare := fresh.DeepCopy()
		bare.OwnerReferences = nil
		_, err := asController.CoreV1().ConfigMaps(ns).Create(ctx, bare, metav1.CreateOptions{DryRun: dryRun})
		return err
	})
	content := mutate.Holes{"data", "data[*]", "binaryData", "binaryData[*]"}
	cmOptions := mutate.Options{KeyPrefixes: []string{"swarm.slipway.dev/"}}
	asSwarms := swarmclient.NewForConfigOrDie(controllerCfg).SwarmV1alpha1().Swarms(ns)
	return []mutate.Target{
		{Component: "swarm controller", Object: "a Swarm's workers' ConfigMap (a new one)", Base: fresh, Options: cmOptions,
			Holes: append(mutate.Holes{"metadata.name", "metadata.ownerReferences[0].uid"}, content...),
			Submit: func(ctx context.Context, obj any) (any, error) {
				return asController.CoreV1().ConfigMaps(ns).Create(ctx, obj.(*corev1.ConfigMap), metav1.CreateOptions{DryRun: dryRun})
			}},
		{Component: "swarm controller", Object: "a Swarm's workers' ConfigMap (an update)", Base: cm, Options: cmOptions, Holes: content,
			Submit: func(ctx context.Context, obj any) (any, error) {
				return asController.CoreV1().ConfigMaps(ns).Update(ctx, obj.(*corev1.ConfigMap), metav1.UpdateOptions{DryRun: dryRun})
			}},
		{Component: "swarm controller", Object: "a Swarm's status", Base: sw, Holes: mutate.Holes{"status.*"},
			Options: mutate.Options{Skip: func(path string) bool { return path != "status" && mutate.DefaultSkip(path) }},
			Submit: func(ctx context.Context, obj any) (any, error) {
				return asSwarms.UpdateStatus(ctx, obj.(*swarmv1.Swarm), metav1.UpdateOptions{DryRun: dryRun})
			}},
	}
}

// leaseAsAdmin creates l as the administrator, or returns the Lease of
// its name that is there.
func leaseAsAdmin(ctx context.Context, t *testing.T, admin kubernetes.Interface, l *coordinationv1.Lease) *coordinationv1.Lease {
	t.Helper()
	api := admin.CoordinationV1().Leases(l.Namespace)
	got, err := api.Create(ctx, l, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = api.Get(ctx, l.Name, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// asKubelet is the admin's config impersonating node's kubelet.
func asKubelet(node string) *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	return cfg
}

// kubeletReaders names, for each key of slipway's on a Node, the trust
// audit row (docs/security.md) of its reader: a node's kubelet may write
// its own Node's labels and annotations (the Node authorizer and
// NodeRestriction allow it), so every reader of such a key must take it as
// that node's word about itself only.
func kubeletReaders() map[string]string {
	keys, _ := uo.NewKeys("")
	m := map[string]string{
		protocol.AnnotationSlotReport:            "ops.node.slot-report",
		protocol.AnnotationRootfsVersion:         "ops.node.versions",
		protocol.AnnotationPrestagedVersion:      "ops.node.versions",
		protocol.AnnotationPrestageFailedVersion: "ops.node.versions",
		protocol.AnnotationDrainStarted:          "ops.node.drain-record",
		drain.AnnotationCordonedBy:               "ops.node.drain-record, uo.node.cordon-record",
		drain.AnnotationSchedulableBefore:        "uo.node.cordon-record",
	}
	for _, k := range uo.AgentAnnotations {
		m[keys.Key(k)] = "uo.node." + k
	}
	for _, k := range uo.ControllerAnnotations {
		if _, ok := m[keys.Key(k)]; !ok {
			m[keys.Key(k)] = "uo.node.controller-keys"
		}
	}
	for _, k := range uo.ControllerLabels {
		m[keys.Key(k)] = "uo.node.controller-keys"
	}
	return m
}

// slipwayNodePrefixes are the prefixes of the Node keys slipway's
// components speak.
var slipwayNodePrefixes = []string{"ops.slipway.dev/", "channel.ops.slipway.dev/", "drain.slipway.dev/", uo.DefaultPrefix + "/"}

// kubeletRow is the trust audit row of the reader of the Node field at
// path ("" when no slipway component reads it).
func kubeletRow(path string, readers map[string]string) string {
	switch {
	case path == "spec.unschedulable":
		return "ops.node.drain-record, uo.node.unschedulable"
	case strings.HasPrefix(path, "spec.taints"):
		return "eds.node.placement"
	}
	_, key, ok := strings.Cut(path, "[")
	if !ok || !strings.HasPrefix(path, "metadata.") {
		return ""
	}
	key = strings.TrimSuffix(key, "]")
	if strings.HasPrefix(key, protocol.AnnotationChannelViewPrefix) && key != protocol.AnnotationChannelViewPrefix+"mutated" {
		return "ops.node.channel-view"
	}
	return readers[key]
}

// TestGeneratedAttacksKubelet runs the generator on a Node as that node's
// own kubelet (system:node:<name>, group system:nodes: the Node authorizer
// and NodeRestriction of the API server): what it may write is
// Kubernetes's grant, not slipway's, so nothing here is "wrong"; the test
// lists which of slipway's keys it reaches and fails when one has no
// reader row in the trust audit (kubeletReaders), so a key added to the
// protocol is audited as written by the node.
func TestGeneratedAttacksKubelet(t *testing.T) {
	e := testenv.Need(t, env)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(e.Config)
	const node = "kubelet-gen"
	if _, err := admin.CoreV1().Nodes().Create(ctx, testenv.FakeNode(node), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	readers := kubeletReaders()
	n := uoAnnotated(ctx, t, admin, node, nil, nil)
	for k := range readers {
		n.Annotations[k] = "v"
	}
	n.Annotations[protocol.AnnotationChannelViewPrefix+"uid-1"] = `{"name":"c"}`
	n.Labels[protocol.LabelRootfsVersion] = "v1"
	n, err := admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubelet := fast(asKubelet(node))
	tg := mutate.Target{Component: "a node's kubelet", Object: "its own Node", Base: n, Submit: nodePatchOf(t, kubelet, n),
		Options: mutate.Options{KeyPrefixes: append(slices.Clone(slipwayNodePrefixes), "node-role.kubernetes.io/", "node-restriction.kubernetes.io/", "kubernetes.io/")},
		// Kubernetes's grant to a kubelet: its Node's labels and annotations
		// (less what NodeRestriction refuses) and what else it admits.
		Holes: mutate.Holes{"*"}}
	r, err := mutate.Run(ctx, tg, 8)
	if err != nil {
		t.Fatal(err)
	}
	// Another Node, as the same kubelet: nothing (NodeRestriction).
	const other = "kubelet-gen-other"
	if _, err := admin.CoreV1().Nodes().Create(ctx, testenv.FakeNode(other), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), other, metav1.DeleteOptions{}) })
	o := uoAnnotated(ctx, t, admin, other, nil, nil)
	for k := range readers {
		o.Annotations[k] = "v"
	}
	o.Annotations[protocol.AnnotationChannelViewPrefix+"uid-1"] = `{"name":"c"}`
	o.Labels[protocol.LabelRootfsVersion] = "v1"
	if o, err = admin.CoreV1().Nodes().Update(ctx, o, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The unmutated object is read as the administrator (the Node
	// authorizer refuses the kubelet even a read of another Node); each
	// mutation is the kubelet's patch, and must be refused.
	patchOther := nodePatchOf(t, kubelet, o)
	others := runTargets(ctx, t, mutate.Target{Component: "a node's kubelet (another Node)", Object: "another Node", Base: o, Options: tg.Options,
		Submit: func(ctx context.Context, obj any) (any, error) {
			if obj == any(o) {
				return admin.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{})
			}
			return patchOther(ctx, obj)
		}})
	rows := map[string][]string{}
	for _, res := range r.Results {
		if res.Outcome != mutate.ByDesign {
			continue
		}
		row := kubeletRow(res.Path, readers)
		slipway := false
		for _, p := range slipwayNodePrefixes {
			slipway = slipway || strings.Contains(res.Path, "["+p)
		}
		switch {
		case row != "":
			rows[row] = append(rows[row], res.What+" "+res.Path)
		case slipway && !strings.HasSuffix(res.Path, "/mutated]"):
			t.Errorf("the kubelet writes %s (%s), a key of slipway's with no reader row in kubeletReaders", res.Path, res.What)
		default:
			rows["(no slipway reader)"] = append(rows["(no slipway reader)"], res.What+" "+res.Path)
		}
	}
	names := make([]string, 0, len(rows))
	for row := range rows {
		names = append(names, row)
	}
	sort.Strings(names)
	for _, row := range names {
		t.Logf("%s: %d admitted: %s", row, len(rows[row]), strings.Join(rows[row], "; "))
	}
	logReports(t, start, append([]mutate.Report{r}, others...))
}
