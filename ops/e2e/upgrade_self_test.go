package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/upgrade/releasetest"
)

// upgradedVersion is the version the next slipway binary reports (its
// User-Agent, in the audit log, says which binary wrote what).
const (
	upgradeTarget   = "v5"
	upgradedVersion = "v9.9.9-upgraded"
)

// TestUpgradeSlipwayMidRollout upgrades slipway itself while a rollout is in
// flight, as applying a new release's manifest (or `helm upgrade`) does: a
// binary of another version takes the old one's place on every node's PATH;
// the controller's Deployment is replaced (SIGTERM: it gives its Lease
// back, the new one takes it), then the agents' DaemonSet pod by pod as
// `maxUnavailable: 1` does, the node holding a slot first: each old agent
// gets SIGTERM (SIGKILL after its grace period), and the next is replaced
// once the new one beats. The rollout then completes: every node at the
// target and labelled so, none cordoned, slots and slipway's cordons never
// over the concurrency, at most one Rebooting Event per reboot; and the
// audit log shows the controller and every agent writing as the new version.
func TestUpgradeSlipwayMidRollout(t *testing.T) {
	c := setup(t)
	if _, err := c.ops.OpsV1().UpdateChannels(ns).Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("this test continues TestRollout's cluster; run the package (go test ./ops/e2e), not this test alone: %v", err)
	}
	if _, err := releasetest.Write(releasetest.Options{Mirror: mirror, Version: upgradeTarget}); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(workDir, "bin-next")
	if err := buildSlipway(next, upgradedVersion); err != nil {
		t.Fatal(err)
	}
	boots := bootsOf()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := sample(ctx, t, c)
	start := time.Now()
	patchChannel(t, c, fmt.Sprintf(`{"spec":{"version":%q,"concurrency":%d,"maxFailures":1,"drain":{"timeout":"1m"}}}`, upgradeTarget, concurrency))
	var inSlot []string
	waitUntil(t, 2*time.Minute, "a slot held (the rollout in flight)", func() (bool, error) {
		for _, sl := range channel(t, c).Status.Updating {
			inSlot = append(inSlot, sl.Node)
		}
		return len(inSlot) > 0, nil
	})
	// The new release's binary replaces the old on the PATH: running
	// processes keep the old one, what starts next runs the new.
	if err := os.Rename(filepath.Join(next, "slipway"), filepath.Join(binDir, "slipway")); err != nil {
		t.Fatal(err)
	}
	stopController()
	if err := startController(env.Config, binDir, workDir); err != nil {
		t.Fatal(err)
	}
	order := append(inSlot, env.Nodes...)
	replaced := map[string]bool{}
	for _, node := range order {
		if !replaced[node] {
			replaced[node] = true
			replaceAgent(t, c, node)
		}
	}
	upToDate := channel(t, c).Status.Counts.UpToDate
	t.Logf("slipway replaced in %s, the rollout in flight (slots held at the start: %s; %d of %d nodes at %s when the last agent was replaced)",
		time.Since(start).Round(time.Second), strings.Join(inSlot, ", "), upToDate, nodes, upgradeTarget)
	if upToDate == nodes {
		t.Error("the rollout was over before slipway was replaced: nothing was tested mid-rollout")
	}
	waitUntil(t, 6*time.Minute, "the rollout to complete after the upgrade of slipway", func() (bool, error) {
		ch := channel(t, c)
		return settled(t, c) && isCondition(ch, v1.ConditionComplete), nil
	})
	cancel()
	t.Logf("%s rolled out in %s across the upgrade of slipway; %d reboots", upgradeTarget, time.Since(start).Round(time.Second), rebootsSince(boots))
	s.check(t)
	for _, name := range env.Nodes {
		n, err := c.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != "" {
			t.Errorf("node %s left cordoned", name)
		}
		if v := current(t, name); v != upgradeTarget || n.Labels[protocol.LabelRootfsVersion] != upgradeTarget {
			t.Errorf("node %s: current %s, labelled %q; want %s", name, v, n.Labels[protocol.LabelRootfsVersion], upgradeTarget)
		}
	}
	checkRebootingEvents(t, c, start, rebootsSince(boots))
	checkWroteAs(t, upgradedVersion)
}

// replaceAgent replaces node's agent as a DaemonSet update does, retrying
// while the node reboots (its pod is replaced once it is back), and waits
// until the new agent renewed its heartbeat.
func replaceAgent(t *testing.T, c clients, node string) {
	t.Helper()
	var at time.Time
	waitUntil(t, 2*time.Minute, "the agent of "+node+" replaced", func() (bool, error) {
		at = time.Now()
		return env.Replace(node, 10*time.Second)
	})
	waitUntil(t, time.Minute, "the new agent of "+node+" beating", func() (bool, error) {
		l, err := c.kube.CoordinationV1().Leases(ns).Get(context.Background(), protocol.AgentLeaseName(node), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(at), err
	})
}

// checkWroteAs: the controller and every node's agent wrote to the API
// server as version v (their User-Agent), after their replacement.
func checkWroteAs(t *testing.T, v string) {
	time.Sleep(2 * time.Second) // the apiserver writes its audit log in batches
	events, err := testenv.ReadAudit(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	wrote := map[string]bool{}
	for _, ev := range events {
		if strings.HasPrefix(ev.UserAgent, "slipway-agent/"+v+" ") || strings.HasPrefix(ev.UserAgent, "slipway-controller/"+v+" ") {
			wrote[strings.SplitN(ev.UserAgent, " ", 2)[1]] = true
		}
	}
	for _, node := range env.Nodes {
		if !wrote["node/"+node] {
			t.Errorf("no write of node %s's agent as %s in the audit log: was it replaced?", node, v)
		}
	}
	controller := false
	for who := range wrote {
		controller = controller || strings.HasPrefix(who, "pod/")
	}
	if !controller {
		t.Errorf("no write of the controller as %s in the audit log: was it replaced?", v)
	}
}

// buildSlipway builds slipway into dir, reporting version.
func buildSlipway(dir, version string) error {
	return goBuild("../../cmd/slipway", filepath.Join(dir, "slipway"), "-s -w -X slipway.dev/slipway/version.Version="+version)
}
