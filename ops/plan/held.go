package plan

import (
	"strings"
	"time"
)

// Held is a node slipway holds cordoned for a slot of Channel, since the
// drain that cordoned it began.
type Held struct {
	Channel, Node string
	Since         time.Time
}

// HeldCordons are the nodes the controller of namespace holds cordoned
// (owner) for one of its channels, with when that cordon began (the drain's
// recorded start, drain.slipway.dev/drain-started, written with the cordon):
// what slipway_channel_node_cordoned_since_timestamp_seconds reports, slot
// or no slot (a cordon that outlives its slot is the one to alert on). Not
// counted: another owner's cordon, another namespace's, a cordon with no
// channel (an older agent's, which that agent lifts itself) and one with
// no readable start.
func HeldCordons(nodes []Cordon, owner, namespace string) []Held {
	var out []Held
	for _, n := range nodes {
		ns, channel, ok := strings.Cut(n.For, "/")
		if n.Owner != owner || ns != namespace || !ok || channel == "" {
			continue
		}
		since, err := time.Parse(time.RFC3339Nano, n.Since)
		if err != nil {
			continue
		}
		out = append(out, Held{Channel: channel, Node: n.Node, Since: since})
	}
	return out
}
