package main

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Panel is one time-series panel of a dashboard.
type Panel struct {
	Title   string
	Unit    string // Grafana unit ("" = short)
	Stacked bool
	Targets []Target
}

// Target is one PromQL query of a panel.
type Target struct{ Expr, Legend string }

// Dashboards are the panels of each chart's Grafana dashboard: a rollout's
// progress over time. TestDashboardMetricsExist checks that every metric
// they name is one the code registers.
var Dashboards = map[string][]Panel{
	"slipway-agent": {
		{Title: "Nodes by version", Stacked: true, Targets: []Target{{`max by (channel, version) (slipway_channel_nodes)`, "{{channel}} {{version}}"}}},
		{Title: "Nodes behind without a slot, by reason", Stacked: true, Targets: []Target{{`max by (channel, reason) (slipway_channel_skipped_nodes)`, "{{channel}} {{reason}}"}}},
		{Title: "Slots assigned (per 10m)", Targets: []Target{{`sum(increase(slipway_agent_slots_assigned_total[10m]))`, "slots"}}},
		{Title: "Upgrade failures by step (per 15m)", Targets: []Target{{`sum by (channel, step) (increase(slipway_agent_upgrade_failures_total[15m]))`, "{{channel}} {{step}}"}}},
		{Title: "Reboot stalls and rollbacks (per 30m)", Targets: []Target{
			{`sum(increase(slipway_agent_reboot_stalls_total[30m]))`, "reboot stalls"},
			{`sum(increase(slipway_agent_rollbacks_total[30m]))`, "rollbacks"},
			{`sum(increase(slipway_agent_rollback_failures_total[30m]))`, "rollback failures"}}},
		{Title: "Slot wait, drain and upgrade time (p90)", Unit: "s", Targets: []Target{
			{`histogram_quantile(0.9, sum by (le) (rate(slipway_agent_slot_wait_seconds_bucket[30m])))`, "slot wait"},
			{`histogram_quantile(0.9, sum by (le) (rate(slipway_agent_drain_duration_seconds_bucket[30m])))`, "drain"},
			{`histogram_quantile(0.9, sum by (le) (rate(slipway_agent_upgrade_duration_seconds_bucket[30m])))`, "upgrade"}}},
	},
	"slipway-update-operator": {
		{Title: "Nodes by version", Stacked: true, Targets: []Target{{`sum by (version) (max by (state, version) (slipway_update_operator_nodes))`, "{{version}}"}}},
		{Title: "Nodes by state", Stacked: true, Targets: []Target{{`sum by (state) (max by (state, version) (slipway_update_operator_nodes))`, "{{state}}"}}},
		{Title: "Updates in flight (slots in use)", Targets: []Target{{`max(slipway_update_operator_updates_in_flight)`, "in flight"}}},
		{Title: "Failures by node (per 15m)", Targets: []Target{{`sum by (node) (increase(slipway_update_operator_failures_total[15m]))`, "{{node}}"}}},
		{Title: "Controller steps by kind (per 10m)", Stacked: true, Targets: []Target{{`sum by (step) (increase(slipway_update_operator_steps_total[10m]))`, "{{step}}"}}},
		{Title: "Agent intents by result (per 10m)", Targets: []Target{{`sum by (intent, result) (increase(slipway_update_operator_agent_intents_total[10m]))`, "{{intent}} {{result}}"}}},
	},
	"slipway-eds": {
		{Title: "State of each ExtendedDaemonSet", Targets: []Target{{`max by (eds_namespace, eds, state) (slipway_eds_state) == 1`, "{{eds_namespace}}/{{eds}} {{state}}"}}},
		{Title: "Rollout progress (up-to-date / desired)", Unit: "percentunit", Targets: []Target{{`max by (eds_namespace, eds) (slipway_eds_rollout_progress_ratio)`, "{{eds_namespace}}/{{eds}}"}}},
		{Title: "Pods by replica set and state", Stacked: true, Targets: []Target{{`max by (eds_namespace, eds, ers, state) (slipway_eds_pods)`, "{{eds}} {{ers}} {{state}}"}}},
		{Title: "Canary verdicts (per 30m)", Targets: []Target{{`sum by (verdict) (increase(slipway_eds_canary_verdicts_total[30m]))`, "{{verdict}}"}}},
		{Title: "Pods created and deleted (per 10m)", Targets: []Target{{`sum by (action) (increase(slipway_eds_pod_actions_total[10m]))`, "{{action}}"}}},
		{Title: "Sync errors (per 10m)", Targets: []Target{{`sum(increase(slipway_eds_sync_errors_total[10m]))`, "errors"}}},
	},
	"slipway-swarm": {
		{Title: "Converged (leader's view)", Targets: []Target{{`max by (swarm) (slipway_swarm_converged and on (namespace, pod) (slipway_swarm_leader == 1))`, "{{swarm}}"}}},
		{Title: "Jobs, workers and unassigned jobs", Targets: []Target{
			{`max by (swarm) (slipway_swarm_jobs and on (namespace, pod) (slipway_swarm_leader == 1))`, "{{swarm}} jobs"},
			{`max by (swarm) (slipway_swarm_workers and on (namespace, pod) (slipway_swarm_leader == 1))`, "{{swarm}} workers"},
			{`max by (swarm) (slipway_swarm_unassigned_jobs and on (namespace, pod) (slipway_swarm_leader == 1))`, "{{swarm}} unassigned"}}},
		{Title: "Moves and worker restarts (per 10m)", Targets: []Target{
			{`sum by (swarm) (increase(slipway_swarm_moves_total[10m]))`, "{{swarm}} moves"},
			{`sum by (swarm) (increase(slipway_swarm_refreshes_total[10m]))`, "{{swarm}} restarts"}}},
		{Title: "Assignment version", Targets: []Target{{`max by (swarm) (slipway_swarm_version)`, "{{swarm}}"}}},
		{Title: "Invalid swarms and leader", Targets: []Target{
			{`max by (swarm) (slipway_swarm_invalid)`, "{{swarm}} invalid"},
			{`max by (pod) (slipway_swarm_leader)`, "{{pod}} leads"}}},
	},
}

// DashboardJSON is the Grafana dashboard of chart name: its panels two to a
// row, on a Prometheus data source chosen by a variable, built with
// Grafana's foundation SDK (its dashboard, timeseries and prometheus
// builders), so the JSON has the fields Grafana's schema names.
func DashboardJSON(name string) ([]byte, error) {
	panels, ok := Dashboards[name]
	if !ok {
		return nil, fmt.Errorf("no dashboard for chart %s", name)
	}
	ds := common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
	// The classic dashboard schema, not dashboardv2: Grafana's dashboard
	// sidecar and its import read the classic JSON, v2 needs Grafana 12's
	// new dashboard API.
	//lint:ignore SA1019 the classic schema is the one the ConfigMap's readers load
	b := dashboard.NewDashboardBuilder(name).Uid(name).Tags([]string{"slipway"}).Editable().
		Time("now-6h", "now").Refresh("30s").Version(1).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus"))
	for i, p := range panels {
		unit := p.Unit
		if unit == "" {
			unit = "short"
		}
		stack := common.StackingModeNone
		if p.Stacked {
			stack = common.StackingModeNormal
		}
		pb := timeseries.NewPanelBuilder().Id(uint32(i + 1)).Title(p.Title).Datasource(ds).Unit(unit).
			Stacking(common.NewStackingConfigBuilder().Mode(stack)).
			Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
			Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderNone)).
			GridPos(dashboard.GridPos{H: 8, W: 12, X: uint32(i%2) * 12, Y: uint32(i/2) * 8})
		for j, t := range p.Targets {
			pb = pb.WithTarget(prometheus.NewDataqueryBuilder().Expr(t.Expr).LegendFormat(t.Legend).RefId(string(rune('A' + j))).Datasource(ds))
		}
		b = b.WithPanel(pb)
	}
	d, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", name, err)
	}
	out, err := json.MarshalIndent(d, "", "  ")
	return append(out, '\n'), err
}
