package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ExtendedDaemonSetReplicaSet is one pod template of an ExtendedDaemonSet,
// named by its hash: the active one, or the canary. Its owner creates and
// deletes it.
type ExtendedDaemonSetReplicaSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the template and its hash.
	Spec ExtendedDaemonSetReplicaSetSpec `json:"spec"`
	// Status counts its pods.
	Status ExtendedDaemonSetReplicaSetStatus `json:"status,omitempty"`
}

// ExtendedDaemonSetReplicaSetSpec is one template of an ExtendedDaemonSet.
type ExtendedDaemonSetReplicaSetSpec struct {
	// Selector is the owner's node selector.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Template is the pod template.
	Template corev1.PodTemplateSpec `json:"template"`
	// TemplateGeneration is the hash of the template.
	// +optional
	TemplateGeneration string `json:"templateGeneration,omitempty"`
}

// ExtendedDaemonSetReplicaSetStatus is the observed state of an ERS.
type ExtendedDaemonSetReplicaSetStatus struct {
	// Status is active, canary, canary-failed or unknown (an outdated
	// template), as DataDog's controller writes it.
	// +optional
	Status string `json:"status,omitempty"`
	// Desired is how many nodes this ERS should run on.
	Desired int32 `json:"desired"`
	// Current is how many of its pods exist.
	Current int32 `json:"current"`
	// Ready is how many are Ready.
	Ready int32 `json:"ready"`
	// Available is how many are available.
	Available int32 `json:"available"`
	// IgnoredUnresponsiveNodes is how many nodes whose pod cannot be scheduled are ignored.
	// +optional
	IgnoredUnresponsiveNodes int32 `json:"ignoredUnresponsiveNodes,omitempty"`
	// CanaryRestarts is the restart history of the canary's pods (those that
	// restarted at least once), kept while the canary runs: a crashing canary
	// pod deleted or evicted does not take its restarts with it.
	// +optional
	// +listType=map
	// +listMapKey=pod
	CanaryRestarts []CanaryPodRestarts `json:"canaryRestarts,omitempty"`
	// Conditions: PodRestarting, PodCannotStart, Canary-Paused, Canary-Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CanaryPodRestarts is what one canary pod's restarts were when last seen.
type CanaryPodRestarts struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// Node is the node it ran on.
	Node string `json:"node"`
	// Restarts is its highest container restart count.
	Restarts int32 `json:"restarts"`
	// Reason is why it last restarted (CrashLoopBackOff, OOMKilled, ...).
	// +optional
	Reason string `json:"reason,omitempty"`
	// LastRestart is when a container of it last stopped before a restart.
	// +optional
	LastRestart metav1.Time `json:"lastRestart,omitempty"`
}

// ERS status values.
const (
	ReplicaSetStatusActive       = "active"
	ReplicaSetStatusCanary       = "canary"
	ReplicaSetStatusCanaryFailed = "canary-failed"
	ReplicaSetStatusUnknown      = "unknown"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ExtendedDaemonsetSetting overrides the resources of some containers of an
// ExtendedDaemonSet's pods on the nodes its nodeSelector selects.
type ExtendedDaemonsetSetting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec names the ExtendedDaemonSet, the nodes and the overrides.
	Spec ExtendedDaemonsetSettingSpec `json:"spec"`
	// Status says whether the setting is applied.
	Status ExtendedDaemonsetSettingStatus `json:"status,omitempty"`
}

// ExtendedDaemonsetSettingSpec is the desired state of a setting.
type ExtendedDaemonsetSettingSpec struct {
	// Reference names the ExtendedDaemonSet (same namespace).
	Reference *CrossVersionObjectReference `json:"reference"`
	// NodeSelector selects the nodes the overrides apply to.
	NodeSelector metav1.LabelSelector `json:"nodeSelector"`
	// Containers are the overrides, by container name.
	// +listType=map
	// +listMapKey=name
	Containers []ExtendedDaemonsetSettingContainerSpec `json:"containers,omitempty"`
}

// CrossVersionObjectReference names an object of any version.
type CrossVersionObjectReference struct {
	// Kind of the object (ExtendedDaemonSet).
	Kind string `json:"kind"`
	// Name of the object.
	Name string `json:"name"`
	// APIVersion of the object.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
}

// ExtendedDaemonsetSettingContainerSpec overrides one container's resources.
type ExtendedDaemonsetSettingContainerSpec struct {
	// Name of the container.
	Name string `json:"name"`
	// Resources replace the container's own.
	Resources corev1.ResourceRequirements `json:"resources"`
}

// ExtendedDaemonsetSettingStatus is whether a setting applies.
type ExtendedDaemonsetSettingStatus struct {
	// Status is valid or error (DataDog's strings).
	// +optional
	Status string `json:"status,omitempty"`
	// Error says what is wrong and what to do.
	// +optional
	Error string `json:"error,omitempty"`
}

// Setting status values.
const (
	SettingStatusValid = "valid"
	SettingStatusError = "error"
)
