package upgrade_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"slipway.dev/slipway/upgrade"
	"slipway.dev/slipway/upgrade/bootstate"
	"slipway.dev/slipway/upgrade/layout"
)

// TestStatusShowsBootState: once the boot loader has abandoned a version,
// `ops status` says so in text and JSON; an unreadable record is reported,
// not fatal; no record means no boot section.
func TestStatusShowsBootState(t *testing.T) {
	e := newEnv(t)
	e.run(t, "v1", layout.Rootfs, layout.Kernel)
	st, err := upgrade.Status(upgrade.StatusOptions{SystemDir: e.sys})
	if err != nil || st.Boot != nil || st.BootError != "" {
		t.Fatalf("no record yet: boot %+v, error %q, %v", st.Boot, st.BootError, err)
	}

	rec := bootstate.State{
		Confirmed: bootstate.Versions{Rootfs: "v2", Kernel: "k2"},
		Abandoned: []bootstate.Abandoned{{
			Versions: bootstate.Versions{Rootfs: "v3", Kernel: "k3"}, Attempts: 1,
			Reason: "did not confirm", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		}},
	}
	if err := bootstate.Save(e.sys, rec); err != nil {
		t.Fatal(err)
	}
	st, err = upgrade.Status(upgrade.StatusOptions{SystemDir: e.sys})
	if err != nil || st.Boot == nil {
		t.Fatalf("status with a boot record: %+v %v", st, err)
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "abandoned rootfs v3") || !strings.Contains(text.String(), "did not confirm") {
		t.Fatalf("text does not name the abandoned version:\n%s", text.String())
	}
	js, _ := json.Marshal(st)
	var back struct {
		Boot struct {
			Abandoned []struct{ Rootfs string } `json:"abandoned"`
		} `json:"boot"`
	}
	if err := json.Unmarshal(js, &back); err != nil || len(back.Boot.Abandoned) != 1 || back.Boot.Abandoned[0].Rootfs != "v3" {
		t.Fatalf("JSON boot section: %s (%v)", js, err)
	}

	if err := os.WriteFile(bootstate.Path(e.sys), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err = upgrade.Status(upgrade.StatusOptions{SystemDir: e.sys})
	if err != nil || st.Boot != nil || !strings.Contains(st.BootError, "parse boot state") {
		t.Fatalf("corrupt record: boot %+v, error %q, %v", st.Boot, st.BootError, err)
	}
}
