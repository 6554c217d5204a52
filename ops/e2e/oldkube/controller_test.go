package oldkube

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/controller"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/process"
	"slipway.dev/slipway/ops/testenv"
)

// TestControllerRunsOnTheOldServer runs the controller with its own
// ServiceAccount's bound token, under the webhook isolation, against the
// 1.23 API server: it starts (the server check), wins its election Lease
// (RBAC and the webhook's Lease policy) and writes a channel's status (the
// status subresource and the webhook's source policy).
func TestControllerRunsOnTheOldServer(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := manifest.Options{Namespace: "slipway-ctl", Isolation: manifest.IsolationWebhook}
	addr, ca := serveInProcess(t, e.Config, o)
	install(ctx, t, e.Config, o, addr, ca)
	admin := kubernetes.NewForConfigOrDie(e.Config)

	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36) // -count=N reuses the control plane
	pod := "controller-" + run
	_, err := admin.CoreV1().Pods(o.Namespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: o.Namespace},
		Spec: corev1.PodSpec{ServiceAccountName: manifest.ControllerName, Containers: []corev1.Container{{Name: "controller", Image: "slipway"}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token, err := testenv.PodToken(ctx, e.Config, o.Namespace, pod)
	if err != nil {
		t.Fatal(err)
	}
	channel := "old-" + run
	body, _ := json.Marshal(map[string]any{"apiVersion": "ops.slipway.dev/v1", "kind": "UpdateChannel",
		"metadata": map[string]any{"name": channel, "namespace": o.Namespace},
		"spec":     map[string]any{"url": "file://" + t.TempDir(), "version": "v0.1.0"}})
	if err := admin.RESTClient().Post().AbsPath("/apis/ops.slipway.dev/v1/namespaces/"+o.Namespace+"/updatechannels").
		Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error(); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the channel: %v", err)
	}

	t.Setenv(process.IsolationEnv, process.IsolationWebhook)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(cctx, controller.Options{Identity: pod, Namespace: o.Namespace, Config: token,
			Resync: 2 * time.Second, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	}()
	defer func() {
		stop()
		<-done
	}()

	for {
		l, lerr := admin.CoordinationV1().Leases(o.Namespace).Get(ctx, manifest.ControllerLease, metav1.GetOptions{})
		raw, cerr := admin.RESTClient().Get().AbsPath("/apis/ops.slipway.dev/v1/namespaces/" + o.Namespace + "/updatechannels/" + channel).DoRaw(ctx)
		var ch struct {
			Status struct {
				Conditions []metav1.Condition `json:"conditions"`
			} `json:"status"`
		}
		if cerr == nil {
			cerr = json.Unmarshal(raw, &ch)
		}
		if lerr == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == pod && cerr == nil && len(ch.Status.Conditions) > 0 {
			t.Logf("the controller leads and wrote the channel's status: %v", ch.Status.Conditions)
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the controller ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("the controller never led (%v) and wrote channel status (%v, %s)", lerr, cerr, raw)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
