package main

import (
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/generated/swarm/openapi"
)

// swarmCRDs are the CRDs of swarm.slipway.dev: the Swarm.
func swarmCRDs() []crdSpec {
	gv := swarmv1.SchemeGroupVersion
	return []crdSpec{{
		model:    "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1.Swarm",
		group:    gv.Group,
		version:  gv.Version,
		kind:     "Swarm",
		plural:   "swarms",
		singular: "swarm",
		short:    []string{"swarm"},
		defs:     openapi.GetOpenAPIDefinitions,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Workers", Type: "integer", JSONPath: ".status.workerCount", Description: "Workers taking jobs (Ready pods)."},
			{Name: "Jobs", Type: "integer", JSONPath: ".status.jobs", Description: "Jobs in the list."},
			{Name: "Version", Type: "integer", JSONPath: ".status.version", Description: "Version of the assignment in force."},
			{Name: "Converged", Type: "string", JSONPath: `.status.conditions[?(@.type=="Converged")].status`, Description: "Every worker runs its share."},
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		},
	}}
}
