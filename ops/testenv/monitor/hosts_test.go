package monitor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/testenv"
	"slipway.dev/slipway/ops/testenv/hostcheck"
	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/layout"
)

// plantHost makes root/node a k3os host with releases v1 and v2 installed
// (rootfs, kernel and k3s with their markers), its next boot v1, and its
// boots log holding boot.
func plantHost(t *testing.T, root, node, boot string) layout.Layout {
	t.Helper()
	dir := filepath.Join(root, node)
	l := layout.New(filepath.Join(dir, testenv.K3osSystemDir))
	for _, rel := range []string{"v1", "v2"} {
		for c, v := range map[layout.Component]string{layout.Rootfs: rel, layout.Kernel: "5.15.0-" + rel, layout.K3s: rel + "-k3s1"} {
			if err := os.MkdirAll(l.VersionDir(c, v), 0o755); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(upgrade.Marker{Release: rel})
			if err := os.WriteFile(filepath.Join(l.VersionDir(c, v), upgrade.MarkerFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	setNext(t, l, "v1")
	if err := os.WriteFile(filepath.Join(dir, testenv.BootsLog), []byte(boot+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return l
}

func setNext(t *testing.T, l layout.Layout, rel string) {
	t.Helper()
	for c, v := range map[layout.Component]string{layout.Rootfs: rel, layout.Kernel: "5.15.0-" + rel, layout.K3s: rel + "-k3s1"} {
		if err := l.SetLink(c, layout.CurrentLink, v); err != nil {
			t.Fatal(err)
		}
	}
}

func slots(m *Monitor, nodes ...string) {
	ch := &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Namespace: "slipway-system", Name: "default", ResourceVersion: "1"}}
	for _, n := range nodes {
		ch.Status.Updating = append(ch.Status.Updating, opsv1.Slot{Node: n})
	}
	m.observe(nil, ch, false)
}

// The monitor with Config.Hosts reports the host checks' violations:
// staged-without-slot once a node without a slot would boot what it does
// not run past the grace (not while it holds a slot), mixed-boot for a
// boot of two releases; a node directory with no boots log (not a k3os
// host) is not read.
func TestPlantedHostViolations(t *testing.T) {
	root := t.TempDir()
	now := time.Unix(10_000, 0)
	m, err := New(Config{Hosts: root, HostsEvery: time.Second, HostsGrace: 30 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	tick := func(d time.Duration) []Violation {
		t.Helper()
		now = now.Add(d)
		m.Tick()
		if errs := m.Errors(); len(errs) > 0 {
			t.Fatalf("checks not made: %v", errs)
		}
		return m.Violations()
	}
	if err := os.MkdirAll(filepath.Join(root, "node-9"), 0o755); err != nil { // an update operator's node: no boots log
		t.Fatal(err)
	}
	l := plantHost(t, root, "node-1", "1 rootfs=v1 kernel=5.15.0-v1 k3s=v1-k3s1")
	if v := tick(0); len(v) != 0 {
		t.Fatalf("v1 booted and next: %v", v)
	}
	slots(m, "node-1")
	setNext(t, l, "v2")
	if v := tick(time.Minute); len(v) != 0 {
		t.Fatalf("v2 activated within node-1's slot: %v", v)
	}
	// The slot ends other than Complete (a failure, counted: the monitor
	// judges that too): v2 stays next.
	m.observe(nil, &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Namespace: "slipway-system", Name: "default", ResourceVersion: "2"},
		Status: opsv1.UpdateChannelStatus{Failed: []opsv1.Failure{{Node: "node-1", Reason: "upgrade job failed"}}}}, false)
	if v := tick(time.Second); len(v) != 0 {
		t.Fatalf("within the grace: %v", v)
	}
	if v := tick(10 * time.Second); len(v) != 0 {
		t.Fatalf("within the grace: %v", v)
	}
	v := tick(25 * time.Second)
	if len(v) != 1 || v[0].Invariant != hostcheck.InvStagedWithoutSlot || !strings.Contains(v[0].Message, "node node-1 holds no slot") {
		t.Fatalf("violations %v, want one %s of node-1", v, hostcheck.InvStagedWithoutSlot)
	}
	if _, ok := v[0].History["Node//node-1"]; !ok {
		t.Errorf("violation %v has no entry for node-1's Node", v[0])
	}
	if v := tick(time.Second); len(v) != 1 {
		t.Fatalf("a standing violation reported again: %v", v)
	}
	plantHost(t, root, "node-2", "2 rootfs=v2 kernel=5.15.0-v1 k3s=v1-k3s1")
	if v := tick(500 * time.Millisecond); len(v) != 1 {
		t.Fatalf("checked before --hosts-every: %v", v)
	}
	v = tick(time.Second)
	if len(v) != 2 || v[1].Invariant != hostcheck.InvMixedBoot || !strings.Contains(v[1].Message, "node node-2 booted rootfs v2 kernel 5.15.0-v1") {
		t.Fatalf("violations %v, want a second, %s of node-2", v, hostcheck.InvMixedBoot)
	}
	if got := m.HostChecks(); got != 7 {
		t.Errorf("%d host checks, want 7 (every tick but the one within --hosts-every)", got)
	}
}
