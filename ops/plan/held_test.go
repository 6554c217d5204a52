package plan

import (
	"reflect"
	"testing"
	"time"
)

func TestHeldCordons(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	start := at.Format(time.RFC3339Nano)
	for _, c := range []struct {
		name string
		node Cordon
		want []Held
	}{
		{"cordoned for a channel of ours", Cordon{Node: "n", Owner: "slipway-agent", For: "ns/default", Since: start},
			[]Held{{Channel: "default", Node: "n", Since: at}}},
		{"someone else's cordon", Cordon{Node: "n", Owner: "kubectl", For: "ns/default", Since: start}, nil},
		{"no owner: not cordoned by anyone we know", Cordon{Node: "n", For: "ns/default", Since: start}, nil},
		{"another installation's namespace", Cordon{Node: "n", Owner: "slipway-agent", For: "other/default", Since: start}, nil},
		{"an older agent's cordon: no channel", Cordon{Node: "n", Owner: "slipway-agent", Since: start}, nil},
		{"a namespace and no channel", Cordon{Node: "n", Owner: "slipway-agent", For: "ns/", Since: start}, nil},
		{"no slash", Cordon{Node: "n", Owner: "slipway-agent", For: "ns", Since: start}, nil},
		{"no start", Cordon{Node: "n", Owner: "slipway-agent", For: "ns/default"}, nil},
		{"a start that is no time", Cordon{Node: "n", Owner: "slipway-agent", For: "ns/default", Since: "yesterday"}, nil},
		{"a start without fractions", Cordon{Node: "n", Owner: "slipway-agent", For: "ns/c", Since: "2026-01-02T03:04:05Z"},
			[]Held{{Channel: "c", Node: "n", Since: at.Truncate(time.Second)}}},
	} {
		got := HeldCordons([]Cordon{c.node}, "slipway-agent", "ns")
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: held %v, want %v", c.name, got, c.want)
		}
	}
}
