// Package v1alpha1 holds the swarm.slipway.dev/v1alpha1 API: the Swarm
// resource, a pool of workers sharing a job list, each job processed by
// exactly one worker (`slipway swarm controller`).
//
// The types are written by hand; deepcopy, list types, registration, clients,
// listers, informers and the CRD YAML are generated from them by
// `scripts/generate` (ops/codegen).
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Swarm is a pool of workers (the pods of a StatefulSet or Deployment) that
// shares a job list: the controller assigns every job to exactly one worker,
// balanced, moving the fewest jobs on any change, and writes the assignment
// into the workers' ConfigMap.
type Swarm struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the pool, the jobs and how workers pick up a change.
	Spec SwarmSpec `json:"spec"`
	// Status is the assignment in force and how far the workers follow it.
	Status SwarmStatus `json:"status,omitempty"`
}

// SwarmSpec is the desired state of a Swarm.
type SwarmSpec struct {
	// Workers selects, by their labels, the StatefulSets or Deployments of
	// this namespace whose pods are the workers. Only Ready pods take jobs.
	Workers metav1.LabelSelector `json:"workers"`
	// Jobs is the job list, each name once. Use it or jobsFrom.
	// +listType=atomic
	// +optional
	Jobs []string `json:"jobs,omitempty"`
	// JobsFrom reads the job list from a ConfigMap key of this namespace:
	// one job per line (blank lines and lines starting with # skipped) or a
	// YAML list.
	// +optional
	JobsFrom *JobsSource `json:"jobsFrom,omitempty"`
	// Dedicated jobs run alone on a worker (a quality-of-service policy);
	// each must be in the job list.
	// +listType=atomic
	// +optional
	Dedicated []string `json:"dedicated,omitempty"`
	// Refresh is how a worker whose jobs changed picks the change up:
	// "restart" deletes its pod (maxUnavailable at a time) so it starts
	// anew; "reload" lets the worker reread its ConfigMap by itself.
	// +default="restart"
	// +k8s:validation:pattern="^(restart|reload)$"
	// +optional
	Refresh string `json:"refresh,omitempty"`
	// MaxUnavailable is the most worker restarts in flight at once.
	// +default=1
	// +k8s:validation:minimum=1
	// +optional
	MaxUnavailable int32 `json:"maxUnavailable,omitempty"`
	// ConfigMap is the name of the workers' ConfigMap, which the controller
	// writes (key config.yml). Default: <swarm name>-worker-config.
	// +optional
	ConfigMap string `json:"configMap,omitempty"`
}

// JobsSource names a ConfigMap key holding the job list.
type JobsSource struct {
	// ConfigMap is the ConfigMap's name, in the Swarm's namespace.
	ConfigMap string `json:"configMap"`
	// Key is the key holding the list.
	// +default="jobs"
	// +optional
	Key string `json:"key,omitempty"`
}

// SwarmStatus is the observed state of a Swarm.
type SwarmStatus struct {
	// ObservedGeneration is the spec generation the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Version of the assignment in force; it grows with every change.
	// +optional
	Version int64 `json:"version,omitempty"`
	// WorkerCount is the number of workers taking jobs.
	// +optional
	WorkerCount int32 `json:"workerCount,omitempty"`
	// Jobs is the number of jobs in the list.
	// +optional
	Jobs int32 `json:"jobs,omitempty"`
	// Unassigned is the number of jobs no worker holds (no worker is Ready).
	// +optional
	Unassigned int32 `json:"unassigned,omitempty"`
	// Moved is the number of jobs the last change moved between workers.
	// +optional
	Moved int32 `json:"moved,omitempty"`
	// Workers are the workers, by pod name.
	// +listType=map
	// +listMapKey=pod
	// +optional
	Workers []WorkerStatus `json:"workers,omitempty"`
	// Conditions: Balanced, Converged, Invalid.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WorkerStatus is one worker's share and whether it runs it.
type WorkerStatus struct {
	// Pod is the worker's pod name.
	Pod string `json:"pod"`
	// Jobs is the number of jobs assigned to it.
	Jobs int32 `json:"jobs"`
	// Version is the version of its share (the assignment version at which
	// its job set last changed).
	// +optional
	Version int64 `json:"version,omitempty"`
	// JobsHash identifies the job set the controller wrote for this worker,
	// so a ConfigMap edited by hand is noticed and its workers refreshed.
	// +optional
	JobsHash string `json:"jobsHash,omitempty"`
	// SeenVersion is the version the worker reports it applied.
	// +optional
	SeenVersion int64 `json:"seenVersion,omitempty"`
	// Phase: Converged, Pending (not yet applied), Restarting.
	// +optional
	Phase string `json:"phase,omitempty"`
	// RestartedAt is when the controller deleted the pod to refresh it.
	// +optional
	RestartedAt *metav1.Time `json:"restartedAt,omitempty"`
	// RestartedUID is the UID of the pod the controller deleted: the worker
	// is back when a Ready pod of another UID holds its name.
	// +optional
	RestartedUID string `json:"restartedUID,omitempty"`
}
