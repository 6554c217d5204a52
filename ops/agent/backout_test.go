package agent

import (
	"slices"
	"strings"
	"testing"

	"slipway.dev/slipway/ops/plan"
	"slipway.dev/slipway/upgrade/layout"
)

// A rollback slot's Job rolls back exactly the components the failed wave
// made current, each only when its previous version is there; a node whose
// previous version is gone gets no Job, with why.
func TestPlanBackout(t *testing.T) {
	both := plan.Components{Rootfs: true, Kernel: true}
	withK3s := plan.Components{Rootfs: true, Kernel: true, K3s: true}
	onDisk := func(missing ...string) func(layout.Component, string) bool {
		return func(c layout.Component, v string) bool { return !slices.Contains(missing, string(c)+"/"+v) }
	}
	cases := []struct {
		name              string
		comps             plan.Components
		current, previous Versions
		missing           []string
		want              []layout.Component
		problem           string
	}{
		{"rootfs and kernel back", both, Versions{Rootfs: "v2", Kernel: "v2"}, Versions{Rootfs: "v1", Kernel: "v1"}, nil,
			[]layout.Component{layout.Rootfs, layout.Kernel}, ""},
		{"a kernel the wave kept stays", both, Versions{Rootfs: "v2", Kernel: "v1"}, Versions{Rootfs: "v1", Kernel: "v0"}, nil,
			[]layout.Component{layout.Rootfs}, ""},
		{"the kernel not moved by the channel stays", plan.Components{Rootfs: true}, Versions{Rootfs: "v2", Kernel: "v2"}, Versions{Rootfs: "v1", Kernel: "v1"}, nil,
			[]layout.Component{layout.Rootfs}, ""},
		{"k3s the wave's release brought goes back", withK3s, Versions{Rootfs: "v2", Kernel: "v2", K3s: "v1.31.2+k3s1"}, Versions{Rootfs: "v1", Kernel: "v1", K3s: "v1.30.1+k3s1"}, nil,
			[]layout.Component{layout.Rootfs, layout.Kernel, layout.K3s}, ""},
		{"k3s of another release stays", withK3s, Versions{Rootfs: "v2", Kernel: "v2", K3s: "v1.30.1+k3s1"}, Versions{Rootfs: "v1", Kernel: "v1", K3s: "v1.29.0+k3s1"}, nil,
			[]layout.Component{layout.Rootfs, layout.Kernel}, ""},
		{"no previous link", both, Versions{Rootfs: "v2", Kernel: "v2"}, Versions{Kernel: "v1"}, nil, nil, "no rootfs previous link"},
		{"previous names another version", both, Versions{Rootfs: "v2", Kernel: "v2"}, Versions{Rootfs: "v0", Kernel: "v1"}, nil, nil, "previous names v0, not v1"},
		{"previous folder gone", both, Versions{Rootfs: "v2", Kernel: "v2"}, Versions{Rootfs: "v1", Kernel: "v1"}, []string{"kernel/v1"}, nil, "kernel v1 is not on disk"},
		{"current is not the wave's", both, Versions{Rootfs: "v1", Kernel: "v1"}, Versions{Rootfs: "v0", Kernel: "v0"}, nil, nil, "not the failed wave's v2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			release := func(component, version string) string {
				if component == string(layout.K3s) && version == "v1.31.2+k3s1" {
					return "v2" // the k3s folder the wave's release brought
				}
				return ""
			}
			d := planBackout(c.comps, c.current, c.previous, "v2", "v1", onDisk(c.missing...), release)
			if !slices.Equal(d.Components, c.want) || !strings.Contains(d.Problem, c.problem) || (c.problem == "") != (d.Problem == "") {
				t.Errorf("planBackout = %+v, want components %v, problem %q", d, c.want, c.problem)
			}
			if d.Problem != "" && !strings.Contains(d.Problem, "gone") && !strings.Contains(d.Problem, "nothing of that wave") {
				t.Errorf("the problem does not say what is gone: %s", d.Problem)
			}
		})
	}
}
