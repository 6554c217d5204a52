package crds

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/internal/conflict"
	"slipway.dev/slipway/ops/kube"
)

// crdClient is the typed client of CustomResourceDefinitions.
type crdClient = kube.Client[*apiextv1.CustomResourceDefinition, *apiextv1.CustomResourceDefinitionList]

func newCRDClient(cfg *rest.Config) (*crdClient, error) {
	client, err := kube.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("CRD client: %w", err)
	}
	return client.ApiextensionsV1().CustomResourceDefinitions(), nil
}

// Apply creates the embedded CRDs of group, or updates them where they exist,
// then waits (bounded by ctx) until the API server serves each one. It needs
// only get, create and update on customresourcedefinitions.
func Apply(ctx context.Context, cfg *rest.Config, group string) error {
	objs, err := OfGroup(group)
	if err != nil {
		return err
	}
	return ApplyObjects(ctx, cfg, objs)
}

// ApplyObjects is Apply for the given CRDs (tests install their own too).
func ApplyObjects(ctx context.Context, cfg *rest.Config, objs []*apiextv1.CustomResourceDefinition) error {
	api, err := newCRDClient(cfg)
	if err != nil {
		return err
	}
	for _, crd := range objs {
		if err := createOrUpdate(ctx, api, crd); err != nil {
			return err
		}
	}
	for _, crd := range objs {
		if err := waitEstablished(ctx, api, crd.Name); err != nil {
			return err
		}
	}
	return nil
}

// WaitEstablished waits (bounded by ctx) until the API server
// serves each named CRD, for code that installs them some other way.
func WaitEstablished(ctx context.Context, cfg *rest.Config, names ...string) error {
	api, err := newCRDClient(cfg)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := waitEstablished(ctx, api, name); err != nil {
			return err
		}
	}
	return nil
}

// createOrUpdate writes want, retrying an update that lost a race.
func createOrUpdate(ctx context.Context, api *crdClient, want *apiextv1.CustomResourceDefinition) error {
	_, err := api.Create(ctx, want.DeepCopy(), metav1.CreateOptions{})
	if err == nil {
		slog.Info("created CRD", "name", want.Name)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CRD %s (the agent needs RBAC create on customresourcedefinitions for --install-crds): %w", want.Name, err)
	}
	err = conflict.Retry(func() error {
		have, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		next := want.DeepCopy()
		next.ResourceVersion = have.ResourceVersion
		_, err = api.Update(ctx, next, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update CRD %s: %w", want.Name, err)
	}
	slog.Info("updated CRD", "name", want.Name)
	return nil
}

// establishedPoll is how often waitEstablished reads the CRD.
const establishedPoll = 100 * time.Millisecond

// waitEstablished reads the named CRD until its Established condition is
// True. It polls with get instead of watching so that the agent's RBAC stays
// get/create/update on CRDs (a watch would need list and watch on all of them);
// establishing takes milliseconds.
func waitEstablished(ctx context.Context, api *crdClient, name string) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, establishedPoll, true, func(ctx context.Context) (bool, error) {
		crd, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		return Established(crd), nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (last read: %w)", err, last)
		}
		return fmt.Errorf("CRD %s did not become Established (check its status conditions): %w", name, err)
	}
	return nil
}

// Established reports whether the API server serves crd.
func Established(crd *apiextv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
			return true
		}
	}
	return false
}
