package main

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"slipway.dev/slipway/ops/testenv"
)

// TestCommonValuesReachTheObjects sets the values a user of kured's or
// DataDog's charts expects on every chart and finds each in the rendered
// objects: the pull policy and secrets, every workload's pod annotations,
// labels, extra environment and ServiceAccount name (also in the bindings'
// subjects and the admission policies' users), the pod's and the first
// container's securityContext (podSecurityContext, securityContext), a
// DaemonSet's update strategy,
// and rbac.create / serviceAccount.create=false leaving their objects out.
func TestCommonValuesReachTheObjects(t *testing.T) {
	for _, c := range Charts() {
		files, err := Build(c)
		if err != nil {
			t.Fatal(err)
		}
		var comps []string
		for _, k := range []string{"agent", "controller"} {
			if strings.Contains(string(files["values.yaml"]), "\n"+k+":\n") {
				comps = append(comps, k)
			}
		}
		args := []string{"template", "rel", filepath.Join(chartsDir, c.Name), "--namespace", "ns1",
			"--set", "image.pullPolicy=Always", "--set-json", `imagePullSecrets=[{"name":"regcred"}]`}
		for _, k := range comps {
			args = append(args, "--set", k+".podAnnotations.example\\.com/a="+k, "--set", k+".podLabels.example\\.com/l="+k,
				"--set-json", k+`.extraEnv=[{"name":"EXTRA","value":"`+k+`"}]`, "--set", k+".serviceAccount.name=sa-"+k,
				"--set-json", k+`.updateStrategy={"type":"OnDelete"}`,
				"--set-json", k+`.podSecurityContext={"runAsUser":1234,"runAsNonRoot":true}`,
				"--set-json", k+`.securityContext={"readOnlyRootFilesystem":true,"runAsGroup":4321}`)
		}
		for _, rbac := range []bool{true, false} {
			a := append(args, "--set", fmt.Sprintf("rbac.create=%v", rbac))
			for _, k := range comps {
				a = append(a, "--set", fmt.Sprintf("%s.serviceAccount.create=%v", k, rbac))
			}
			docs, err := ParseDocs(helm(t, a...))
			if err != nil {
				t.Fatal(err)
			}
			checkCommonValues(t, c.Name, rbac, docs)
		}
	}
}

func checkCommonValues(t *testing.T, chart string, rbac bool, docs []Object) {
	t.Helper()
	workloads := 0
	for _, o := range docs {
		what := fmt.Sprintf("%s rbac=%v: %s", chart, rbac, Key(o))
		kind := fmt.Sprint(o["kind"])
		body := fmt.Sprint(o)
		switch {
		case rbacKinds[kind] && !rbac:
			t.Errorf("%s: rendered with rbac.create=false", what)
		case kind == "ServiceAccount" && !rbac && strings.HasPrefix(fmt.Sprint(o["metadata"].(map[string]any)["name"]), "sa-"):
			t.Errorf("%s: rendered with serviceAccount.create=false", what)
		case kind == "ValidatingAdmissionPolicy" && strings.Contains(body, "system:serviceaccount:ns1:") &&
			!strings.Contains(body, "system:serviceaccount:ns1:sa-") && !strings.Contains(body, "swarm-worker"):
			t.Errorf("%s: the policy names the manifest's ServiceAccount, not serviceAccount.name", what)
		case kind == "RoleBinding" || kind == "ClusterRoleBinding":
			for _, s := range o["subjects"].([]any) {
				sm := s.(map[string]any)
				if sm["kind"] == "ServiceAccount" && !strings.HasPrefix(fmt.Sprint(sm["name"]), "sa-") && !strings.Contains(fmt.Sprint(sm["name"]), "worker") {
					t.Errorf("%s: subject %v is not serviceAccount.name", what, sm)
				}
			}
		}
		if kind != "Deployment" && kind != "DaemonSet" {
			continue
		}
		workloads++
		pod, _ := dig(o, []string{"spec", "template", "spec"})
		meta, _ := dig(o, []string{"spec", "template", "metadata"})
		c0 := pod["containers"].([]any)[0].(map[string]any)
		comp := fmt.Sprint(c0["name"])
		if a, _ := meta["annotations"].(map[string]any); a["example.com/a"] != comp {
			t.Errorf("%s: pod annotations %v lack podAnnotations", what, a)
		}
		if l, _ := meta["labels"].(map[string]any); l["example.com/l"] != comp || l["app.kubernetes.io/name"] == nil {
			t.Errorf("%s: pod labels %v lack podLabels or the manifest's", what, l)
		}
		env, _ := c0["env"].([]any)
		if len(env) == 0 || !reflect.DeepEqual(env[len(env)-1], map[string]any{"name": "EXTRA", "value": comp}) {
			t.Errorf("%s: env %v does not end with extraEnv", what, env)
		}
		if pod["serviceAccountName"] != "sa-"+comp {
			t.Errorf("%s: serviceAccountName %v", what, pod["serviceAccountName"])
		}
		if !reflect.DeepEqual(pod["imagePullSecrets"], []any{map[string]any{"name": "regcred"}}) {
			t.Errorf("%s: imagePullSecrets %v", what, pod["imagePullSecrets"])
		}
		for _, ci := range pod["containers"].([]any) {
			if p := ci.(map[string]any)["imagePullPolicy"]; p != "Always" {
				t.Errorf("%s: imagePullPolicy %v", what, p)
			}
		}
		if sc := pod["securityContext"]; !reflect.DeepEqual(sc, map[string]any{"runAsUser": float64(1234), "runAsNonRoot": true}) {
			t.Errorf("%s: pod securityContext %v is not podSecurityContext", what, sc)
		}
		if sc := c0["securityContext"]; !reflect.DeepEqual(sc, map[string]any{"readOnlyRootFilesystem": true, "runAsGroup": float64(4321)}) {
			t.Errorf("%s: the first container's securityContext %v is not securityContext", what, sc)
		}
		if kind == "DaemonSet" {
			if s, _ := dig(o, []string{"spec", "updateStrategy"}); s["type"] != "OnDelete" {
				t.Errorf("%s: updateStrategy %v", what, s)
			}
		}
	}
	if workloads == 0 {
		t.Errorf("%s: no workload rendered", chart)
	}
}

// TestUpdateOperatorNotesWarnWithoutSource: `helm install` of the update
// operator's chart with the default platform (slipway) and no --source for
// its agents prints a warning in its notes (the agents exit without one),
// and none once the agents have a source or run another platform.
func TestUpdateOperatorNotesWarnWithoutSource(t *testing.T) {
	e := testenv.Need(t, env)
	for _, tc := range []struct {
		set  []string
		warn bool
	}{
		{nil, true},
		{[]string{"--set", "agent.extraArgs={--source=https://mirror.example/k3os/releases/latest}"}, false},
		{[]string{"--set-json", `agent.extraEnv=[{"name":"SLIPWAY_UO_SOURCE","value":"/mnt/mirror"}]`}, false},
		{[]string{"--set", "platform=command"}, false},
	} {
		args := append([]string{"install", "notes", filepath.Join(chartsDir, "slipway-update-operator"), "--dry-run=client",
			"--namespace", "notes", "--kubeconfig", e.Kubeconfig}, tc.set...)
		out := string(helm(t, args...))
		notes := out[strings.Index(out, "NOTES:"):]
		if warned := strings.Contains(notes, "WARNING: platform is slipway and the agents have no release source"); warned != tc.warn {
			t.Errorf("%v: warning printed %v, want %v:\n%s", tc.set, warned, tc.warn, notes)
		}
	}
}
