package v1alpha1

import "time"

// Keys of the eds.slipway.dev protocol. Each has a DataDog twin under
// extendeddaemonset.datadoghq.com that is honoured beside it (read, never
// written), so a cluster moves over without relabelling anything.
const (
	// DataDogPrefix is the prefix of DataDog's keys.
	DataDogPrefix = "extendeddaemonset.datadoghq.com"

	// LabelName (pods; written by the controller) is the ExtendedDaemonSet's name.
	LabelName = "eds.slipway.dev/name"
	// LabelReplicaSet (pods; controller) is the ERS's name.
	LabelReplicaSet = "eds.slipway.dev/replicaset"
	// LabelCanary (pods; controller) is "true" on canary pods.
	LabelCanary = "eds.slipway.dev/canary"
	// DataDogLabelName, DataDogLabelReplicaSet and DataDogLabelCanary (pods;
	// controller) are the labels DataDog's controller writes, written beside
	// ours so that selectors, dashboards and `kubectl get pods -l` written
	// for DataDog's pods find ours.
	DataDogLabelName       = DataDogPrefix + "/name"
	DataDogLabelReplicaSet = "extendeddaemonsetreplicaset.datadoghq.com/name"
	DataDogLabelCanary     = "extendeddaemonsetreplicaset.datadoghq.com/canary"
	// DataDogLabelSettingName and DataDogLabelSettingNamespace (pods;
	// controller) name the ExtendedDaemonsetSetting whose resources the pod
	// got, as DataDog's controller labels them.
	DataDogLabelSettingName      = "extendeddaemonsetsetting.datadoghq.com/name"
	DataDogLabelSettingNamespace = "extendeddaemonsetsetting.datadoghq.com/namespace"
	// AnnotationAutoscalerDaemonSetPod (pods; controller) = "true" tells the
	// cluster autoscaler the pod is a daemon's: it does not keep a node up.
	AnnotationAutoscalerDaemonSetPod = "cluster-autoscaler.kubernetes.io/daemonset-pod"
	// LabelEDSOwner (ERS; controller) is the owning ExtendedDaemonSet's name.
	LabelEDSOwner = "eds.slipway.dev/owner"

	// AnnotationTemplateHash (ERS and pods; controller) is the template's hash.
	AnnotationTemplateHash = "eds.slipway.dev/templatehash"
	// AnnotationNodeHash (pods; controller) is the hash of the node's resource overrides.
	AnnotationNodeHash = "eds.slipway.dev/nodehash"

	// The annotations below are written on the ExtendedDaemonSet by users or
	// by kubectl-eds, and read by the controller.

	// AnnotationCanaryValid = <ERS name> validates that canary.
	AnnotationCanaryValid = "eds.slipway.dev/canary-valid"
	// AnnotationCanaryPaused = "true" pauses the canary; "false" is a manual unpause.
	AnnotationCanaryPaused = "eds.slipway.dev/canary-paused"
	// AnnotationCanaryPausedReason says why the canary was paused.
	AnnotationCanaryPausedReason = "eds.slipway.dev/canary-paused-reason"
	// AnnotationCanaryUnpaused = "true" is a manual unpause (DataDog's
	// kubectl-eds writes it beside canary-paused=false); auto-pause stays off
	// for that canary.
	AnnotationCanaryUnpaused = "eds.slipway.dev/canary-unpaused"
	// AnnotationCanaryFailed = <ERS name> fails that canary (kubectl-eds canary fail).
	AnnotationCanaryFailed = "eds.slipway.dev/canary-failed"
	// AnnotationOldDaemonSet names a DaemonSet of the namespace whose pods
	// count as the previous version and are replaced under the rolling limits.
	AnnotationOldDaemonSet = "eds.slipway.dev/old-daemonset"
	// AnnotationRollingUpdatePaused = "true" stops deletions of outdated pods
	// (new nodes still get theirs).
	AnnotationRollingUpdatePaused = "eds.slipway.dev/rolling-update-paused"
	// AnnotationRolloutFrozen = "true" stops creations and deletions.
	AnnotationRolloutFrozen = "eds.slipway.dev/rollout-frozen"

	// NodeResourcesPrefix + "<namespace>.<eds>.<container>" on a Node holds
	// a JSON ResourceRequirements for that container on that node (users).
	NodeResourcesPrefix = "resources.eds.slipway.dev/"
	// DataDogNodeResourcesPrefix is DataDog's twin of NodeResourcesPrefix.
	DataDogNodeResourcesPrefix = "resources." + DataDogPrefix + "/"
)

// ManualCanaryAnnotations are the annotations by which a user decides about
// one canary. The controller removes them (and their DataDog twins) when
// that canary ends: validated, failed or replaced by another template.
var ManualCanaryAnnotations = []string{AnnotationCanaryValid, AnnotationCanaryPaused,
	AnnotationCanaryPausedReason, AnnotationCanaryUnpaused, AnnotationCanaryFailed}

// DataDog returns the DataDog twin of one of our annotation keys
// ("eds.slipway.dev/x" -> "extendeddaemonset.datadoghq.com/x").
func DataDog(key string) string {
	const ours = "eds.slipway.dev/"
	if len(key) > len(ours) && key[:len(ours)] == ours {
		return DataDogPrefix + "/" + key[len(ours):]
	}
	return key
}

// Defaults applied in code where the schema cannot (auto mode only).
const (
	DefaultCanaryDuration           = 10 * time.Minute
	DefaultCanaryNoRestartsDuration = 5 * time.Minute
	// UnresponsiveAfter is how long a pod may stay unscheduled before its
	// node counts as unresponsive.
	UnresponsiveAfter = 10 * time.Minute
)

// Condition types of an ExtendedDaemonSet and its ERS. Canary-Paused,
// Canary-Failed, ReconcileError, PodRestarting and PodCannotStart are
// DataDog's; the others are slipway's own.
const (
	ConditionCanary              = "Canary"
	ConditionCanaryPaused        = "Canary-Paused"
	ConditionCanaryFailed        = "Canary-Failed"
	ConditionReconcileError      = "ReconcileError"
	ConditionRollingUpdatePaused = "RollingUpdatePaused"
	ConditionRolloutFrozen       = "RolloutFrozen"
	ConditionInvalid             = "Invalid"
	ConditionPodRestarting       = "PodRestarting"
	ConditionPodCannotStart      = "PodCannotStart"
	// ConditionCanaryAnalysisHolding is True while the canary's analysis
	// holds it: it could not be judged, or no evaluation has passed since
	// the canary could be validated.
	ConditionCanaryAnalysisHolding = "CanaryAnalysisHolding"
)
