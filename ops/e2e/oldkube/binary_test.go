package oldkube

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/testenv"
)

// TestAdmissionBinary runs the slipway-admission binary with the arguments
// the manifest's Deployment gives it: it writes its CA into the webhook
// configuration and the old API server then refuses through it.
func TestAdmissionBinary(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "slipway-admission")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "slipway.dev/slipway/cmd/slipway-admission")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build slipway-admission: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	o := manifest.Options{Namespace: "slipway-bin", Isolation: manifest.IsolationWebhook}
	c := install(ctx, t, e.Config, o, "127.0.0.1:"+strconv.Itoa(port), nil)

	// The Deployment's arguments, but for where it listens and what its certificate names.
	args := append([]string(nil), c.Args...)
	for i := range args {
		if args[i] == "--service-host" && i+1 < len(args) {
			args[i+1] = "127.0.0.1"
		}
	}
	args = append(args, "--port", strconv.Itoa(port), "--kubeconfig", e.Kubeconfig, "--namespace", o.Namespace)
	if c.Command[0] != "slipway-admission" {
		t.Fatalf("the Deployment runs %v, want slipway-admission", c.Command)
	}
	var logs strings.Builder
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("slipway-admission's log:\n%s", logs.String())
		}
	}()

	admin := kubernetes.NewForConfigOrDie(e.Config)
	name := manifest.AdmissionWebhookConfigName(o.Namespace)
	for {
		cfg, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(cfg.Webhooks) > 0 && len(cfg.Webhooks[len(cfg.Webhooks)-1].ClientConfig.CABundle) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("slipway-admission never wrote its CA into %s: %v", name, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36) // -count=N reuses the control plane
	na, nb := "bin-a-"+run, "bin-b-"+run
	node(ctx, t, admin, na)
	node(ctx, t, admin, nb)
	a := agentIn(ctx, t, e.Config, o.Namespace, na, "agent-"+na)
	// The server may call before the listener is up: retry the allowed write a while.
	for {
		_, err = a.CoreV1().Nodes().Patch(ctx, na, types.MergePatchType, labelPatch("ops.slipway.dev/bin"), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), "failed calling webhook") || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	allowed(t, "agent on bin-a labels its own Node", err)
	_, err = a.CoreV1().Nodes().Patch(ctx, nb, types.MergePatchType, labelPatch("ops.slipway.dev/bin"), metav1.PatchOptions{})
	denied(t, "agent on bin-a labels bin-b", err, "own")
}
