package attack

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/attack/mutate"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	typedv1 "slipway.dev/slipway/ops/generated/clientset/versioned/typed/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
)

// The per-node NodeUpdate: the controller writes its spec (a node's
// instructions), the node's agent its status (the node's reports, and its
// versions, boot ID and staged versions, which the controller reads there
// alone from agents of protocol 3). The API
// server holds each to its half: RBAC gives the agent the status
// subresource only and the controller the object without its status, and
// the agent's policy binds its status writes to the object named after the
// node in its token.

// nodeUpdateAPI is the NodeUpdates of the attack namespace as cfg's user
// sees them, without client-side rate limits (the mutations go in parallel).
func nodeUpdateAPI(cfg *rest.Config) typedv1.NodeUpdateInterface {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	return versioned.NewForConfigOrDie(cfg).OpsV1().NodeUpdates(agentOpts.Namespace)
}

// nodeUpdateOf is the NodeUpdate of node as the controller writes it
// (created by the administrator when missing), with a report in its
// status as the node's agent writes it.
func nodeUpdateOf(ctx context.Context, t *testing.T, node string) *v1.NodeUpdate {
	t.Helper()
	admin := nodeUpdateAPI(env.Config)
	since := metav1.NewTime(time.Now().Truncate(time.Second))
	want := &v1.NodeUpdate{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: agentOpts.Namespace},
		Spec: v1.NodeUpdateSpec{Channels: []v1.NodeChannel{{UID: "uid-1", ChannelView: v1.ChannelView{Namespace: agentOpts.Namespace, Name: "c",
			Spec:     v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"},
			Resolved: &v1.ResolvedRelease{Version: "v2", Source: "file:///srv/mirror"},
			Slot:     &v1.Slot{Node: node, Version: "v2", Phase: "Upgrading", Attempt: 1, Since: since}}}}}}
	got, err := admin.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = admin.Get(ctx, node, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	got.Status = v1.NodeUpdateStatus{Protocol: 3, RebootFrom: "boot-1", Reports: []v1.NodeReport{{UID: "uid-1",
		SlotReport: v1.SlotReport{Since: since, Attempt: 1, Version: "v2", Phase: "Draining", Job: "upgrade-6-" + node + "-v2"}}},
		// protocol 3: what its boot runs and what it stages, read by the controller from here alone
		Booted: &v1.NodeVersions{Rootfs: "v1", Kernel: "v1", K3s: "v1.33.1+k3s1", BootID: "boot-1"}, Staged: &v1.NodeVersions{Rootfs: "v2", Kernel: "v2"}}
	if got, err = admin.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestNodeUpdateHalves: the agent on node-a writes the status of its own
// node's NodeUpdate and nothing else of it (not its spec, not its
// metadata), and nothing of node-b's; it creates and deletes none. The
// controller writes the spec and never a node's reports, and its objects
// carry no finalizer and no owner but their own Node.
func TestNodeUpdateHalves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentCfg, _ := agentOnA(ctx, t)
	controllerCfg := podOn(ctx, t, agentOpts.Namespace, manifest.ControllerName, "node-cp")
	asAgent, asController := nodeUpdateAPI(agentCfg), nodeUpdateAPI(controllerCfg)
	own, other := nodeUpdateOf(ctx, t, "node-a"), nodeUpdateOf(ctx, t, "node-b")
	dry := metav1.UpdateOptions{DryRun: dryRun}

	report := func(o *v1.NodeUpdate) *v1.NodeUpdate {
		o = o.DeepCopy()
		o.Status.Reports[0].Phase, o.Status.Reports[0].Outcome = "Rebooting", ""
		return o
	}
	waitPolicy(t, "only its own node's NodeUpdate", func() error { return second(patchOf(t, asAgent, other, "status")(ctx, report(other))) })
	if _, err := patchOf(t, asAgent, own, "status")(ctx, report(own)); err != nil {
		t.Errorf("the agent cannot report on its own NodeUpdate: %v", err)
	}
	if _, err := asAgent.Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Errorf("the agent cannot read its own NodeUpdate: %v", err)
	}

	respec := func(o *v1.NodeUpdate) *v1.NodeUpdate {
		o = o.DeepCopy()
		o.Spec.Channels[0].Slot.Version = "v9"
		return o
	}
	merge := func(api typedv1.NodeUpdateInterface, name, patch string, sub ...string) error {
		return second(api.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: dryRun}, sub...))
	}
	for name, err := range map[string]error{
		"report on node-b's NodeUpdate":             second(asAgent.UpdateStatus(ctx, report(other), dry)),
		"patch node-b's NodeUpdate's status":        merge(asAgent, "node-b", `{"status":{"rebootFrom":"x"}}`, "status"),
		"forge node-b's versions":                   merge(asAgent, "node-b", `{"status":{"booted":{"rootfs":"v9","bootID":"boot-1"}}}`, "status"),
		"forge node-b's staged versions":            merge(asAgent, "node-b", `{"status":{"staged":null}}`, "status"),
		"write its own instructions (update)":       second(asAgent.Update(ctx, respec(own), dry)),
		"write its own instructions (patch)":        merge(asAgent, "node-a", `{"spec":{"channels":[]}}`),
		"label its own NodeUpdate":                  merge(asAgent, "node-a", `{"metadata":{"labels":{"x":"y"}}}`),
		"create a NodeUpdate":                       second(asAgent.Create(ctx, &v1.NodeUpdate{ObjectMeta: metav1.ObjectMeta{Name: "node-z"}}, metav1.CreateOptions{DryRun: dryRun})),
		"delete its own NodeUpdate":                 asAgent.Delete(ctx, "node-a", metav1.DeleteOptions{DryRun: dryRun}),
		"delete node-b's NodeUpdate":                asAgent.Delete(ctx, "node-b", metav1.DeleteOptions{DryRun: dryRun}),
		"write a NodeUpdate in another namespace":   merge(nodeUpdateAPIIn(agentCfg, "default"), "node-a", `{"status":{"rebootFrom":"x"}}`, "status"),
		"read the NodeUpdates of another namespace": second(nodeUpdateAPIIn(agentCfg, "default").List(ctx, metav1.ListOptions{})),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("the agent could %s: %s", name, why)
		}
	}
	// A status write carries nothing else: the API server keeps the spec
	// and the metadata of the object as they were.
	sneaky := report(own)
	sneaky.Spec.Channels[0].Slot.Version = "v9"
	sneaky.Labels = map[string]string{"x": "y"}
	sneaky.Finalizers = []string{"example.com/pin"}
	stored, err := patchOf(t, asAgent, own, "status")(ctx, sneaky)
	got, _ := stored.(*v1.NodeUpdate)
	switch {
	case err != nil && refused(err, "") != "":
		t.Errorf("a status write with a changed spec and metadata failed otherwise: %v", err)
	case err == nil && (got.Spec.Channels[0].Slot.Version != "v2" || len(got.Labels) > 0 || len(got.Finalizers) > 0):
		t.Errorf("a status write of the agent changed the spec or metadata: slot %s labels %v finalizers %v", got.Spec.Channels[0].Slot.Version, got.Labels, got.Finalizers)
	}

	// The controller: the spec, not the reports.
	if _, err := patchOf(t, asController, own, "")(ctx, respec(own)); err != nil {
		t.Errorf("the controller cannot write a node's instructions: %v", err)
	}
	owned := func(kind, name string) *v1.NodeUpdate {
		o := &v1.NodeUpdate{ObjectMeta: metav1.ObjectMeta{Name: "node-c", Namespace: agentOpts.Namespace}}
		if kind != "" {
			o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: kind, Name: name, UID: "u"}}
		}
		return o
	}
	create := func(o *v1.NodeUpdate) error {
		return second(asController.Create(ctx, o, metav1.CreateOptions{DryRun: dryRun}))
	}
	const msg = "the slipway controller may write a NodeUpdate"
	waitPolicy(t, msg, func() error { return create(owned("Node", "node-b")) })
	for name, err := range map[string]error{
		"a plain NodeUpdate":             create(owned("", "")),
		"a NodeUpdate owned by its Node": create(owned("Node", "node-c")),
	} {
		if err != nil {
			t.Errorf("the controller cannot write %s: %v", name, err)
		}
	}
	pinned := owned("", "")
	pinned.Finalizers = []string{"example.com/pin"}
	generated := owned("", "")
	generated.Name, generated.GenerateName = "", "node-"
	for name, err := range map[string]error{
		"forge a node's report":                                   second(asController.UpdateStatus(ctx, report(own), dry)),
		"patch a node's report":                                   merge(asController, "node-a", `{"status":{"rebootFrom":"x"}}`, "status"),
		"forge a node's versions":                                 merge(asController, "node-a", `{"status":{"booted":{"rootfs":"v9"}}}`, "status"),
		"own a NodeUpdate by another Node":                        create(owned("Node", "node-b")),
		"own a NodeUpdate by something else":                      create(owned("ConfigMap", "node-c")),
		"pin a NodeUpdate with a finalizer":                       create(pinned),
		"create a NodeUpdate by generateName":                     create(generated),
		"delete a NodeUpdate (its Node's garbage collector does)": asController.Delete(ctx, "node-b", metav1.DeleteOptions{DryRun: dryRun}),
		"update a NodeUpdate (RBAC: patch only)":                  second(asController.Update(ctx, respec(own), dry)),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("the controller could %s: %s", name, why)
		}
	}
}

// patchOf submits a mutation of base as the merge patch from base to it
// (the agent and the controller patch NodeUpdates: RBAC grants patch, not
// update), to subresource sub of api ("" the object itself).
func patchOf(t *testing.T, api typedv1.NodeUpdateInterface, base *v1.NodeUpdate, sub string) func(context.Context, any) (any, error) {
	t.Helper()
	var subs []string
	if sub != "" {
		subs = []string{sub}
	}
	return patchSubmit(t, base, v1.NodeUpdate{}, func(ctx context.Context, p []byte) (any, error) {
		return api.Patch(ctx, base.Name, types.MergePatchType, p, metav1.PatchOptions{DryRun: dryRun}, subs...)
	})
}

// nodeUpdateAPIIn is the NodeUpdates of namespace as cfg's user sees them.
func nodeUpdateAPIIn(cfg *rest.Config, namespace string) typedv1.NodeUpdateInterface {
	return versioned.NewForConfigOrDie(cfg).OpsV1().NodeUpdates(namespace)
}

// statusAndServer skips what the API server writes, but not the status.
func statusAndServer(path string) bool { return path != "status" && mutate.DefaultSkip(path) }

// TestGeneratedAttacksNodeUpdate runs the generator on the NodeUpdate
// writes: the agent's status write of its own node's object (every status
// field is its own; everything else must be refused or dropped), the
// controller's create and spec write (the spec and the name are its own),
// and every mutation of node-b's object written as node-a's agent, which
// must all be refused.
func TestGeneratedAttacksNodeUpdate(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	agentCfg, _ := agentOnA(ctx, t)
	asAgent := nodeUpdateAPI(agentCfg)
	asController := nodeUpdateAPI(podOn(ctx, t, agentOpts.Namespace, manifest.ControllerName, "node-cp"))
	own, other := nodeUpdateOf(ctx, t, "node-a"), nodeUpdateOf(ctx, t, "node-b")
	toOther := patchOf(t, asAgent, other, "status")
	waitPolicy(t, "only its own node's NodeUpdate", func() error {
		changed := other.DeepCopy()
		changed.Status.RebootFrom = "boot-2"
		return second(toOther(ctx, changed))
	})
	fresh := own.DeepCopy()
	fresh.Name, fresh.ResourceVersion, fresh.UID, fresh.Status = "node-c", "", "", v1.NodeUpdateStatus{}
	fresh.Spec.Channels[0].Slot.Node = "node-c"
	meta := mutate.Holes{"metadata.labels[*]", "metadata.annotations[*]"} // no reader looks at them
	reports := runTargets(ctx, t,
		mutate.Target{Component: "ops agent", Object: "its own NodeUpdate (status)", Base: own, Holes: mutate.Holes{"status*"},
			Options: mutate.Options{Skip: statusAndServer}, Submit: patchOf(t, asAgent, own, "status")},
		mutate.Target{Component: "ops controller", Object: "a NodeUpdate (create)", Base: fresh, Holes: append(mutate.Holes{"spec*", "metadata.name"}, meta...),
			Submit: func(ctx context.Context, obj any) (any, error) {
				return asController.Create(ctx, obj.(*v1.NodeUpdate), metav1.CreateOptions{DryRun: dryRun})
			}},
		mutate.Target{Component: "ops controller", Object: "a NodeUpdate (spec)", Base: own, Holes: append(mutate.Holes{"spec*"}, meta...),
			Submit: patchOf(t, asController, own, "")})

	// Another node's object: each mutation refused.
	muts := mutate.Generate(other, mutate.Options{Skip: statusAndServer})
	admitted := 0
	for _, m := range muts {
		_, err := toOther(ctx, m.Object)
		if err == nil {
			admitted++
			t.Errorf("ops agent on node-a, node-b's NodeUpdate (status): %s %s admitted", m.What, m.Path)
		} else if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Logf("%s %s: refused otherwise: %v", m.What, m.Path, err)
		}
	}
	t.Logf("ops agent on node-a, node-b's NodeUpdate (status): tried %d, admitted %d", len(muts), admitted)
	logReports(t, start, reports)
}
