package benchside

import (
	"testing"
	"time"
)

func TestFloor(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		name  string
		shape Shape
		want  time.Duration
	}{
		{"the staged shape: the first staging, then ten waves of reboots", Shape{Nodes: 100, Concurrency: 10, Stage: 30 * s, StageAtOnce: 25, Slot: 20 * s}, 230 * s},
		{"no host time: nothing bounds it but the software", Shape{Nodes: 100, Concurrency: 10}, 0},
		{"slot-bound staging: every slot stages too", Shape{Nodes: 100, Concurrency: 10, Stage: 30 * s, Slot: 20 * s}, 500 * s},
		{"staging slower than the slots: the last wave waits for its stage", Shape{Nodes: 40, Concurrency: 10, Stage: 30 * s, StageAtOnce: 10, Slot: 5 * s}, 125 * s},
		{"a last wave that is not full", Shape{Nodes: 25, Concurrency: 10, Slot: 20 * s}, 60 * s},
		{"fewer nodes than slots", Shape{Nodes: 3, Concurrency: 10, Stage: 30 * s, StageAtOnce: 20, Slot: 20 * s}, 50 * s},
		{"no nodes", Shape{Concurrency: 10, Slot: s}, 0},
		{"no concurrency", Shape{Nodes: 10, Slot: s}, 0},
	} {
		if got := Floor(c.shape); got != c.want {
			t.Errorf("%s: Floor(%+v) = %s, want %s", c.name, c.shape, got, c.want)
		}
	}
}
