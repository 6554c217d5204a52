// Package oldkube tests slipway on the Kubernetes of the last k3os releases
// (kube-apiserver v1.23.17, built by `scripts/install-tools --old-kube`):
// the webhook isolation's manifest, the admission webhook's refusals with
// real bound tokens, and the agent's server-version check. The tests run
// when $SLIPWAY_OLD_KUBE_TOOLS_DIR names that build or SLIPWAY_OLD_KUBE=1
// (which builds it, many minutes on a cold cache); otherwise they skip.
package oldkube
