package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"slipway.dev/slipway/ops/drain"
	"slipway.dev/slipway/ops/kube"
	"slipway.dev/slipway/ops/protocol"
	"slipway.dev/slipway/ops/testenv"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// TestUncordonAllAfterUninstall is docs/install.md's way out of `helm
// uninstall` in the middle of a rollout: the cordons the controllers left
// are lifted by `slipway uncordon-all`, run against the real API server. A
// node cordoned by hand before slipway cordoned it stays cordoned (only the
// record goes), and a node cordoned by someone else is not touched.
func TestUncordonAllAfterUninstall(t *testing.T) {
	e := testenv.Need(t, env)
	ctx := context.Background()
	k, err := kube.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Nodes) < 2 {
		t.Fatalf("want 2 nodes, have %v", e.Nodes)
	}
	n1, n2 := e.Nodes[0], e.Nodes[1]
	setUnschedulable := func(node string, on bool) {
		t.Helper()
		p := `{"spec":{"unschedulable":` + map[bool]string{true: "true", false: "null"}[on] + `}}`
		if _, err := k.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range e.Nodes {
			setUnschedulable(n, false)
			p := `{"metadata":{"annotations":{"` + drain.AnnotationCordonedBy + `":null,"` + drain.AnnotationSchedulableBefore + `":null}}}`
			_, _ = k.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		}
	})
	// Mid-rollout: the UpdateChannel controller cordoned n1 (with its drain
	// record); n2 was cordoned by hand, then by an update operator of another
	// prefix.
	if err := drain.Cordon(ctx, k, n1, protocol.CordonOwner, map[string]string{protocol.AnnotationDrainStarted: "2026-11-28T00:00:00Z"}); err != nil {
		t.Fatal(err)
	}
	setUnschedulable(n2, true)
	if err := drain.Cordon(ctx, k, n2, uo.CordonOwner+".bottlerocket.aws"); err != nil {
		t.Fatal(err)
	}

	bin := filepath.Join(t.TempDir(), "slipway")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/slipway").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"uncordon-all", "--kubeconfig", e.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("slipway uncordon-all %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run("--dry-run"); !strings.Contains(out, "would uncordon "+n1) || !strings.Contains(out, "would uncordon "+n2) {
		t.Errorf("--dry-run: %s", out)
	}
	if n, _ := k.CoreV1().Nodes().Get(ctx, n1, metav1.GetOptions{}); !n.Spec.Unschedulable {
		t.Fatalf("--dry-run uncordoned %s", n1)
	}
	if out := run(); !strings.Contains(out, "uncordoned "+n1) || !strings.Contains(out, "uncordoned "+n2) {
		t.Errorf("uncordon-all: %s", out)
	}
	for _, tc := range []struct {
		node          string
		unschedulable bool
	}{{n1, false}, {n2, true}} {
		n, err := k.CoreV1().Nodes().Get(ctx, tc.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Spec.Unschedulable != tc.unschedulable {
			t.Errorf("%s: unschedulable=%v, want %v", tc.node, n.Spec.Unschedulable, tc.unschedulable)
		}
		for _, a := range []string{drain.AnnotationCordonedBy, drain.AnnotationSchedulableBefore, protocol.AnnotationDrainStarted} {
			if _, ok := n.Annotations[a]; ok {
				t.Errorf("%s keeps %s", tc.node, a)
			}
		}
	}
	// Nothing left: a second run changes nothing.
	if out := run(); !strings.Contains(out, "no node carries a slipway cordon") {
		t.Errorf("second run: %s", out)
	}
	// A cordon of another owner stays.
	if err := drain.Cordon(ctx, k, n1, "someone-else"); err != nil {
		t.Fatal(err)
	}
	run()
	if n, _ := k.CoreV1().Nodes().Get(ctx, n1, metav1.GetOptions{}); !n.Spec.Unschedulable || drain.CordonedBy(n.Annotations) != "someone-else" {
		t.Errorf("another owner's cordon was lifted: %v %v", n.Spec.Unschedulable, n.Annotations)
	}
}
