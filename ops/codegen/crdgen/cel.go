package main

import (
	"archive/zip"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// rule is one CEL validation rule (x-kubernetes-validations) on the property
// that path names below the schema's root ("spec", "window"); the API server
// refuses an object that breaks it, with message.
type rule struct {
	path    []string
	rule    string
	message string
}

// bound caps the size of a property (maxLength of a string, maxItems of a
// list), which the API server needs to estimate a CEL rule's cost.
type bound struct {
	path []string
	max  int64
}

// addValidation puts each bound and rule on the property its path names.
func addValidation(root *apiextv1.JSONSchemaProps, bounds []bound, rules []rule) error {
	for _, b := range bounds {
		max := b.max
		err := editProperty(root, b.path, func(p *apiextv1.JSONSchemaProps) {
			if p.Type == "array" {
				p.MaxItems = &max
			} else {
				p.MaxLength = &max
			}
		})
		if err != nil {
			return fmt.Errorf("bound %v: %w", b.path, err)
		}
	}
	for _, r := range rules {
		v := apiextv1.ValidationRule{Rule: r.rule, Message: r.message}
		err := editProperty(root, r.path, func(p *apiextv1.JSONSchemaProps) { p.XValidations = append(p.XValidations, v) })
		if err != nil {
			return fmt.Errorf("CEL rule %q: %w", r.rule, err)
		}
	}
	return nil
}

// editProperty calls edit on the property at path ("[]" steps into a list's
// items). Properties are held by value, so each level is written back after
// its child changed.
func editProperty(p *apiextv1.JSONSchemaProps, path []string, edit func(*apiextv1.JSONSchemaProps)) error {
	if len(path) == 0 {
		edit(p)
		return nil
	}
	if path[0] == "[]" {
		if p.Items == nil || p.Items.Schema == nil {
			return fmt.Errorf("not a list")
		}
		return editProperty(p.Items.Schema, path[1:], edit)
	}
	child, ok := p.Properties[path[0]]
	if !ok {
		return fmt.Errorf("no property %q", path[0])
	}
	if err := editProperty(&child, path[1:], edit); err != nil {
		return fmt.Errorf("%s: %w", path[0], err)
	}
	p.Properties[path[0]] = child
	return nil
}

// celList is a CEL list literal of strings.
func celList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// timeZones are the IANA zone names of the Go release's time zone database
// (the one time/tzdata embeds in slipway), sorted, so the CRD refuses the
// zones the agents could not load.
func timeZones() ([]string, error) {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("find Go's root (go env GOROOT): %w", err)
	}
	path := filepath.Join(strings.TrimSpace(string(goroot)), "lib", "time", "zoneinfo.zip")
	z, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("read Go's time zone database: %w", err)
	}
	defer z.Close()
	var names []string
	for _, f := range z.File {
		if !strings.HasSuffix(f.Name, "/") {
			names = append(names, f.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}
