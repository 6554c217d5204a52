package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/kube"
)

// startEvents starts the recorder of the agent's Events (about its
// channels, in its namespace) and returns the function that stops it.
func (a *Agent) startEvents() (stop func(), err error) {
	scheme := runtime.NewScheme()
	if err := kube.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build the events' scheme: %w", err)
	}
	if err := v1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build the events' scheme: %w", err)
	}
	b := record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{BurstSize: 100, QPS: 1})
	b.StartRecordingToSink(eventSink{a.kube.CoreV1().Events(a.opts.Namespace)})
	a.recorder = b.NewRecorder(scheme, corev1.EventSource{Component: "slipway-agent", Host: a.opts.NodeName})
	return b.Shutdown, nil
}

// eventSink writes the recorder's Events through the client of one
// namespace's Events, as client-go's EventSinkImpl does.
type eventSink struct {
	events *kube.Client[*corev1.Event, *corev1.EventList]
}

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	if err := s.check(e); err != nil {
		return nil, err
	}
	return s.events.Create(context.Background(), e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	if err := s.check(e); err != nil {
		return nil, err
	}
	return s.events.Update(context.Background(), e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	if err := s.check(e); err != nil {
		return nil, err
	}
	return s.events.Patch(context.Background(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}

// check refuses an Event of another namespace than the client's.
func (s eventSink) check(e *corev1.Event) error {
	if e.Namespace != s.events.GetNamespace() {
		return fmt.Errorf("event %s is in namespace %q, the recorder writes to %q", e.Name, e.Namespace, s.events.GetNamespace())
	}
	return nil
}
