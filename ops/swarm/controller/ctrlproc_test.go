package controller

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"slipway.dev/slipway/ops/agentmem"
	"slipway.dev/slipway/ops/e2e/benchside"
	"slipway.dev/slipway/ops/swarm/manifest"
	"slipway.dev/slipway/ops/testenv"
)

// ctrlProc is the controller running as its own process, as the manifest's
// ServiceAccount; its memory is sampled every half second.
type ctrlProc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	stopMu sync.Once

	mu         sync.Mutex
	peak, last agentmem.Split
	phase      agentmem.Split
	cpuAtExit  time.Duration
}

func startCtrlProc(b *testing.B, e *testenv.Env, ns string) *ctrlProc {
	dir := b.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData, CertificateAuthority: e.Config.CAFile}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: e.Config.BearerToken, Impersonate: "system:serviceaccount:" + ns + ":" + manifest.ControllerName}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	log, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		b.Fatal(err)
	}
	c := &ctrlProc{done: make(chan struct{})}
	c.cmd = exec.Command(slipwayBinary(b), "swarm", "controller", "--namespace", ns, "--kubeconfig", kc, "--identity", "bench", "--http", addr)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); log.Close(); close(c.done) }()
	go c.sample()
	b.Cleanup(c.stop)
	for deadline := time.Now().Add(time.Minute); get("http://"+addr+"/readyz") != 200; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the controller is not ready after a minute; its log: %s", filepath.Join(dir, "controller.log"))
		}
	}
	c.mu.Lock()
	b.Logf("controller ready, idle: %s", c.last)
	c.mu.Unlock()
	return c
}

// sample reads the controller's memory every half second until it exits.
func (c *ctrlProc) sample() {
	pid := strconv.Itoa(c.cmd.Process.Pid)
	for {
		if s, err := agentmem.ReadSplit(pid); err == nil {
			c.mu.Lock()
			c.last = s
			c.peak = maxSplit(c.peak, s)
			c.phase = maxSplit(c.phase, s)
			c.mu.Unlock()
		}
		select {
		case <-c.done:
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func maxSplit(a, b agentmem.Split) agentmem.Split {
	a.PSS, a.PSSAnon, a.Anon, a.RSS = max(a.PSS, b.PSS), max(a.PSSAnon, b.PSSAnon), max(a.Anon, b.Anon), max(a.RSS, b.RSS)
	return a
}

func (c *ctrlProc) resetPhase() {
	c.mu.Lock()
	c.phase = c.last
	c.mu.Unlock()
}

func (c *ctrlProc) phasePeak() agentmem.Split {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.phase
}

// cpu is the CPU time the controller used so far (user + system).
func (c *ctrlProc) cpu() time.Duration {
	select {
	case <-c.done:
		return c.cpuAtExit
	default:
	}
	d, _ := benchside.ProcCPU(c.cmd.Process.Pid)
	return d
}

// stop ends the controller and keeps its CPU time.
func (c *ctrlProc) stop() {
	c.stopMu.Do(func() {
		cpu := c.cpu()
		_ = c.cmd.Process.Signal(os.Interrupt)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if st := c.cmd.ProcessState; st != nil {
			cpu = max(cpu, st.UserTime()+st.SystemTime())
		}
		c.cpuAtExit = cpu
	})
}

// get returns the status code of a GET of url (0 when it fails).
func get(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
