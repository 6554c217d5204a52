package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// Recorder is what a controller needs to write Events: who writes them and
// about which kinds.
type Recorder struct {
	// Namespace the Events are written in; Events of other namespaces are
	// refused (least privilege: the writer may create Events only there).
	// Empty: each Event goes to the namespace of the object it is about
	// (a controller of every namespace).
	Namespace string
	// Component and Host name the writer (the Event's source).
	Component, Host string
	// AddToScheme registers the writer's own kinds, so Events can name them.
	AddToScheme []func(*runtime.Scheme) error
	// QPS is how many similar Events a second pass the correlator after a
	// burst of 100 (default 1).
	QPS float32
}

// Start starts an event recorder writing through c, with client-go's
// correlator (similar Events aggregated, a burst of 100 then one a second),
// and returns it with the function that stops it.
func (r Recorder) Start(c *Clientset) (record.EventRecorder, func(), error) {
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{AddToScheme}, r.AddToScheme...) {
		if err := add(scheme); err != nil {
			return nil, nil, fmt.Errorf("build the events' scheme: %w", err)
		}
	}
	qps := r.QPS
	if qps <= 0 {
		qps = 1
	}
	b := record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{BurstSize: 100, QPS: qps})
	b.StartRecordingToSink(eventSink{c: c, namespace: r.Namespace})
	rec := b.NewRecorder(scheme, corev1.EventSource{Component: r.Component, Host: r.Host})
	return rec, b.Shutdown, nil
}

// eventSink writes the recorder's Events through the typed client, as
// client-go's EventSinkImpl does.
type eventSink struct {
	c         *Clientset
	namespace string // "" = the Event's own
}

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	events, err := s.events(e)
	if err != nil {
		return nil, err
	}
	return events.Create(context.Background(), e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	events, err := s.events(e)
	if err != nil {
		return nil, err
	}
	return events.Update(context.Background(), e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	events, err := s.events(e)
	if err != nil {
		return nil, err
	}
	return events.Patch(context.Background(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}

// events is the client of e's namespace; an Event of another namespace than
// the recorder's is refused.
func (s eventSink) events(e *corev1.Event) (*Client[*corev1.Event, *corev1.EventList], error) {
	if s.namespace != "" && e.Namespace != s.namespace {
		return nil, fmt.Errorf("event %s is in namespace %q, the recorder writes to %q", e.Name, e.Namespace, s.namespace)
	}
	return s.c.CoreV1().Events(e.Namespace), nil
}
