package eds

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/kube"
)

// Event reasons of the controller.
const (
	EventCanaryStarted   = "CanaryStarted"
	EventCanaryPaused    = "CanaryPaused"
	EventCanaryUnpaused  = "CanaryUnpaused"
	EventCanaryFailed    = "CanaryFailed"
	EventCanaryValidated = "CanaryValidated"
	EventRollingUpdate   = "RollingUpdate"
	EventRolledOut       = "RolledOut"
	EventStateChanged    = "StateChanged"
	EventInvalid         = "Invalid"
	EventCreateFailed    = "FailedCreate"
	EventSettingInvalid  = "SettingInvalid"
	EventMigrating       = "Migrating"
)

// startEvents starts the recorder of the controller's Events (written in
// the namespace of the object they are about).
func (c *Controller) startEvents() (stop func(), err error) {
	scheme := runtime.NewScheme()
	if err := kube.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build the events' scheme: %w", err)
	}
	if err := v1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("build the events' scheme: %w", err)
	}
	b := record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{BurstSize: 100, QPS: 5})
	b.StartRecordingToSink(eventSink{c.kube})
	c.recorder = b.NewRecorder(scheme, corev1.EventSource{Component: "slipway-eds"})
	return b.Shutdown, nil
}

// eventSink writes the recorder's Events through the typed client.
type eventSink struct{ kube *kube.Clientset }

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.kube.CoreV1().Events(e.Namespace).Create(context.Background(), e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.kube.CoreV1().Events(e.Namespace).Update(context.Background(), e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.kube.CoreV1().Events(e.Namespace).Patch(context.Background(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
