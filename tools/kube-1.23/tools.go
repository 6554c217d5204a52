//go:build tools

// Package tools pins kube-apiserver v1.23.17 (and the openapi-gen of its
// kube-openapi, which generates the definitions it is built with). Nothing
// imports it; scripts/install-tools --old-kube builds from it.
package tools

import (
	_ "k8s.io/kube-openapi/cmd/openapi-gen"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
