package main

import (
	"fmt"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"
)

// crdSpec describes one CustomResourceDefinition: what the OpenAPI
// definitions cannot say (names, scope, subresources, printer columns).
type crdSpec struct {
	model    string // OpenAPI model name of the kind, "<go package>.<Kind>"
	group    string
	version  string
	kind     string
	plural   string
	singular string
	short    []string
	// cluster is true for a cluster-scoped kind (default namespaced).
	cluster bool
	// categories are the `kubectl get <category>` groups it joins.
	categories []string
	columns    []apiextv1.CustomResourceColumnDefinition
	// scale is the scale subresource, when the kind has one.
	scale *apiextv1.CustomResourceSubresourceScale
	// validation returns the size bounds and CEL rules the OpenAPI
	// definitions cannot express (nil: none).
	validation func() ([]bound, []rule, error)
	// defs are the generated OpenAPI definitions of the kind's group.
	defs func(common.ReferenceCallback) map[string]common.OpenAPIDefinition
	// edit, when set, adds what the definitions cannot say (CEL rules, enums).
	edit func(*apiextv1.JSONSchemaProps)
}

// fileName is the YAML file ops/crds embeds for s.
func (s crdSpec) fileName() string { return s.group + "_" + s.plural + ".yaml" }

// buildCRD builds the CustomResourceDefinition of s from its group's
// generated OpenAPI definitions. Every kind has the status subresource.
func buildCRD(s crdSpec) (*apiextv1.CustomResourceDefinition, error) {
	schema, err := structuralSchema(definitions(s.defs), s.model)
	if err != nil {
		return nil, fmt.Errorf("%s schema: %w", s.kind, err)
	}
	if s.validation != nil {
		bounds, rules, err := s.validation()
		if err != nil {
			return nil, fmt.Errorf("%s validation: %w", s.kind, err)
		}
		if err := addValidation(schema, bounds, rules); err != nil {
			return nil, fmt.Errorf("%s validation: %w", s.kind, err)
		}
	}
	if s.edit != nil {
		s.edit(schema)
	}
	scope := apiextv1.NamespaceScoped
	if s.cluster {
		scope = apiextv1.ClusterScoped
	}
	return &apiextv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   s.plural + "." + s.group,
			Labels: map[string]string{"app.kubernetes.io/part-of": "slipway"},
		},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: s.group,
			Scope: scope,
			Names: apiextv1.CustomResourceDefinitionNames{
				Plural:     s.plural,
				Singular:   s.singular,
				Kind:       s.kind,
				ListKind:   s.kind + "List",
				ShortNames: s.short,
				Categories: s.categories,
			},
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name:    s.version,
				Served:  true,
				Storage: true,
				Schema:  &apiextv1.CustomResourceValidation{OpenAPIV3Schema: schema},
				Subresources: &apiextv1.CustomResourceSubresources{
					Status: &apiextv1.CustomResourceSubresourceStatus{},
					Scale:  s.scale,
				},
				AdditionalPrinterColumns: s.columns,
			}},
		},
	}, nil
}
