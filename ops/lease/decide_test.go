package lease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lease := func(holder *string, seconds *int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: holder, LeaseDurationSeconds: seconds}}
	}
	fifteen := ptr(int32(15))
	cases := []struct {
		name     string
		lease    *coordinationv1.Lease
		now      time.Time // observed at t0
		fallback time.Duration
		want     Action
	}{
		{"never held", lease(nil, nil), t0, 15 * time.Second, Take},
		{"released (holder cleared)", lease(ptr(""), ptr(int32(1))), t0, 15 * time.Second, Take},
		{"mine: renew", lease(ptr("me"), fifteen), t0, 15 * time.Second, Renew},
		{"mine, even when expired: renew", lease(ptr("me"), fifteen), t0.Add(time.Hour), 15 * time.Second, Renew},
		{"another's, just read", lease(ptr("other"), fifteen), t0, 15 * time.Second, Wait},
		{"another's, at its expiry", lease(ptr("other"), fifteen), t0.Add(15 * time.Second), 15 * time.Second, Wait},
		{"another's, past its expiry", lease(ptr("other"), fifteen), t0.Add(15*time.Second + time.Millisecond), 15 * time.Second, Take},
		{"another's duration wins over mine", lease(ptr("other"), ptr(int32(60))), t0.Add(30 * time.Second), 15 * time.Second, Wait},
		{"no duration: mine is assumed", lease(ptr("other"), nil), t0.Add(16 * time.Second), 15 * time.Second, Take},
		{"no duration, not yet expired", lease(ptr("other"), nil), t0.Add(14 * time.Second), 15 * time.Second, Wait},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Decide(c.now, c.lease, "me", t0, c.fallback); got != c.want {
				t.Errorf("Decide = %s, want %s", got, c.want)
			}
		})
	}
}

func TestWrites(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	old := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("other"), LeaseTransitions: ptr(int32(4))}}
	got := taken(old, "me", 1500*time.Millisecond, t0)
	if *got.Spec.HolderIdentity != "me" || *got.Spec.LeaseTransitions != 5 || *got.Spec.LeaseDurationSeconds != 2 ||
		!got.Spec.AcquireTime.Time.Equal(t0) || !got.Spec.RenewTime.Time.Equal(t0) {
		t.Errorf("taken = %+v", got.Spec)
	}
	if *old.Spec.HolderIdentity != "other" {
		t.Error("taken changed the Lease it was given")
	}
	later := renewed(got, 1500*time.Millisecond, t0.Add(time.Second))
	if *later.Spec.LeaseTransitions != 5 || !later.Spec.AcquireTime.Time.Equal(t0) || !later.Spec.RenewTime.Time.Equal(t0.Add(time.Second)) {
		t.Errorf("renewed = %+v", later.Spec)
	}
	gone := released(later, t0.Add(2*time.Second))
	if *gone.Spec.HolderIdentity != "" || *gone.Spec.LeaseTransitions != 5 || *gone.Spec.LeaseDurationSeconds != 1 {
		t.Errorf("released = %+v", gone.Spec)
	}
}
