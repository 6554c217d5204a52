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
func TestMain(m *testing.M) {
	objs, err := crds.OfGroup("swarm.slipway.dev")
	if err != nil {
		panic(err)
	}
	os.Exit(testenv.RunMain(m, testenv.Options{Cluster: true, Nodes: 2, CRDs: objs}, &env))
}
