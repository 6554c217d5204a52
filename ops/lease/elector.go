package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"slipway.dev/slipway/ops/internal/wallclock"
)

// Client reads and writes the Leases of one namespace.
type Client interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// Config is one candidacy for one Lease.
type Config struct {
	Client   Client
	Name     string // the Lease's name in Client's namespace
	Identity string // this candidate's holderIdentity
	// Duration is how long the holder may go without renewing before
	// another candidate takes the Lease (its leaseDurationSeconds).
	Duration time.Duration
	// RenewDeadline is how long the holder keeps trying to renew before it
	// gives the Lease up; shorter than Duration, so it stops leading before
	// anyone else may start.
	RenewDeadline time.Duration
	// RetryPeriod is the wait between tries to take or renew the Lease.
	RetryPeriod time.Duration
	// OnStartedLeading and OnStoppedLeading are called, quickly, when this
	// candidate takes the Lease and when it stops holding it.
	OnStartedLeading func()
	OnStoppedLeading func()
	// Tenure, when set, is kept up to date with every take and renewal, so
	// the holder can fence its writes (see Tenure).
	Tenure *Tenure
	Log    *slog.Logger // default slog.Default()
}

func (c Config) validate() error {
	switch {
	case c.Client == nil || c.Name == "" || c.Identity == "":
		return errors.New("lease: Client, Name and Identity are required")
	case c.RetryPeriod <= 0 || c.RenewDeadline <= c.RetryPeriod || c.Duration <= c.RenewDeadline:
		return fmt.Errorf("lease: need 0 < RetryPeriod (%s) < RenewDeadline (%s) < Duration (%s)", c.RetryPeriod, c.RenewDeadline, c.Duration)
	case c.OnStartedLeading == nil || c.OnStoppedLeading == nil:
		return errors.New("lease: OnStartedLeading and OnStoppedLeading are required")
	}
	return nil
}

// Run competes for the Lease until ctx ends: it takes the Lease when it may,
// renews it while it holds it, competes again when it loses it, and
// releases it (clears the holder, so another candidate takes over at once)
// when ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	e := &elector{cfg: cfg, log: cfg.Log.With("lease", cfg.Name, "identity", cfg.Identity)}
	for e.acquire(ctx) {
		cfg.OnStartedLeading()
		e.hold(ctx)
		cfg.Tenure.lost()
		cfg.OnStoppedLeading()
		if ctx.Err() != nil {
			e.release(context.WithoutCancel(ctx))
			break
		}
	}
	return nil
}

// elector is the state of one Run.
type elector struct {
	cfg Config
	log *slog.Logger
	// observedVersion is the Lease's resourceVersion when last read, and
	// observedAt the time this candidate first read that version.
	observedVersion string
	observedAt      time.Time
}

// acquire tries to take or renew the Lease every RetryPeriod (jittered)
// until it holds it (true) or ctx ends (false).
func (e *elector) acquire(ctx context.Context) bool {
	for {
		held, err := e.try(ctx)
		if held {
			return true
		}
		if err != nil && ctx.Err() == nil {
			e.log.Debug("cannot take the lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait.Jitter(e.cfg.RetryPeriod, 1.2)):
		}
	}
}

// hold renews the Lease every RetryPeriod until ctx ends, another
// candidate holds it, or no renewal succeeded for RenewDeadline.
func (e *elector) hold(ctx context.Context) {
	renewed := time.Now()
	tick := time.NewTicker(e.cfg.RetryPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		deadline := renewed.Add(e.cfg.RenewDeadline)
		tryCtx, cancel := context.WithDeadline(ctx, deadline)
		held, err := e.try(tryCtx)
		cancel()
		switch {
		case held:
			renewed = time.Now()
		case ctx.Err() != nil:
			return
		case err == nil:
			e.log.Info("another candidate holds the lease")
			return
		case !time.Now().Before(deadline):
			e.log.Warn("could not renew the lease in time; giving it up", "renewDeadline", e.cfg.RenewDeadline, "err", err)
			return
		}
	}
}

// try reads the Lease and takes or renews it when Decide says so. It
// reports whether this candidate holds the Lease now.
//
// now, a time.Now reading, times the Lease locally (its expiry from when
// this candidate saw it change, its tenure) on the monotonic clock; only
// the times written to the Lease are read from the process's wall clock
// (wallclock.At), which a clock step moves.
func (e *elector) try(ctx context.Context) (bool, error) {
	now := time.Now()
	l, err := e.cfg.Client.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return e.create(ctx, now)
	}
	if err != nil {
		return false, fmt.Errorf("read lease %s: %w", e.cfg.Name, err)
	}
	e.observe(l, now)
	var next *coordinationv1.Lease
	switch Decide(now, l, e.cfg.Identity, e.observedAt, e.cfg.Duration) {
	case Wait:
		return false, nil
	case Take:
		next = taken(l, e.cfg.Identity, e.cfg.Duration, wallclock.At(now))
	case Renew:
		next = renewed(l, e.cfg.Duration, wallclock.At(now))
	}
	written, err := e.cfg.Client.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return false, fmt.Errorf("write lease %s: %w", e.cfg.Name, err)
	}
	e.observe(written, now)
	e.cfg.Tenure.renewed(now, e.cfg.RenewDeadline)
	return true, nil
}

func (e *elector) create(ctx context.Context, now time.Time) (bool, error) {
	l := taken(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name}}, e.cfg.Identity, e.cfg.Duration, wallclock.At(now))
	l.Spec.LeaseTransitions = ptr(int32(0))
	written, err := e.cfg.Client.Create(ctx, l, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("create lease %s: %w", e.cfg.Name, err)
	}
	e.observe(written, now)
	e.cfg.Tenure.renewed(now, e.cfg.RenewDeadline)
	return true, nil
}

func (e *elector) observe(l *coordinationv1.Lease, now time.Time) {
	if l.ResourceVersion != e.observedVersion {
		e.observedVersion, e.observedAt = l.ResourceVersion, now
	}
}

// release clears the holder of a Lease this candidate holds, so the next
// candidate need not wait for it to expire.
func (e *elector) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	l, err := e.cfg.Client.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	if err != nil {
		e.log.Warn("cannot release the lease; it expires by itself", "err", err)
		return
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.cfg.Identity {
		return
	}
	if _, err := e.cfg.Client.Update(ctx, released(l, wallclock.Now()), metav1.UpdateOptions{}); err != nil {
		e.log.Warn("cannot release the lease; it expires by itself", "err", err)
	}
}

// taken is l held by me from now on, one more transition.
func taken(l *coordinationv1.Lease, me string, d time.Duration, now time.Time) *coordinationv1.Lease {
	next := renewed(l, d, now)
	next.Spec.HolderIdentity = ptr(me)
	next.Spec.AcquireTime = next.Spec.RenewTime.DeepCopy()
	next.Spec.LeaseTransitions = ptr(transitions(l) + 1)
	return next
}

// renewed is l renewed at now.
func renewed(l *coordinationv1.Lease, d time.Duration, now time.Time) *coordinationv1.Lease {
	next := l.DeepCopy()
	t := metav1.NewMicroTime(now)
	next.Spec.RenewTime = &t
	next.Spec.LeaseDurationSeconds = ptr(seconds(d))
	return next
}

// released is l with no holder, as client-go's ReleaseOnCancel leaves it.
func released(l *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	next := renewed(l, time.Second, now)
	next.Spec.HolderIdentity = ptr("")
	next.Spec.AcquireTime = next.Spec.RenewTime.DeepCopy()
	return next
}

func transitions(l *coordinationv1.Lease) int32 {
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// seconds is d in whole seconds, rounded up, at least 1.
func seconds(d time.Duration) int32 {
	return int32(max(1, (d+time.Second-1)/time.Second))
}

func ptr[T any](v T) *T { return &v }
