package main

import (
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

func obj(props map[string]spec.Schema, required ...string) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: props, Required: required}}
}

func str(desc string) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Description: desc}}
}

func ref(name, desc string, def any) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef(refPrefix + name), Description: desc, Default: def}}
}

func defs(m map[string]spec.Schema) map[string]common.OpenAPIDefinition {
	out := map[string]common.OpenAPIDefinition{}
	for k, v := range m {
		out[k] = common.OpenAPIDefinition{Schema: v}
	}
	return out
}

func TestResolve(t *testing.T) {
	cases := []struct {
		name    string
		defs    map[string]spec.Schema
		root    spec.Schema
		wantErr string
		check   func(t *testing.T, s spec.Schema)
	}{
		{
			name: "a reference is inlined, keeping the referrer's description and default",
			defs: map[string]spec.Schema{"T": obj(map[string]spec.Schema{"a": str("A")})},
			root: obj(map[string]spec.Schema{"t": ref("T", "the t", map[string]any{})}),
			check: func(t *testing.T, s spec.Schema) {
				p := s.Properties["t"]
				if p.Ref.String() != "" || p.Description != "the t" || p.Default == nil || p.Properties["a"].Description != "A" {
					t.Errorf("t = %+v", p)
				}
			},
		},
		{
			name: "list items and map values are inlined",
			defs: map[string]spec.Schema{"T": str("T")},
			root: obj(map[string]spec.Schema{
				"l": {SchemaProps: spec.SchemaProps{Type: []string{"array"}, Items: &spec.SchemaOrArray{Schema: ptr(ref("T", "", nil))}}},
				"m": {SchemaProps: spec.SchemaProps{Type: []string{"object"}, AdditionalProperties: &spec.SchemaOrBool{Allows: true, Schema: ptr(ref("T", "", nil))}}},
			}),
			check: func(t *testing.T, s spec.Schema) {
				if s.Properties["l"].Items.Schema.Type[0] != "string" || s.Properties["m"].AdditionalProperties.Schema.Type[0] != "string" {
					t.Errorf("not inlined: %+v", s)
				}
			},
		},
		{
			name:    "recursion is refused",
			defs:    map[string]spec.Schema{"T": obj(map[string]spec.Schema{"self": ref("T", "", nil)})},
			root:    obj(map[string]spec.Schema{"t": ref("T", "", nil)}),
			wantErr: "recursive type T",
		},
		{
			name:    "a missing definition names what to do",
			root:    obj(map[string]spec.Schema{"t": ref("Nope", "", nil)}),
			wantErr: "no OpenAPI definition for Nope (add its package to OpenAPIDependencies",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolve(defs(c.defs), c.root, map[string]bool{})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, got)
		})
	}
}

func TestPruneDefaults(t *testing.T) {
	js := func(s string) *apiextv1.JSON { return &apiextv1.JSON{Raw: []byte(s)} }
	cases := []struct {
		name string
		in   apiextv1.JSONSchemaProps
		keep bool
	}{
		{"empty string dropped", apiextv1.JSONSchemaProps{Type: "string", Default: js(`""`)}, false},
		{"real string kept", apiextv1.JSONSchemaProps{Type: "string", Default: js(`"15m"`)}, true},
		{"zero number kept", apiextv1.JSONSchemaProps{Type: "integer", Default: js(`0`)}, true},
		{"empty object without required fields kept", apiextv1.JSONSchemaProps{Type: "object", Default: js(`{}`)}, true},
		{"empty object with required fields dropped", apiextv1.JSONSchemaProps{Type: "object", Default: js(`{}`), Required: []string{"url"}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := apiextv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{"f": c.in}}
			pruneDefaults(&root)
			if got := root.Properties["f"].Default != nil; got != c.keep {
				t.Errorf("default kept = %v, want %v", got, c.keep)
			}
		})
	}
	items := apiextv1.JSONSchemaProps{Type: "array", Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &apiextv1.JSONSchemaProps{Type: "object", Default: js(`{}`)}}}
	pruneDefaults(&items)
	if items.Items.Schema.Default != nil {
		t.Error("a default on list items survived")
	}
}

func ptr[T any](v T) *T { return &v }
