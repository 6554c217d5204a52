package benchside

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Prefix starts every result line: scripts/bench-suc keeps these lines.
const Prefix = "SIDE "

// Result is one contender's run of one rollout shape.
type Result struct {
	Contender string // "slipway" or "suc"
	Shape     string // "noop" or "staged"
	Nodes     int
	Wall      time.Duration
	// Writes are the successful writes by writer, per node upgraded; Own is
	// the goal's count: the contender's own writes and its Jobs'.
	Own    float64
	Writes map[string]float64
	// Controller is the contender's own processes (SUC's controller, or
	// slipway's agents and its controller), Jobs the processes its Jobs
	// ran; KCM and APIServer the control plane's share of the work.
	Controller, KCM, APIServer Usage
	// Watch is what the apiserver sent on watches during the rollout.
	Watch    WatchTraffic
	Load     string // load average at the end
	Settings string // the host times and limits, human readable
	// Floor is the shape's physical floor (see Floor): the wall if nothing
	// but host time took any.
	Floor time.Duration
	// JobController is the pace of kube-controller-manager's Job
	// controller over the wall (pace.go): at its client limit, it bounds
	// a rollout that makes a Job per node.
	JobController Pace
	// Machine is the machine's CPU over the wall (machine.go): how much of
	// it every core spent busy, the contender's steps waiting their turn.
	Machine MachineCPU
}

// Line formats r as one "SIDE key=value ..." line; keys ending in _s, _mib
// and _per_node are numbers, the rest text without spaces.
func (r Result) Line() string {
	kv := []string{
		"contender=" + r.Contender, "shape=" + r.Shape, "nodes=" + strconv.Itoa(r.Nodes),
		"wall_s=" + f1(r.Wall.Seconds()),
		"floor_s=" + f1(r.Floor.Seconds()),
		"own_writes_per_node=" + f1(r.Own),
		"controller_cpu_s=" + f1(r.Controller.CPU.Seconds()),
		"controller_rss_mib=" + f1(r.Controller.PeakRSS),
		"controller_anon_mib=" + f1(r.Controller.PeakAnon),
		"controller_processes=" + strconv.Itoa(r.Controller.Processes),
		"kcm_cpu_s=" + f1(r.KCM.CPU.Seconds()),
		"apiserver_cpu_s=" + f1(r.APIServer.CPU.Seconds()),
		"watch_mib=" + f1(r.Watch.Total().Bytes/(1<<20)),
		"watch_events=" + strconv.FormatFloat(r.Watch.Total().Events, 'f', 0, 64),
	}
	resources := make([]string, 0, len(r.Watch))
	for res, sent := range r.Watch {
		if sent.Bytes >= 1<<10 {
			resources = append(resources, res)
		}
	}
	slices.Sort(resources)
	for _, res := range resources {
		kv = append(kv, "watchres_"+strings.ReplaceAll(strings.TrimPrefix(res, "/"), "/", ".")+"_mib="+strconv.FormatFloat(r.Watch[res].Bytes/(1<<20), 'f', 4, 64))
	}
	writers := make([]string, 0, len(r.Writes))
	for w := range r.Writes {
		writers = append(writers, w)
	}
	slices.Sort(writers)
	for _, w := range writers {
		kv = append(kv, "writes_"+w+"_per_node="+f1(r.Writes[w]))
	}
	kv = append(kv, "jobctl_writes_events="+strconv.Itoa(r.JobController.Writes), "jobctl_at_limit_s="+strconv.Itoa(r.JobController.AtLimit),
		"jobctl_limit_per_s="+strconv.Itoa(r.JobController.Limit))
	kv = append(kv, "machine_saturated_s="+f1(r.Machine.Saturated.Seconds()), "machine_busy_share="+f1(r.Machine.Busy))
	kv = append(kv, "load="+strings.ReplaceAll(r.Load, " ", "/"), "settings="+strings.ReplaceAll(r.Settings, " ", "_"))
	return Prefix + strings.Join(kv, " ")
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// Summary is a human-readable account of r (the log above the result line).
func (r Result) Summary() string {
	return fmt.Sprintf("%s, %s rollout of %d nodes (%s): wall %s (the shape's floor %s); writes per node by %s and its Jobs %.1f; "+
		"%s CPU %.1f s over %d processes, peak RSS median %.1f MiB (anonymous %.1f), largest %.1f MiB; "+
		"kube-controller-manager CPU %.1f s (its Job controller: %s), kube-apiserver CPU %.1f s; the machine's cores all busy for %.1f s of the wall (%.0f %% busy over it); load average %s; sent on watches: %s",
		r.Contender, r.Shape, r.Nodes, r.Settings, r.Wall.Round(100*time.Millisecond), r.Floor, r.Contender, r.Own,
		r.Contender, r.Controller.CPU.Seconds(), r.Controller.Processes, r.Controller.PeakRSS, r.Controller.PeakAnon, r.Controller.MaxRSS,
		r.KCM.CPU.Seconds(), r.JobController, r.APIServer.CPU.Seconds(), r.Machine.Saturated.Seconds(), 100*r.Machine.Busy, r.Load, r.Watch)
}
