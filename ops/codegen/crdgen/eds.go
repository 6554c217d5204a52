package main

import (
	"fmt"
	"slices"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	edsv1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/generated/eds/openapi"
)

const edsModel = "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1."

// edsCRDs are the CRDs of eds.slipway.dev: ExtendedDaemonSet,
// ExtendedDaemonSetReplicaSet and ExtendedDaemonsetSetting. The core types
// they embed (a pod template, resource requirements) have their real
// schemas without descriptions: a field of the wrong type is refused at
// admission, not stored where the controller cannot decode it.
func edsCRDs() []crdSpec {
	gv := edsv1.SchemeGroupVersion
	return []crdSpec{{
		model: edsModel + "ExtendedDaemonSet", group: gv.Group, version: gv.Version,
		kind: "ExtendedDaemonSet", plural: "extendeddaemonsets", singular: "extendeddaemonset",
		short: []string{"eds"}, categories: []string{"all"}, defs: edsDefinitions,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Desired", Type: "integer", JSONPath: ".status.desired", Description: "Nodes that should run a pod."},
			{Name: "Current", Type: "integer", JSONPath: ".status.current", Description: "Pods that exist."},
			{Name: "Ready", Type: "integer", JSONPath: ".status.ready", Description: "Pods that are Ready."},
			{Name: "Up-to-date", Type: "integer", JSONPath: ".status.upToDate", Description: "Pods of the spec's template."},
			{Name: "Available", Type: "integer", JSONPath: ".status.available", Description: "Pods that are available."},
			{Name: "Ignored Unresponsive Nodes", Type: "integer", JSONPath: ".status.ignoredUnresponsiveNodes", Priority: 1},
			{Name: "Status", Type: "string", JSONPath: ".status.state", Description: "Running, Canary, Canary Paused, Canary Failed, RollingUpdate Paused or Rollout frozen."},
			{Name: "Reason", Type: "string", JSONPath: ".status.reason", Priority: 1},
			{Name: "Active RS", Type: "string", JSONPath: ".status.activeReplicaSet", Description: "The ERS of the validated template."},
			{Name: "Canary RS", Type: "string", JSONPath: ".status.canary.replicaSet", Description: "The ERS of the canary, if any."},
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		},
		edit: func(root *apiextv1.JSONSchemaProps) {
			canaryRules(root)
			canaryAnalysisRules(root)
			coreTypes(root, []string{"spec", "template"})
		},
	}, {
		model: edsModel + "ExtendedDaemonSetReplicaSet", group: gv.Group, version: gv.Version,
		kind: "ExtendedDaemonSetReplicaSet", plural: "extendeddaemonsetreplicasets", singular: "extendeddaemonsetreplicaset",
		short: []string{"ers"}, categories: []string{"all"}, defs: edsDefinitions,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Status", Type: "string", JSONPath: ".status.status"},
			{Name: "Desired", Type: "integer", JSONPath: ".status.desired"},
			{Name: "Current", Type: "integer", JSONPath: ".status.current"},
			{Name: "Ready", Type: "integer", JSONPath: ".status.ready"},
			{Name: "Available", Type: "integer", JSONPath: ".status.available"},
			{Name: "Node Selector", Type: "string", JSONPath: ".spec.selector.matchLabels"},
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		},
		edit: func(root *apiextv1.JSONSchemaProps) { coreTypes(root, []string{"spec", "template"}) },
	}, {
		model: edsModel + "ExtendedDaemonsetSetting", group: gv.Group, version: gv.Version,
		kind: "ExtendedDaemonsetSetting", plural: "extendeddaemonsetsettings", singular: "extendeddaemonsetsetting",
		short: []string{"edss"}, defs: edsDefinitions,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Status", Type: "string", JSONPath: ".status.status"},
			{Name: "Node Selector", Type: "string", JSONPath: ".spec.nodeSelector.matchLabels"},
			{Name: "Error", Type: "string", JSONPath: ".status.error"},
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		},
		edit: func(root *apiextv1.JSONSchemaProps) {
			coreTypes(root, []string{"spec", "containers", "[]", "resources"})
		},
	}}
}

// edsDefinitions are the generated definitions, the core types included
// (a pod template, resource requirements: their real schemas, so that
// `containerPort: "8080"` or `cpu: "1 core"` is refused at admission), with
// IntOrString and Quantity written as a CRD spells them.
func edsDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := openapi.GetOpenAPIDefinitions(ref)
	intOrString := func(pattern string) common.OpenAPIDefinition {
		return common.OpenAPIDefinition{Schema: spec.Schema{
			SchemaProps: spec.SchemaProps{Pattern: pattern, AnyOf: []spec.Schema{
				{SchemaProps: spec.SchemaProps{Type: []string{"integer"}}},
				{SchemaProps: spec.SchemaProps{Type: []string{"string"}}},
			}},
			VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-int-or-string": true}},
		}}
	}
	defs[intstr.IntOrString{}.OpenAPIModelName()] = intOrString("")
	defs[resource.Quantity{}.OpenAPIModelName()] = intOrString(quantityPattern)
	return defs
}

// quantityPattern is what resource.ParseQuantity reads ("100m", "1Gi", "2").
const quantityPattern = `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`

// coreTypes trims the embedded core schemas of a kind: no descriptions
// (kubectl explain pod.spec has them; the CRDs stay a fraction of the
// size) and the template's metadata as the API server stores a pod
// template's: labels and annotations checked, the rest kept as written.
func coreTypes(root *apiextv1.JSONSchemaProps, paths ...[]string) {
	for _, path := range paths {
		err := editProperty(root, path, func(p *apiextv1.JSONSchemaProps) {
			desc := p.Description
			dropDescriptions(p)
			listMapKeyDefaults(p)
			p.Description = desc
			if _, ok := p.Properties["metadata"]; ok && path[len(path)-1] == "template" {
				strings := apiextv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextv1.JSONSchemaPropsOrBool{
					Allows: true, Schema: &apiextv1.JSONSchemaProps{Type: "string"}}}
				preserve := true
				p.Properties["metadata"] = apiextv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve,
					Properties: map[string]apiextv1.JSONSchemaProps{"labels": strings, "annotations": strings}}
			}
		})
		if err != nil {
			panic(fmt.Sprintf("crdgen: core type at %v: %v", path, err))
		}
	}
}

// listMapKeyDefaults gives back the `default: ""` pruneDefaults took from
// the string keys of list maps (imagePullSecrets[].name, say): the API
// server wants each key required or defaulted, as in the core schemas.
func listMapKeyDefaults(p *apiextv1.JSONSchemaProps) {
	if p.Items != nil && p.Items.Schema != nil {
		item := p.Items.Schema
		for _, key := range p.XListMapKeys {
			prop, ok := item.Properties[key]
			if !ok || prop.Default != nil || slices.Contains(item.Required, key) {
				continue
			}
			if prop.Type != "string" {
				panic(fmt.Sprintf("crdgen: list map key %s is neither required nor a string", key))
			}
			prop.Default = &apiextv1.JSON{Raw: []byte(`""`)}
			item.Properties[key] = prop
		}
		listMapKeyDefaults(item)
	}
	for k, c := range p.Properties {
		listMapKeyDefaults(&c)
		p.Properties[k] = c
	}
	if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
		listMapKeyDefaults(p.AdditionalProperties.Schema)
	}
}

// dropDescriptions removes every description below p.
func dropDescriptions(p *apiextv1.JSONSchemaProps) {
	p.Description = ""
	for k, c := range p.Properties {
		dropDescriptions(&c)
		p.Properties[k] = c
	}
	if p.Items != nil && p.Items.Schema != nil {
		dropDescriptions(p.Items.Schema)
	}
	if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
		dropDescriptions(p.AdditionalProperties.Schema)
	}
	for i := range p.AnyOf {
		dropDescriptions(&p.AnyOf[i])
	}
}

// canaryRules adds what the generated schema cannot say about a canary:
// the validation mode's values, the rules between autoPause and autoFail,
// that manual mode has no duration, and that the template is required.
func canaryRules(root *apiextv1.JSONSchemaProps) {
	specProps := root.Properties["spec"]
	strategy := specProps.Properties["strategy"]
	canary := strategy.Properties["canary"]
	mode := canary.Properties["validationMode"]
	mode.Enum = []apiextv1.JSON{{Raw: []byte(`"auto"`)}, {Raw: []byte(`"manual"`)}}
	canary.Properties["validationMode"] = mode
	canary.XValidations = apiextv1.ValidationRules{{
		Rule:    "!has(self.autoFail) || !has(self.autoPause) || !has(self.autoFail.maxRestarts) || !has(self.autoPause.maxRestarts) || self.autoFail.maxRestarts >= self.autoPause.maxRestarts",
		Message: "autoFail.maxRestarts must be at least autoPause.maxRestarts",
	}, {
		Rule:    "!has(self.validationMode) || self.validationMode != 'manual' || (!has(self.duration) && !has(self.noRestartsDuration))",
		Message: "validationMode manual takes no duration or noRestartsDuration: the canary ends with `kubectl-eds canary validate`",
	}, {
		Rule:    "!has(self.autoFail) || !has(self.autoFail.canaryTimeout) || !has(self.duration) || duration(self.autoFail.canaryTimeout) > duration(self.duration)",
		Message: "autoFail.canaryTimeout must be longer than duration",
	}}
	strategy.Properties["canary"] = canary
	specProps.Properties["strategy"] = strategy
	durations(&specProps)
	template := specProps.Properties["template"]
	template.Default = nil // required: a missing template is refused, not defaulted to an empty pod
	specProps.Properties["template"] = template
	root.Properties["spec"] = specProps
	// An ERS is named <eds>-<10 hex digits> and that name is a pod label
	// value (at most 63 characters).
	root.XValidations = append(root.XValidations, apiextv1.ValidationRule{
		Rule:    "self.metadata.name.size() <= 52",
		Message: "metadata.name: an ExtendedDaemonSet's name has at most 52 characters (its ERS names add 11 and are pod label values, at most 63)",
	})
}

// durationPattern is what time.ParseDuration reads: "90s", "1h30m", "1.5h", "0".
const durationPattern = `^[-+]?(0|([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+)$`

// durations gives every duration of the spec Go's duration pattern, so
// that "1d" or "ten minutes" is refused at admission instead of being
// stored where the controller cannot decode it.
func durations(spec *apiextv1.JSONSchemaProps) {
	set := func(p *apiextv1.JSONSchemaProps, names ...string) {
		for _, n := range names {
			f, ok := p.Properties[n]
			if !ok {
				panic("crdgen: no duration field " + n)
			}
			f.Pattern = durationPattern
			p.Properties[n] = f
		}
	}
	strategy := spec.Properties["strategy"]
	set(&strategy, "reconcileFrequency")
	rolling := strategy.Properties["rollingUpdate"]
	set(&rolling, "slowStartIntervalDuration")
	strategy.Properties["rollingUpdate"] = rolling
	canary := strategy.Properties["canary"]
	set(&canary, "duration", "noRestartsDuration")
	an := canary.Properties["analysis"]
	set(&an, "interval", "timeout")
	canary.Properties["analysis"] = an
	for _, sub := range []struct{ name, field string }{{"autoPause", "maxSlowStartDuration"}, {"autoFail", "maxRestartsDuration"}, {"autoFail", "canaryTimeout"}} {
		p := canary.Properties[sub.name]
		set(&p, sub.field)
		canary.Properties[sub.name] = p
	}
	strategy.Properties["canary"] = canary
	spec.Properties["strategy"] = strategy
}

// canaryAnalysisRules refuses at apply the canary analyses the controller
// could not evaluate as written, with the messages of an UpdateChannel's
// spec.analysis (the same shape, the same ops/analysis rules): a condition
// that does not parse, a query without a name or an expression, a name
// used twice, a noData other than hold or pass, a prometheusURL that is
// not http(s)://host, an analysis that asks nothing.
func canaryAnalysisRules(root *apiextv1.JSONSchemaProps) {
	at := []string{"spec", "strategy", "canary", "analysis"}
	path := func(rest ...string) []string { return append(slices.Clone(at), rest...) }
	query := path("queries", "[]")
	const field = "spec.strategy.canary.analysis"
	// condition is what analysis.ParseCondition reads.
	condition := `^\\s*((?i)empty|(<=|>=|==|!=|<|>)\\s*[-+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][-+]?[0-9]+)?)\\s*$`
	bounds := []bound{
		{path("prometheusURL"), 2048},
		{path("queries"), 32},
		{path("queries", "[]", "name"), 63},
		{path("queries", "[]", "query"), 4096},
		{path("queries", "[]", "condition"), 64},
		{path("queries", "[]", "noData"), 8},
		{path("alerts", "filterRegexp"), 1024},
	}
	rules := []rule{
		{at, `self.prometheusURL.matches('^(?i)https?://[^/?#]+')`,
			field + ".prometheusURL: write the Prometheus address as http(s)://host:port"},
		{at, `(has(self.queries) && size(self.queries) > 0) || has(self.alerts)`,
			field + " asks nothing: list queries (name, query, condition) or set alerts: {}"},
		{at, `!has(self.queries) || self.queries.all(q, self.queries.exists_one(r, r.name == q.name))`,
			field + ".queries: each query needs a name of its own (it is reported when the query fails)"},
		{query, `self.name.trim() != ''`,
			field + ".queries[].name is empty: name the query (it is reported when it fails)"},
		{query, `self.query.trim() != ''`,
			field + ".queries[].query is empty: write a PromQL expression"},
		{query, `self.condition.matches('` + condition + `')`,
			field + ".queries[].condition: write \"<op> <number>\" with op one of < <= > >= == != (e.g. \"< 0.05\"), or \"empty\""},
		{query, `!has(self.noData) || self.noData in ['hold', 'pass']`,
			field + ".queries[].noData: write hold (the default) or pass"},
	}
	if err := addValidation(root, bounds, rules); err != nil {
		panic(fmt.Sprintf("crdgen: canary analysis: %v", err))
	}
}
