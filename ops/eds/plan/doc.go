// Package plan holds the pure decisions of the ExtendedDaemonSet controller,
// free of any client: which nodes are eligible for a pod, which nodes run the
// canary, how many pods a rolling update may create and delete now, what a
// pod's status says about its health, and the canary's verdict (continue,
// pause, fail or validate). The controller only gathers their inputs from
// its caches and writes their outputs to the API.
package plan
