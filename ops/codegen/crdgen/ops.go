package main

import (
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/generated/openapi"
)

// opsCRDs are the CRDs of ops.slipway.dev: the UpdateChannel.
func opsCRDs() []crdSpec {
	gv := opsv1.SchemeGroupVersion
	return []crdSpec{{
		model:      "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1.UpdateChannel",
		group:      gv.Group,
		version:    gv.Version,
		kind:       "UpdateChannel",
		plural:     opsv1.UpdateChannelResourceName,
		singular:   "updatechannel",
		short:      []string{"upchan", "upchans"},
		categories: []string{"all"},
		defs:       openapi.GetOpenAPIDefinitions,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Version", Type: "string", JSONPath: ".spec.version", Description: "The version the nodes should run; empty or latest follows the channel."},
			{Name: "Latest", Type: "string", JSONPath: ".status.latestVersion", Description: "The newest version the channel offered at the last poll."},
			{Name: "Concurrency", Type: "integer", JSONPath: ".spec.concurrency", Description: "The most nodes upgrading at once."},
			{Name: "Updating", Type: "integer", JSONPath: ".status.counts.updating", Description: "Nodes holding a slot now."},
			{Name: "Up-to-date", Type: "integer", JSONPath: ".status.counts.upToDate", Description: "Selected nodes at the target version."},
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		},
	}}
}
