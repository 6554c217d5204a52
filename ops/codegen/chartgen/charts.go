package main

import (
	"bytes"
	"context"
	"slices"
	"strconv"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/eds"
	"slipway.dev/slipway/ops/manifest"
	swarmmanifest "slipway.dev/slipway/ops/swarm/manifest"
	uo "slipway.dev/slipway/ops/updateoperator"
)

// Sentinels rendered in place of the settings a chart exposes. Each is text
// no renderer produces by itself; Write fails when one is left over.
const (
	sentinelNamespace  = "zzsentns"
	sentinelImage      = "zzsent.invalid/zzsentimage:zzsenttag"
	sentinelChannelURL = "https://zzsentchannel.invalid/latest"
	sentinelPrefix     = "zzsentprefix.invalid"
	sentinelAgentArg   = "--zzsentagentarg"
	sentinelCtrlArg    = "--zzsentcontrollerarg"
	sentinelMirrorDir  = "/zzsentmirror"
	sentinelSecret     = "zzsentsecret"
	sentinelJobImage   = "zzsent.invalid/zzsentjobimage:zzsentjobtag"
	sentinelSource     = "https://zzsentsource.invalid/releases"
	sentinelMark       = "zzsent"
)

// imageExpr is the image every chart runs: the repository and tag values,
// the tag defaulting to the chart's appVersion.
const imageExpr = `{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}`

// Render is one render of a system's manifest: with sentinels or the
// defaults, for one value of the chart's variant switch.
type Render struct {
	Sentinel bool
	Variant  string
	// On are the Toggles set.
	On []string
}

// Chart describes one chart: how to render its manifest and which settings
// become values.
type Chart struct {
	Name, Description string
	// Notes is template text added to NOTES.txt (e.g. a warning about a
	// value the chart's workloads cannot run without).
	Notes string
	// DefaultNamespace is the renderer's default namespace: the one the
	// chart's default render is compared in.
	DefaultNamespace string
	Render           func(Render) ([]byte, error)
	// Strings are sentinel substrings and the values that replace them.
	Strings []StringValue
	// ListItems are sentinel list items replaced by a range over a list value.
	ListItems []ListValue
	// Objects are whole fields of one object that come from a value.
	Objects []ObjectValue
	// Variant is a switch whose values render different objects (nil: none).
	Variant *Variant
	// Toggles are boolean settings that only add lines.
	Toggles []Toggle
	// NeedsPrivileged: some pod of the chart needs the privileged Pod
	// Security level (its namespace must say so; NOTES.txt tells how).
	NeedsPrivileged bool
}

// StringValue: Sentinel, wherever it appears, becomes {{ .Values.<Key> }}.
type StringValue struct {
	Sentinel, Key, Comment string
	Default                any
}

// ObjectValue: the field Path of the object of kind Kind comes from
// .Values.<Key>; its default is what the default render has there.
type ObjectValue struct {
	Kind         string
	Path         []string
	Key, Comment string
}

// Variant is a setting that changes the objects' shape (not only a value in
// them): every value is rendered, and objects differing between them are
// guarded by `if` on .Values.<Key>.
type Variant struct {
	Key, Comment string
	Values       []string // Values[0] is the default
	// Bool: the value is a YAML boolean rather than a string.
	Bool bool
}

func variantOr(r Render, def string) string {
	if r.Variant == "" {
		return def
	}
	return r.Variant
}

// Charts are slipway's four charts, one per system.
func Charts() []Chart {
	return []Chart{agentChart(), updateOperatorChart(), edsChart(), swarmChart()}
}

func agentChart() Chart {
	return Chart{
		Name:             "slipway-agent",
		Description:      "slipway's UpdateChannel agent: rolls new OS versions through the nodes concurrency at a time (the objects of `slipway ops manifest`)",
		DefaultNamespace: manifest.DefaultNamespace,
		NeedsPrivileged:  true,
		Render: func(r Render) ([]byte, error) {
			o := manifest.Options{}
			if r.Sentinel {
				o = manifest.Options{Namespace: sentinelNamespace, Image: sentinelImage, Channel: opsv1.UpdateChannelSpec{URL: sentinelChannelURL},
					MirrorDirs: []string{sentinelMirrorDir}, TokenSecrets: []string{sentinelSecret}, JobImages: []string{sentinelJobImage},
					ReleaseSources: []string{sentinelSource}}
			}
			o.SystemdHosts, _ = strconv.ParseBool(variantOr(r, "false"))
			o.InstallCRDs = slices.Contains(r.On, "installCRDs")
			return manifest.Render(o)
		},
		Objects: []ObjectValue{{Kind: "UpdateChannel", Path: []string{"spec"}, Key: "channel",
			Comment: "The default UpdateChannel's spec (docs/updatechannel.md): url, version, concurrency, window, paused, ...\n" +
				"It stays paused until it has a version, so installing the chart starts no rollout by itself."}},
		ListItems: []ListValue{
			{Sentinel: sentinelMirrorDir, Key: "mirrorDirs", Index: "mirror-",
				Comment: "Host directories file:// channels read from (--mirror-dir): mounted read-only into the agents\n" +
					"and the controller, and the only host paths besides the system and lock directories an upgrade Job may mount."},
			{Sentinel: sentinelSecret, Key: "tokenSecrets", Default: []string{manifest.DefaultTokenSecret},
				Comment: "Secrets (in the release's namespace) a channel's tokenSecretRef may name (--token-secret): the\n" +
					"controller may read them and the upgrade Jobs take GITHUB_TOKEN from them; empty: the default."},
			{Sentinel: sentinelSource, Key: "releaseSources", Default: []string{manifest.DefaultChannelURL},
				Comment: "Release sources (channel URLs) the upgrade Jobs may download from besides the mirror directories\n" +
					"(--release-source): a github-releases://owner/repo source also admits its repository's download address.\n" +
					"Add your channel's url here when you change it: the admission policy refuses a Job with any other --source."},
			{Sentinel: sentinelJobImage, Key: "jobImages",
				Comment: "Images a channel's spec.image may run its upgrade Jobs with, besides the chart's image (--job-image)."},
		},
		Toggles: []Toggle{{Key: "installCRDs",
			Comment: "Run the agents with --install-crds: they create the UpdateChannel CRD and update it to their version's\n" +
				"(Helm installs crds/ once and never upgrades them), and may write CRDs for that (docs/install.md)."}},
		Variant: &Variant{Key: "systemdHosts", Values: []string{"false", "true"}, Bool: true,
			Comment: "Mount the host's D-Bus socket into the agents (hosts whose init is systemd reboot through logind); false for k3os."},
	}
}

func updateOperatorChart() Chart {
	return Chart{
		Name:             "slipway-update-operator",
		Description:      "slipway's node-annotation update operator: controller and per-node agent (the objects of `slipway update-operator manifest`)",
		DefaultNamespace: uo.DefaultNamespace,
		NeedsPrivileged:  true,
		Render: func(r Render) ([]byte, error) {
			o := uo.ManifestOptions{Platform: variantOr(r, "slipway")}
			if r.Sentinel {
				o.Namespace, o.Image, o.Prefix = sentinelNamespace, sentinelImage, sentinelPrefix
				o.AgentArgs, o.ControllerArgs = []string{sentinelAgentArg}, []string{sentinelCtrlArg}
			}
			var buf bytes.Buffer
			o.Out = &buf
			err := uo.Manifest(context.Background(), o)
			return buf.Bytes(), err
		},
		Strings: []StringValue{{Sentinel: sentinelPrefix, Key: "prefix", Default: uo.DefaultPrefix,
			Comment: "Prefix of the annotation and label keys (bottlerocket.aws for nodes of Bottlerocket's operator)."}},
		ListItems: []ListValue{
			{Sentinel: sentinelAgentArg, Key: "agent.extraArgs", Comment: "arguments added to the agent's command line (e.g. --source=URL)"},
			{Sentinel: sentinelCtrlArg, Key: "controller.extraArgs", Comment: "arguments added to the controller's command line"},
		},
		Notes: `{{- if eq (toString .Values.platform) "slipway" }}
{{- $source := false }}
{{- range .Values.agent.extraArgs }}{{ if regexMatch "^--source(=|$)" (toString .) }}{{ $source = true }}{{ end }}{{ end }}
{{- range .Values.agent.extraEnv }}{{ if eq (toString .name) "SLIPWAY_UO_SOURCE" }}{{ $source = true }}{{ end }}{{ end }}
{{- if not $source }}

WARNING: platform is slipway and the agents have no release source: each agent exits at
start (--platform slipway needs --source) and its pod crash-loops. Give them one:
  helm upgrade {{ .Release.Name }} <chart> -n {{ .Release.Namespace }} --reuse-values \
    --set 'agent.extraArgs={--source=https://mirror.example/k3os/releases/latest}'
{{- end }}
{{- end }}
`,
		Variant: &Variant{Key: "platform", Values: []string{"slipway", "bottlerocket-api", "command"},
			Comment: "The agents' platform: slipway, bottlerocket-api or command (docs/update-operator.md)."},
	}
}

func edsChart() Chart {
	return Chart{
		Name:             "slipway-eds",
		Description:      "slipway's ExtendedDaemonSet controller: canary and rolling updates of daemons (the objects of `slipway eds manifest`)",
		DefaultNamespace: manifest.DefaultNamespace,
		Render: func(r Render) ([]byte, error) {
			var buf bytes.Buffer
			o := eds.ManifestOptions{Namespace: manifest.DefaultNamespace, Image: manifest.DefaultImage(), Out: &buf}
			if r.Sentinel {
				o.Namespace, o.Image = sentinelNamespace, sentinelImage
			}
			err := eds.WriteManifest(o)
			return buf.Bytes(), err
		},
	}
}

func swarmChart() Chart {
	return Chart{
		Name:             "slipway-swarm",
		Description:      "slipway's swarm controller: balanced, minimal-move assignment of jobs over a worker pool (the objects of `slipway swarm manifest`)",
		DefaultNamespace: manifest.DefaultNamespace,
		Render: func(r Render) ([]byte, error) {
			var buf bytes.Buffer
			o := swarmmanifest.Options{Replicas: 2}
			if r.Sentinel {
				o.Namespace, o.Image = sentinelNamespace, sentinelImage
			}
			err := swarmmanifest.Write(&buf, o)
			return buf.Bytes(), err
		},
	}
}
