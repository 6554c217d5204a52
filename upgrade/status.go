package upgrade

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"slipway.dev/slipway/upgrade/bootstate"
	"slipway.dev/slipway/upgrade/layout"
)

// StatusOptions of Status.
type StatusOptions struct {
	SystemDir  string
	Components []layout.Component // default all
}

// ComponentStatus is the state of one component.
type ComponentStatus struct {
	Component layout.Component `json:"component"`
	Current   string           `json:"current"`
	Previous  string           `json:"previous"`
	Release   string           `json:"release,omitempty"` // release that installed current, when slipway did
	Installed []string         `json:"installed"`         // version folders present
}

// StatusReport is what Status returns.
type StatusReport struct {
	SystemDir  string            `json:"systemDir"`
	Components []ComponentStatus `json:"components"`
	// Boot is the try-once boot record (confirmed, tentative and abandoned
	// versions), present once the boot loader or `ops confirm` wrote one.
	Boot *bootstate.State `json:"boot,omitempty"`
	// BootError says why an existing boot record could not be read.
	BootError string `json:"bootError,omitempty"`
}

// Status reads current and previous of each component. It takes no lock and
// changes nothing.
func Status(o StatusOptions) (*StatusReport, error) {
	if o.SystemDir == "" {
		o.SystemDir = DefaultSystemDir
	}
	if len(o.Components) == 0 {
		o.Components = layout.Components
	}
	if _, err := os.Stat(o.SystemDir); err != nil {
		return nil, fmt.Errorf("system directory: %w (pass --system-dir)", err)
	}
	l := layout.New(o.SystemDir)
	rep := &StatusReport{SystemDir: o.SystemDir}
	for _, c := range o.Components {
		cs := ComponentStatus{Component: c, Installed: []string{}}
		var err error
		if cs.Current, err = l.Current(c); err != nil {
			return nil, err
		}
		if cs.Previous, err = l.Previous(c); err != nil {
			return nil, err
		}
		if m := readMarker(l.VersionDir(c, cs.Current)); cs.Current != "" && m != nil {
			cs.Release = m.Release
		}
		ents, _ := os.ReadDir(l.Dir(c))
		for _, e := range ents {
			if e.IsDir() && layout.ValidVersion(e.Name()) == nil {
				cs.Installed = append(cs.Installed, e.Name())
			}
		}
		sort.Strings(cs.Installed)
		rep.Components = append(rep.Components, cs)
	}
	rep.Boot, rep.BootError = readBootState(o.SystemDir)
	return rep, nil
}

// readBootState loads the boot record of systemDir: nil when there is none,
// and an error message rather than a failed status when it is unreadable.
func readBootState(systemDir string) (*bootstate.State, string) {
	if _, err := os.Stat(bootstate.Path(systemDir)); err != nil {
		return nil, ""
	}
	st, err := bootstate.Load(systemDir)
	if err != nil {
		return nil, err.Error()
	}
	return &st, ""
}

// WriteText prints the report as a table.
func (r *StatusReport) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "system directory: %s\n", r.SystemDir)
	fmt.Fprintln(tw, "COMPONENT\tCURRENT\tPREVIOUS\tINSTALLED")
	for _, c := range r.Components {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Component, dash(c.Current), dash(c.Previous), dash(strings.Join(c.Installed, ",")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case r.Boot != nil:
		_, err := fmt.Fprintln(w, r.Boot.Summary())
		return err
	case r.BootError != "":
		_, err := fmt.Fprintf(w, "boot: %s\n", r.BootError)
		return err
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
