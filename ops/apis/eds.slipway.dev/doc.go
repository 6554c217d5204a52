// Package eds names the eds.slipway.dev API group (GroupName, generated); its
// versions live in the packages below, v1alpha1 holding ExtendedDaemonSet,
// ExtendedDaemonSetReplicaSet and ExtendedDaemonsetSetting.
package eds
