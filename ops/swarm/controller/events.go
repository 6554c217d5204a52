package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/kube"
)

// startEvents starts the recorder of the controller's Events (about its
// Swarms, in its namespace) and returns the function that stops it.
func (c *Controller) startEvents() (stop func(), err error) {
	scheme := runtime.NewScheme()
	if err := kube.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build the events' scheme: %w", err)
	}
	if err := swarmv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build the events' scheme: %w", err)
	}
	b := record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{BurstSize: 100, QPS: 1})
	b.StartRecordingToSink(eventSink{c.kube.CoreV1().Events(c.opts.Namespace)})
	c.recorder = b.NewRecorder(scheme, corev1.EventSource{Component: "slipway-swarm", Host: c.opts.Identity})
	return b.Shutdown, nil
}

// eventSink writes the recorder's Events through one namespace's client.
type eventSink struct {
	events *kube.Client[*corev1.Event, *corev1.EventList]
}

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.events.Create(context.Background(), e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.events.Update(context.Background(), e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.events.Patch(context.Background(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
