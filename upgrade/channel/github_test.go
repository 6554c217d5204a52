package channel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeGitHub mimics the parts of the GitHub REST API the source uses.
type fakeGitHub struct {
	t        *testing.T
	srv      *httptest.Server
	token    string // required in Authorization when set
	reset    time.Time
	releases map[string]map[string]any // repo -> tag -> release JSON
	blobs    map[int64]string          // asset id -> content
	cut      map[int64]bool            // serve only the first 10 bytes
}

func newFakeGitHub(t *testing.T, token string) *fakeGitHub {
	f := &fakeGitHub{t: t, token: token, reset: time.Now().Add(42 * time.Minute).Truncate(time.Second),
		releases: map[string]map[string]any{}, blobs: map[int64]string{}, cut: map[int64]bool{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// addRelease publishes tag in repo with the given assets (name -> content).
func (f *fakeGitHub) addRelease(repo, tag string, id int64, assets map[string]string) {
	var list []map[string]any
	n := id * 100
	for name, content := range assets {
		n++
		f.blobs[n] = content
		list = append(list, map[string]any{"id": n, "name": name, "size": len(content)})
	}
	if f.releases[repo] == nil {
		f.releases[repo] = map[string]any{}
	}
	f.releases[repo][tag] = map[string]any{"id": id, "tag_name": tag, "assets": list}
}

func (f *fakeGitHub) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/blob/") {
		f.serveBlob(w, r)
		return
	}
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Bad credentials"})
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/repos/"), "/")
	if len(parts) < 4 || parts[0] != "o" || parts[2] != "releases" {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
		return
	}
	repo, rest := parts[1], parts[3:]
	switch {
	case repo == "limited":
		w.Header().Set("X-RateLimit-Limit", "60")
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(f.reset.Unix(), 10))
		writeJSON(w, http.StatusForbidden, map[string]any{"message": "API rate limit exceeded for 127.0.0.1."})
	case repo == "abuse":
		w.Header().Set("Retry-After", "90")
		writeJSON(w, http.StatusForbidden, map[string]any{"message": "You have exceeded a secondary rate limit.",
			"documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"})
	case len(rest) == 1 && rest[0] == "latest":
		f.serveRelease(w, repo, "v2")
	case len(rest) == 2 && rest[0] == "tags":
		f.serveRelease(w, repo, rest[1])
	case len(rest) == 2 && rest[0] == "assets":
		f.serveAssetRedirect(w, r, rest[1])
	case len(rest) == 2 && rest[1] == "assets":
		f.serveAssetList(w, r, repo, rest[0])
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
	}
}

func (f *fakeGitHub) serveRelease(w http.ResponseWriter, repo, tag string) {
	rel, ok := f.releases[repo][tag]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
		return
	}
	writeJSON(w, http.StatusOK, rel)
}

// serveAssetRedirect answers like GitHub: a redirect to storage elsewhere.
func (f *fakeGitHub) serveAssetRedirect(w http.ResponseWriter, r *http.Request, id string) {
	if r.Header.Get("Accept") != "application/octet-stream" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "want Accept: application/octet-stream"})
		return
	}
	http.Redirect(w, r, "/blob/"+id, http.StatusFound)
}

func (f *fakeGitHub) serveBlob(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		http.Error(w, "token leaked to the storage host", http.StatusBadRequest)
		return
	}
	if r.Header.Get("Accept-Encoding") != "identity" {
		http.Error(w, "the client may decode the body: want Accept-Encoding: identity", http.StatusBadRequest)
		return
	}
	id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/blob/"), 10, 64)
	content, ok := f.blobs[id]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if f.cut[id] {
		w.(http.Flusher).Flush() // chunked: no Content-Length, only the asset size tells
		io.WriteString(w, content[:10])
		return
	}
	io.WriteString(w, content)
}

// serveAssetList pages 100 assets at a time, with a Link header.
func (f *fakeGitHub) serveAssetList(w http.ResponseWriter, r *http.Request, repo, id string) {
	for _, rel := range f.releases[repo] {
		rel := rel.(map[string]any)
		if fmt.Sprint(rel["id"]) != id {
			continue
		}
		all := rel["all_assets"].([]map[string]any)
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		page = max(page, 1)
		lo, hi := min((page-1)*100, len(all)), min(page*100, len(all))
		if hi < len(all) {
			w.Header().Set("Link", fmt.Sprintf(`<%s%s?page=%d&per_page=100>; rel="next"`, f.srv.URL, r.URL.Path, page+1))
		}
		writeJSON(w, http.StatusOK, all[lo:hi])
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (f *fakeGitHub) source(t *testing.T, repo, token string) Source {
	return newSource(t, "github-releases://o/"+repo, Options{GitHubBaseURL: f.srv.URL, GitHubToken: token})
}

func TestGitHubLatestAndOpen(t *testing.T) {
	f := newFakeGitHub(t, "tok")
	f.addRelease("r", "v2", 2, map[string]string{"rootfs.tar.gz": "rootfs v2", "sha256sum-amd64.txt": "sums"})
	f.addRelease("r", "v1", 1, map[string]string{"rootfs.tar.gz": "rootfs v1"})
	src := f.source(t, "r", "tok")
	if src.String() != "github-releases://o/r" {
		t.Fatalf("String() = %q", src)
	}
	v, err := src.Latest(context.Background())
	if err != nil || v != "v2" {
		t.Fatalf("Latest = %q, %v", v, err)
	}
	for version, want := range map[string]string{"v1": "rootfs v1", "v2": "rootfs v2"} {
		if got, size := readAll(t, src, version, "rootfs.tar.gz"); got != want || size != int64(len(want)) {
			t.Fatalf("%s: got %q size %d", version, got, size)
		}
	}
}

func TestGitHubErrors(t *testing.T) {
	f := newFakeGitHub(t, "")
	f.addRelease("r", "v2", 2, map[string]string{"rootfs.tar.gz": "rootfs v2", "kernel.squashfs": "k"})
	tests := []struct {
		name, repo, version, artifact string
		notFound                      bool
		want                          []string
	}{
		{name: "unknown tag", repo: "r", version: "v9", artifact: "rootfs.tar.gz", notFound: true, want: []string{"release v9 not found"}},
		{name: "missing asset", repo: "r", version: "v2", artifact: "k3s-arm64", notFound: true,
			want: []string{"no asset named k3s-arm64", "kernel.squashfs", "rootfs.tar.gz"}},
		{name: "no release", repo: "empty", notFound: true, want: []string{"latest release not found"}},
		{name: "rate limit", repo: "limited", want: []string{"rate limit of 60 requests per hour",
			"resets at " + f.reset.UTC().Format(time.RFC3339), "set GITHUB_TOKEN"}},
		{name: "rate limit on open", repo: "limited", version: "v1", artifact: "a", want: []string{"resets at", "set GITHUB_TOKEN"}},
		{name: "secondary rate limit", repo: "abuse", want: []string{"secondary rate limit", "retry after 1m30s", "GITHUB_TOKEN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := f.source(t, tt.repo, "")
			var err error
			if tt.version == "" {
				_, err = src.Latest(context.Background())
			} else {
				var rc io.ReadCloser
				if rc, _, err = src.Open(context.Background(), tt.version, tt.artifact); err == nil {
					rc.Close()
				}
			}
			if err == nil || errors.Is(err, ErrNotFound) != tt.notFound {
				t.Fatalf("err = %v, want ErrNotFound=%v", err, tt.notFound)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestGitHubBadToken(t *testing.T) {
	f := newFakeGitHub(t, "right")
	f.addRelease("r", "v2", 2, nil)
	_, err := f.source(t, "r", "wrong").Latest(context.Background())
	if err == nil || !strings.Contains(err.Error(), "check GITHUB_TOKEN") {
		t.Fatalf("Latest with a wrong token: %v", err)
	}
}

func TestGitHubTruncatedAsset(t *testing.T) {
	f := newFakeGitHub(t, "")
	f.addRelease("r", "v2", 2, map[string]string{"big": strings.Repeat("x", 100)})
	f.cut[201] = true
	rc, size, err := f.source(t, "r", "").Open(context.Background(), "v2", "big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if size != 100 {
		t.Fatalf("size = %d, want 100", size)
	}
	if _, err := io.ReadAll(rc); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("reading a cut asset: %v, want io.ErrUnexpectedEOF", err)
	}
}

// A release with more assets than GitHub embeds is searched page by page.
func TestGitHubAssetPaging(t *testing.T) {
	f := newFakeGitHub(t, "")
	var embedded, all []map[string]any
	for i := range 250 {
		a := map[string]any{"id": 1000 + i, "name": fmt.Sprintf("asset-%03d", i), "size": 4}
		f.blobs[int64(1000+i)] = fmt.Sprintf("%04d", i)
		all = append(all, a)
		if i < 100 {
			embedded = append(embedded, a)
		}
	}
	f.releases["many"] = map[string]any{"v3": map[string]any{"id": 3, "tag_name": "v3", "assets": embedded, "all_assets": all}}
	src := f.source(t, "many", "")
	if got, _ := readAll(t, src, "v3", "asset-230"); got != "0230" {
		t.Fatalf("asset-230 = %q", got)
	}
	_, _, err := src.Open(context.Background(), "v3", "asset-999")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "and 240 more") {
		t.Fatalf("missing asset in a large release: %v", err)
	}
}
