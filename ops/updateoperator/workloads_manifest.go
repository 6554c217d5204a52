package updateoperator

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// controllerDeployment runs two controller replicas, one leading through
// the Lease. It tolerates the cordon and a NotReady node, so on a
// single-node cluster it stays (and comes back) on the node it updates.
func controllerDeployment(o ManifestOptions, keys Keys) *appsv1.Deployment {
	labels := appLabels(ControllerComponent)
	replicas := int32(2)
	args := []string{"update-operator", "controller", "--prefix", keys.Prefix, "--namespace", o.Namespace, "--lease", LeaseName}
	if !slices.ContainsFunc(o.ControllerArgs, func(a string) bool { return strings.HasPrefix(a, "--os-image-pattern") }) {
		args = append(args, "--os-image-pattern", o.OSImagePattern)
	}
	args = append(args, o.ControllerArgs...)
	return &appsv1.Deployment{
		TypeMeta:   tm("apps/v1", "Deployment"),
		ObjectMeta: metav1.ObjectMeta{Name: ControllerName, Namespace: o.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr(intstr.FromInt32(1)), MaxSurge: ptr(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: ControllerName,
					PriorityClassName:  PriorityName,
					Tolerations: []corev1.Toleration{
						{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
						{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
						{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					},
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65532)), RunAsGroup: ptr(int64(65532)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
						Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}}}}},
					Containers: []corev1.Container{{
						Name: "controller", Image: o.Image, Args: args,
						Env:            []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						Ports:          []corev1.ContainerPort{metricsPort(), healthPort()},
						LivenessProbe:  liveness(),
						ReadinessProbe: readiness(),
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
						SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65532)), ReadOnlyRootFilesystem: ptr(true),
							AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
		},
	}
}

// agentDaemonSet runs the agent on every node with the interface-version
// label, with the host paths its platform needs.
func agentDaemonSet(o ManifestOptions, keys Keys) *appsv1.DaemonSet {
	labels := appLabels(AgentName)
	args := append([]string{"update-operator", "agent", "--prefix", keys.Prefix, "--platform", o.Platform,
		"--metrics-addr", fmt.Sprintf(":%d", metricsPort().ContainerPort)}, o.AgentArgs...)
	hostPath := func(name, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	env := []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
	switch o.Platform {
	case "bottlerocket-api":
		vols = append(vols, hostPath("api-socket", "/run/api.sock", corev1.HostPathSocket))
		mounts = append(mounts, corev1.VolumeMount{Name: "api-socket", MountPath: "/run/api.sock"})
	case "slipway":
		// No more of the host: not its /run (a read-only bind mount does
		// not stop connect(2), and /run holds the system bus and the
		// container runtime's sockets); the init is told from PID 1
		// (hostPID) and rebooted by a signal (platform.Rebooter).
		vols = append(vols, hostPath("system", "/k3os/system", corev1.HostPathDirectory), hostPath("lock", "/run/k3os", corev1.HostPathDirectoryOrCreate))
		mounts = append(mounts, corev1.VolumeMount{Name: "system", MountPath: "/k3os/system"}, corev1.VolumeMount{Name: "lock", MountPath: "/run/k3os"})
	}
	return &appsv1.DaemonSet{
		TypeMeta:   tm("apps/v1", "DaemonSet"),
		ObjectMeta: metav1.ObjectMeta{Name: AgentName, Namespace: o.Namespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: AgentName,
					PriorityClassName:  PriorityName,
					NodeSelector:       map[string]string{keys.InterfaceVersion(): InterfaceVersion},
					Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					HostPID:            o.Platform == "slipway", // the reboot reaches the host's init
					Volumes:            vols,
					Containers: []corev1.Container{{
						Name: "agent", Image: o.Image, Args: args,
						Env:            env,
						VolumeMounts:   mounts,
						Ports:          []corev1.ContainerPort{metricsPort(), healthPort()},
						LivenessProbe:  liveness(),
						ReadinessProbe: readiness(),
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("24Mi")}},
						SecurityContext: agentSecurity(o.Platform),
					}},
				},
			},
		},
	}
}

// SlipwayAgentCapabilities are the only capabilities of the slipway
// platform's agent: writing the host's system directory as root
// (DAC_OVERRIDE, FOWNER, CHOWN) and reboot(2) for an init it does not know
// (SYS_BOOT). Not privileged, and no CAP_SYS_PTRACE: with the host's PID
// namespace, either would open /proc/1/root, the host's whole filesystem
// and every socket in it.
var SlipwayAgentCapabilities = []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SYS_BOOT"}

// agentSecurity is the agent container's security context per platform.
// slipway: root with SlipwayAgentCapabilities, AppArmor unconfined: the
// runtime's default profile refuses a signal to an unconfined process, and
// the host's init (PID 1) is one, so the reboot needs it (a profile of our
// own would have to be loaded on every host first). On Bottlerocket the
// host API's socket is labelled so that only SELinux type super_t may
// connect (an enforcing host refuses every other container), as the
// Bottlerocket update operator's own agent runs; AppArmor is the runtime's
// default there and for the command platform. It runs as root, said here
// since the image's default user is not.
func agentSecurity(platform string) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{Privileged: ptr(false), RunAsUser: ptr(int64(0))}
	switch platform {
	case "slipway":
		sc.AllowPrivilegeEscalation = ptr(false)
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: SlipwayAgentCapabilities}
		sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	case "bottlerocket-api":
		sc.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u", Role: "system_r", Type: "super_t", Level: "s0"}
	}
	return sc
}

func ptr[T any](v T) *T { return &v }

// metricsPort is where both components serve /metrics (the controller's
// --metrics-addr default; the agent's is off, so its DaemonSet passes it).
func metricsPort() corev1.ContainerPort {
	return corev1.ContainerPort{Name: "metrics", ContainerPort: 9480}
}

// healthPort is where both components serve /healthz and /readyz (DefaultHealthAddr).
func healthPort() corev1.ContainerPort {
	return corev1.ContainerPort{Name: "health", ContainerPort: 9481}
}

// liveness restarts a container whose loops stopped beating (probes.go).
func liveness() *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("health")}},
		PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3}
}

// readiness: the Node informer synced.
func readiness() *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("health")}},
		PeriodSeconds: 5, TimeoutSeconds: 5, FailureThreshold: 2}
}
