package oldkube

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/testenv"
)

// slipway is the slipway binary, built once for the tests that run it.
var slipway = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "slipway-oldkube-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "slipway")
	build := exec.Command("go", "build", "-trimpath", "-tags", "urfave_cli_no_docs", "-o", bin, "slipway.dev/slipway/cmd/slipway")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build slipway: %w\n%s", err, out)
	}
	return bin, nil
})

// binDir holds the binary slipway built (TestMain removes it).
var binDir string

func slipwayBin(t *testing.T) string {
	t.Helper()
	bin, err := slipway()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestAdmissionWebhookCommand runs `slipway ops webhook` with the command
// and arguments the manifest's Deployment gives it: it writes its CA into
// the webhook configuration and the old API server then refuses through it.
func TestAdmissionWebhookCommand(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := slipwayBin(t)
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
	if !slices.Equal(c.Command, []string{"slipway"}) || len(args) < 2 || args[0] != "ops" || args[1] != "webhook" {
		t.Fatalf("the Deployment runs %v %v, want slipway ops webhook", c.Command, c.Args)
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
			t.Logf("slipway ops webhook's log:\n%s", logs.String())
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
			t.Fatalf("slipway ops webhook never wrote its CA into %s: %v", name, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36) // -count=N reuses the control plane
	na, nb := "bin-a-"+run, "bin-b-"+run
	node(ctx, t, admin, na)
	node(ctx, t, admin, nb)
	a := agentIn(ctx, t, e.Config, o.Namespace, na, "agent-"+na)
	inForce(ctx, t, e.Config, o.Namespace) // the CA the command wrote, as the server's cache has it
	_, err = a.CoreV1().Nodes().Patch(ctx, na, types.MergePatchType, labelPatch("ops.slipway.dev/bin"), metav1.PatchOptions{})
	allowed(t, "agent on bin-a labels its own Node", err)
	_, err = a.CoreV1().Nodes().Patch(ctx, nb, types.MergePatchType, labelPatch("ops.slipway.dev/bin"), metav1.PatchOptions{})
	denied(t, "agent on bin-a labels bin-b", err, "own")
}
