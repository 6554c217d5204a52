// Package attack holds slipway's attack suite: tests that act as one of
// slipway's components with nothing but the bound ServiceAccount token
// its pod really gets on one node (ops/testenv.PodToken: the node-name and
// pod-name claims included), against a real API server running the
// manifest's RBAC and admission policies, and try what that component must
// not do: reach another node, another shape of Job, another Lease, a
// Secret. Every attempt must be refused by the API server, never by
// slipway's own code; the legitimate call beside each must go through.
// docs/security.md lists the rights each component holds and the attacks.
package attack
