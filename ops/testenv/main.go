package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"slipway.dev/slipway/ops/testenv/tools"
)

// Environment variables the TestMain helper reads (when it runs, never at init).
const (
	// EnvSkip, set to 1, makes RunMain start nothing; tests that Need the env skip.
	EnvSkip = "SLIPWAY_SKIP_CLUSTER"
	// EnvToolsDir names the directory of the control-plane binaries.
	EnvToolsDir = tools.EnvDir
)

// RunMain is a test package's TestMain body: it starts an Env with opts (tools
// from $SLIPWAY_TOOLS_DIR unless opts.ToolsDir is set), stores it in *env, runs
// the tests and stops the Env. It returns the exit code for os.Exit:
//
//	var env *testenv.Env
//	func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{}, &env)) }
//
// Nothing is started (and *env stays nil) only when SLIPWAY_SKIP_CLUSTER=1 or
// with -short; a failure to start fails the package.
func RunMain(m *testing.M, opts Options, env **Env) int {
	flag.Parse()
	if os.Getenv(EnvSkip) == "1" || testing.Short() {
		return m.Run()
	}
	if opts.ToolsDir == "" {
		opts.ToolsDir = os.Getenv(EnvToolsDir)
	}
	e, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: start the control plane: %v\n", err)
		return 1
	}
	*env = e
	stop := sync.OnceFunc(e.Stop)
	defer stopOnSignal(stop)()
	code := m.Run()
	if code != 0 {
		e.DumpLogs(os.Stderr, 20)
	}
	stop()
	return code
}

// Overlap lets up to n of the package's parallel tests run at once, unless
// go test was given -parallel (whose default is the number of cores). It is
// for packages whose parallel tests mostly wait (on Leases, timeouts, the
// simulated cluster) rather than compute. Call it in TestMain before the
// flags are parsed (before RunMain or m.Run): the command line still wins.
func Overlap(n int) {
	if flag.Parsed() {
		panic("testenv.Overlap after the flags were parsed")
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		panic(err)
	}
}

// stopOnSignal runs stop and exits when the test binary is interrupted or
// terminated, so no control plane outlives it; the returned func ends the
// watch.
func stopOnSignal(stop func()) func() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "testenv: %v: stopping the control plane\n", sig)
			stop()
			os.Exit(1)
		case <-done:
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// Need skips t when the package's Env was not started (SLIPWAY_SKIP_CLUSTER=1
// or -short), and returns env otherwise.
func Need(t testing.TB, env *Env) *Env {
	t.Helper()
	if env == nil {
		t.Skipf("no control plane: %s=1 or -short", EnvSkip)
	}
	return env
}
