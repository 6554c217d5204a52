package updateoperator

import "time"

// preparedAhead: n was told to prepare ahead of its turn and has done so;
// Starts gives it perform-update when a slot frees.
func preparedAhead(n NodeView) bool {
	return n.Ahead && n.Wanted == IntentPrepare && n.Active == IntentPrepare && n.State == StateReady
}

// PrepareAhead decides which candidates prepare-update ahead of their turn
// (with Policy.PrepareAhead): prepare is not disruptive (the host
// downloads and verifies; nothing switches, nothing is drained), so while
// the current nodes update, the next ones get ready, and each then takes
// its slot at perform-update. At most MaxConcurrent nodes are ahead at
// once, in the order Starts would take them; never the controller's own
// node, never outside the window, never a node in Starts' started list.
func PrepareAhead(nodes []NodeView, p Policy, f Fleet, now time.Time, started []string) []string {
	if !p.PrepareAhead || p.Window != nil && !p.Window.Contains(now) || f.AnalysisFailed != nil {
		return nil
	}
	taken := map[string]bool{}
	for _, s := range started {
		taken[s] = true
	}
	ahead := 0
	for _, n := range nodes {
		if n.Ahead && n.Wanted == IntentPrepare && !taken[n.Name] {
			ahead++
		}
	}
	var out []string
	for _, n := range candidates(nodes, p, f, now) {
		if ahead+len(out) >= max(p.MaxConcurrent, 1) {
			break
		}
		if n.Own || taken[n.Name] || n.Ahead {
			continue
		}
		out = append(out, n.Name)
	}
	return out
}
