// Package cli is the logic of the kubectl-eds commands (`kubectl eds ...`,
// `slipway eds ...`): it reads ExtendedDaemonSets, their ERSs and pods and
// prints them in kubectl's table style or as JSON/YAML, and writes the
// annotations through which a user validates, pauses, unpauses or fails a
// canary, pauses a rolling update or freezes a rollout.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
	edsclient "slipway.dev/slipway/ops/generated/eds/clientset/versioned/typed/eds.slipway.dev/v1alpha1"
	"slipway.dev/slipway/ops/kube"
)

// Client runs the commands against one namespace.
type Client struct {
	Kube *kube.Clientset
	EDS  edsclient.EdsV1alpha1Interface
	// Namespace of the commands ("" with AllNamespaces).
	Namespace     string
	AllNamespaces bool
	// Output is "" (a table), "wide", "json" or "yaml".
	Output string
	Out    io.Writer
}

// CheckOutput refuses an unknown -o value.
func CheckOutput(o string) error {
	switch o {
	case "", "wide", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unknown output format %q: use -o json, -o yaml or -o wide (or nothing for a table)", o)
}

func (c *Client) ns() string {
	if c.AllNamespaces {
		return ""
	}
	return c.Namespace
}

// get reads one ExtendedDaemonSet with a message that says what to do when it is missing.
func (c *Client) get(ctx context.Context, name string) (*v1.ExtendedDaemonSet, error) {
	if name == "" {
		return nil, errors.New("name the ExtendedDaemonSet (kubectl eds <command> NAME)")
	}
	e, err := c.EDS.ExtendedDaemonSets(c.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("no ExtendedDaemonSet %q in namespace %q (list them with kubectl eds get; -n picks the namespace)", name, c.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("read ExtendedDaemonSet %s/%s: %w", c.Namespace, name, err)
	}
	return e, nil
}

// annotate sets (value non-nil) or removes (nil) annotations of an
// ExtendedDaemonSet by a merge patch.
func (c *Client) annotate(ctx context.Context, name string, set map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return err
	}
	if _, err := c.EDS.ExtendedDaemonSets(c.Namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate ExtendedDaemonSet %s/%s: %w", c.Namespace, name, err)
	}
	return nil
}

func ptr(s string) *string { return &s }

// canaryOf returns e's running canary ERS, or an error saying there is none.
func canaryOf(e *v1.ExtendedDaemonSet) (string, error) {
	if e.Status.Canary == nil || e.Status.Canary.ReplicaSet == "" {
		return "", fmt.Errorf("ExtendedDaemonSet %s/%s has no canary running (state %q)", e.Namespace, e.Name, e.Status.State)
	}
	return e.Status.Canary.ReplicaSet, nil
}

// CanaryValidate validates the running canary: the rolling update carries it to every node.
func (c *Client) CanaryValidate(ctx context.Context, name string) error {
	return c.canaryAction(ctx, name, "validated", func(ers string) map[string]*string {
		return map[string]*string{v1.AnnotationCanaryValid: ptr(ers)}
	})
}

// CanaryFail fails the running canary: the active template is restored.
func (c *Client) CanaryFail(ctx context.Context, name string) error {
	return c.canaryAction(ctx, name, "failed", func(ers string) map[string]*string {
		return map[string]*string{v1.AnnotationCanaryFailed: ptr(ers)}
	})
}

// CanaryPause pauses the running canary (reason is recorded).
func (c *Client) CanaryPause(ctx context.Context, name, reason string) error {
	return c.canaryAction(ctx, name, "paused", func(string) map[string]*string {
		return map[string]*string{v1.AnnotationCanaryPaused: ptr("true"), v1.AnnotationCanaryPausedReason: ptr(reason), v1.AnnotationCanaryUnpaused: nil}
	})
}

// CanaryUnpause resumes a paused canary; auto-pause stays off for it.
func (c *Client) CanaryUnpause(ctx context.Context, name string) error {
	return c.canaryAction(ctx, name, "unpaused", func(string) map[string]*string {
		return map[string]*string{v1.AnnotationCanaryPaused: ptr("false"), v1.AnnotationCanaryUnpaused: ptr("true"), v1.AnnotationCanaryPausedReason: nil}
	})
}

func (c *Client) canaryAction(ctx context.Context, name, done string, set func(ers string) map[string]*string) error {
	e, err := c.get(ctx, name)
	if err != nil {
		return err
	}
	ers, err := canaryOf(e)
	if err != nil {
		return err
	}
	if err := c.annotate(ctx, name, set(ers)); err != nil {
		return err
	}
	fmt.Fprintf(c.Out, "canary %s of %s/%s %s\n", ers, c.Namespace, name, done)
	return nil
}

// SetFlag sets (on) or removes a boolean annotation: pause-rollout uses
// AnnotationRollingUpdatePaused, freeze AnnotationRolloutFrozen.
func (c *Client) SetFlag(ctx context.Context, name, key string, on bool, done string) error {
	if _, err := c.get(ctx, name); err != nil {
		return err
	}
	var v *string
	if on {
		v = ptr("true")
	}
	if err := c.annotate(ctx, name, map[string]*string{key: v, v1.DataDog(key): nil}); err != nil {
		return err
	}
	fmt.Fprintf(c.Out, "extendeddaemonset %s/%s %s\n", c.Namespace, name, done)
	return nil
}

// printObjects prints objects as JSON or YAML: one alone when single,
// else a List, as kubectl does.
func (c *Client) printObjects(objs []any, single bool) error {
	var doc any = map[string]any{"apiVersion": "v1", "kind": "List", "items": objs}
	if single && len(objs) == 1 {
		doc = objs[0]
	}
	raw, err := json.MarshalIndent(doc, "", "    ")
	if err != nil {
		return fmt.Errorf("encode the output: %w", err)
	}
	if c.Output == "yaml" {
		if raw, err = yaml.JSONToYAML(raw); err != nil {
			return fmt.Errorf("encode the output: %w", err)
		}
	}
	_, err = c.Out.Write(append(raw, '\n'))
	return err
}
