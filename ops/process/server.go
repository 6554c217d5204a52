package process

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	apiversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"

	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/kube"
)

// MinKubernetes is the oldest API server the agent and its manifest work
// with: ValidatingAdmissionPolicy v1 (the own-Node policy), the node-name
// claim in bound service-account tokens, and the Job's
// securityContext.appArmorProfile field (an older server silently drops
// it, and the upgrade Job's remount is then refused by the default
// profile).
const MinKubernetes = "1.30.0"

// MinKubernetesWebhook is the oldest API server the agent works with when
// the manifest confines it by slipway's admission webhook instead of
// ValidatingAdmissionPolicies (IsolationWebhook): the webhook learns the
// requester's node from the pod its bound token names, which every server
// since 1.22 puts in the request (the last k3os releases carry k3s 1.22
// and 1.23).
const MinKubernetesWebhook = "1.22.0"

// IsolationEnv names the environment variable in which the manifest tells
// the agent and the controller how they are confined: IsolationPolicy
// (unset or "policy") or IsolationWebhook ("webhook").
const IsolationEnv = "SLIPWAY_ISOLATION"

// Isolation modes (IsolationEnv).
const (
	IsolationPolicy  = "policy"
	IsolationWebhook = "webhook"
)

// Isolation is the mode the manifest set in IsolationEnv, and an error
// saying what to write instead when it is neither mode.
func Isolation() (string, error) {
	switch v := strings.TrimSpace(os.Getenv(IsolationEnv)); v {
	case "", IsolationPolicy:
		return IsolationPolicy, nil
	case IsolationWebhook:
		return IsolationWebhook, nil
	default:
		return "", fmt.Errorf("%s=%q: write %q (ValidatingAdmissionPolicies, Kubernetes %s or newer) or %q (slipway's admission webhook, Kubernetes %s or newer), or leave it unset",
			IsolationEnv, v, IsolationPolicy, MinKubernetes, IsolationWebhook, MinKubernetesWebhook)
	}
}

// minimum is the oldest API server that the isolation mode can confine the agent on.
func minimum(isolation string) string {
	if isolation == IsolationWebhook {
		return MinKubernetesWebhook
	}
	return MinKubernetes
}

// ServerRecheck is how often an agent facing an older API server asks
// again: it waits for the control plane's upgrade rather than crash-loop.
// (A variable: tests ask again sooner.)
var ServerRecheck = 5 * time.Minute

// supportedServer decides from the API server's /version whether the agent
// may run under isolation (IsolationPolicy or IsolationWebhook), and says
// why not in words for the operator.
func supportedServer(info apiversion.Info, isolation string) (bool, string) {
	min := minimum(isolation)
	v, err := utilversion.ParseGeneric(info.GitVersion)
	if err != nil { // a distribution's own gitVersion: major and minor ("30+")
		v, err = utilversion.ParseGeneric(strings.TrimSuffix(info.Major, "+") + "." + strings.TrimSuffix(info.Minor, "+"))
	}
	if err != nil {
		return false, fmt.Sprintf("the API server's version %q (major %q, minor %q) cannot be read; slipway's agent needs Kubernetes %s or newer",
			info.GitVersion, info.Major, info.Minor, min)
	}
	if !v.LessThan(utilversion.MustParseGeneric(min)) {
		return true, ""
	}
	if isolation == IsolationWebhook {
		return false, fmt.Sprintf("the API server runs Kubernetes %s; slipway's agent needs %s or newer even with its admission webhook "+
			"(the pod name in bound service-account tokens, policy/v1 evictions): upgrade the control plane; the agent checks again every %s and does nothing until then",
			orVersion(info.GitVersion, v), min, ServerRecheck)
	}
	if !v.LessThan(utilversion.MustParseGeneric(MinKubernetesWebhook)) {
		return false, fmt.Sprintf("the API server runs Kubernetes %s; slipway's agent needs %s or newer "+
			"(ValidatingAdmissionPolicy v1, the node-name claim in bound service-account tokens, the Job's appArmorProfile field, "+
			"which older servers silently drop), or, down to %s, the manifest's admission webhook in their place "+
			"(`slipway ops manifest --isolation=webhook`, docs/agent/old-kubernetes.md): the agent checks again every %s and does nothing until then",
			orVersion(info.GitVersion, v), min, MinKubernetesWebhook, ServerRecheck)
	}
	return false, fmt.Sprintf("the API server runs Kubernetes %s; slipway's agent needs %s or newer "+
		"(ValidatingAdmissionPolicy v1, the node-name claim in bound service-account tokens, the Job's appArmorProfile field, "+
		"which older servers silently drop): upgrade the control plane; the agent checks again every %s and does nothing until then",
		orVersion(info.GitVersion, v), min, ServerRecheck)
}

// serverVersion reads the API server's /version.
func serverVersion(ctx context.Context, kube *kube.Clientset) (apiversion.Info, error) {
	var info apiversion.Info
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return info, fmt.Errorf("read the API server's version: %w", err)
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		return info, fmt.Errorf("read the API server's version: %w", err)
	}
	return info, nil
}

// Prepare is what both the agent and the controller do before their
// informers start: wait for a supported API server, then install the CRDs
// when asked (installCRDs: --install-crds) with cfg.
func Prepare(ctx context.Context, kube *kube.Clientset, cfg *rest.Config, installCRDs bool, log *slog.Logger) error {
	if err := WaitForSupportedServer(ctx, kube, log); err != nil {
		return err
	}
	if !installCRDs {
		return nil
	}
	if err := crds.Apply(ctx, cfg, v1.SchemeGroupVersion.Group); err != nil {
		return fmt.Errorf("install the CRDs (--install-crds): %w", err)
	}
	return nil
}

// WaitForSupportedServer returns once the API server runs MinKubernetes or
// newer (MinKubernetesWebhook or newer when IsolationEnv says the manifest
// confines the agent by slipway's webhook). Against an older one it logs
// why, does nothing else, and asks again every ServerRecheck: a DaemonSet
// in a crash loop would say less.
func WaitForSupportedServer(ctx context.Context, kube *kube.Clientset, log *slog.Logger) error {
	isolation, err := Isolation()
	if err != nil {
		return err
	}
	var why string // the last refusal: what the operator needs to read when the agent stops
	for {
		info, err := serverVersion(ctx, kube)
		if err != nil && why != "" && ctx.Err() != nil { // stopped while waiting to ask again
			return fmt.Errorf("%s: %w", why, ctx.Err())
		}
		if err != nil {
			return err
		}
		var ok bool
		ok, why = supportedServer(info, isolation)
		if ok {
			log.Info("API server supported", "version", info.GitVersion, "minimum", minimum(isolation), "isolation", isolation)
			return nil
		}
		log.Error("unsupported Kubernetes version", "why", why)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", why, ctx.Err())
		case <-time.After(ServerRecheck):
		}
	}
}

// orVersion is the server's own gitVersion, else the version read.
func orVersion(git string, v *utilversion.Version) string {
	if git != "" {
		return git
	}
	return v.String()
}
