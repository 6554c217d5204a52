package agentmem_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/agentmem"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
)

// BenchmarkAgentMemory starts, against a simulated cluster of
// SLIPWAY_MEM_NODES fake nodes (default 10), one `slipway ops agent` (the
// holder of a paused UpdateChannel's Lease) and one `slipway update-operator agent` (command
// platform, up to date), each twice: as released and with
// SLIPWAY_KEEP_STARTUP_PAGES=1. Every process runs its own copy of the
// binary, as on a node where the agent is the binary's only user, so its
// page cache is its own. It logs each one's RSS split (anonymous, file),
// PSS and how much of its binary is in the page cache (the file pages its
// cgroup is charged for), at startup and once settled.
//
//	go test ./ops/agentmem -run '^$' -bench AgentMemory -benchtime 1x
func BenchmarkAgentMemory(b *testing.B) {
	nodes := 10
	if n, err := strconv.Atoi(os.Getenv("SLIPWAY_MEM_NODES")); err == nil && n > 0 {
		nodes = n
	}
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{Cluster: true, Nodes: nodes, CRDs: crds.Must(), ToolsDir: os.Getenv("SLIPWAY_TOOLS_DIR")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.Stop)
	if err := setupCluster(ctx, env); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "slipway")
	if err := build(bin); err != nil {
		b.Fatal(err)
	}
	procs, err := startAgents(b, dir, bin, env)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	settled := agentmem.Defaults().Settle + agentmem.Defaults().Drop
	for _, at := range []time.Duration{8 * time.Second, settled} {
		time.Sleep(time.Until(procs[0].started.Add(at)))
		for _, p := range procs {
			b.Logf("%s nodes, %s after start, %-28s %s", strconv.Itoa(nodes), at, p.name+":", p.memory())
		}
	}
}

// namespaces are the ops agents' namespaces, one each, so that both hold
// their channel's Lease and do the same work.
var namespaces = map[string]string{"": "mem-released", "1": "mem-kept"}

// setupCluster creates each ops agent's namespace and a paused UpdateChannel in it.
func setupCluster(ctx context.Context, env *testenv.Env) error {
	kube := kubernetes.NewForConfigOrDie(env.Config)
	ops := versioned.NewForConfigOrDie(env.Config).OpsV1()
	for _, name := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create the namespace %s: %w", name, err)
		}
		ch := &v1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name},
			Spec: v1.UpdateChannelSpec{URL: "file:///nonexistent", Version: "v1", Concurrency: 1, Paused: true}}
		if _, err := ops.UpdateChannels(name).Create(ctx, ch, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create the UpdateChannel in %s: %w", name, err)
		}
	}
	return nil
}

// build compiles slipway as scripts/build does for a release (static, stripped).
func build(out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "urfave_cli_no_docs", "-ldflags", "-s -w", "-o", out, "../../cmd/slipway")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build slipway: %w", err)
	}
	return nil
}

// agentProc is one agent process and the copy of the binary it runs.
type agentProc struct {
	name, bin string
	cmd       *exec.Cmd
	started   time.Time
}

// startAgents starts the four agents, each on a node of its own.
func startAgents(b *testing.B, dir, bin string, env *testenv.Env) ([]*agentProc, error) {
	host := filepath.Join(dir, "host")
	if err := writeHost(host); err != nil {
		return nil, err
	}
	kinds := []struct{ name, keep string }{
		{"ops agent", ""}, {"ops agent (keep pages)", "1"},
		{"update-operator agent", ""}, {"update-operator agent (keep pages)", "1"},
	}
	var procs []*agentProc
	for i, k := range kinds {
		if i >= len(env.Nodes) {
			return nil, fmt.Errorf("%d agents need %d nodes", len(kinds), len(kinds))
		}
		p := &agentProc{name: k.name, bin: filepath.Join(dir, fmt.Sprintf("agent-%d", i), "slipway")}
		if err := copyFile(bin, p.bin); err != nil {
			return nil, err
		}
		args := agentArgs(k.name, env.Nodes[i], namespaces[k.keep], env.Kubeconfig, host)
		p.cmd = exec.Command(p.bin, args...)
		p.cmd.Env = append(os.Environ(), agentmem.EnvKeepPages+"="+k.keep)
		p.cmd.Dir = filepath.Dir(p.bin)
		if err := startLogged(p.cmd, filepath.Join(p.cmd.Dir, "log")); err != nil {
			return nil, err
		}
		p.started = time.Now()
		b.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
		procs = append(procs, p)
	}
	return procs, nil
}

func agentArgs(name, node, namespace, kubeconfig, host string) []string {
	if name[:3] == "ops" {
		return []string{"ops", "agent", "--node-name", node, "--namespace", namespace, "--system-dir", filepath.Join(host, node),
			"--reboot-method", "command", "--reboot-command", "true", "--boot-id-from-node", "--metrics-addr", "", "--kubeconfig", kubeconfig}
	}
	sh := func(s string) string { return "/bin/sh " + filepath.Join(host, s) }
	return []string{"update-operator", "agent", "--kubeconfig", kubeconfig, "--node-name", node, "--platform", "command",
		"--check-command", sh("check.sh"), "--prepare-command", sh("true.sh"), "--apply-command", sh("true.sh"),
		"--reboot-command", sh("true.sh"), "--version-command", sh("version.sh"), "--check-interval", "2s"}
}

// writeHost writes the update-operator agents' host commands: at v1, nothing to update.
func writeHost(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, body := range map[string]string{"check.sh": "", "true.sh": "true", "version.sh": "echo v1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body+"\n"), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		return err
	}
	// A fresh copy's pages are dirty in the page cache: write them out and
	// drop them, so the agent reads its binary as after a node's boot.
	f, err := os.Open(to)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

func startLogged(cmd *exec.Cmd, log string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return nil
}

// memory is the process's RSS split and its binary's pages in the page cache.
func (p *agentProc) memory() string {
	s, err := agentmem.ReadSplit(strconv.Itoa(p.cmd.Process.Pid))
	if err != nil {
		return err.Error()
	}
	cached, err := cachedKiB(p.bin)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s; binary in the page cache %.1f MiB", s, float64(cached)/1024)
}

// cachedKiB is how much of the file is in the page cache (mincore).
func cachedKiB(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(data)
	page := os.Getpagesize()
	vec := make([]byte, (len(data)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n * page / 1024, nil
}
