package eds

import (
	"slices"
	"testing"
	"time"
)

// TestJudgeCountsOnlyWhatTheControllerDid: the chaos sample's arithmetic,
// node by node (no cluster).
func TestJudgeCountsOnlyWhatTheControllerDid(t *testing.T) {
	up := nodeView{Available: true, Live: []string{"p"}, Images: []string{"v2"}}
	old := nodeView{Available: true, Live: []string{"q"}, Images: []string{"v1"}}
	gone := nodeView{}
	deleting := nodeView{Deleting: 1}
	notReady := nodeView{Live: []string{"r"}, Images: []string{"v1"}}
	done := disruption{what: "delete", done: time.Now()}
	cases := []struct {
		name      string
		views     map[string]nodeView
		marks     map[string]disruption
		down      []string
		disrupted int
		recovered []string
		doubled   []string
		overlap   []string
		images    []string
	}{
		{"all up", map[string]nodeView{"a": up, "b": up}, nil, nil, 0, nil, nil, nil, []string{"v2"}},
		{"rolling: two down by the controller", map[string]nodeView{"a": gone, "b": deleting, "c": old}, nil,
			[]string{"a", "b"}, 0, nil, nil, nil, []string{"v1"}},
		{"a not-ready pod counts unless the test made it so", map[string]nodeView{"a": notReady, "b": notReady}, map[string]disruption{"b": done},
			[]string{"a"}, 1, nil, nil, nil, []string{"v1"}},
		{"a disruption still under way counts for the test", map[string]nodeView{"a": gone}, map[string]disruption{"a": {what: "delete"}},
			nil, 1, nil, nil, nil, nil},
		{"a disrupted node available again is recovered", map[string]nodeView{"a": up}, map[string]disruption{"a": done},
			nil, 0, []string{"a"}, nil, nil, []string{"v2"}},
		{"two live pods on a node", map[string]nodeView{"a": {Available: true, Live: []string{"p", "q"}, Images: []string{"v1", "v2"}}}, nil,
			nil, 0, nil, []string{"a"}, nil, []string{"v1", "v2"}},
		{"a new pod beside a deleting one", map[string]nodeView{"a": {Live: []string{"p"}, Deleting: 1, Images: []string{"v2"}}}, nil,
			[]string{"a"}, 0, nil, nil, []string{"a"}, []string{"v2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := judge(c.views, c.marks)
			if !slices.Equal(j.Down, c.down) || j.Disrupted != c.disrupted || !slices.Equal(j.Recovered, c.recovered) ||
				!slices.Equal(j.Doubled, c.doubled) || !slices.Equal(j.Overlapping, c.overlap) || !slices.Equal(j.Images, c.images) {
				t.Errorf("judge = %+v", j)
			}
		})
	}
}

func TestDisruptionsClearOnlyAfterTheAct(t *testing.T) {
	d := newDisruptions()
	d.begin("a", "delete")
	d.recovered("a", time.Now().Add(time.Hour))
	if _, ok := d.snapshot(time.Now(), 0)["a"]; !ok {
		t.Fatal("a disruption under way was cleared")
	}
	before := time.Now()
	time.Sleep(time.Millisecond)
	d.end("a")
	d.recovered("a", before)
	if _, ok := d.snapshot(time.Now(), 0)["a"]; !ok {
		t.Fatal("cleared by a list older than the act's end")
	}
	d.recovered("a", time.Now().Add(time.Millisecond))
	if _, ok := d.snapshot(time.Now(), 0)["a"]; ok {
		t.Fatal("not cleared by a list after the act")
	}
}
