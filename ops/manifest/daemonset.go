package manifest

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Host paths the agent mounts, at the same paths inside its container.
const (
	SystemDir = "/k3os/system" // the k3os system directory (read to label the node)
	RunDir    = "/run/k3os"    // holds the upgrade lock
	DBusDir   = "/run/dbus"    // the system bus, only with SystemdHosts (reboot through logind)
)

// MetricsPort is where the agent serves Prometheus metrics (its --metrics-addr).
const MetricsPort = 9479

// Environment variables the DaemonSet sets for the agent.
const (
	EnvNodeName  = "NODE_NAME"         // the node the pod runs on (downward API)
	EnvNamespace = "SLIPWAY_NAMESPACE" // the agent's namespace (downward API)
	EnvImage     = "SLIPWAY_IMAGE"     // the agent's own image, for the upgrade Jobs
)

// daemonSet runs `slipway ops agent` on every node, control plane included.
// It shares the host's PID namespace and holds CAP_SYS_BOOT
// (agentSecurityContext), because the agent reboots its node (reboot(2) from a pod's own PID namespace would
// only end that namespace); it is not privileged. Its system directory is
// mounted read-only (the upgrade Job, not the agent, writes it).
func daemonSet(o Options) *appsv1.DaemonSet {
	lbl := labels("agent")
	selector := map[string]string{"app.kubernetes.io/name": AgentName}
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: AgentName, Namespace: o.Namespace, Labels: lbl},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{
					ServiceAccountName: AgentName,
					HostPID:            true,
					PriorityClassName:  PriorityClassName,
					SecurityContext:    &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					// Every taint, so the agent also runs on control-plane and tainted nodes.
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					TerminationGracePeriodSeconds: ptr.To[int64](30),
					Containers:                    []corev1.Container{agentContainer(o)},
					Volumes:                       agentVolumes(o),
				},
			},
		},
	}
}

func agentContainer(o Options) corev1.Container {
	return corev1.Container{
		Name:            "agent",
		Image:           o.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"slipway"},
		Args:            agentArgs(o),
		Env: []corev1.EnvVar{
			fieldEnv(EnvNodeName, "spec.nodeName"),
			fieldEnv(EnvNamespace, "metadata.namespace"),
			{Name: EnvImage, Value: o.Image},
		},
		Ports:           []corev1.ContainerPort{{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP}},
		SecurityContext: agentSecurityContext(),
		LivenessProbe:   probe("/healthz"),
		ReadinessProbe:  probe("/readyz"),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("10m"),
				corev1.ResourceMemory: resource.MustParse("32Mi"),
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		VolumeMounts: agentMounts(o),
	}
}

func agentArgs(o Options) []string {
	if o.InstallCRDs {
		return []string{"ops", "agent", "--install-crds"}
	}
	return []string{"ops", "agent"}
}

// AgentCapabilities are the only capabilities the agent's container holds.
var AgentCapabilities = []corev1.Capability{"SYS_BOOT"}

// agentSecurityContext holds the capabilities the agent uses, and no more:
// SYS_BOOT, to reboot its host when its init is unknown (reboot(2) after
// sync; a signal to PID 1, which hostPID makes the host's init, needs no
// capability from a root process, nor do logind reboots over the system
// bus). No SYS_PTRACE (with hostPID it would
// reach every host process's memory and the host's root through
// /proc/<pid>/root) and no SYS_CHROOT. It runs as root to reach the system
// bus and read the system directory, under the runtime's default seccomp
// profile, with a read-only root filesystem (it writes nothing locally). A
// `--reboot-method command` whose command needs more is given it by the
// operator, in a patch of this DaemonSet. AppArmor is unconfined: the
// runtime's default profile lets a container receive signals from
// unconfined processes but not send them, so the signal to the host's init
// (itself unconfined) would be refused on hosts that enforce AppArmor.
func agentSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AppArmorProfile:          &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
		RunAsUser:                ptr.To[int64](0),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: AgentCapabilities},
	}
}

// agentVolumes are the host paths the agent reads: the system directory,
// the upgrade lock's directory, the mirror directories of file:// channels
// (it resolves `latest` there) and, with SystemdHosts only, the system bus.
// No host /run: a read-only bind mount does not stop connect(2) to the
// sockets below it (the system bus, the container runtime's), either of
// which is root on the host. The agent tells the host's init from /proc/1
// (hostPID) and reboots it by a signal to PID 1.
func agentVolumes(o Options) []corev1.Volume {
	vols := []corev1.Volume{
		hostPathVolume("system", SystemDir, corev1.HostPathDirectory),
		hostPathVolume("run", RunDir, corev1.HostPathDirectoryOrCreate),
	}
	if o.SystemdHosts {
		vols = append(vols, hostPathVolume("dbus", DBusDir, corev1.HostPathDirectory))
	}
	for i, dir := range o.MirrorDirs {
		vols = append(vols, hostPathVolume(fmt.Sprintf("mirror-%d", i), dir, corev1.HostPathDirectory))
	}
	return vols
}

func agentMounts(o Options) []corev1.VolumeMount {
	mounts := []corev1.VolumeMount{
		{Name: "system", MountPath: SystemDir, ReadOnly: true},
		{Name: "run", MountPath: RunDir},
	}
	if o.SystemdHosts {
		mounts = append(mounts, corev1.VolumeMount{Name: "dbus", MountPath: DBusDir})
	}
	for i, dir := range o.MirrorDirs {
		mounts = append(mounts, corev1.VolumeMount{Name: fmt.Sprintf("mirror-%d", i), MountPath: dir, ReadOnly: true})
	}
	return mounts
}

// PriorityClassName is the agent's PriorityClass: a node's agent is what
// reboots it back onto a working release, so it is not the pod evicted
// when the node runs short.
const PriorityClassName = "slipway-node-agent"

func priorityClass() *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{
		TypeMeta:         metav1.TypeMeta{APIVersion: "scheduling.k8s.io/v1", Kind: "PriorityClass"},
		ObjectMeta:       metav1.ObjectMeta{Name: PriorityClassName, Labels: labels("agent")},
		Value:            1000000000, // the highest a user-defined class may have, below system-node-critical
		Description:      "slipway's node agent: it reboots its node onto a working release",
		PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority),
	}
}

// probe asks path on the metrics port (ops/health: /healthz fails when a
// loop stopped beating, /readyz until the informers synced).
func probe(path string) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("metrics")}},
		PeriodSeconds: 20, TimeoutSeconds: 5, FailureThreshold: 3}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func hostPathVolume(name, path string, t corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(t)}}}
}
