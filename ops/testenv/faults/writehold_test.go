package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/testenv"
)

// TestSlowWritesDraws: a drawn hold is more than 0, at most MaxHold and
// at most its fault's length; a slow-writes line wants its hold.
func TestSlowWritesDraws(t *testing.T) {
	s := Generate(5, Spec{Duration: 5 * time.Minute, Targets: map[Kind][]string{SlowWrites: {"writes/controller"}}})
	if len(s) == 0 {
		t.Fatal("nothing drawn")
	}
	for _, f := range s {
		if f.Kind != SlowWrites || f.Arg <= 0 || f.Arg > MaxHold || f.Arg > f.For+100*time.Millisecond {
			t.Errorf("drew %s", f)
		}
	}
	got, err := Parse(s.String())
	if err != nil || got.String() != s.String() {
		t.Fatalf("round trip: %v\n%s\n---\n%s", err, s, got)
	}
	for _, bad := range []string{"+1s slow-writes writes/controller for 3s", "+1s slow-writes writes/controller for 3s arg 40s"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

// TestSlowWritesHoldsOneWriter registers a write hold with a real API
// server for one user's writes to ConfigMaps, and reads the order of what
// happens rather than how long it takes: while the hold is on, that
// user's patch is held in the webhook and a GET still shows the ConfigMap
// as it was, while another user's patch of it lands; the heal lets the
// held patch land. With no hold, nothing waits. A SlowWrites fault
// through Sim does the same.
func TestSlowWritesHoldsOneWriter(t *testing.T) {
	if testing.Short() || os.Getenv(testenv.EnvSkip) == "1" {
		t.Skipf("no control plane: %s=1 or -short", testenv.EnvSkip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, testenv.Options{ToolsDir: os.Getenv(testenv.EnvToolsDir)})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	const user = "system:serviceaccount:default:writer"
	as := rest.CopyConfig(env.Config)
	as.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
	writer := kubernetes.NewForConfigOrDie(as)
	for _, name := range []string{"held", "other"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string]string{"v": "0"}}
		if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var lines []string
	logs := make(chan string, 16)
	w, err := StartWriteHold(ctx, admin, "test", WriteScope{User: user, Rules: []admissionregv1.RuleWithOperations{{
		Operations: []admissionregv1.OperationType{admissionregv1.Update},
		Rule:       admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}}, func(l string) { logs <- l })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	patch := func(c kubernetes.Interface, name, v string) error {
		_, err := c.CoreV1().ConfigMaps("default").Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":%q}}`, v), metav1.PatchOptions{})
		return err
	}
	value := func(name string) string {
		cm, err := admin.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data["v"]
	}
	if err := patch(writer, "held", "1"); err != nil { // no hold: nothing waits
		t.Fatal(err)
	}
	sim := &Sim{Writes: map[string]*WriteHold{"writes/test": w}}
	// The API server loads a new webhook within moments: hold until it
	// calls this one (a write held), at most a minute.
	heal, err := sim.Inject(ctx, Fault{Kind: SlowWrites, Target: "writes/test", For: time.Minute, Arg: MaxHold})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	deadline := time.Now().Add(time.Minute)
	for v := 2; w.Waiting() == 0; v++ {
		if time.Now().After(deadline) {
			t.Fatal("the API server never called the webhook for the writer's patch")
		}
		// Set back by the admin, whose writes are never held: a patch of
		// the writer's here would be held itself once the webhook loads
		// between two tries, and time out.
		if err := patch(admin, "held", fmt.Sprint(v)); err != nil {
			t.Fatal(err)
		}
		go func() { done <- patch(writer, "held", "held") }()
		for end := time.Now().Add(2 * time.Second); w.Waiting() == 0 && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
		if w.Waiting() == 0 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := value("held"); got == "held" {
		t.Fatal("the held patch landed while the webhook held it")
	}
	if err := patch(admin, "other", "1"); err != nil { // another user: not held
		t.Fatal(err)
	}
	if got := value("other"); got != "1" {
		t.Fatalf("the admin's patch: %q", got)
	}
	if got := value("held"); got == "held" {
		t.Fatal("the held patch landed while the webhook held it")
	}
	if err := heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the held patch after the heal: %v", err)
	}
	if got := value("held"); got != "held" {
		t.Fatalf("after the heal: %q, want the held patch", got)
	}
	held := w.Held()
	if len(held) == 0 || held[len(held)-1].Name != "held" || held[len(held)-1].Operation != "UPDATE" || held[len(held)-1].Resource != "configmaps" {
		t.Fatalf("held %v", held)
	}
	close(logs)
	for l := range logs {
		lines = append(lines, l)
	}
	if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "UPDATE configmaps default/held held") {
		t.Fatalf("log %q", lines)
	}
	if _, err := sim.Inject(ctx, Fault{Kind: SlowWrites, Target: "writes/none", For: time.Second, Arg: time.Second}); err == nil {
		t.Error("a hold no run registered: no error")
	}
}

// TestHoldEndsOnce: a hold ended by Close (endHold) and then healed, and
// an old heal after a new hold, close nothing twice and leave the new hold
// in force.
func TestHoldEndsOnce(t *testing.T) {
	w := &WriteHold{name: "test"}
	heal, err := w.Hold(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w.endHold()
	heal() // after Close's end: must not close the channel again
	old, err := w.Hold(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old()
	if _, err := w.Hold(time.Second); err != nil {
		t.Fatal(err)
	}
	old() // an old heal again: the new hold stays
	w.mu.Lock()
	inForce := w.release != nil
	w.mu.Unlock()
	if !inForce {
		t.Fatal("an old hold's heal ended the hold in force")
	}
	w.endHold()
}
