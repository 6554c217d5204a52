package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
)

// ReasonTooLarge is the Converged condition's reason (and the Warning
// Event's) when the API server refuses a write of the assignment as too
// large: the workers' ConfigMap, or a worker's share on its pod.
const ReasonTooLarge = "TooLarge"

// tooLarge is a write of the config text refused as too large.
type tooLarge struct {
	text string
	err  error
	// record: the refused write is the workers' ConfigMap (the record),
	// not a share; jobs is how many jobs it assigns.
	record bool
	jobs   int
}

// RecordCeilingJobs is about how many jobs the record holds with realistic
// names of 45 characters (measured by TestRecordCeiling): the workers'
// ConfigMap holds the whole assignment gzip-compressed, under the API
// server's 1 MiB cap.
const RecordCeilingJobs = 74_000

// message says what was refused and what to do.
func (e *tooLarge) message() string {
	if e.record {
		return fmt.Sprintf("the API server refused the workers' ConfigMap, the record of the assignment of %d jobs, as too large (%v): "+
			"no worker is given a new share until it fits; a ConfigMap holds about %d jobs of 45 characters: "+
			"split the jobs over more than one Swarm or shorten the job names", e.jobs, e.err, RecordCeilingJobs)
	}
	return fmt.Sprintf("the API server refused the assignment as too large: %v: add workers (smaller shares) or shorten the job names", e.err)
}

func (e *tooLarge) Error() string { return e.err.Error() }
func (e *tooLarge) Unwrap() error { return e.err }

// isTooLarge tells whether the API server refused a write for its size: a
// request too large, or a field (a ConfigMap's data, a pod's annotations)
// over its limit.
func isTooLarge(err error) bool {
	if err == nil {
		return false
	}
	if apierrors.IsRequestEntityTooLargeError(err) {
		return true
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Type == metav1.CauseTypeTooLong {
			return true
		}
	}
	return false
}

// markTooLarge records a refused write: Converged=False TooLarge and a
// Warning Event when new. The sync is not retried: the config in force stays
// (the handover waits on the workers' reports, so a share that could not be
// written runs nowhere new), and the next change of the spec or the pool is
// tried again.
func (c *Controller) markTooLarge(ctx context.Context, sw *swarmv1.Swarm, big *tooLarge) error {
	st := sw.Status.DeepCopy()
	st.ObservedGeneration = sw.Generation
	cond := metav1.Condition{Type: swarmv1.ConditionConverged, Status: metav1.ConditionFalse, Reason: ReasonTooLarge,
		ObservedGeneration: sw.Generation,
		Message:            big.message()}
	old := meta.FindStatusCondition(sw.Status.Conditions, swarmv1.ConditionConverged)
	if old == nil || old.Reason != cond.Reason || old.Message != cond.Message {
		c.recorder.Event(sw, corev1.EventTypeWarning, ReasonTooLarge, cond.Message)
		c.log.Warn("assignment too large to write", "swarm", sw.Name, "err", big.err)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	c.metrics.converged.WithLabelValues(sw.Name).Set(0)
	return c.updateStatus(ctx, sw, st)
}
