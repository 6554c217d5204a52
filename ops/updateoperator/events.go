package updateoperator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/internal/wallclock"
	"slipway.dev/slipway/ops/kube"
)

// Event reasons.
const (
	ReasonIntent        = "UpdateIntent"           // the controller wants a new intent
	ReasonDrained       = "NodeDrained"            // cordoned and drained before reboot-update
	ReasonUncordoned    = "NodeUncordoned"         // back, the operator's cordon lifted
	ReasonSucceeded     = "UpdateSucceeded"        // the node's update finished
	ReasonFailed        = "UpdateFailed"           // a failure counted
	ReasonStuck         = "UpdateStuck"            // waiting past a timeout, or a node left out
	ReasonLabelled      = "NodeLabelled"           // the interface-version label applied
	ReasonHooks         = "WaitingForHooks"        // the node is labelled for the before- / after-reboot hooks
	ReasonAgentState    = "AgentState"             // the agent reports a new state
	ReasonAgentError    = "AgentError"             // the agent could not carry out an intent
	ReasonAdopted       = "CordonAdopted"          // the old operator's cordon recorded as the operator's
	ReasonTargetAdopted = "TargetAdopted"          // an update under way without a target-version given the host's
	ReasonHalted        = "RolloutHalted"          // a release failed --halt-after times: no node starts it
	ReasonResumed       = "RolloutResumed"         // an admin lifted the brake
	ReasonRestored      = "ControllerKeysRestored" // the controller's keys on a Node changed by another: written back
	// ReasonAnalysisFailed: the analysis failed after a wave (on each of its nodes): the rollout halts.
	ReasonAnalysisFailed = "AnalysisFailed"
	// ReasonAnalysisPassed: the wave passed its analysis (after its bake).
	ReasonAnalysisPassed = "AnalysisPassed"
	eventNamespace       = metav1.NamespaceDefault
	componentController  = "slipway-update-operator-controller"
	componentAgent       = "slipway-update-operator-agent"
	eventTimeout         = 5 * time.Second
)

// events writes Events about Nodes (in the default namespace, as the
// kubelet's are) so `kubectl describe node` shows each transition. Events
// are written in the background, at most maxPendingEvents at once: a
// transition's next write does not wait for its Event's round trip.
type events struct {
	c         *kube.Clientset
	component string
	host      string
	log       *slog.Logger
	pending   chan struct{} // one token per Event being written
	uids      *sync.Map     // node name -> UID, so Events reach `kubectl describe node`
}

const maxPendingEvents = 16

func newEvents(c *kube.Clientset, component, host string, log *slog.Logger) events {
	return events{c: c, component: component, host: host, log: log, pending: make(chan struct{}, maxPendingEvents), uids: &sync.Map{}}
}

// remember notes the UID of a Node seen (a Node deleted and created again
// under its name has a new one).
func (e events) remember(n *corev1.Node) {
	if n != nil && n.UID != "" {
		e.uids.Store(n.Name, n.UID)
	}
}

// uid is the UID of node: remembered, else read (once). `kubectl describe
// node` selects Events by the involved object's UID: without it they
// never show there.
func (e events) uid(ctx context.Context, node string) types.UID {
	if u, ok := e.uids.Load(node); ok {
		return u.(types.UID)
	}
	n, err := e.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		e.log.Warn("could not read the node's UID for its Event", "node", node, "err", err)
		return ""
	}
	e.remember(n)
	return n.UID
}

// emit writes one Event in the background (it waits only when
// maxPendingEvents are under way); a failure is logged, never fatal.
func (e events) emit(ctx context.Context, node, typ, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	now := metav1.NewTime(wallclock.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: node + ".", Namespace: eventNamespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: e.component, Host: e.host},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "slipway.dev/update-operator", ReportingInstance: e.component + "-" + e.host,
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventTimeout)
	e.pending <- struct{}{}
	go func() {
		defer func() { <-e.pending; cancel() }()
		ev.InvolvedObject.UID = e.uid(ctx, node)
		if _, err := e.c.CoreV1().Events(eventNamespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			e.log.Warn("could not write an Event", "node", node, "reason", reason, "err", err)
		}
	}()
}

// flush waits for the Events under way.
func (e events) flush() {
	for range cap(e.pending) {
		e.pending <- struct{}{}
	}
	for range cap(e.pending) {
		<-e.pending
	}
}
