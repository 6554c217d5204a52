package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientscheme "k8s.io/client-go/kubernetes/scheme"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// decodeAll parses a rendered manifest back into typed objects, strictly.
func decodeAll(t *testing.T, body []byte) []runtime.Object {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientscheme.AddToScheme, apiextv1.AddToScheme, opsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	dec := codecs.UniversalDeserializer()
	reader := utilyaml.NewYAMLReader(bufioReader(body))
	var out []runtime.Object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode %q: %v", firstLines(doc), err)
		}
		out = append(out, obj)
	}
}

func TestRenderParsesIntoTheObjects(t *testing.T) {
	body, err := Render(Options{Namespace: "ops", Image: "registry.example/slipway:v9", Channel: opsv1.UpdateChannelSpec{URL: "file:///mirror", Version: "v2", Concurrency: 3}})
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, body)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
	}
	vap := strings.Repeat("ValidatingAdmissionPolicy,ValidatingAdmissionPolicyBinding,", 11)     // own Node, Jobs, Leases, the controller's Lease and Nodes, resolved source, Events, the NodeUpdates of the agent and the controller, the slot Pods' creates and deletes
	rbac := strings.Repeat("ServiceAccount,ClusterRole,ClusterRoleBinding,Role,RoleBinding,", 2) // the agent's, the controller's
	want := "Namespace,CustomResourceDefinition,CustomResourceDefinition," + rbac + vap + "PriorityClass,DaemonSet,Deployment,UpdateChannel"
	if got := strings.Join(kinds, ","); got != want {
		t.Fatalf("kinds = %s\nwant %s", got, want)
	}
	if ns := objs[0].(*corev1.Namespace); ns.Name != "ops" || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" ||
		ns.Labels["pod-security.kubernetes.io/audit"] != "restricted" {
		t.Errorf("namespace = %s, labels %v: want Pod Security written out", ns.Name, ns.Labels)
	}
	ch := objs[len(objs)-1].(*opsv1.UpdateChannel)
	if ch.Namespace != "ops" || ch.Name != "default" || ch.Spec.URL != "file:///mirror" || ch.Spec.Version != "v2" || ch.Spec.Concurrency != 3 || ch.Spec.Paused {
		t.Errorf("channel = %+v", ch)
	}
	ds := objs[len(objs)-3].(*appsv1.DaemonSet)
	checkDaemonSet(t, ds, "ops", "registry.example/slipway:v9")
	checkDeployment(t, objs[len(objs)-2].(*appsv1.Deployment), "ops", "registry.example/slipway:v9")
	if rb := objs[7].(*rbacv1.RoleBinding); rb.Subjects[0].Namespace != "ops" || rb.Namespace != "ops" {
		t.Errorf("role binding = %+v", rb)
	}
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, ns, image string) {
	t.Helper()
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if ds.Namespace != ns || c.Image != image || pod.ServiceAccountName != AgentName {
		t.Errorf("daemonset ns %s image %s sa %s", ds.Namespace, c.Image, pod.ServiceAccountName)
	}
	if strings.Join(append(c.Command, c.Args...), " ") != "slipway ops agent" {
		t.Errorf("command = %v %v", c.Command, c.Args)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env[EnvNodeName]; e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME = %+v", e)
	}
	if e := env[EnvImage]; e.Value != image {
		t.Errorf("SLIPWAY_IMAGE = %q, want the agent's own image %q", e.Value, image)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" {
		t.Errorf("tolerations = %+v, want one that tolerates every taint", pod.Tolerations)
	}
	paths := map[string]string{}
	for _, v := range pod.Volumes {
		paths[v.Name] = v.HostPath.Path
	}
	for _, m := range c.VolumeMounts {
		if paths[m.Name] != m.MountPath {
			t.Errorf("mount %s at %s from host %s", m.Name, m.MountPath, paths[m.Name])
		}
	}
	checkAgentHardened(t, pod)
	if paths["system"] != "/k3os/system" || paths["run"] != "/run/k3os" || len(paths) != 2 {
		t.Errorf("host paths = %v, want only the system directory and /run/k3os", paths)
	}
	for _, p := range paths { // a read-only bind mount does not stop connect(2) to a socket below it
		for _, socketDir := range []string{"/run", "/var/run", "/run/dbus", "/run/containerd", "/run/k3s", "/var/run/docker.sock"} {
			if p == socketDir {
				t.Errorf("the agent mounts the host's %s, where host sockets are", p)
			}
		}
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the template", k, v)
		}
	}
}

func checkDeployment(t *testing.T, d *appsv1.Deployment, ns, image string) {
	t.Helper()
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if d.Namespace != ns || c.Image != image || pod.ServiceAccountName != ControllerName || *d.Spec.Replicas != 2 {
		t.Errorf("deployment ns %s image %s sa %s replicas %d", d.Namespace, c.Image, pod.ServiceAccountName, *d.Spec.Replicas)
	}
	if strings.Join(append(c.Command, c.Args...), " ") != "slipway ops controller" {
		t.Errorf("command = %v %v", c.Command, c.Args)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("controller probes %+v %+v, want /healthz and /readyz", c.LivenessProbe, c.ReadinessProbe)
	}
	if len(c.Env) == 0 || c.Env[0].Name != EnvPodName || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env = %+v, want POD_NAME from metadata.name (its Lease identity)", c.Env)
	}
	if pod.HostPID || pod.HostNetwork || len(pod.Volumes) != 0 || len(c.SecurityContext.Capabilities.Add) != 0 {
		t.Errorf("controller pod holds host namespaces, host paths or capabilities: %+v", pod)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the template", k, v)
		}
	}
}

func TestDefaults(t *testing.T) {
	cases := []struct {
		name       string
		in         Options
		wantPaused bool
	}{
		{"no version leaves the channel paused", Options{}, true},
		{"latest follows the channel", Options{Channel: opsv1.UpdateChannelSpec{Version: "latest"}}, false},
		{"a pinned version rolls out", Options{Channel: opsv1.UpdateChannelSpec{Version: "v1.2.3"}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := c.in.WithDefaults()
			if o.Namespace != DefaultNamespace || o.ChannelName != DefaultChannelName || o.Channel.URL != DefaultChannelURL || o.Image != DefaultImage() {
				t.Errorf("defaults = %+v", o)
			}
			if o.Channel.Paused != c.wantPaused {
				t.Errorf("paused = %v, want %v", o.Channel.Paused, c.wantPaused)
			}
		})
	}
}

// What the agent calls is checked against these rules from the API
// server's audit log in ops/e2e (TestMain there); here only the switch.
func TestCRDWritesOnlyWithInstallCRDs(t *testing.T) {
	for _, install := range []bool{false, true} {
		granted := false
		for _, r := range clusterRules(Options{InstallCRDs: install}) {
			granted = granted || slices.Contains(r.Resources, "customresourcedefinitions")
		}
		args := strings.Join(agentArgs(Options{InstallCRDs: install}), " ")
		if granted != install || strings.Contains(args, "--install-crds") != install {
			t.Errorf("InstallCRDs %v: CRD rule %v, agent args %q", install, granted, args)
		}
	}
}

func TestRunWritesRender(t *testing.T) {
	var buf bytes.Buffer
	if err := Run(t.Context(), Options{Out: &buf}); err != nil {
		t.Fatal(err)
	}
	want, err := Render(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Error("Run and Render disagree")
	}
	if err := Run(t.Context(), Options{}); err == nil {
		t.Error("Run without an output writer succeeded")
	}
}

// checkAgentHardened (issue 22, right 4): the agent's pod holds the host's
// PID namespace and CAP_SYS_BOOT alone: no SYS_PTRACE (with hostPID, the
// host's root and every host process's memory) or SYS_CHROOT, the
// runtime's seccomp profile, a read-only root, a PriorityClass.
func checkAgentHardened(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	sc := pod.Containers[0].SecurityContext
	if !pod.HostPID || sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.Capabilities == nil ||
		fmt.Sprint(sc.Capabilities.Drop, sc.Capabilities.Add) != "[ALL] [SYS_BOOT]" {
		t.Errorf("hostPID %v, security context %+v: want the host's PID namespace and CAP_SYS_BOOT alone, not privileged", pod.HostPID, sc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("security context %+v: want a read-only root, no privilege escalation, seccomp RuntimeDefault", sc)
	}
	if pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want seccomp RuntimeDefault", pod.SecurityContext)
	}
	if pod.PriorityClassName != PriorityClassName || pod.HostNetwork || pod.HostIPC {
		t.Errorf("priority class %q, hostNetwork %v, hostIPC %v", pod.PriorityClassName, pod.HostNetwork, pod.HostIPC)
	}
}

// TestHostOptions: the D-Bus socket only for systemd hosts; each mirror
// directory read-only in the agent's pod (a file:// channel resolves
// `latest` there, issue 21 item 6) and allowed to the Jobs.
func TestHostOptions(t *testing.T) {
	o := Options{SystemdHosts: true, MirrorDirs: []string{"/srv/mirror"}}.WithDefaults()
	ds := daemonSet(o)
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m
	}
	if _, ok := mounts[DBusDir]; !ok {
		t.Errorf("SystemdHosts: no D-Bus mount in %v", mounts)
	}
	if m, ok := mounts["/srv/mirror"]; !ok || !m.ReadOnly {
		t.Errorf("mirror mount %+v, want read-only", m)
	}
	if p := jobPolicy(o).Policy(); !strings.Contains(fmt.Sprint(p.Spec.Validations), `"/srv/mirror"`) {
		t.Error("the Job policy does not allow the mirror directory")
	}
}
