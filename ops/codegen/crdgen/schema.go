package main

import (
	"encoding/json"
	"fmt"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// refPrefix marks the references handed to the generated definitions, so
// they can be told apart from anything else and resolved by name.
const refPrefix = "#/definitions/"

// definitions calls a generated GetOpenAPIDefinitions with a reference
// callback that resolve understands.
func definitions(get func(common.ReferenceCallback) map[string]common.OpenAPIDefinition) map[string]common.OpenAPIDefinition {
	return get(func(name string) spec.Ref { return spec.MustCreateRef(refPrefix + name) })
}

// structuralSchema returns the schema of the named type with every reference
// inlined and converted to the CRD's JSONSchemaProps, as a structural schema
// for the top level of a custom resource: apiVersion and kind strings,
// metadata a plain object, no default on metadata or status.
func structuralSchema(defs map[string]common.OpenAPIDefinition, name string) (*apiextv1.JSONSchemaProps, error) {
	def, ok := defs[name]
	if !ok {
		return nil, fmt.Errorf("no OpenAPI definition for %s: rerun scripts/generate", name)
	}
	inlined, err := resolve(defs, def.Schema, map[string]bool{name: true})
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(inlined)
	if err != nil {
		return nil, fmt.Errorf("marshal schema of %s: %w", name, err)
	}
	var props apiextv1.JSONSchemaProps
	if err := json.Unmarshal(raw, &props); err != nil {
		return nil, fmt.Errorf("convert schema of %s: %w", name, err)
	}
	pruneDefaults(&props)
	props.Properties["metadata"] = apiextv1.JSONSchemaProps{Type: "object"}
	if status, ok := props.Properties["status"]; ok {
		status.Default = nil
		props.Properties["status"] = status
	}
	return &props, nil
}

// resolve inlines every reference in s. A referencing node keeps its own
// description and default over those of the type it names. seen guards
// against recursive types, which a structural schema cannot express.
func resolve(defs map[string]common.OpenAPIDefinition, s spec.Schema, seen map[string]bool) (spec.Schema, error) {
	if ref := s.Ref.String(); ref != "" {
		name, ok := strings.CutPrefix(ref, refPrefix)
		if !ok {
			return s, fmt.Errorf("unexpected reference %q", ref)
		}
		if seen[name] {
			return s, fmt.Errorf("recursive type %s cannot be a structural schema", name)
		}
		def, ok := defs[name]
		if !ok {
			return s, fmt.Errorf("no OpenAPI definition for %s (add its package to OpenAPIDependencies in ops/codegen)", name)
		}
		inner := map[string]bool{name: true}
		for k := range seen {
			inner[k] = true
		}
		target, err := resolve(defs, def.Schema, inner)
		if err != nil {
			return s, err
		}
		if s.Description != "" {
			target.Description = s.Description
		}
		if s.Default != nil {
			target.Default = s.Default
		}
		return target, nil
	}
	out := s
	if len(s.Properties) > 0 {
		out.Properties = make(map[string]spec.Schema, len(s.Properties))
		for k, p := range s.Properties {
			r, err := resolve(defs, p, seen)
			if err != nil {
				return s, fmt.Errorf("%s: %w", k, err)
			}
			out.Properties[k] = r
		}
	}
	if s.Items != nil && s.Items.Schema != nil {
		r, err := resolve(defs, *s.Items.Schema, seen)
		if err != nil {
			return s, fmt.Errorf("items: %w", err)
		}
		out.Items = &spec.SchemaOrArray{Schema: &r}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		r, err := resolve(defs, *s.AdditionalProperties.Schema, seen)
		if err != nil {
			return s, fmt.Errorf("additionalProperties: %w", err)
		}
		out.AdditionalProperties = &spec.SchemaOrBool{Allows: true, Schema: &r}
	}
	return out, nil
}

// pruneDefaults removes the defaults openapi-gen writes that a CRD must not
// carry: `default: ""` on every string without omitempty (it would make a
// required string such as spec.url present and empty instead of missing),
// `default: {}` on objects with required fields (the API server rejects a
// default that does not validate) and any default on list items.
func pruneDefaults(p *apiextv1.JSONSchemaProps) {
	if p.Default != nil {
		raw := string(p.Default.Raw)
		if raw == `""` || (raw == `{}` && len(p.Required) > 0) {
			p.Default = nil
		}
	}
	for k, c := range p.Properties {
		pruneDefaults(&c)
		p.Properties[k] = c
	}
	if p.Items != nil && p.Items.Schema != nil {
		p.Items.Schema.Default = nil
		pruneDefaults(p.Items.Schema)
	}
	if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
		pruneDefaults(p.AdditionalProperties.Schema)
	}
}
