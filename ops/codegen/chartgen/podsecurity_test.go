package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"slipway.dev/slipway/ops/agent"
	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	swarmmanifest "slipway.dev/slipway/ops/swarm/manifest"
)

// podTemplate is one pod a system's manifest runs: the kind and name of its
// owner object, and its spec.
type podTemplate struct {
	Kind, Name string
	Meta       metav1.ObjectMeta
	Spec       corev1.PodSpec
}

// podTemplates are the pod templates of a multi-document manifest.
func podTemplates(t *testing.T, manifest []byte) []podTemplate {
	t.Helper()
	var out []podTemplate
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		kind, _ := raw["kind"].(string)
		b := mustJSON(t, raw)
		var into any
		switch kind {
		case "Deployment":
			into = &appsv1.Deployment{}
		case "DaemonSet":
			into = &appsv1.DaemonSet{}
		case "Job":
			into = &batchv1.Job{}
		case "Pod", "StatefulSet", "ReplicaSet", "CronJob":
			t.Fatalf("a %s in the manifest: teach this test its pod template", kind)
		default:
			continue
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
		switch o := into.(type) {
		case *appsv1.Deployment:
			out = append(out, podTemplate{kind, o.Name, o.Spec.Template.ObjectMeta, o.Spec.Template.Spec})
		case *appsv1.DaemonSet:
			out = append(out, podTemplate{kind, o.Name, o.Spec.Template.ObjectMeta, o.Spec.Template.Spec})
		case *batchv1.Job:
			out = append(out, podTemplate{kind, o.Name, o.Spec.Template.ObjectMeta, o.Spec.Template.Spec})
		}
	}
	return out
}

// namespaceLevel is the enforce label of the manifest's Namespace ("" when
// it has none, or no Namespace).
func namespaceLevel(t *testing.T, manifest []byte) string {
	t.Helper()
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var ns corev1.Namespace
		if err := dec.Decode(&ns); err == io.EOF {
			return ""
		} else if err != nil {
			t.Fatal(err)
		}
		if ns.Kind == "Namespace" {
			return ns.Labels[psaapi.EnforceLevelLabel]
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// restrictedViolations evaluates spec with Pod Security's own policy checks
// (k8s.io/pod-security-admission, what the API server's admission runs) at
// level restricted, latest version, and lists what fails.
func restrictedViolations(t *testing.T, meta metav1.ObjectMeta, spec corev1.PodSpec) []string {
	t.Helper()
	return violations(t, psaapi.LevelRestricted, meta, spec)
}

// violations lists what fails Pod Security's checks at level (latest).
func violations(t *testing.T, level psaapi.Level, meta metav1.ObjectMeta, spec corev1.PodSpec) []string {
	t.Helper()
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range ev.EvaluatePod(psaapi.LevelVersion{Level: level, Version: psaapi.LatestVersion()}, &meta, &spec) {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	return out
}

// runAsUser is the uid every container of spec runs as when they all say
// the same (their own runAsUser, or the pod's); nil when one says none or
// they differ.
func runAsUser(spec corev1.PodSpec) *int64 {
	var out *int64
	for i, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		var uid *int64
		if spec.SecurityContext != nil {
			uid = spec.SecurityContext.RunAsUser
		}
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			uid = c.SecurityContext.RunAsUser
		}
		if uid == nil || (i > 0 && (out == nil || *out != *uid)) {
			return nil
		}
		out = uid
	}
	return out
}

// runsAsRoot says whether every container of spec says it runs as uid 0
// (its own runAsUser, or the pod's): the image's default user is not root.
func runsAsRoot(spec corev1.PodSpec) bool {
	uid := runAsUser(spec)
	return uid != nil && *uid == 0
}

// TestPodsMeetPodSecurity renders every system's manifest (each chart's
// renderer, the code behind `slipway ops|update-operator|eds|swarm
// manifest`, in every variant and with every toggle), the upgrade Job and
// the slot Pods the UpdateChannel agent creates and the swarm worker's pod: each controller
// (a Deployment) meets Pod Security `restricted`, and each node agent
// (DaemonSet) and Job, which need root, says runAsUser: 0 itself since the
// image does not run as root.
func TestPodsMeetPodSecurity(t *testing.T) {
	var controllers int
	for _, c := range Charts() {
		privileged := false
		renders := []Render{{}}
		if c.Variant != nil {
			renders = nil
			for _, v := range c.Variant.Values {
				renders = append(renders, Render{Variant: v})
			}
		}
		for _, tg := range c.Toggles {
			renders = append(renders, Render{On: []string{tg.Key}})
		}
		for _, r := range renders {
			b, err := c.Render(r)
			if err != nil {
				t.Fatalf("%s %+v: %v", c.Name, r, err)
			}
			pods := podTemplates(t, b)
			nsLevel := namespaceLevel(t, b)
			if len(pods) == 0 {
				t.Errorf("%s %+v renders no pod", c.Name, r)
			}
			for _, p := range pods {
				where := fmt.Sprintf("%s (%+v): %s %s", c.Name, r, p.Kind, p.Name)
				switch p.Kind {
				case "Deployment":
					controllers++
					if v := restrictedViolations(t, p.Meta, p.Spec); len(v) > 0 {
						t.Errorf("%s does not meet Pod Security restricted:\n  %s", where, strings.Join(v, "\n  "))
					}
					// runAsNonRoot alone leaves the uid to the image: the kubelet then
					// refuses any image whose user is not numeric and non-zero.
					if uid := runAsUser(p.Spec); uid == nil || *uid == 0 {
						t.Errorf("%s sets no non-zero runAsUser for every container", where)
					}
				default:
					if !runsAsRoot(p.Spec) {
						t.Errorf("%s runs as the image's non-root user: a node agent needing root says runAsUser: 0", where)
					}
				}
				// The manifest's own namespace admits every pod it runs: a pod
				// above baseline needs the namespace labelled privileged.
				if len(violations(t, psaapi.LevelBaseline, p.Meta, p.Spec)) > 0 {
					privileged = true
				}
				if v := violations(t, psaapi.LevelBaseline, p.Meta, p.Spec); len(v) > 0 && nsLevel != "privileged" {
					t.Errorf("%s needs Pod Security privileged (%s) but the manifest's Namespace enforces %q", where, v[0], nsLevel)
				}
			}
		}
		if privileged != c.NeedsPrivileged {
			t.Errorf("%s: NeedsPrivileged is %v, its pods say %v (NOTES.txt tells users to label the namespace from it)", c.Name, c.NeedsPrivileged, privileged)
		}
	}
	if controllers < 4 {
		t.Errorf("checked %d controller Deployments, want at least one per system", controllers)
	}

	ch := &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "slipway-system", UID: "uid-1"},
		Spec: opsv1.UpdateChannelSpec{URL: "https://example.org/latest", Version: "v2"}}
	j, err := agent.UpgradeJob(agent.Options{NodeName: "node-a", Image: "slipway:test"}, ch, opsv1.Slot{Node: "node-a", Version: "v2", Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !runsAsRoot(j.Spec.Template.Spec) {
		t.Error("the UpdateChannel agent's upgrade Job runs as the image's non-root user: it needs root and must say runAsUser: 0")
	}
	// The slot Pods it creates itself in the manifest's namespace: root as
	// the Job's, and above baseline (the host's directories), which the
	// chart's namespace must then admit.
	slotPods, err := agent.SlotPods(agent.Options{NodeName: "node-a", Image: "slipway:test"}, ch, opsv1.Slot{Node: "node-a", Version: "v2", Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	for kind, p := range slotPods {
		if !runsAsRoot(p.Spec) {
			t.Errorf("the UpdateChannel agent's %s slot Pod runs as the image's non-root user: it needs root and must say runAsUser: 0", kind)
		}
		if v := violations(t, psaapi.LevelBaseline, p.ObjectMeta, p.Spec); len(v) > 0 && !chartNeedsPrivileged(t, "slipway-agent") {
			t.Errorf("the %s slot Pod needs Pod Security privileged (%s) but the slipway-agent chart does not say so", kind, v[0])
		}
	}

	// A restricted application beside the swarm sidecar: the worker pod
	// stays restricted (the sidecar adds nothing the level refuses).
	app := corev1.Container{Name: "app", Image: "app", SecurityContext: &corev1.SecurityContext{
		RunAsNonRoot: ptrTo(true), AllowPrivilegeEscalation: ptrTo(false),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}
	if v := restrictedViolations(t, metav1.ObjectMeta{}, swarmmanifest.WorkerPodSpec(app, "slipway:test")); len(v) > 0 {
		t.Errorf("a swarm worker pod of a restricted app does not meet restricted:\n  %s", strings.Join(v, "\n  "))
	}
}

func ptrTo[T any](v T) *T { return &v }

// chartNeedsPrivileged is the NeedsPrivileged of the chart named name.
func chartNeedsPrivileged(t *testing.T, name string) bool {
	t.Helper()
	for _, c := range Charts() {
		if c.Name == name {
			return c.NeedsPrivileged
		}
	}
	t.Fatalf("no chart %s", name)
	return false
}
