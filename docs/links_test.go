package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink finds inline Markdown links and images: [text](target "title").
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// codeSpan is an inline code span; links inside one are text, not links.
var codeSpan = regexp.MustCompile("`+[^`]*`+")

// htmlAnchor is an explicit anchor a link may point at.
var htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)

// markdownFiles lists README.md and every .md file under docs/, relative
// to the repository root.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list the docs: %v", err)
	}
	return files
}

// prose returns the file's lines outside fenced code blocks, with inline
// code spans blanked, each with its line number.
func prose(text string) map[int]string {
	out := map[int]string{}
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trim := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			fence = trim[:3]
			continue
		}
		out[i+1] = codeSpan.ReplaceAllString(line, "")
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, punctuation dropped,
// spaces as hyphens.
func slug(heading string) string {
	heading = strings.ReplaceAll(heading, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the anchors of a Markdown file's headings (repeated
// headings get -1, -2, ... as on GitHub) and its explicit <a name> tags.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := prose(text)
	for n := 1; n <= len(strings.Split(text, "\n")); n++ {
		line, ok := lines[n]
		if !ok {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		// the heading as written, code spans included
		orig := strings.Split(text, "\n")[n-1]
		s := slug(strings.TrimLeft(orig, "#"))
		if k := seen[s]; k > 0 {
			out[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestRelativeLinks fails on a relative link in README.md or docs/ that
// names a missing file, or a section its file does not have.
func TestRelativeLinks(t *testing.T) {
	root := ".."
	cache := map[string]map[string]bool{}
	anchorsOf := func(p string) (map[string]bool, error) {
		if a, ok := cache[p]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, err
		}
		cache[p] = anchors(string(b))
		return cache[p], nil
	}
	links := 0
	for _, file := range markdownFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range prose(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Clean(filepath.Join(filepath.Dir(file), path))
					st, err := os.Stat(filepath.Join(root, dest))
					if err != nil {
						t.Errorf("%s:%d: link %q: no such file %s", file, n, target, dest)
						continue
					}
					if st.IsDir() || frag == "" {
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				a, err := anchorsOf(dest)
				if err != nil {
					t.Errorf("%s:%d: link %q: %v", file, n, target, err)
					continue
				}
				if !a[frag] {
					t.Errorf("%s:%d: link %q: %s has no section #%s", file, n, target, dest, frag)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("found no relative links at all: the link pattern is broken")
	}
	t.Logf("%d relative links checked", links)
}

// TestSlug pins the anchor rule to GitHub's for the headings the docs use.
func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Staging ahead of the slot", "staging-ahead-of-the-slot"},
		{"`slipway ops agent`", "slipway-ops-agent"},
		{"Side by side after the agent/controller split: where a slot's seconds go", "side-by-side-after-the-agentcontroller-split-where-a-slots-seconds-go"},
		{"Try-once boots (`upgrade/bootstate`)", "try-once-boots-upgradebootstate"},
		{"Which kernel runs — what is asserted", "which-kernel-runs--what-is-asserted"},
		{"SlipwayEDSCanaryPaused", "slipwayedscanarypaused"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}
