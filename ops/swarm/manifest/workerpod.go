package manifest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/swarm/config"
)

// TokenPath is where in-cluster clients read their ServiceAccount token.
const TokenPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// WorkerHTTPPort is where the worker sidecar serves /healthz and /readyz
// (its --http default).
const WorkerHTTPPort = 9481

func workerProbe(path string) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(WorkerHTTPPort)}}}
}

// WorkerPodSpec is the pod spec of a worker: app, and beside it the
// `slipway swarm worker` sidecar (image) reading its share from its pod's
// annotation (a downwardAPI volume: no right to read anything, no other
// worker's share) and writing the jobs to /shared/jobs.txt. Only the sidecar gets the
// ServiceAccount token (a projected, pod-bound one): the pod does not
// automount it, so the application container has no token unless the
// caller gives it one. The sidecar's /healthz is its liveness probe (its
// loop turns) and /readyz its readiness probe (config read, version
// reported, Lease held).
func WorkerPodSpec(app corev1.Container, image string) corev1.PodSpec {
	shared := corev1.VolumeMount{Name: "shared", MountPath: "/shared"}
	app.VolumeMounts = append(app.VolumeMounts, shared)
	sidecar := corev1.Container{
		Name: "swarm", Image: image,
		Args: []string{"swarm", "worker", "--config", "/etc/swarm/" + swarmv1.ConfigMapKey, "--out", "/shared/jobs.txt"},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "swarm", MountPath: "/etc/swarm", ReadOnly: true}, shared,
			{Name: "swarm-token", MountPath: TokenPath, ReadOnly: true},
		},
		Ports:          []corev1.ContainerPort{{Name: "swarm-probes", ContainerPort: WorkerHTTPPort}},
		LivenessProbe:  workerProbe("/healthz"),
		ReadinessProbe: workerProbe("/readyz"),
		// The sidecar meets Pod Security `restricted` whatever the app does.
		SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
	}
	return corev1.PodSpec{
		ServiceAccountName:           WorkerName,
		AutomountServiceAccountToken: ptr.To(false),
		Containers:                   []corev1.Container{app, sidecar},
		Volumes: []corev1.Volume{
			{Name: "swarm", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: swarmv1.ConfigMapKey, FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + config.ShareAnnotation + "']"}}}}}},
			{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "swarm-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			}}}},
		},
	}
}
