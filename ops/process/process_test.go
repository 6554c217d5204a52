package process

import (
	"testing"
	"time"
)

// TestWatchTimeout: a watch asks the reflector's timeout unless told to
// last longer, then watchFor to twice that.
func TestWatchTimeout(t *testing.T) {
	asked := int64(420)
	for _, c := range []struct {
		name     string
		asked    *int64
		watchFor time.Duration
		r        float64
		want     *int64
	}{
		{"client-go's", &asked, 0, 0.5, &asked},
		{"client-go's, none asked", nil, 0, 0.5, nil},
		{"the shortest", &asked, 30 * time.Minute, 0, new(int64(1800))},
		{"half way", &asked, 30 * time.Minute, 0.5, new(int64(2700))},
		{"none asked", nil, 30 * time.Minute, 0.99, new(int64(3582))},
	} {
		got := watchTimeout(c.asked, c.watchFor, c.r)
		switch {
		case got == nil || c.want == nil:
			if got != c.want {
				t.Errorf("%s: got %v, want %v", c.name, got, c.want)
			}
		case *got != *c.want:
			t.Errorf("%s: got %d s, want %d s", c.name, *got, *c.want)
		}
	}
}
