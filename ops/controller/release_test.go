package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/internal/fleettest"
	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/protocol"
)

// fakeGitHub stands in for the GitHub API: it serves release v2 of o/r
// and counts the requests for it, with the token they carried.
type fakeGitHub struct {
	mu       sync.Mutex
	releases int
	auth     []string
}

func (g *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/repos/o/r/releases/tags/v2":
		g.releases++
		g.auth = append(g.auth, r.Header.Get("Authorization"))
		asset := func(name string) map[string]any {
			return map[string]any{"name": name, "browser_download_url": "https://github.example/o/r/releases/download/v2/" + name}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"tag_name": "v2",
			"assets": []any{asset("k3os-rootfs-amd64.tar.gz"), asset("sha256sum-amd64.txt")}})
	case "/repos/o/r":
		_ = json.NewEncoder(w).Encode(map[string]any{"name": "r", "private": false})
	default:
		http.NotFound(w, r)
	}
}

// TestReleaseResolvedOncePerRollout: a github-releases:// channel with a
// token Secret rolls through three nodes, two at a time, with one request
// for the release, authenticated with the Secret's token; the Jobs read
// the resolved download base and get the token from the Secret; the token
// is in no Job spec, channel or log. The agents run as the manifest's
// ServiceAccount.
func TestReleaseResolvedOncePerRollout(t *testing.T) {
	t.Parallel()
	api := &fakeGitHub{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	const token = "s3cr3t-token-for-test"
	f := newFleet(t, 3, func(o *Options) { o.GitHubBaseURL = srv.URL + "/" })
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gh", Namespace: f.NS}, Data: map[string][]byte{"token": []byte(token)}}
	if _, err := f.Kube.CoreV1().Secrets(f.NS).Create(context.Background(), sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Issue 21 item 6: as the shipped manifest's ServiceAccount, the token
	// Secret named by the manifest is readable (and no other).
	f.AsServiceAccount(manifest.Options{TokenSecrets: []string{"gh"}, GitHubDownloadBase: "https://github.example/", ReleaseSources: []string{"github-releases://o/r"}})
	for i := range 3 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	f.Channel(v1.UpdateChannelSpec{URL: "github-releases://o/r", Version: "v2", Concurrency: 2, RebootDelay: fleettest.ZeroDelay(),
		NodeSelector: f.Selector(), TokenSecretRef: &v1.SecretKeyRef{Name: "gh"}})
	ch := f.WaitFor("all nodes at v2", 2*time.Minute, fleettest.Done(3))
	f.AssertAllAt("v2")
	api.mu.Lock()
	releases, auth := api.releases, api.auth
	api.mu.Unlock()
	if releases != 1 || auth[0] != "Bearer "+token {
		t.Errorf("release requests %d with %q, want one with the Secret's token", releases, auth)
	}
	if r := ch.Status.Resolved; r == nil || r.Version != "v2" || r.Source != "https://github.example/o/r/releases" {
		t.Errorf("status.resolved = %+v", r)
	}
	var jobs []batchv1.Job // the slots' and the staging runs' (Pods, as the Jobs they stand for)
	slots, stages, _ := f.JobsByAction()
	for _, by := range []map[string][]batchv1.Job{slots, stages} {
		for _, js := range by {
			jobs = append(jobs, js...)
		}
	}
	if len(jobs) < 3 {
		t.Fatalf("%d upgrade and staging runs, want at least one per node", len(jobs))
	}
	for _, j := range jobs {
		c := j.Spec.Template.Spec.Containers[0]
		if got := protocol.ArgAfterFlag(c.Args, "--source"); got != "https://github.example/o/r/releases" {
			t.Errorf("job %s reads %s, not the resolved release", j.Name, got)
		}
		if len(c.Env) != 1 || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.SecretKeyRef.Name != "gh" {
			t.Errorf("job %s env %+v, want GITHUB_TOKEN from Secret gh", j.Name, c.Env)
		}
		if b, _ := json.Marshal(j); strings.Contains(string(b), token) {
			t.Errorf("job %s holds the token", j.Name)
		}
	}
	if b, _ := json.Marshal(f.Get()); strings.Contains(string(b), token) {
		t.Error("the channel holds the token")
	}
	if b, _ := os.ReadFile(filepath.Join(f.Root, "agents.log")); strings.Contains(string(b), token) || len(b) == 0 {
		t.Errorf("the agents' log holds the token (or is empty: %d bytes)", len(b))
	}
}

// TestFailedResolveIsPaced: while the GitHub API fails, a channel rolls
// through its nodes (their Jobs ask the API themselves) with one attempt
// to resolve its release, not one per pass of the controller, and one
// ResolveFailed Warning: every pass asking again would spend the API's
// rate limit and the recorder's allowance of Warnings for the channel.
func TestFailedResolveIsPaced(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	asked := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked++
		mu.Unlock()
		http.Error(w, `{"message":"the API is down"}`, http.StatusBadGateway)
	}))
	defer srv.Close()
	f := newFleet(t, 3, func(o *Options) { o.GitHubBaseURL = srv.URL + "/" })
	for i := range 3 {
		f.Start(fmt.Sprintf("%s-n%d", f.NS, i))
	}
	start := time.Now()
	f.Channel(v1.UpdateChannelSpec{URL: "github-releases://o/r", Version: "v2", RebootDelay: fleettest.ZeroDelay(), NodeSelector: f.Selector()})
	f.WaitFor("all nodes at v2", 2*time.Minute, fleettest.Done(3))
	want := 1 + int(time.Since(start)/pollRetry) // one, and one more per pollRetry the rollout took
	mu.Lock()
	n := asked
	mu.Unlock()
	if n < 1 || n > want {
		t.Errorf("%d requests to the GitHub API in a rollout of three nodes, want 1 to %d (one per %s)", n, want, pollRetry)
	}
	if got := f.EventsWithin("ResolveFailed", want+1, time.Second); got < 1 || got > want {
		t.Errorf("%d ResolveFailed Events, want 1 to %d", got, want)
	}
}

func TestResolveAttemptDue(t *testing.T) {
	at := time.Now()
	for _, c := range []struct {
		name   string
		failed resolveAttempt
		target string
		after  time.Duration
		want   bool
	}{
		{"never tried", resolveAttempt{}, "v2", 0, true},
		{"the same target at once", resolveAttempt{target: "v2", at: at}, "v2", time.Second, false},
		{"the same target just before the retry", resolveAttempt{target: "v2", at: at}, "v2", pollRetry - time.Millisecond, false},
		{"the same target at the retry", resolveAttempt{target: "v2", at: at}, "v2", pollRetry, true},
		{"another target at once", resolveAttempt{target: "v2", at: at}, "v3", 0, true},
	} {
		if got := c.failed.due(c.target, at.Add(c.after)); got != c.want {
			t.Errorf("%s: due = %v, want %v", c.name, got, c.want)
		}
	}
}
