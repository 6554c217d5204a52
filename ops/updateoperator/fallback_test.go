package updateoperator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// eventMessages are the reason: message of node's Events.
func (f *fleet) eventMessages(node string) []string {
	list, err := f.kube.CoreV1().Events(eventNamespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", node).String()})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

// A Bottlerocket host that falls back to its old partition is a failed
// update (a reason, an UpdateFailed Event, a failure counted and its
// backoff), never "updated to" the old version; its reboot call is cut
// off by the host going down (taken as under way, not a failure) and its
// status answers 404 after each boot. After its backoff it is tried again
// and comes back at v2.
func TestFallbackBootIsAFailure(t *testing.T) {
	f := newFleet(t, "fallback", 2)
	name := f.nodes[1] // on the Bottlerocket API emulator
	srv := f.br[name]
	srv.FallBack(1)
	srv.ResetOnReboot(true)
	seen := f.record(name)
	stop := f.controller(nil)
	defer stop()
	eventually(t, 2*time.Minute, "every node at v2, the fallen-back one after a second reboot", func() (bool, string) {
		ok, why := f.done()
		return ok && srv.Reboots() == 2, fmt.Sprintf("%s; %d reboots", why, srv.Reboots())
	})
	msgs := f.eventMessages(name)
	var failed bool
	for _, m := range msgs {
		if strings.HasPrefix(m, ReasonSucceeded) && strings.Contains(m, "v1") {
			t.Errorf("the fallback boot counted as a success: %q", m)
		}
		failed = failed || strings.HasPrefix(m, ReasonFailed) && strings.Contains(m, "fallback")
	}
	if !failed {
		t.Errorf("no %s Event naming the fallback boot: %v", ReasonFailed, msgs)
	}
	if bad := f.eventsWithoutUID(name); len(bad) > 0 {
		t.Errorf("Events that `kubectl describe node` never shows (no involvedObject UID of the node): %v", bad)
	}
	want := []string{"reboot-update/reboot-update/rebooting", "reboot-update/reboot-update/ready", "reset-state/reset-state/ready",
		"stabilize/stabilize/update-available", "reboot-update/reboot-update/rebooting", "stabilize/stabilize/up-to-date"}
	if steps := seen(); !inOrder(steps, want) {
		t.Errorf("the node went %v;\nwant in this order %v", steps, want)
	}
}

// eventsWithoutUID are the Events about node (by name) whose involved
// object does not carry the node's UID: `kubectl describe node` selects by
// UID, so it never shows them.
func (f *fleet) eventsWithoutUID(node string) []string {
	uid := f.node(node).UID
	list, err := f.kube.CoreV1().Events(eventNamespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", node).String()})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.UID != uid && e.Source.Component != "" && strings.HasPrefix(e.Source.Component, "slipway-update-operator") {
			out = append(out, e.Source.Component+" "+e.Reason)
		}
	}
	return out
}
