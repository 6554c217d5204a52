package attack

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAgentWritesOnlyItsOwnEvents: the agent on node-a writes Events
// signed by node-a about a channel of its namespace or its own node's
// NodeUpdate (its recorder writes only in its namespace, where the API
// admits no Event about a Node), and is refused a Warning that looks like
// node-b's, one about node-b's NodeUpdate, one in another namespace, and
// one about another kind of object.
func TestAgentWritesOnlyItsOwnEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, asAgent := agentOnA(ctx, t)
	ns := agentOpts.Namespace
	event := func(namespace, host string, about corev1.ObjectReference) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e-", Namespace: namespace}, InvolvedObject: about,
			Type: corev1.EventTypeWarning, Reason: "UpgradeFailed", Message: "node node-b failed", Source: corev1.EventSource{Component: "slipway-agent", Host: host},
			ReportingController: "slipway-agent", ReportingInstance: host, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1}
	}
	channel := corev1.ObjectReference{Kind: "UpdateChannel", APIVersion: "ops.slipway.dev/v1", Namespace: ns, Name: "default"}
	create := func(e *corev1.Event) error {
		_, err := asAgent.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	const msg = "Events from its own node"
	waitPolicy(t, msg, func() error { return create(event(ns, "node-b", channel)) })
	for name, e := range map[string]*corev1.Event{
		"on a channel":             event(ns, "node-a", channel),
		"on its node's NodeUpdate": event(ns, "node-a", corev1.ObjectReference{Kind: "NodeUpdate", APIVersion: "ops.slipway.dev/v1", Namespace: ns, Name: "node-a"}),
	} {
		if err := create(e); err != nil {
			t.Errorf("the agent's own Event %s is refused: %v", name, err)
		}
	}
	other := event(ns, "node-a", channel)
	other.ReportingInstance = "node-b"
	for name, e := range map[string]*corev1.Event{
		"signed by node-b":             event(ns, "node-b", channel),
		"reported by node-b":           other,
		"about node-b's NodeUpdate":    event(ns, "node-a", corev1.ObjectReference{Kind: "NodeUpdate", APIVersion: "ops.slipway.dev/v1", Namespace: ns, Name: "node-b"}),
		"about a NodeUpdate elsewhere": event(ns, "node-a", corev1.ObjectReference{Kind: "NodeUpdate", APIVersion: "ops.slipway.dev/v1", Namespace: "default", Name: "node-a"}),
		"about a channel elsewhere":    event(ns, "node-a", corev1.ObjectReference{Kind: "UpdateChannel", Namespace: "default", Name: "c"}),
		"about a pod":                  event(ns, "node-a", corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "p"}),
		"in another namespace":         event("default", "node-a", corev1.ObjectReference{Kind: "Node", Name: "node-a"}),
	} {
		if why := refused(create(e), ""); why != "" {
			t.Errorf("an Event %s: %s", name, why)
		}
	}
}
