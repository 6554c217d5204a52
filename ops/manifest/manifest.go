// Package manifest builds the objects that deploy slipway's operator into a
// cluster: the namespace, the UpdateChannel CRD, least-privilege RBAC, the
// `slipway ops agent` DaemonSet, the `slipway ops controller` Deployment and
// a default UpdateChannel. `slipway ops
// manifest` prints them, `slipway config apply` writes them where k3s
// auto-deploys manifests from, and scripts/generate writes them into overlay/.
package manifest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/version"
)

// Defaults of Options.
const (
	DefaultNamespace   = "slipway-system"
	DefaultImageRepo   = "docker.io/slipway/slipway"
	DefaultChannelName = "default"
	DefaultChannelURL  = "github-releases://rancher/k3os"
	// DefaultTokenSecret is the Secret a channel's tokenSecretRef names
	// unless Options.TokenSecrets names others: the only Secret the agent
	// may read, and the only one its Jobs may take a token from.
	DefaultTokenSecret = "slipway-github-token"
	// DefaultGitHubDownloadBase is where GitHub serves release assets.
	DefaultGitHubDownloadBase = "https://github.com/"
	// AgentName names the DaemonSet, its ServiceAccount and its RBAC objects.
	AgentName = "slipway-agent"
)

// Options says what to render.
type Options struct {
	// Namespace holds the agent, its namespaced RBAC and the default channel.
	Namespace string
	// Image runs the agent (and, unless the channel names another, the upgrade Jobs).
	Image string
	// ChannelName names the default UpdateChannel.
	ChannelName string
	// Channel is the default UpdateChannel's spec. An empty URL becomes
	// DefaultChannelURL; an empty Version leaves the channel paused, so that
	// deploying the operator never starts a rollout by itself.
	Channel opsv1.UpdateChannelSpec
	// InstallCRDs runs the agent with --install-crds and grants it the
	// CRD writes that needs. Off by default: the manifest carries the CRD,
	// and an agent that may rewrite CRDs may rewrite any API in the cluster.
	InstallCRDs bool
	// JobImages are images the upgrade Jobs may run besides Image (a
	// channel's spec.image); the admission policy refuses any other.
	JobImages []string
	// JobCommand is the upgrade Job container's command (default slipway).
	JobCommand []string
	// HostSystemDir and HostLockDir are the host paths the Jobs mount
	// (defaults SystemDir and RunDir): the only host paths besides MirrorDirs.
	HostSystemDir, HostLockDir string
	// MirrorDirs are the host directories file:// channels read from: the
	// agent's pod mounts them read-only (it resolves `latest` from them)
	// and the Jobs may mount them read-only; no other host path.
	MirrorDirs []string
	// TokenSecrets are the Secrets (in Namespace) a channel's
	// tokenSecretRef may name (default DefaultTokenSecret).
	TokenSecrets []string
	// ReleaseSources are the release sources the upgrade Jobs may download
	// from besides the mirror directories: channel URLs
	// (github-releases://owner/repo, which also admits its repository's
	// download address, http(s)://…). Default: the default channel's URL.
	// The Job policy refuses any other `--source`, so that whoever writes
	// the nodes' instructions (the controller, through the channel views)
	// cannot point a node's upgrade at another release.
	ReleaseSources []string
	// GitHubDownloadBase is where the resolved release of a
	// github-releases://owner/repo channel must point: <base>owner/repo/releases.
	GitHubDownloadBase string
	// SystemdHosts mounts the host's D-Bus socket directory into the agent's
	// pod, so that systemd hosts reboot through logind, which honours
	// inhibitor locks. Off by default: the agent reboots systemd hosts by
	// SIGRTMIN+5 to PID 1 (systemd(1)) without the bus, whose socket gives
	// root on the host to whoever reaches it; a k3os host has no use for it.
	SystemdHosts bool
	// Isolation is how the agent and the controller are confined beyond
	// RBAC: IsolationPolicy (default; ValidatingAdmissionPolicies, Kubernetes
	// 1.30+) or IsolationWebhook (slipway's admission webhook evaluating the
	// same policies, for Kubernetes 1.22-1.29; webhook.go).
	Isolation string
	// Out receives the YAML (Run only).
	Out io.Writer
}

// DefaultImage is the image of this build of slipway.
func DefaultImage() string { return DefaultImageRepo + ":" + version.Version }

// WithDefaults fills the empty fields of o.
func (o Options) WithDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Image == "" {
		o.Image = DefaultImage()
	}
	if o.ChannelName == "" {
		o.ChannelName = DefaultChannelName
	}
	if o.Channel.URL == "" {
		o.Channel.URL = DefaultChannelURL
	}
	if o.Channel.Version == "" {
		o.Channel.Paused = true
	}
	if o.HostSystemDir == "" {
		o.HostSystemDir = SystemDir
	}
	if o.HostLockDir == "" {
		o.HostLockDir = RunDir
	}
	if o.GitHubDownloadBase == "" {
		o.GitHubDownloadBase = DefaultGitHubDownloadBase
	}
	return o
}

// Run writes the manifest to o.Out.
func Run(_ context.Context, o Options) error {
	if o.Out == nil {
		return fmt.Errorf("manifest: no output writer")
	}
	body, err := Render(o)
	if err != nil {
		return err
	}
	_, err = o.Out.Write(body)
	return err
}

// Render returns the manifest as a multi-document YAML stream.
func Render(o Options) ([]byte, error) {
	objs, err := Objects(o)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString("# slipway operator, rendered by `slipway ops manifest` (" + version.Version + ").\n")
	for _, obj := range objs {
		doc, err := Marshal(obj)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(doc)
	}
	return buf.Bytes(), nil
}

// Objects returns the typed objects of the manifest, in the order they apply.
func Objects(o Options) ([]any, error) {
	o = o.WithDefaults()
	crdObjs, err := crds.OfGroup("ops.slipway.dev")
	if err != nil {
		return nil, err
	}
	objs := []any{namespace(o)}
	for _, c := range crdObjs {
		objs = append(objs, c)
	}
	objs = append(objs, rbac(o)...)
	switch o.Isolation {
	case "", IsolationPolicy:
		objs = append(objs, policies(o)...)
		objs = append(objs, priorityClass(), daemonSet(o), deployment(o), channel(o))
	case IsolationWebhook:
		objs = append(objs, priorityClass(), daemonSet(o), deployment(o))
		forOldServers(o, objs)
		objs = append(objs, webhookObjects(o)...)
		objs = append(objs, channel(o))
	default:
		return nil, fmt.Errorf("isolation %q: use %q (ValidatingAdmissionPolicies, Kubernetes 1.30+) or %q (slipway's admission webhook, Kubernetes 1.22+)",
			o.Isolation, IsolationPolicy, IsolationWebhook)
	}
	return objs, nil
}

// labels are put on every object slipway deploys.
func labels(component string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":      AgentName,
		"app.kubernetes.io/part-of":   "slipway",
		"app.kubernetes.io/component": component,
	}
}

// namespace holds the agent and its Jobs. Both need the host (the agent:
// its PID namespace to reboot, the system directory read-only; the Jobs:
// the system directory writable and CAP_SYS_ADMIN to remount it), so Pod
// Security enforces `privileged` here, written out so that a cluster whose
// default level is stricter still runs them; what the Jobs may be is
// decided by the Job admission policy (jobPolicy) instead, and the
// namespace warns and audits at `restricted` so that anything else placed
// here shows. docs/security.md says why.
func namespace(o Options) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Namespace, Labels: map[string]string{
			"app.kubernetes.io/part-of":                  "slipway",
			"pod-security.kubernetes.io/enforce":         "privileged",
			"pod-security.kubernetes.io/enforce-version": "latest",
			"pod-security.kubernetes.io/audit":           "restricted",
			"pod-security.kubernetes.io/audit-version":   "latest",
		}},
	}
}

func channel(o Options) *opsv1.UpdateChannel {
	return &opsv1.UpdateChannel{
		TypeMeta:   metav1.TypeMeta{APIVersion: opsv1.SchemeGroupVersion.String(), Kind: "UpdateChannel"},
		ObjectMeta: metav1.ObjectMeta{Name: o.ChannelName, Namespace: o.Namespace, Labels: labels("channel")},
		Spec:       o.Channel,
	}
}

// Marshal renders obj as YAML without what a manifest never carries: status
// and null creationTimestamps (at any depth, such as a pod template's).
func Marshal(obj any) ([]byte, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", obj, err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("unmarshal %T: %w", obj, err)
	}
	delete(m, "status")
	stripNullTimestamps(m)
	return yaml.Marshal(m)
}

func stripNullTimestamps(v any) {
	switch t := v.(type) {
	case map[string]any:
		if ts, ok := t["creationTimestamp"]; ok && ts == nil {
			delete(t, "creationTimestamp")
		}
		for _, c := range t {
			stripNullTimestamps(c)
		}
	case []any:
		for _, c := range t {
			stripNullTimestamps(c)
		}
	}
}
