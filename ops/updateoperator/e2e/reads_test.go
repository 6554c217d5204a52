package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"slipway.dev/slipway/ops/testenv"
)

// calls counts one component's API requests during a round by "verb
// resource" (watches apart: they are long-running, logged when they end).
type calls map[string]int

// apiCalls sorts the round's requests (the audit log logs reads in the
// benchmark) by component: controller and agent.
func apiCalls(events []testenv.AuditEvent, start time.Time, wall time.Duration) map[string]calls {
	by := map[string]calls{}
	for _, ev := range events {
		w := writer(ev.UserAgent)
		if (w != "controller" && w != "agent") || ev.Verb == "watch" || ev.Time.Before(start) || ev.Time.After(start.Add(wall)) {
			continue
		}
		if by[w] == nil {
			by[w] = calls{}
		}
		by[w][ev.Verb+" "+strings.SplitN(ev.Resource, "/", 2)[0]+sub(ev.Resource)]++
	}
	return by
}

func sub(resource string) string {
	if _, s, ok := strings.Cut(resource, "/"); ok {
		return "/" + s
	}
	return ""
}

// total is every request counted.
func (c calls) total() int {
	n := 0
	for _, k := range c {
		n += k
	}
	return n
}

// reads are the GETs and LISTs counted.
func (c calls) reads() int {
	n := 0
	for k, v := range c {
		if strings.HasPrefix(k, "get ") || strings.HasPrefix(k, "list ") {
			n += v
		}
	}
	return n
}

// perNode says each kind per node, most first.
func (c calls) perNode(nodes int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c[keys[i]] > c[keys[j]] || c[keys[i]] == c[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(c[k])/float64(nodes)))
	}
	return strings.Join(parts, ", ")
}

// freeAddr is a loopback address no one listens on (for a controller's metrics).
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ""
	}
	defer l.Close()
	return l.Addr().String()
}

// scrape reads the samples of the metric family name from the /metrics at
// addr: labels -> value.
func scrape(addr, name string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetric(resp.Body, name)
}

func parseMetric(r io.Reader, name string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		out[strings.TrimPrefix(line[:i], name)] = v
	}
	return out, sc.Err()
}
