package sucproc

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{}, &env)) }

func TestPlanObject(t *testing.T) {
	for _, tc := range []struct {
		name      string
		plan      Plan
		exprs     int
		afterKey  string
		cordon    bool
		parallel  int64
		firstWord string
	}{
		{"noop", Plan{Name: "noop", Concurrency: 10, Cordon: true, Command: []string{"sh", "-c", "true"}}, 1, "", true, 10, "sh"},
		{"after prepare", Plan{Name: "upgrade", Concurrency: 3, Command: []string{"x"}, After: "prepare"}, 2, PlanLabelPrefix + "prepare", false, 3, "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.plan.Object()
			if o.GetNamespace() != Namespace || o.GetName() != tc.plan.Name {
				t.Errorf("plan %s/%s", o.GetNamespace(), o.GetName())
			}
			if o.GetLabels()[testenv.ExecutorLabelKey] != testenv.ExecutorLabelValue {
				t.Errorf("labels %v: the executor's label is missing", o.GetLabels())
			}
			exprs, _, _ := unstructured.NestedSlice(o.Object, "spec", "nodeSelector", "matchExpressions")
			if len(exprs) != tc.exprs {
				t.Fatalf("%d node selector expressions, want %d", len(exprs), tc.exprs)
			}
			if tc.afterKey != "" && exprs[1].(map[string]any)["key"] != tc.afterKey {
				t.Errorf("second expression %v, want key %s", exprs[1], tc.afterKey)
			}
			cordon, _, _ := unstructured.NestedBool(o.Object, "spec", "cordon")
			n, _, _ := unstructured.NestedInt64(o.Object, "spec", "concurrency")
			cmd, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "upgrade", "command")
			if cordon != tc.cordon || n != tc.parallel || !reflect.DeepEqual(cmd, tc.plan.Command) {
				t.Errorf("cordon %v, concurrency %d, command %v; want %v, %d, %v", cordon, n, cmd, tc.cordon, tc.parallel, tc.plan.Command)
			}
		})
	}
}

// TestStartRefusesABinaryUnderAnotherName: the benchmarks tell SUC's
// requests by its binary's name, so one that runs under another is
// refused before anything starts.
func TestStartRefusesABinaryUnderAnotherName(t *testing.T) {
	dir := t.TempDir()
	for name, want := range map[string]string{"suc-v0.20.1": "must be named " + Name, "missing/" + Name: "not an executable"} {
		bin := filepath.Join(dir, name)
		if !strings.Contains(name, "/") {
			if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Start(context.Background(), Options{Bin: bin}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, want)
		}
	}
}

// TestStartReportsAControllerThatExits: a SUC that exits before its Plan
// CRD serves is an error with the end of its log, not a wait to the
// timeout.
func TestStartReportsAControllerThatExits(t *testing.T) {
	e := testenv.Need(t, env)
	dir := t.TempDir()
	bin := filepath.Join(dir, Name)
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'cannot reach the cluster' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := Start(context.Background(), Options{Bin: bin, Kubeconfig: e.Kubeconfig, Dir: dir, Timeout: 5 * time.Minute,
		Kube: kubernetes.NewForConfigOrDie(e.Config), Dyn: dynamic.NewForConfigOrDie(e.Config)})
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "cannot reach the cluster") {
		t.Fatalf("got %v, want an error saying it exited, with its log", err)
	}
	if time.Since(start) > 4*time.Minute {
		t.Errorf("took %s: waited for the timeout", time.Since(start))
	}
}
