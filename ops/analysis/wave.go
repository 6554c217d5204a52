package analysis

import (
	"fmt"
	"strings"
	"time"
)

// WaveJudgement is what a rollout does with one result of its analysis,
// given the wave it judges (the nodes finished since the analysis last
// passed) and that wave's bake.
type WaveJudgement struct {
	// Hold, when set, is why no new node starts (no slot is granted).
	Hold string
	// FailWave: record the wave as failed (the rollout halts);
	// PassWave: the wave passed its analysis (it is forgotten).
	FailWave, PassWave bool
}

// JudgeWave decides from the wave, the end of its bake and the analysis's
// result r; bakeSetting names the setting of the bake in the hold's
// message (--bake-time, spec.analysis.bakeTime). Pure.
//   - Fail with a wave to blame fails the wave; with none (no node of
//     this rollout updated yet) the failure is not the release's: it holds.
//   - Hold (cannot be evaluated, alerts) holds, never passes.
//   - Pass while the wave bakes holds until the bake ends; a Pass at or
//     after its end passes the wave.
func JudgeWave(wave []string, bakeUntil time.Time, r Result, now time.Time, bakeSetting string) WaveJudgement {
	switch r.Verdict {
	case Fail:
		if len(wave) > 0 {
			return WaveJudgement{FailWave: true, Hold: "analysis failed: " + r.Reason()}
		}
		return WaveJudgement{Hold: "analysis fails before any node of this rollout was updated (no wave to blame, so not the release's): " + r.Reason()}
	case Pass:
		if now.Before(bakeUntil) {
			return WaveJudgement{Hold: fmt.Sprintf("baking %s until %s (%s)", strings.Join(wave, ", "), bakeUntil.Format(time.RFC3339), bakeSetting)}
		}
		return WaveJudgement{PassWave: len(wave) > 0}
	}
	return WaveJudgement{Hold: "analysis cannot be judged, holding: " + r.Reason()}
}

// FreshAfter is the earliest evaluation time a judgement may use: one
// within interval of now, and none made before the bake (ending at
// bakeUntil, zero for none) ended once it has.
func FreshAfter(bakeUntil time.Time, interval time.Duration, now time.Time) time.Time {
	t := now.Add(-interval)
	if !bakeUntil.IsZero() && !now.Before(bakeUntil) && bakeUntil.After(t) {
		t = bakeUntil
	}
	return t
}
