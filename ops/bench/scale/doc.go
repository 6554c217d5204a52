// Package scale measures the k3os operator's no-op rollout at fleet sizes
// no machine runs one agent process per node for (1,000 and 5,000 kwok
// nodes), beside rancher's system-upgrade-controller (SUC) on the same
// simulated cluster: slipway's real controller process, a sample of real
// agent processes, and the real agent code for every other node run in
// this process by ops/testenv/standin, each with its own connection and
// node-bound identity. Its benchmark is run by scripts/bench-scale (in
// make bench), one contender and fleet size per run on a fresh cluster.
// It prints one SCALE line per run: wall, API requests per node, bytes
// sent on watches by resource, the controller's CPU and memory (anonymous
// and PSS), the API server's CPU, and what one extra watcher of Nodes
// received.
package scale
