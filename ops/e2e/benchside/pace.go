package benchside

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"slipway.dev/slipway/ops/testenv"
)

// Every controller of kube-controller-manager writes through a client of
// its own, limited to --kube-api-qps requests a second after a burst of
// --kube-api-burst (20 and 30 by default). The Job controller makes a few
// writes for every Job (its pod, its status two or three times, the pod's
// tracking finalizer lifted, its Events); when a rollout asks for Jobs
// faster than that limit lets it, each new Job's pod waits in its queue
// behind the others' writes, and the rollout's wall is the Job
// controller's pace, whatever the contender does. Pace measures it from
// the audit log: the writes made in each second of the wall, and how many
// of those seconds were at the limit.

// EnvControllerManagerQPS names the benchmark's setting of
// kube-controller-manager's --kube-api-qps, alike for every contender.
const EnvControllerManagerQPS = "SLIPWAY_BENCH_KCM_QPS"

// defaultControllerManagerQPS is kube-controller-manager's default client
// limit (its burst: 30).
const defaultControllerManagerQPS = 20

// ControllerManagerQPS is the benchmark's kube-controller-manager QPS from
// EnvControllerManagerQPS: 0 (its default) when unset; an error says what
// to set instead.
func ControllerManagerQPS() (int, error) {
	v := strings.TrimSpace(os.Getenv(EnvControllerManagerQPS))
	if v == "" {
		return 0, nil
	}
	q, err := strconv.Atoi(v)
	if err != nil || q <= 0 {
		return 0, fmt.Errorf("%s=%q: want a whole number of requests a second above 0, or unset for kube-controller-manager's default (20)", EnvControllerManagerQPS, v)
	}
	return q, nil
}

// ControllerManagerLimit is the writes a second each controller of
// kube-controller-manager is limited to, for the setting qps (0: the default).
func ControllerManagerLimit(qps int) int {
	if qps <= 0 {
		return defaultControllerManagerQPS
	}
	return qps
}

// Pace is what one client wrote in a rollout's wall, second by second.
type Pace struct {
	Writes  int // in the wall
	Seconds int // whole seconds of the wall (a part second left out)
	// AtLimit are the whole seconds in which it wrote limit times or more.
	AtLimit int
	Limit   int
}

// PaceOf counts writes (their times) in each whole second from start to
// end, against limit writes a second.
func PaceOf(writes []time.Time, start, end time.Time, limit int) Pace {
	p := Pace{Seconds: int(end.Sub(start) / time.Second), Limit: limit}
	per := make([]int, p.Seconds)
	for _, t := range writes {
		if t.Before(start) || !t.Before(end) {
			continue
		}
		p.Writes++
		if i := int(t.Sub(start) / time.Second); i < len(per) {
			per[i]++
		}
	}
	for _, n := range per {
		if n >= limit {
			p.AtLimit++
		}
	}
	return p
}

// String says it for the log, e.g. "612 writes in 28 s (21.9 a second), at
// its limit of 20 a second in 25 of them".
func (p Pace) String() string {
	rate := 0.0
	if p.Seconds > 0 {
		rate = float64(p.Writes) / float64(p.Seconds)
	}
	return fmt.Sprintf("%d writes in %d s (%.1f a second), at its limit of %d a second in %d of them", p.Writes, p.Seconds, rate, p.Limit, p.AtLimit)
}

// JobControllerWrites are the times of the Job controller's writes in an
// audit log's writes (testenv.ReadAudit).
func JobControllerWrites(events []testenv.AuditEvent) []time.Time {
	var out []time.Time
	for _, ev := range events {
		if strings.HasSuffix(ev.UserAgent, "/job-controller") {
			out = append(out, ev.Received)
		}
	}
	return out
}
