package controller

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/analysis"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/plan"
)

// The rollback of a failed wave (spec.analysis.onFailure: rollback): the
// decision is plan.StepBackout's, applied in each pass's status write
// (fleetPass.backout); the slots it grants are carried out by the nodes'
// agents as upgrades are (ops/agent/backout.go). This file asks the
// analysis once the wave is back, and says what the rollback did: Events
// on the channel and on each node, and a gauge.

// Reasons of the rollback's Events.
const (
	ReasonWaveRollingBack  = "WaveRollingBack"
	ReasonWaveRolledBack   = "WaveRolledBack"
	ReasonNodeRolledBack   = "WaveNodeRolledBack"
	ReasonNodeRollbackFail = "WaveNodeRollbackFailed"
	ReasonRollbackCured    = "RollbackCured"
	ReasonRollbackNotCured = "RollbackNotCured"
	ReasonAnalysisResumed  = "AnalysisResumed"
)

// backoutMetrics say what the rollbacks of failed waves do.
type backoutMetrics struct {
	nodes *prometheus.GaugeVec // the nodes of a channel's rolled back wave, by state
}

func newBackoutMetrics(r prometheus.Registerer) *backoutMetrics {
	m := &backoutMetrics{
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "slipway_channel_rollback_nodes",
			Help: "The nodes of a channel's failed wave under spec.analysis.onFailure: rollback, by state (Pending, RollingBack, RolledBack, Failed); the wave label says its rollback's state (RollingBack, RolledBack, Cured, NotCured)."},
			[]string{"channel", "version", "state", "wave"}),
	}
	r.MustRegister(m.nodes)
	return m
}

// backoutServers reports whether a node of the channel's failed wave that
// is a server still waits for its rollback slot: the server gate is read
// for it then.
func backoutServers(st v1.UpdateChannelStatus, mine []plan.Node) bool {
	as := st.Analysis
	if as == nil || as.Rollback == nil {
		return false
	}
	for _, nr := range as.Rollback.Nodes {
		if nr.State != plan.NodeRollbackPending && nr.State != plan.NodeRollbackRunning {
			continue
		}
		if i := slices.IndexFunc(mine, func(n plan.Node) bool { return n.Name == nr.Node }); i >= 0 && plan.Server(mine[i]) {
			return true
		}
	}
	return false
}

// askAfterRollback asks the channel's analysis about the wave rolled back
// once it is due (plan.RollbackJudgeDue); nil: not asked.
func (ctl *Controller) askAfterRollback(ctx context.Context, fc *fleetCache, name string, a *plan.Analysis, st v1.UpdateChannelStatus, now time.Time) *analysis.Result {
	if !plan.RollbackJudgeDue(a, st.Analysis, now) {
		return nil
	}
	r := analysis.Evaluate(ctx, ctl.querierOf(&fc.analysis, name, a.URL), a.Spec, plan.RollbackWave(st.Analysis.Rollback), now)
	ctl.metrics.analysis.evaluations.WithLabelValues(name, string(r.Verdict)).Inc()
	return &r
}

// backout applies the rollback to the status of this pass, after the
// analysis: the rollback slots' outcomes folded in this pass, the slots it
// grants (none while hold says why), and the analysis asked after it.
func (p fleetPass) backout(st *v1.UpdateChannelStatus, uid string, before v1.UpdateChannelStatus, r *fleetResult, hold string) {
	if p.analysis == nil {
		return
	}
	was := plan.RollbackNodes(before)
	in := plan.BackoutPass{Nodes: map[string]plan.Node{}, Failed: map[string]string{}, ServerElsewhere: p.serverElsewhere, Hold: hold,
		Down: plan.Names(plan.Unavailable(*st, p.avail))}
	for _, n := range p.mine {
		in.Nodes[n.Name] = n
	}
	for _, n := range r.folded.Succeeded {
		if was[n] {
			in.Succeeded = append(in.Succeeded, n)
		}
	}
	for _, f := range append(slices.Clone(r.folded.Failed), r.recovered...) {
		if was[f.Node] {
			in.Failed[f.Node] = f.Reason
		}
	}
	for _, rel := range r.folded.Released {
		if n, _, _ := strings.Cut(rel, ": "); was[n] {
			in.Released = append(in.Released, n)
		}
	}
	r.backout = plan.StepBackout(p.s, p.analysis, st, in, p.now)
	if len(r.backout.Granted) > 0 {
		plan.SpaceClaims(st, r.backout.Granted, p.claims)
		startUpgrading(types.UID(uid), st, r.backout.Granted)
		r.added = append(r.added, r.backout.Granted...)
	}
	if p.afterRollback != nil && plan.RollbackJudgeDue(p.analysis, st.Analysis, p.afterRollback.At) {
		plan.JudgeRollback(st.Analysis, *p.afterRollback, p.afterRollback.At)
		judged := *st.Analysis.Rollback
		r.backout.Judged = &judged
	}
}

// joinable are the nodes whose slot succeeded in this pass that join the
// analysis's wave: not those whose slot was a rollback (before: the status
// before the fold).
func joinable(succeeded []string, before v1.UpdateChannelStatus) []string {
	rb := plan.RollbackNodes(before)
	if len(rb) == 0 {
		return succeeded
	}
	return slices.DeleteFunc(slices.Clone(succeeded), func(n string) bool { return rb[n] })
}

// backoutHold is why no rollback slot is granted in a pass, as no upgrade
// slot would be: a slot changed hands since the nodes were read (relist),
// or a slot taken away may still be in its node's view (fenced).
func backoutHold(relist, fenced bool) string {
	switch {
	case relist:
		return "a slot changed hands since the nodes were read"
	case fenced:
		return "a slot taken away may still be in its node's view"
	}
	return ""
}

// backoutEvents say what the rollback did in a pass: on the channel when
// it starts, ends and is judged, on each node when its rollback ends; and
// the gauge.
func (ctl *Controller) backoutEvents(ch *v1.UpdateChannel, r fleetResult) {
	m := ctl.metrics.analysis.backout
	m.nodes.DeletePartialMatch(prometheus.Labels{"channel": ch.Name})
	if r.resumed {
		ctl.recorder.Eventf(ch, corev1.EventTypeNormal, ReasonAnalysisResumed, "the halt of the failed analysis is lifted (annotation %s=%s): slots are granted once the analysis passes",
			plan.ResumeAnnotation, ch.Annotations[plan.ResumeAnnotation])
	}
	as := ch.Status.Analysis
	if as == nil || as.Rollback == nil {
		return
	}
	rb := as.Rollback
	counts := map[string]int{}
	for _, nr := range rb.Nodes {
		counts[nr.State]++
	}
	for _, s := range []string{plan.NodeRollbackPending, plan.NodeRollbackRunning, plan.NodeRollbackDone, plan.NodeRollbackFailed} {
		m.nodes.WithLabelValues(ch.Name, rb.Version, s, rb.State).Set(float64(counts[s]))
	}
	b := r.backout
	if b.Started {
		var nodes []string
		for _, nr := range rb.Nodes {
			nodes = append(nodes, nr.Node+" ("+nr.From+" to "+orUnknown(nr.To)+")")
		}
		ctl.log.Warn("rolling back the failed wave", "channel", ch.Name, "version", rb.Version, "nodes", nodes)
		ctl.recorder.Eventf(ch, corev1.EventTypeWarning, ReasonWaveRollingBack, "the analysis failed after the wave at %s (spec.analysis.onFailure: rollback): rolling back %s, %d at a time; the halt stays",
			rb.Version, strings.Join(nodes, ", "), ctl.concurrencyOf(ch))
	}
	for _, nr := range b.Ended { // one per node, on the channel (the recorder writes in the controller's namespace only)
		if nr.State == plan.NodeRollbackDone {
			ctl.recorder.Eventf(ch, corev1.EventTypeNormal, ReasonNodeRolledBack, "node %s rolled back from %s: %s", nr.Node, nr.From, nr.Message)
		} else {
			ctl.recorder.Eventf(ch, corev1.EventTypeWarning, ReasonNodeRollbackFail, "node %s was not rolled back from %s: %s; it is left uncordoned", nr.Node, nr.From, nr.Message)
		}
	}
	if b.Finished {
		ctl.recorder.Event(ch, corev1.EventTypeWarning, ReasonWaveRolledBack, plan.RollbackMessage(*rb))
	}
	if j := b.Judged; j != nil {
		switch j.State {
		case plan.WaveCured:
			ctl.recorder.Eventf(ch, corev1.EventTypeNormal, ReasonRollbackCured, "after rolling back the wave at %s: %s", j.Version, j.Message)
		case plan.WaveNotCured:
			ctl.recorder.Eventf(ch, corev1.EventTypeWarning, ReasonRollbackNotCured, "after rolling back the wave at %s: %s", j.Version, j.Message)
		}
	}
}

func (ctl *Controller) concurrencyOf(ch *v1.UpdateChannel) int {
	if ch.Spec.Concurrency < 1 {
		return 1
	}
	return ch.Spec.Concurrency
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
