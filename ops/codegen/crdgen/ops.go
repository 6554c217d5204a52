package main

import (
	"fmt"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/generated/openapi"
)

// opsCRDs are the CRDs of ops.slipway.dev: the UpdateChannel and the
// per-node NodeUpdate.
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
		validation: updateChannelValidation,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Version", Type: "string", JSONPath: ".spec.version", Description: "The version the nodes should run; empty or latest follows the channel."},
			{Name: "Latest", Type: "string", JSONPath: ".status.latestVersion", Description: "The newest version the channel offered at the last poll."},
			{Name: "Concurrency", Type: "integer", JSONPath: ".spec.concurrency", Description: "The most nodes upgrading at once."},
			{Name: "Updating", Type: "integer", JSONPath: ".status.counts.updating", Description: "Nodes holding a slot now."},
			{Name: "Up-to-date", Type: "integer", JSONPath: ".status.counts.upToDate", Description: "Selected nodes at the target version."},
			{Name: "Skipped", Type: "integer", JSONPath: ".status.counts.skipped", Description: "Nodes behind that get no slot (status.skipped says why)."},
			{Name: "Staged", Type: "integer", JSONPath: ".status.counts.staged", Description: "Nodes behind that have the target staged ahead of their slot."},
			{Name: "Rollback", Type: "string", JSONPath: ".status.analysis.rollback.state", Description: "The rollback of a failed wave: RollingBack, RolledBack, Cured or NotCured (status.analysis.rollback)."},
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		},
	}, {
		model:      "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1.NodeUpdate",
		group:      gv.Group,
		version:    gv.Version,
		kind:       "NodeUpdate",
		plural:     opsv1.NodeUpdateResourceName,
		singular:   "nodeupdate",
		short:      []string{"nodeup", "nodeups"},
		defs:       openapi.GetOpenAPIDefinitions,
		validation: nodeUpdateValidation,
		edit: func(root *apiextv1.JSONSchemaProps) {
			// The object holds what the controller wrote and nothing the API
			// server adds: a view the controller slims (a setting left out)
			// reads back as written, so "written only on change" compares
			// like with like.
			if err := editProperty(root, []string{"spec", "channels", "[]", "spec"}, dropDefaults); err != nil {
				panic(fmt.Sprintf("NodeUpdate schema: %v", err))
			}
		},
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Node", Type: "string", JSONPath: ".metadata.name", Description: "The node (the object is named after it)."},
			{Name: "Channel", Type: "string", JSONPath: ".spec.channels[0].name", Description: "The first channel that concerns the node."},
			{Name: "Slot", Type: "string", JSONPath: ".spec.channels[0].slot.version", Description: "The version of the node's slot in that channel, while it holds one."},
			{Name: "Phase", Type: "string", JSONPath: ".status.reports[0].phase", Description: "The phase the node last reported."},
			{Name: "Version", Type: "string", JSONPath: ".spec.channels[0].resolved.version", Description: "The channel's resolved release (its target)."},
			{Name: "Running", Type: "string", JSONPath: ".status.booted.rootfs", Description: "The rootfs version the node's boot runs (its agent's record)."},
			{Name: "Staged", Type: "string", JSONPath: ".status.staged.rootfs", Description: "The rootfs version staged for the node's next boot, where it differs."},
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		},
	}}
}

// dropDefaults removes every default at and below p.
func dropDefaults(p *apiextv1.JSONSchemaProps) {
	p.Default = nil
	for k, c := range p.Properties {
		dropDefaults(&c)
		p.Properties[k] = c
	}
	if p.Items != nil && p.Items.Schema != nil {
		dropDefaults(p.Items.Schema)
	}
	if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
		dropDefaults(p.AdditionalProperties.Schema)
	}
}

// nodeUpdateValidation bounds a NodeUpdate and refuses what no writer of
// slipway writes: a slot or permit of another node than the object's, an
// entry without its channel's UID, an outcome no reader knows.
func nodeUpdateValidation() ([]bound, []rule, error) {
	channels, channel := []string{"spec", "channels"}, []string{"spec", "channels", "[]"}
	reports, report := []string{"status", "reports"}, []string{"status", "reports", "[]"}
	bounds := []bound{
		{channels, 64},
		{append(channel, "uid"), 64},
		{append(channel, "namespace"), 63},
		{append(channel, "name"), 253},
		{append(channel, "slot", "node"), 253},
		{append(channel, "permit", "node"), 253},
		{reports, 64},
		{append(report, "uid"), 64},
		{append(report, "version"), 128},
		{append(report, "phase"), 32},
		{append(report, "job"), 63},
		{append(report, "outcome"), 16},
		{append(report, "reason"), 4096},
		{[]string{"status", "rebootFrom"}, 64},
		{[]string{"status", "prestagedVersion"}, 128},
		{[]string{"status", "prestageFailedVersion"}, 128},
		{[]string{"status", "booted", "rootfs"}, 128},
		{[]string{"status", "booted", "kernel"}, 128},
		{[]string{"status", "booted", "k3s"}, 128},
		{[]string{"status", "booted", "bootID"}, 64},
		{[]string{"status", "staged", "rootfs"}, 128},
		{[]string{"status", "staged", "kernel"}, 128},
		{[]string{"status", "staged", "k3s"}, 128},
	}
	rules := []rule{
		{nil, `!has(self.spec) || !has(self.spec.channels) || self.spec.channels.all(c, (!has(c.slot) || c.slot.node == self.metadata.name) && (!has(c.permit) || c.permit.node == self.metadata.name))`,
			"spec.channels: a NodeUpdate holds the slots and staging permits of its own node only (the node its name names)"},
		{channel, `self.uid != '' && self.name != ''`,
			"spec.channels[]: each entry names its channel (uid and name)"},
		{report, `self.uid != ''`,
			"status.reports[]: each report names its channel's uid"},
		{report, `!has(self.outcome) || self.outcome in ['', 'Succeeded', 'Failed', 'Released']`,
			"status.reports[].outcome must be Succeeded, Failed or Released (or empty while the slot goes on)"},
	}
	return bounds, rules, nil
}

// updateChannelValidation is what kubectl apply refuses at once: channel URLs
// of no scheme slipway reads, versions that are not one token, windows that
// do not parse, unknown time zones. The agents' Invalid condition stays for
// what only they can check (a selector's semantics, the channel's answers).
func updateChannelValidation() ([]bound, []rule, error) {
	zones, err := timeZones()
	if err != nil {
		return nil, nil, err
	}
	days := []string{"sun", "sunday", "mon", "monday", "tue", "tuesday", "wed", "wednesday",
		"thu", "thursday", "fri", "friday", "sat", "saturday"}
	clock := `^\\s*([01]?[0-9]|2[0-3]):[0-5][0-9]\\s*$`
	spec, window := []string{"spec"}, []string{"spec", "window"}
	analysis, query := []string{"spec", "analysis"}, []string{"spec", "analysis", "queries", "[]"}
	// condition is what analysis.ParseCondition reads.
	condition := `^\\s*((?i)empty|(<=|>=|==|!=|<|>)\\s*[-+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][-+]?[0-9]+)?)\\s*$`
	bounds := []bound{
		{[]string{"spec", "url"}, 2048},
		{[]string{"spec", "version"}, 128},
		{[]string{"spec", "window", "days"}, 14},
		{[]string{"spec", "window", "days", "[]"}, 16},
		{[]string{"spec", "window", "start"}, 16},
		{[]string{"spec", "window", "end"}, 16},
		{[]string{"spec", "window", "timeZone"}, 64},
		{[]string{"spec", "analysis", "prometheusURL"}, 2048},
		{[]string{"spec", "analysis", "queries"}, 32},
		{[]string{"spec", "analysis", "queries", "[]", "name"}, 63},
		{[]string{"spec", "analysis", "queries", "[]", "query"}, 4096},
		{[]string{"spec", "analysis", "queries", "[]", "condition"}, 64},
		{[]string{"spec", "analysis", "queries", "[]", "noData"}, 8},
		{[]string{"spec", "analysis", "alerts", "filterRegexp"}, 1024},
		{[]string{"spec", "analysis", "onFailure"}, 16},
	}
	rules := []rule{
		{spec, `self.url.trim() != ''`,
			"spec.url is empty: name a release channel (github-releases://owner/repo, https://host/path/latest, file:///mirror)"},
		{spec, `!self.url.contains('://') || self.url.matches('^(?i)(https?|github-releases|file)://')`,
			"spec.url has a scheme slipway does not read: use github-releases://owner/repo, https://host/path/latest, file:///mirror or a directory path"},
		{spec, `!self.url.startsWith('github-releases://') || self.url.matches('^github-releases://[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+/?$')`,
			"spec.url: write a GitHub channel as github-releases://owner/repo"},
		{spec, `!self.url.matches('^(?i)https?://') || self.url.matches('^(?i)https?://[^/?#]+[^?#]*$')`,
			"spec.url: an http(s) channel needs a host and takes no query or fragment: write https://host/path/latest"},
		{spec, `!has(self.version) || self.version == '' || self.version == 'latest' || self.version.matches('^[A-Za-z0-9][A-Za-z0-9._+~-]*$')`,
			"spec.version must be latest or one token such as v1.2.3 (letters, digits and . _ + ~ -; no slash)"},
		{window, `has(self.start) && self.start.matches('` + clock + `')`,
			"spec.window.start must be a time of day written HH:MM (24-hour)"},
		{window, `has(self.end) && self.end.matches('` + clock + `')`,
			"spec.window.end must be a time of day written HH:MM (24-hour)"},
		{window, `!has(self.days) || self.days.all(d, d.trim().lowerAscii() in ` + celList(days) + `)`,
			"spec.window.days must be days of the week: mon, tue, wed, thu, fri, sat, sun (or their full names)"},
		{window, `!has(self.timeZone) || self.timeZone == '' || self.timeZone in ` + celList(zones),
			"spec.window.timeZone must be an IANA time zone name such as Europe/Berlin (empty means UTC)"},
		{analysis, `self.prometheusURL.matches('^(?i)https?://[^/?#]+')`,
			"spec.analysis.prometheusURL: write the Prometheus address as http(s)://host:port"},
		{analysis, `!has(self.onFailure) || self.onFailure in ['halt', 'rollback']`,
			"spec.analysis.onFailure: write halt (the default: a failed wave stops the rollout) or rollback (its nodes also go back to their previous version)"},
		{analysis, `(has(self.queries) && size(self.queries) > 0) || has(self.alerts)`,
			"spec.analysis asks nothing: list queries (name, query, condition) or set alerts: {}"},
		{analysis, `!has(self.queries) || self.queries.all(q, self.queries.exists_one(r, r.name == q.name))`,
			"spec.analysis.queries: each query needs a name of its own (it is reported when the query fails)"},
		{query, `self.name.trim() != ''`,
			"spec.analysis.queries[].name is empty: name the query (it is reported when it fails)"},
		{query, `self.query.trim() != ''`,
			"spec.analysis.queries[].query is empty: write a PromQL expression"},
		{query, `self.condition.matches('` + condition + `')`,
			"spec.analysis.queries[].condition: write \"<op> <number>\" with op one of < <= > >= == != (e.g. \"< 0.05\"), or \"empty\""},
		{query, `!has(self.noData) || self.noData in ['hold', 'pass']`,
			"spec.analysis.queries[].noData: write hold (the default) or pass"},
	}
	return bounds, rules, nil
}
