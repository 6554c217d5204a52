package testenv

import (
	"context"
	"os"
	"testing"
)

// BenchmarkStartControlPlane measures Start and Stop of etcd + kube-apiserver.
func BenchmarkStartControlPlane(b *testing.B) { benchStart(b, Options{}) }

// BenchmarkStartCluster10 measures Start and Stop of a simulated cluster of 10 nodes.
func BenchmarkStartCluster10(b *testing.B) { benchStart(b, Options{Cluster: true, Nodes: 10}) }

func benchStart(b *testing.B, opts Options) {
	if os.Getenv(EnvSkip) == "1" {
		b.Skip("SLIPWAY_SKIP_CLUSTER=1")
	}
	opts.ToolsDir = os.Getenv(EnvToolsDir)
	for b.Loop() {
		env, err := Start(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		env.Stop()
	}
}
