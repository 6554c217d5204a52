package agentmem

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// Range is one mapping of the address space, [Start, End).
type Range struct{ Start, End uintptr }

// Len is the mapping's size in bytes.
func (r Range) Len() uintptr { return r.End - r.Start }

// ReadOnlyMappings returns the private, read-only mappings of the file exe
// in a /proc/PID/maps listing: the binary's text and read-only data, whose
// pages are the file's and can be dropped and faulted in again unchanged.
// Writable mappings (the binary's .data) and everything else are left out.
func ReadOnlyMappings(maps io.Reader, exe string) ([]Range, error) {
	var out []Range
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		r, ok := readOnlyMapping(sc.Text(), exe)
		if ok {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// readOnlyMapping parses one maps line: "start-end perms offset dev inode path".
func readOnlyMapping(line, exe string) (Range, bool) {
	f := strings.Fields(line)
	if len(f) < 6 || strings.Join(f[5:], " ") != exe {
		return Range{}, false
	}
	perms := f[1]
	if len(perms) != 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
		return Range{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return Range{}, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return Range{}, false
	}
	return Range{Start: uintptr(start), End: uintptr(end)}, true
}
