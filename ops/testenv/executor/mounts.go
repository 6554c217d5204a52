package executor

import (
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// hostMounts maps the container's hostPath volume mounts into nodeDir, creating
// the directories (or a file's parent directory) they stand for.
func hostMounts(pod *corev1.Pod, c corev1.Container, nodeDir string) ([]Mount, error) {
	vols := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			vols[v.Name] = v.HostPath
		}
	}
	var mounts []Mount
	for _, m := range c.VolumeMounts {
		hp, ok := vols[m.Name]
		if !ok {
			continue
		}
		local := filepath.Join(nodeDir, filepath.Clean("/"+hp.Path), filepath.Clean("/"+m.SubPath))
		dir := local
		if hp.Type != nil && (*hp.Type == corev1.HostPathFile || *hp.Type == corev1.HostPathFileOrCreate) {
			dir = filepath.Dir(local)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create host path %s of volume %s: %w", local, m.Name, err)
		}
		mounts = append(mounts, Mount{Container: filepath.Clean(m.MountPath), Local: local})
	}
	return mounts, nil
}

// containerEnv is the container's environment with mount paths mapped; values
// from the downward API fields a kubelet would fill are resolved, others dropped.
func containerEnv(pod *corev1.Pod, c corev1.Container, hostIP string, mounts []Mount) []string {
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				continue
			}
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.uid":
				v = string(pod.UID)
			case "spec.nodeName":
				v = pod.Spec.NodeName
			case "spec.serviceAccountName":
				v = pod.Spec.ServiceAccountName
			case "status.hostIP", "status.podIP":
				v = hostIP
			default:
				continue
			}
		}
		env = append(env, e.Name+"="+rewritePaths(v, mounts))
	}
	return env
}
