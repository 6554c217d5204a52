package main

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// settingGroups are the values maps whose own fields are slipway's settings
// (typed in the schema one level down); every other map or list holds a
// Kubernetes field (affinity, resources, tolerations, the UpdateChannel's
// spec, labels), which the API server validates, typed only as an object or
// an array.
var settingGroups = map[string]bool{"image": true, "agent": true, "controller": true, "metrics": true,
	"serviceMonitor": true, "prometheusRule": true, "dashboard": true,
	"rbac": true, "serviceAccount": true}

// valuesSchema is the chart's values.schema.json: every value's JSON type
// from its default (so `--set controller.replicas=two` is refused by helm
// instead of rendered as a string), the variant switch's allowed values,
// and no unknown top-level key (a misspelt value is an error, not ignored).
func valuesSchema(c Chart, v *values) ([]byte, error) {
	props := map[string]any{}
	for _, k := range v.order {
		props[k] = schemaOf(k, v.m[k])
	}
	if c.Variant != nil {
		var enum []any
		for _, val := range c.Variant.Values {
			if c.Variant.Bool {
				enum = append(enum, val == "true")
			} else {
				enum = append(enum, val)
			}
		}
		props[c.Variant.Key] = map[string]any{"enum": enum}
	}
	// Helm passes "global" to every chart (subcharts' convention).
	props["global"] = map[string]any{"type": "object"}
	s := map[string]any{
		"$schema":              "https://json-schema.org/draft-07/schema#",
		"$comment":             GeneratedHeader,
		"title":                c.Name + " values",
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("values.schema.json of %s: %w", c.Name, err)
	}
	return append(b, '\n'), nil
}

// schemaOf is the schema of the value at key with default val.
func schemaOf(key string, val any) map[string]any {
	switch x := val.(type) {
	case bool:
		return map[string]any{"type": "boolean"}
	case string:
		return map[string]any{"type": "string"}
	case int, int32, int64:
		return map[string]any{"type": "integer"}
	case float64:
		if x == math.Trunc(x) {
			return map[string]any{"type": "integer"}
		}
		return map[string]any{"type": "number"}
	case []any, []string:
		return map[string]any{"type": "array"}
	case map[string]any:
		s := map[string]any{"type": "object"}
		if settingGroups[key] {
			props := map[string]any{}
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				props[k] = schemaOf(k, x[k])
			}
			s["properties"] = props
		}
		return s
	default: // null: any type
		return map[string]any{}
	}
}
