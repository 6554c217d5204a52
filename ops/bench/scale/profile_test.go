package scale

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// profileDir is where the rollout's CPU profiles go, for go tool pprof
// (SLIPWAY_SCALE_PROFILE, a directory; "" takes none): kube-apiserver's
// and, in slipway's runs, the controller's, over the first
// profileSeconds of the rollout (SLIPWAY_SCALE_PROFILE_SECONDS, 30 by
// default). Profiling costs both some CPU: compare walls from runs
// without it.
var (
	profileDir     = os.Getenv("SLIPWAY_SCALE_PROFILE")
	profileSeconds = envInt("SLIPWAY_SCALE_PROFILE_SECONDS", 30)
)

// controllerProfileAddr is where the controller serves its profiles (profileDir set).
var controllerProfileAddr string

// freeAddr is a free loopback address, released for the caller to listen on.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// profileRollout starts the CPU profiles of the rollout; the function it
// returns waits for them and logs where they are.
func profileRollout(b *testing.B, kube kubernetes.Interface) func() {
	if profileDir == "" {
		return func() {}
	}
	if err := os.MkdirAll(profileDir, 0o755); err != nil {
		b.Fatal(err)
	}
	name := func(who string) string {
		return filepath.Join(profileDir, fmt.Sprintf("%s-%d-%s.pprof", contender, nodes, who))
	}
	secs := strconv.Itoa(profileSeconds)
	timeout := time.Duration(profileSeconds)*time.Second + time.Minute
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		body, err := kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", secs).Timeout(timeout).DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(name("apiserver"), body, 0o644)
		}
		if err != nil {
			errs <- fmt.Errorf("kube-apiserver's profile: %w", err)
		}
	})
	if contender == "slipway" && controllerProfileAddr != "" {
		wg.Go(func() {
			if err := fetchProfile("http://"+controllerProfileAddr+"/debug/pprof/profile?seconds="+secs, timeout, name("controller")); err != nil {
				errs <- fmt.Errorf("the controller's profile: %w", err)
			}
		})
	}
	return func() {
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Logf("CPU profile: %v", err)
		}
		b.Logf("CPU profiles of the rollout's first %d s: %s", profileSeconds, name("*"))
	}
}

// fetchProfile saves what url serves to path.
func fetchProfile(url string, timeout time.Duration, path string) error {
	c := http.Client{Timeout: timeout}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
