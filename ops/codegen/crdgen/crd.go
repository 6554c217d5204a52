package main

import (
	"fmt"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
)

// updateChannelModel is the OpenAPI model name of the UpdateChannel type.
const updateChannelModel = "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1.UpdateChannel"

// updateChannelCRD builds the UpdateChannel CustomResourceDefinition from the
// generated OpenAPI definitions.
func updateChannelCRD(defs map[string]common.OpenAPIDefinition) (*apiextv1.CustomResourceDefinition, error) {
	schema, err := structuralSchema(defs, updateChannelModel)
	if err != nil {
		return nil, fmt.Errorf("UpdateChannel schema: %w", err)
	}
	gv := opsv1.SchemeGroupVersion
	return &apiextv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   opsv1.UpdateChannelResourceName + "." + gv.Group,
			Labels: map[string]string{"app.kubernetes.io/part-of": "slipway"},
		},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: gv.Group,
			Scope: apiextv1.NamespaceScoped,
			Names: apiextv1.CustomResourceDefinitionNames{
				Plural:     opsv1.UpdateChannelResourceName,
				Singular:   "updatechannel",
				Kind:       "UpdateChannel",
				ListKind:   "UpdateChannelList",
				ShortNames: []string{"upchan", "upchans"},
				Categories: []string{"all"},
			},
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name:                     gv.Version,
				Served:                   true,
				Storage:                  true,
				Schema:                   &apiextv1.CustomResourceValidation{OpenAPIV3Schema: schema},
				Subresources:             &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: printerColumns(),
			}},
		},
	}, nil
}

// printerColumns are what `kubectl get upchan` shows.
func printerColumns() []apiextv1.CustomResourceColumnDefinition {
	return []apiextv1.CustomResourceColumnDefinition{
		{Name: "Version", Type: "string", JSONPath: ".spec.version", Description: "The version the nodes should run; empty or latest follows the channel."},
		{Name: "Latest", Type: "string", JSONPath: ".status.latestVersion", Description: "The newest version the channel offered at the last poll."},
		{Name: "Concurrency", Type: "integer", JSONPath: ".spec.concurrency", Description: "The most nodes upgrading at once."},
		{Name: "Updating", Type: "integer", JSONPath: ".status.counts.updating", Description: "Nodes holding a slot now."},
		{Name: "Up-to-date", Type: "integer", JSONPath: ".status.counts.upToDate", Description: "Selected nodes at the target version."},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}
}
