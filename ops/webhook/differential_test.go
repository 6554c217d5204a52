package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/process"
)

// TestDecisionsAreTheAPIServers: for every policy of the manifest (both
// isolations) and a corpus of requests (the agent's real Jobs and slot
// Pods of every kind as old and new servers send them, attacks on them,
// the Pods' deletes, Leases and
// Nodes and NodeUpdates of its own node and another's, requesters the policies do not
// match, a token that names no node), the webhook's evaluation decides as
// the API server's own ValidatingAdmissionPolicy code does, with the same
// message.
func TestDecisionsAreTheAPIServers(t *testing.T) {
	const ns, node = "ns", "n1"
	agentUser := authenticationv1.UserInfo{Username: manifest.AgentUser(ns), Extra: map[string]authenticationv1.ExtraValue{NodeNameExtra: {node}}}
	unbound := authenticationv1.UserInfo{Username: manifest.AgentUser(ns)}
	other := authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:masters"}}
	controller := authenticationv1.UserInfo{Username: "system:serviceaccount:" + ns + ":" + manifest.ControllerName}
	var corpus []*admissionv1.AdmissionRequest
	add := func(op admissionv1.Operation, gvk metav1.GroupVersionKind, resource string, sub string, obj, old any, users ...authenticationv1.UserInfo) {
		for _, u := range users {
			r := &admissionv1.AdmissionRequest{UID: "r", Operation: op, Namespace: ns, Kind: gvk, SubResource: sub,
				Resource: metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource}, UserInfo: u}
			if obj != nil {
				r.Object = raw(t, obj)
				r.Name = obj.(metav1.Object).GetName()
			}
			if old != nil {
				r.OldObject = raw(t, old)
				if obj == nil {
					r.Name = old.(metav1.Object).GetName()
				}
			}
			corpus = append(corpus, r)
		}
	}
	jobKind := metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
	for _, iso := range []string{process.IsolationPolicy, process.IsolationWebhook} {
		for _, spec := range []v1.UpdateChannelSpec{{URL: "github-releases://rancher/k3os", Version: "v2"}, {URL: "file:///mirror", Version: "v2", TokenSecretRef: &v1.SecretKeyRef{Name: "t"}}} {
			ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns, UID: "uid-1"}, Spec: spec}
			jobs, err := agent.Jobs(agent.Options{NodeName: node, Image: manifest.DefaultImage(), Namespace: ns, Isolation: iso}, ch,
				v1.Slot{Node: node, Version: "v2", Attempt: 1, Since: metav1.Now()})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				add(admissionv1.Create, jobKind, "jobs", "", j, nil, agentUser, unbound, other)
				add(admissionv1.Create, jobKind, "jobs", "", oldServer(t, j), nil, agentUser)
				for _, mutate := range jobAttacks {
					m := j.DeepCopy()
					mutate(m)
					add(admissionv1.Create, jobKind, "jobs", "", m, nil, agentUser)
					add(admissionv1.Create, jobKind, "jobs", "", oldServer(t, m), nil, agentUser)
				}
			}
		}
	}
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	for _, iso := range []string{process.IsolationPolicy, process.IsolationWebhook} {
		for kind, p := range slotPods(t, ns, node, iso) {
			add(admissionv1.Create, podKind, "pods", "", p, nil, agentUser, unbound, other)
			add(admissionv1.Create, podKind, "pods", "", oldServerPod(t, p), nil, agentUser)
			add(admissionv1.Delete, podKind, "pods", "", nil, p, agentUser, unbound, other)
			for _, mutate := range podAttacks {
				m := p.DeepCopy()
				mutate(m)
				add(admissionv1.Create, podKind, "pods", "", m, nil, agentUser)
				add(admissionv1.Create, podKind, "pods", "", oldServerPod(t, m), nil, agentUser)
				add(admissionv1.Delete, podKind, "pods", "", nil, m, agentUser)
			}
			if kind != agent.PodUpgrade {
				continue
			}
			// Every Job attack on the pod, on the slot Pod.
			for _, mutate := range jobAttacks {
				j := &batchv1.Job{ObjectMeta: *p.ObjectMeta.DeepCopy(), Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
					ObjectMeta: *p.ObjectMeta.DeepCopy(), Spec: *p.Spec.DeepCopy()}}}
				mutate(j)
				m := p.DeepCopy()
				m.ObjectMeta, m.Spec = j.ObjectMeta, j.Spec.Template.Spec
				m.Annotations = j.Spec.Template.Annotations
				add(admissionv1.Create, podKind, "pods", "", m, nil, agentUser)
			}
		}
	}
	leaseKind := metav1.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}
	for _, holder := range []string{node, "n2"} {
		l := &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}, ObjectMeta: metav1.ObjectMeta{Name: manifest.HeartbeatLeasePrefix + holder, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
		add(admissionv1.Create, leaseKind, "leases", "", l, nil, agentUser, unbound, other, controller)
		l2 := l.DeepCopy()
		l2.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: holder, UID: "u"}}
		add(admissionv1.Update, leaseKind, "leases", "", l2, l, agentUser)
	}
	nodeKind := metav1.GroupVersionKind{Version: "v1", Kind: "Node"}
	for _, name := range []string{node, "n2"} {
		n := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fleet": "a"}}}
		for _, change := range []func(*corev1.Node){
			func(n *corev1.Node) { n.Labels["ops.slipway.dev/rootfs-version"] = "v2" },
			func(n *corev1.Node) { n.Labels["example.com/x"] = "y" },
			func(n *corev1.Node) {
				n.Annotations = map[string]string{"ops.slipway.dev/k3s-version": "v1.30.14+k3s1"}
			},
			func(n *corev1.Node) { n.Annotations = map[string]string{"drain.slipway.dev/x": "y"} },
			func(n *corev1.Node) { n.Spec.Unschedulable = true },
			func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}} },
			func(n *corev1.Node) {
				n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "u"}}
			},
		} {
			m := n.DeepCopy()
			change(m)
			add(admissionv1.Update, nodeKind, "nodes", "", m, n, agentUser, unbound, other, controller)
		}
	}
	eventKind := metav1.GroupVersionKind{Version: "v1", Kind: "Event"}
	for _, host := range []string{node, "n2"} {
		for _, about := range []corev1.ObjectReference{{Kind: "Node", Name: node}, {Kind: "Node", Name: "n2"},
			{Kind: "UpdateChannel", Namespace: ns, Name: "c"}, {Kind: "UpdateChannel", Namespace: "other", Name: "c"}, {Kind: "Pod", Namespace: ns, Name: "p"}} {
			ev := &corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}, ObjectMeta: metav1.ObjectMeta{Name: "e." + host, Namespace: ns},
				InvolvedObject: about, Source: corev1.EventSource{Host: host}, Reason: "R"}
			add(admissionv1.Create, eventKind, "events", "", ev, nil, agentUser, unbound, other)
		}
	}
	channelKind := metav1.GroupVersionKind{Group: "ops.slipway.dev", Version: "v1", Kind: "UpdateChannel"}
	for _, url := range []string{"github-releases://rancher/k3os", "github-releases://rancher/k3os/", "file:///mirror"} {
		for _, source := range []string{"", "https://github.com/rancher/k3os/releases", "https://github.com/evil/k3os/releases", url} {
			ch := &v1.UpdateChannel{TypeMeta: metav1.TypeMeta{APIVersion: "ops.slipway.dev/v1", Kind: "UpdateChannel"},
				ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns}, Spec: v1.UpdateChannelSpec{URL: url}}
			old := ch.DeepCopy()
			if source != "" {
				ch.Status.Resolved = &v1.ResolvedRelease{Version: "v2", Source: source, At: metav1.Now()}
			}
			add(admissionv1.Update, channelKind, "updatechannels", "status", ch, old, controller, agentUser, other)
		}
	}
	nodeUpdateKind := metav1.GroupVersionKind{Group: "ops.slipway.dev", Version: "v1", Kind: "NodeUpdate"}
	for _, name := range []string{node, "n2"} {
		nu := &v1.NodeUpdate{TypeMeta: metav1.TypeMeta{APIVersion: "ops.slipway.dev/v1", Kind: "NodeUpdate"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: "u"}}}}
		reported := nu.DeepCopy()
		reported.Status.Protocol = 2
		relabelled := reported.DeepCopy()
		relabelled.Labels = map[string]string{"x": "y"}
		disowned := reported.DeepCopy()
		disowned.OwnerReferences = nil
		versions := reported.DeepCopy() // protocol 3: the versions, the boot ID and the staged versions in the status
		versions.Status.Protocol = 3
		versions.Status.Booted = &v1.NodeVersions{Rootfs: "v1", Kernel: "v1", K3s: "v1.33.1+k3s1", BootID: "boot-1"}
		versions.Status.Staged = &v1.NodeVersions{Rootfs: "v2"}
		for _, m := range []*v1.NodeUpdate{reported, relabelled, disowned, versions} {
			add(admissionv1.Update, nodeUpdateKind, "nodeupdates", "status", m, nu, agentUser, unbound, other, controller)
		}
		for _, change := range []func(*v1.NodeUpdate){
			func(*v1.NodeUpdate) {},
			func(n *v1.NodeUpdate) { n.Spec.Protocol = 2 },
			func(n *v1.NodeUpdate) { n.Finalizers = []string{"example.com/keep"} },
			func(n *v1.NodeUpdate) { n.GenerateName = "x-" },
			func(n *v1.NodeUpdate) { n.OwnerReferences = nil },
			func(n *v1.NodeUpdate) { n.OwnerReferences[0].Name = "n3" },
			func(n *v1.NodeUpdate) { n.OwnerReferences[0].Kind = "Pod" },
		} {
			m := nu.DeepCopy()
			change(m)
			add(admissionv1.Create, nodeUpdateKind, "nodeupdates", "", m, nil, controller, agentUser, other)
			add(admissionv1.Update, nodeUpdateKind, "nodeupdates", "", m, nu, controller, agentUser, other)
		}
	}

	checked := 0
	for _, o := range []manifest.Options{{Namespace: ns}, {Namespace: ns, Isolation: manifest.IsolationWebhook, MirrorDirs: []string{"/mirror"}, TokenSecrets: []string{"t"}}} {
		s, err := New(manifest.Policies(o), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range s.policies {
			ref := compileReference(t, p.policy)
			met := 0
			for i, req := range corpus {
				if !matchesResource(p, req) {
					continue
				}
				met++
				in, err := s.input(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				got := p.decide(in)
				allowed, msg := ref.decide(t, req)
				checked++
				switch {
				case got.allowed != allowed:
					t.Errorf("%s (isolation %q), request %d (%s %s %s by %s): the webhook admits %v (%s), the API server %v (%s)", name, o.Isolation, i,
						req.Operation, req.Kind.Kind, req.Name, req.UserInfo.Username, got.allowed, got.message, allowed, msg)
				case !allowed && !strings.HasPrefix(got.message, msg):
					t.Errorf("%s, request %d (%s %s by %s): the webhook denies with %q, the API server with %q", name, i, req.Operation, req.Name,
						req.UserInfo.Username, got.message, msg)
				}
			}
			if met == 0 {
				t.Errorf("policy %s (isolation %q) met no request of the corpus", name, o.Isolation)
			}
		}
	}
	if checked < 500 {
		t.Errorf("only %d decisions compared", checked)
	}
	t.Logf("%d decisions compared", checked)
}

// matchesResource: the request is one the policy's rules send it (what
// the API server matches before the policy runs).
func matchesResource(p *compiled, req *admissionv1.AdmissionRequest) bool {
	mc := p.policy.Spec.MatchConstraints
	if mc == nil {
		return false
	}
	resource := req.Resource.Resource
	if req.SubResource != "" {
		resource += "/" + req.SubResource
	}
	for _, r := range mc.ResourceRules {
		if contains(r.APIGroups, req.Resource.Group) && contains(r.Resources, resource) {
			for _, op := range r.Operations {
				if string(op) == "*" || string(op) == string(req.Operation) {
					return true
				}
			}
		}
	}
	return false
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v || x == "*" {
			return true
		}
	}
	return false
}

func raw(t *testing.T, obj any) runtime.RawExtension {
	t.Helper()
	switch o := obj.(type) {
	case runtime.RawExtension:
		return o
	case *batchv1.Job:
		return asNewServer(t, o)
	case *corev1.Pod:
		return podAsNewServer(t, o)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

// oldServer is j as a server before 1.30 sends it, as a Job again.
func oldServer(t *testing.T, j *batchv1.Job) *oldJob {
	return &oldJob{Job: j, raw: asOldServer(t, j)}
}

type oldJob struct {
	*batchv1.Job
	raw runtime.RawExtension
}

func (o *oldJob) MarshalJSON() ([]byte, error) { return o.raw.Raw, nil }

// oldServerPod is p as a server before 1.30 sends it, as a Pod again.
func oldServerPod(t *testing.T, p *corev1.Pod) *oldPod {
	return &oldPod{Pod: p, raw: podAsOldServer(t, p)}
}

type oldPod struct {
	*corev1.Pod
	raw runtime.RawExtension
}

func (o *oldPod) MarshalJSON() ([]byte, error) { return o.raw.Raw, nil }

// podAttacks change an agent's slot Pod into what a compromised agent
// might ask for (jobAttacks change its pod spec too).
var podAttacks = []func(*corev1.Pod){
	func(p *corev1.Pod) { p.Spec.NodeName = "n2" },
	func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "upgrade-2-n2-x", UID: "u", Controller: ptr.To(true)}}
	},
	func(p *corev1.Pod) { p.Finalizers = []string{"example.com/pin"} },
	func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = nil },
	func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](manifest.JobMaxDeadline + 1) },
	func(p *corev1.Pod) { p.Spec.ServiceAccountName = manifest.AgentName },
	func(p *corev1.Pod) { p.Spec.Priority = ptr.To[int32](2000001000) },
	func(p *corev1.Pod) { p.Annotations["ops.slipway.dev/action"] = "stage" },
	func(p *corev1.Pod) { p.Annotations["ops.slipway.dev/action"] = "prune" },
	func(p *corev1.Pod) { p.Labels = nil },
	func(p *corev1.Pod) { p.Name = "upgrade-2-n2-x" },
}

// jobAttacks change an agent's Job into what a compromised agent might ask for.
var jobAttacks = []func(*batchv1.Job){
	func(j *batchv1.Job) { j.Spec.Template.Spec.NodeName = "n2" },
	func(j *batchv1.Job) { j.Spec.Template.Spec.HostPID = true },
	func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true) },
	func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = "evil:latest" },
	func(j *batchv1.Job) { c := &j.Spec.Template.Spec.Containers[0]; c.Args = append(c.Args, "--evil") },
	func(j *batchv1.Job) {
		c := &j.Spec.Template.Spec.Containers[0]
		c.Args = append(c.Args, "--source", "file:///mirror")
	},
	func(j *batchv1.Job) {
		c := &j.Spec.Template.Spec.Containers[0]
		c.Args = append(c.Args, "--phase", "activate")
	},
	func(j *batchv1.Job) {
		c := &j.Spec.Template.Spec.Containers[0]
		c.Args = append(c.Args, "--system-dir", "/")
	},
	func(j *batchv1.Job) { j.Spec.Template.Spec.Volumes[0].HostPath.Path = "/" },
	func(j *batchv1.Job) { j.Name = "upgrade-2-n2-x" },
	func(j *batchv1.Job) { j.Labels["ops.slipway.dev/node"] = "n2" },
	func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To[int32](3) },
	func(j *batchv1.Job) {
		j.Spec.Template.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + j.Spec.Template.Spec.Containers[0].Name: "localhost/x"}
	},
	func(j *batchv1.Job) {
		j.Spec.Template.Annotations = map[string]string{"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}
	},
	func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].SecurityContext.AppArmorProfile = nil },
	func(j *batchv1.Job) { j.Spec.Template.Spec.Containers = nil },
}
