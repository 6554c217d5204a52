package drain

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type podVerdict int

const (
	evictIt podVerdict = iota
	skip               // left running: not the drain's business
	refuse             // blocks the drain under this policy
)

// mirrorAnnotation marks static pods the kubelet mirrors into the API.
const mirrorAnnotation = "kubernetes.io/config.mirror"

// verdict decides what the drain does with one pod, as kubectl drain does,
// but for the caller's own pods (opts.Keep), which it leaves in place.
func verdict(p corev1.Pod, opts Options) podVerdict {
	if _, ok := p.Annotations[mirrorAnnotation]; ok {
		return skip
	}
	for _, k := range opts.Keep {
		if k.Has(p) {
			return skip
		}
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return skip
	}
	owner := metav1.GetControllerOf(&p)
	if owner != nil && owner.Kind == "DaemonSet" {
		if opts.IgnoreDaemonSets {
			return skip
		}
		return refuse
	}
	if owner == nil && !opts.Force && !opts.EvictUnmanaged {
		return refuse
	}
	if usesEmptyDir(p) && !opts.DeleteEmptyDirData {
		return refuse
	}
	return evictIt
}

func refuseReason(p corev1.Pod, opts Options) string {
	owner := metav1.GetControllerOf(&p)
	f := opts.Flags.withDefaults()
	switch {
	case owner != nil && owner.Kind == "DaemonSet":
		return "DaemonSet pod: set " + f.IgnoreDaemonSets
	case owner == nil && !opts.Force && !opts.EvictUnmanaged && f.EvictUnmanaged != "":
		return "no controller owns it: set " + f.EvictUnmanaged + " to evict it (it is not recreated)"
	case owner == nil && !opts.Force && !opts.EvictUnmanaged:
		return "no controller owns it: set " + f.Force + " to delete it"
	default:
		return "uses emptyDir: set " + f.DeleteEmptyDirData + " to lose its data"
	}
}

func usesEmptyDir(p corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			return true
		}
	}
	return false
}
