package controller

import (
	"os"
	"testing"

	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

// TestMain starts one simulated cluster for the package: a real API server,
// controller-manager (its StatefulSet and Deployment controllers create and
// delete the worker pods) and scheduler, and kwok nodes that run the pods.
//
// The tests that use the cluster run in parallel (t.Parallel): each works
// in a namespace of its own (newPool numbers them apart), with its own
// controller and its election Lease there, its RBAC, its admission
// policies (named after the namespace), workloads, worker processes and
// mounts. Nothing else is shared but the API server and the two kwok
// nodes, which run any namespace's pods (110 each). They mostly wait (on
// Leases, settle and stop delays, the kubelet lags the fleet plays), so
// they overlap well: three run at once.
func TestMain(m *testing.M) {
	testenv.Overlap(3)
	objs, err := crds.OfGroup("swarm.slipway.dev")
	if err != nil {
		panic(err)
	}
	os.Exit(testenv.RunMain(m, testenv.Options{Cluster: true, Nodes: 2, CRDs: objs}, &env))
}
