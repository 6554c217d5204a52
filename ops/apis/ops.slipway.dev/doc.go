// Package ops names the ops.slipway.dev API group (GroupName, generated);
// its versions live in the packages below, v1 holding UpdateChannel.
package ops
