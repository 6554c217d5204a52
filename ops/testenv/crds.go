package testenv

import (
	"context"
	"fmt"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// installCRDs creates the CRDs (updating existing ones) and waits until each is Established.
func installCRDs(ctx context.Context, cfg *rest.Config, crds []*apiextv1.CustomResourceDefinition) error {
	if len(crds) == 0 {
		return nil
	}
	c, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("CRD client: %w", err)
	}
	api := c.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		_, err := api.Create(ctx, crd.DeepCopy(), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			old, gerr := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if gerr != nil {
				return fmt.Errorf("get CRD %s: %w", crd.Name, gerr)
			}
			upd := crd.DeepCopy()
			upd.ResourceVersion = old.ResourceVersion
			_, err = api.Update(ctx, upd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return established(got), nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s never became Established: %w", crd.Name, err)
		}
	}
	return nil
}

func established(crd *apiextv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
			return true
		}
	}
	return false
}
