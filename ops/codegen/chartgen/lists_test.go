package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
	swarmmanifest "slipway.dev/slipway/ops/swarm/manifest"
)

// TestAgentChartTakesTheListFlags: the agent chart's mirrorDirs,
// tokenSecrets, jobImages and releaseSources render what `slipway ops manifest` renders
// with the same --mirror-dir, --token-secret, --job-image and --release-source flags: two of
// each (a path with a space; with installCRDs and systemdHosts too), one of
// each, and none (the manifest's defaults).
func TestAgentChartTakesTheListFlags(t *testing.T) {
	c := agentChart()
	for name, tc := range map[string]struct {
		set []string
		o   manifest.Options
	}{
		"two of each, systemd hosts": {
			set: []string{"--set-json", `mirrorDirs=["/var/lib/slipway/mirror","/srv/os releases"]`,
				"--set-json", `tokenSecrets=["github-a","github-b"]`,
				"--set-json", `jobImages=["registry.example/slipway:v2","registry.example/tools/slipway@sha256:0123"]`,
				"--set-json", `releaseSources=["github-releases://acme/os","https://mirror.example/os releases"]`,
				"--set", "systemdHosts=true", "--set", "installCRDs=true"},
			o: manifest.Options{MirrorDirs: []string{"/var/lib/slipway/mirror", "/srv/os releases"}, TokenSecrets: []string{"github-a", "github-b"},
				JobImages: []string{"registry.example/slipway:v2", "registry.example/tools/slipway@sha256:0123"}, SystemdHosts: true, InstallCRDs: true,
				ReleaseSources: []string{"github-releases://acme/os", "https://mirror.example/os releases"}},
		},
		"one of each": {
			set: []string{"--set-json", `mirrorDirs=["/mirror"]`, "--set-json", `tokenSecrets=["token"]`, "--set-json", `jobImages=["x.example/y:1"]`,
				"--set-json", `releaseSources=["http://mirror.example/releases"]`},
			o: manifest.Options{MirrorDirs: []string{"/mirror"}, TokenSecrets: []string{"token"}, JobImages: []string{"x.example/y:1"},
				ReleaseSources: []string{"http://mirror.example/releases"}},
		},
		"none": {
			set: []string{"--set-json", "mirrorDirs=[]", "--set-json", "tokenSecrets=[]", "--set-json", "jobImages=[]", "--set-json", "releaseSources=[]"},
		},
	} {
		args := append([]string{"template", "rel", filepath.Join(chartsDir, c.Name), "--include-crds", "--namespace", c.DefaultNamespace}, tc.set...)
		got, err := ParseDocs(helm(t, args...))
		if err != nil {
			t.Fatal(err)
		}
		body, err := manifest.Render(tc.o)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ParseDocs(body)
		if err != nil {
			t.Fatal(err)
		}
		compareObjects(t, c.Name+" "+name, got, want)
	}
}

// TestStringExpr: a string holding a list sentinel among other text becomes
// one expression; a sentinel alone is left to the list item's range; a form
// chartgen does not know fails.
func TestStringExpr(t *testing.T) {
	c := Chart{Name: "x", ListItems: []ListValue{{Sentinel: "zzsentl", Key: "l"}, {Sentinel: "zzsentd", Key: "d", Default: []string{"a"}}}}
	for _, tc := range []struct{ in, want, err string }{
		{in: "plain", want: ""},
		{in: "zzsentl", want: ""},
		{in: `path in ["zzsentl"] && x`, want: `print "path in " (include "x.celList" $.Values.l) " && x"`},
		{in: `image in ["` + sentinelImage + `", "zzsentl"]`,
			want: `print "image in [\"" (print $.Values.image.repository ":" ($.Values.image.tag | default $.Chart.AppVersion)) "\"" (include "x.celItems" $.Values.l) "]"`},
		{in: "secrets [zzsentd] in " + sentinelNamespace,
			want: `print "secrets " (printf "[%s]" (join " " ($.Values.d | default (list "a")))) " in " $.Release.Namespace`},
		{in: "one of [a zzsentl]", want: `print "one of [a" (include "x.goItems" $.Values.l) "]"`},
		{in: "dir=zzsentl", err: "cannot template"},
	} {
		got, ok, err := c.stringExpr(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want one saying %q", tc.in, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case ok != (tc.want != "") || got != tc.want:
			t.Errorf("%q:\n got %v %s\nwant %s", tc.in, ok, got, tc.want)
		}
	}
}

// TestRangeItems: the list item holding the sentinel (a scalar, a map with
// a numbered name) becomes a range, and the list's key is guarded when the
// item is its only one.
func TestRangeItems(t *testing.T) {
	l := ListValue{Sentinel: "/zzsentm", Key: "m", Index: "m-"}
	c := Chart{Name: "x", ListItems: []ListValue{l}}
	for _, tc := range []struct{ in, want, err string }{
		{in: "args:\n- a\n- /zzsentm\n- b\n",
			want: "args:\n- a\n{{- range $i, $v := $.Values.m }}\n- {{ toJson $v }}\n{{- end }}\n- b\n"},
		{in: "spec:\n  volumes:\n  - hostPath:\n      path: /zzsentm\n    name: m-0\n  other: 1\n",
			want: "spec:\n  {{- if $.Values.m }}\n  volumes:\n  {{- range $i, $v := $.Values.m }}\n  - hostPath:\n      path: {{ toJson $v }}\n    name: m-{{ $i }}\n  {{- end }}\n  {{- end }}\n  other: 1\n"},
		{in: "spec:\n  path: /zzsentm\n", err: "not inside a list item"},
		{in: "args:\n- --dir=/zzsentm\n", err: "not as a whole"},
	} {
		got, err := c.rangeItems(tc.in, l)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want one saying %q", tc.in, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case got != tc.want:
			t.Errorf("%q:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// TestGuardInsertions: the lines a toggle adds are guarded, in runs; a
// toggle that changes a line is refused.
func TestGuardInsertions(t *testing.T) {
	for _, tc := range []struct{ base, on, want, err string }{
		{base: "args:\n- a\nenv: 1\n", on: "args:\n- a\n- --x\nenv: 1\n",
			want: "args:\n- a\n{{- if .Values.x }}\n- --x\n{{- end }}\nenv: 1\n"},
		{base: "rules:\n- r1\n", on: "rules:\n- r1\n- r2\n  - get\n",
			want: "rules:\n- r1\n{{- if .Values.x }}\n- r2\n  - get\n{{- end }}\n"},
		{base: "a: 1\n", on: "a: 2\n", err: "changes or removes"},
	} {
		got, err := guardInsertions(tc.base, tc.on, ".Values.x")
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want one saying %q", tc.on, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.on, err)
		case got != tc.want:
			t.Errorf("%q:\n got %s\nwant %s", tc.on, got, tc.want)
		}
	}
}

// TestChartsTakeTheCommandsNumbers: the settings the generic values carry
// (the channel's spec, a component's replicas) render what the manifest
// commands render with the same flags: `slipway ops manifest
// --channel-version latest --concurrency 3` and `slipway swarm manifest
// --replicas 3`.
func TestChartsTakeTheCommandsNumbers(t *testing.T) {
	var swarm bytes.Buffer
	if err := swarmmanifest.Write(&swarm, swarmmanifest.Options{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	agent, err := manifest.Render(manifest.Options{Channel: opsv1.UpdateChannelSpec{Version: "latest", Concurrency: 3}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    Chart
		set  []string
		want []byte
	}{
		// paused=null drops the key, as the manifest's unpaused channel
		// leaves it out (paused=false is the same to the API server).
		{c: agentChart(), set: []string{"--set", "channel.version=latest", "--set", "channel.paused=null", "--set", "channel.concurrency=3"}, want: agent},
		{c: swarmChart(), set: []string{"--set", "controller.replicas=3"}, want: swarm.Bytes()},
	} {
		args := append([]string{"template", "rel", filepath.Join(chartsDir, tc.c.Name), "--include-crds", "--namespace", tc.c.DefaultNamespace}, tc.set...)
		got, err := ParseDocs(helm(t, args...))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ParseDocs(tc.want)
		if err != nil {
			t.Fatal(err)
		}
		compareObjects(t, tc.c.Name+" "+strings.Join(tc.set, " "), got, want)
	}
}
