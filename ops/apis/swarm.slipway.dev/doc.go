// Package swarm names the swarm.slipway.dev API group (GroupName, generated);
// its versions live in the packages below, v1alpha1 holding Swarm.
package swarm
