// Package bench compares `slipway eds` with the built-in DaemonSet
// controller of kube-controller-manager on the same simulated cluster (100
// kwok nodes by default): each rolls a template change over every node at
// maxUnavailable 10, canary off. It reports the wall times and their ratio,
// each controller's API writes per node (from the apiserver's audit log),
// the controllers' resident memory, and how long a canary takes to show
// CanaryPaused once its restart count crosses maxRestarts.
//
//	go test ./ops/eds/bench -run '^$' -bench EDSVsDaemonSet -benchtime 1x
//
// Without -bench the package starts nothing.
package bench
