// Package crds embeds the CustomResourceDefinitions of slipway's APIs (the
// YAML scripts/generate writes from ops/apis, one file per kind) and installs
// them: Objects parses them all, OfGroup those of one API group, Apply
// creates or updates a group's and waits until they are served.
package crds

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed *.yaml
var files embed.FS

// Objects returns the embedded CRDs, in file name order, freshly parsed (the
// caller may modify them).
func Objects() ([]*apiextv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, fmt.Errorf("list embedded CRDs: %w", err)
	}
	sort.Strings(names)
	var out []*apiextv1.CustomResourceDefinition
	for _, name := range names {
		body, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read embedded %s: %w", name, err)
		}
		crds, err := parse(body)
		if err != nil {
			return nil, fmt.Errorf("embedded %s: %w (rerun scripts/generate)", name, err)
		}
		out = append(out, crds...)
	}
	return out, nil
}

// parse decodes every CustomResourceDefinition document of a YAML stream.
func parse(body []byte) ([]*apiextv1.CustomResourceDefinition, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(body), 4096)
	var out []*apiextv1.CustomResourceDefinition
	for {
		crd := &apiextv1.CustomResourceDefinition{}
		err := dec.Decode(crd)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		if crd.Kind == "" && crd.Name == "" {
			continue // an empty document
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("document %q is a %s, not a CustomResourceDefinition", crd.Name, crd.Kind)
		}
		out = append(out, crd)
	}
}

// OfGroup returns the embedded CRDs of one API group (ops.slipway.dev, say),
// so each system installs and ships only its own kinds.
func OfGroup(group string) ([]*apiextv1.CustomResourceDefinition, error) {
	all, err := Objects()
	if err != nil {
		return nil, err
	}
	var out []*apiextv1.CustomResourceDefinition
	for _, crd := range all {
		if crd.Spec.Group == group {
			out = append(out, crd)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no embedded CRD of group %q (rerun scripts/generate)", group)
	}
	return out, nil
}

// Must is for tests and static tables: it panics when the embedded YAML does
// not parse, which a test of this package catches first.
func Must() []*apiextv1.CustomResourceDefinition {
	objs, err := Objects()
	if err != nil {
		panic(err)
	}
	return objs
}
