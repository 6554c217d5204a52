package manifest

import (
	"bufio"
	"bytes"
	"strings"
)

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// stripComments drops whole-line YAML comments.
func stripComments(doc []byte) []byte {
	var out []string
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

func firstLines(doc []byte) string {
	lines := strings.SplitN(string(doc), "\n", 4)
	return strings.Join(lines[:min(3, len(lines))], " | ")
}
