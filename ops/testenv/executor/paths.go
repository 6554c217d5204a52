package executor

import (
	"path/filepath"
	"sort"
	"strings"
)

// Mount maps a container path (a hostPath volume's mountPath) to the directory
// on this machine that stands for the node's host path.
type Mount struct {
	Container string // mountPath inside the container, e.g. /k3os/system
	Local     string // <nodesRoot>/<node>/<hostPath>
}

// rewritePaths replaces every occurrence of a mount's container path in s that
// stands as a whole path or a path prefix (`/k3os/system`, `/k3os/system/x`,
// `--system-dir=/k3os/system`) by its local path. Longer container paths win.
func rewritePaths(s string, mounts []Mount) string {
	if len(mounts) == 0 || s == "" {
		return s
	}
	ms := append([]Mount(nil), mounts...)
	sort.SliceStable(ms, func(i, j int) bool { return len(ms[i].Container) > len(ms[j].Container) })
	var b strings.Builder
	for i := 0; i < len(s); {
		m, ok := mountAt(s, i, ms)
		if !ok {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(m.Local)
		i += len(m.Container)
	}
	return b.String()
}

// mountAt returns the mount whose container path starts at s[i] on path boundaries.
func mountAt(s string, i int, ms []Mount) (Mount, bool) {
	if i > 0 && isPathByte(s[i-1]) {
		return Mount{}, false
	}
	for _, m := range ms {
		c := strings.TrimRight(m.Container, "/")
		if c == "" || !strings.HasPrefix(s[i:], c) {
			continue
		}
		end := i + len(c)
		if end == len(s) || s[end] == '/' || !isPathByte(s[end]) {
			return Mount{Container: c, Local: m.Local}, true
		}
	}
	return Mount{}, false
}

// isPathByte reports whether c can be part of a path name component.
func isPathByte(c byte) bool {
	return c == '/' || c == '.' || c == '_' || c == '-' || c == '~' ||
		(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// resolveCommand finds the program to run for a container's argv[0]: its base
// name looked up in path (a PATH-style list) first, so that `slipway` or
// `/usr/bin/slipway` in an image runs this machine's build, else argv0 itself
// when it is an existing absolute path. "" when nothing fits.
func resolveCommand(argv0, path string, exists func(string) bool) string {
	base := filepath.Base(argv0)
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, base); exists(p) {
			return p
		}
	}
	if filepath.IsAbs(argv0) && exists(argv0) {
		return argv0
	}
	return ""
}
