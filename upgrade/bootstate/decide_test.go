package bootstate

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v1 := Versions{"v1", "k1"}
	v2 := Versions{"v2", "k2"}
	v3 := Versions{"v3", "k3"}
	mixed := Versions{"v2", "k1"} // rootfs upgraded, kernel kept
	absent := func(v string) func(bool, string) bool {
		return func(_ bool, x string) bool { return x != v }
	}
	tests := []struct {
		name         string
		in           Input
		action       Action
		boot         Versions
		relink       bool
		attempts     int // tentative attempts after; 0 = no tentative
		abandoned    int
		tentativeFor Versions
	}{
		{name: "confirmed boots", in: Input{State: State{Confirmed: v2}, Current: v2, Previous: v1},
			action: Boot, boot: v2},
		{name: "fresh install, nothing to fall back to", in: Input{Current: v1},
			action: Boot, boot: v1},
		{name: "fresh record, previous present: tentative", in: Input{Current: v2, Previous: v1},
			action: Try, boot: v2, attempts: 1, tentativeFor: v2},
		{name: "first try of upgrade", in: Input{State: State{Confirmed: v1}, Current: v2, Previous: v1},
			action: Try, boot: v2, attempts: 1, tentativeFor: v2},
		{name: "second try allowed by max 2", in: Input{State: State{Confirmed: v1, Tentative: &Tentative{Versions: v2, Attempts: 1}},
			Current: v2, Previous: v1, MaxAttempts: 2}, action: Try, boot: v2, attempts: 2, tentativeFor: v2},
		{name: "attempts used up: fall back to confirmed", in: Input{State: State{Confirmed: v2, Tentative: &Tentative{Versions: v3, Attempts: 1}},
			Current: v3, Previous: v2, MaxAttempts: 1}, action: FallBack, boot: v2, relink: true, abandoned: 1},
		{name: "tentative record of another version restarts count", in: Input{State: State{Confirmed: v1, Tentative: &Tentative{Versions: v2, Attempts: 5}},
			Current: v3, Previous: v2, MaxAttempts: 1}, action: Try, boot: v3, attempts: 1, tentativeFor: v3},
		{name: "fall back prefers confirmed over unconfirmed previous", in: Input{State: State{Confirmed: v1, Tentative: &Tentative{Versions: v3, Attempts: 1}},
			Current: v3, Previous: v2}, action: FallBack, boot: v1, relink: true, abandoned: 1},
		{name: "confirmed folder gone: fall back to previous, tentatively", in: Input{State: State{Confirmed: v1, Tentative: &Tentative{Versions: v3, Attempts: 1}},
			Current: v3, Previous: v2, Present: absent("v1")}, action: FallBack, boot: Versions{"v2", "k1"}, relink: true, abandoned: 1, attempts: 1, tentativeFor: Versions{"v2", "k1"}},
		{name: "only rootfs changed: kernel stays", in: Input{State: State{Confirmed: v1, Tentative: &Tentative{Versions: mixed, Attempts: 1}},
			Current: mixed, Previous: Versions{"v1", ""}}, action: FallBack, boot: v1, relink: true, abandoned: 1},
		{name: "fallback target already abandoned: boot current", in: Input{State: State{Abandoned: []Abandoned{{Versions: v1}}, Tentative: &Tentative{Versions: v2, Attempts: 1}},
			Current: v2, Previous: v1}, action: Boot, boot: v2, abandoned: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.Now = now
			d := Decide(tt.in)
			if d.Action != tt.action || d.Boot != tt.boot || d.Relink != tt.relink {
				t.Fatalf("Decide = %s %v relink=%v (%s); want %s %v relink=%v", d.Action, d.Boot, d.Relink, d.Reason, tt.action, tt.boot, tt.relink)
			}
			if got := len(d.State.Abandoned); got != tt.abandoned {
				t.Fatalf("abandoned = %d, want %d", got, tt.abandoned)
			}
			switch {
			case tt.attempts == 0 && d.State.Tentative != nil:
				t.Fatalf("tentative = %+v, want none", *d.State.Tentative)
			case tt.attempts > 0 && (d.State.Tentative == nil || d.State.Tentative.Attempts != tt.attempts || d.State.Tentative.Versions != tt.tentativeFor):
				t.Fatalf("tentative = %+v, want %v with %d attempts", d.State.Tentative, tt.tentativeFor, tt.attempts)
			}
			if d.Action == FallBack {
				a, _ := d.State.LastAbandoned()
				if a.Versions != tt.in.Current || a.FellBackTo != d.Boot || a.Reason == "" {
					t.Fatalf("abandoned record = %+v", a)
				}
			}
		})
	}
}

func TestConfirmEndsTentative(t *testing.T) {
	s := State{Confirmed: Versions{"v1", "k1"}, Tentative: &Tentative{Versions: Versions{"v2", "k2"}, Attempts: 1}}
	s = Confirm(s, Versions{"v2", "k2"}, time.Unix(10, 0))
	if s.Tentative != nil || s.Confirmed != (Versions{"v2", "k2"}) {
		t.Fatalf("after Confirm: %+v", s)
	}
	d := Decide(Input{State: s, Current: Versions{"v2", "k2"}, Previous: Versions{"v1", "k1"}})
	if d.Action != Boot {
		t.Fatalf("confirmed version: action %s, want boot", d.Action)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if s, err := Load(dir); err != nil || s.Tentative != nil || !s.Confirmed.IsZero() {
		t.Fatalf("Load of missing record = %+v, %v", s, err)
	}
	want := State{Confirmed: Versions{"v2", "k2"}, Abandoned: []Abandoned{{Versions: Versions{"v3", "k3"}, Attempts: 1, Reason: "r", At: time.Unix(5, 0).UTC()}}}
	if err := Save(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Summary() != want.Summary() || len(got.Abandoned) != 1 {
		t.Fatalf("round trip: got %s, want %s", got.Summary(), want.Summary())
	}
}
