package eds

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1 "slipway.dev/slipway/ops/apis/eds.slipway.dev/v1alpha1"
)

// Manifests in the shape of DataDog's datadoghq.com/v1alpha1 examples, with
// only apiVersion changed: strict decoding proves every field is one of
// ours, and the API server accepts them with its schema and CEL rules.
var dataDogShaped = []string{`
apiVersion: eds.slipway.dev/v1alpha1
kind: ExtendedDaemonSet
metadata:
  name: shaped-v1
spec:
  strategy:
    canary:
      replicas: 1
      duration: 5m
      autoFail:
        enabled: true
        canaryTimeout: 10m
      autoPause:
        enabled: true
        maxRestarts: 5
    rollingUpdate:
      maxParallelPodCreation: 1
      maxUnavailable: 2
      slowStartIntervalDuration: 1m
  template:
    spec:
      containers:
      - name: daemon
        image: example/daemon:1
      tolerations:
      - operator: Exists
`, `
apiVersion: eds.slipway.dev/v1alpha1
kind: ExtendedDaemonSet
metadata:
  name: shaped-restarts
spec:
  selector:
    matchLabels:
      pool: daemons
  strategy:
    reconcileFrequency: 5s
    canary:
      replicas: 10%
      duration: 3m
      noRestartsDuration: 1m
      nodeSelector:
        matchLabels:
          canary: allowed
      nodeAntiAffinityKeys: [topology.kubernetes.io/zone]
      validationMode: auto
      autoPause:
        enabled: true
        maxRestarts: 2
        maxSlowStartDuration: 2m
      autoFail:
        enabled: true
        maxRestarts: 5
        maxRestartsDuration: 10m
    rollingUpdate:
      maxParallelPodCreation: 5
      maxUnavailable: 20%
      maxPodSchedulerFailure: 1
      slowStartIntervalDuration: 30s
      slowStartAdditiveIncrease: 25%
  template:
    metadata:
      labels:
        app: shaped
    spec:
      containers:
      - name: daemon
        image: example/daemon:2
        command: ["run", "--flag"]
`, `
apiVersion: eds.slipway.dev/v1alpha1
kind: ExtendedDaemonSet
metadata:
  name: shaped-manual
spec:
  strategy:
    canary:
      replicas: 1
      validationMode: manual
  template:
    spec:
      containers:
      - name: daemon
        image: example/daemon:3
`}

func TestDataDogShapedManifestsApply(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	ctx := context.Background()
	for _, doc := range dataDogShaped {
		var e v1.ExtendedDaemonSet
		if err := yaml.UnmarshalStrict([]byte(doc), &e); err != nil {
			t.Fatalf("a field is not ours: %v\n%s", err, doc)
		}
		got, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Create(ctx, &e, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s refused: %v", e.Name, err)
		}
		ru := got.Spec.Strategy.RollingUpdate
		if got.Spec.Strategy.ReconcileFrequency == nil || ru.MaxUnavailable == nil || ru.MaxParallelPodCreation == nil || ru.SlowStartAdditiveIncrease == nil {
			t.Errorf("%s: schema defaults not applied: %+v", e.Name, got.Spec.Strategy)
		}
		if c := got.Spec.Strategy.Canary; c.AutoFail == nil || c.AutoFail.MaxRestarts == nil || c.AutoPause == nil || c.AutoPause.MaxRestarts == nil {
			t.Errorf("%s: canary defaults not applied: %+v", e.Name, c)
		}
	}
	setting := `
apiVersion: eds.slipway.dev/v1alpha1
kind: ExtendedDaemonsetSetting
metadata:
  name: shaped-setting
spec:
  reference:
    kind: ExtendedDaemonset
    name: shaped-v1
  nodeSelector:
    matchLabels:
      overwrite: shaped
  containers:
  - name: daemon
    resources:
      requests:
        cpu: "0.1"
        memory: 30Mi
`
	var s v1.ExtendedDaemonsetSetting
	if err := yaml.UnmarshalStrict([]byte(setting), &s); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eds.EdsV1alpha1().ExtendedDaemonsetSettings(h.ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("setting refused: %v", err)
	}
}

func TestCELRulesRefuseBadCanaries(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	ctx := context.Background()
	bad := map[string]string{
		"autoFail below autoPause": `{"canary":{"autoPause":{"maxRestarts":4},"autoFail":{"maxRestarts":3}}}`,
		"timeout within duration":  `{"canary":{"duration":"10m","autoFail":{"canaryTimeout":"5m"}}}`,
		"manual with a duration":   `{"canary":{"validationMode":"manual","duration":"1m"}}`,
		"unknown validation mode":  `{"canary":{"validationMode":"sometimes"}}`,
	}
	for name, strategy := range bad {
		doc := `{"apiVersion":"eds.slipway.dev/v1alpha1","kind":"ExtendedDaemonSet","metadata":{"name":"bad"},"spec":{"strategy":` + strategy +
			`,"template":{"spec":{"containers":[{"name":"d","image":"x"}]}}}}`
		var e v1.ExtendedDaemonSet
		if err := yaml.UnmarshalStrict([]byte(doc), &e); err != nil {
			t.Fatal(err)
		}
		_, err := h.eds.EdsV1alpha1().ExtendedDaemonSets(h.ns).Create(ctx, &e, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "spec.strategy.canary") {
			t.Errorf("%s: %v, want a refusal naming spec.strategy.canary", name, err)
		}
	}
}

// Issue 24 items 2 and 11: what the controller could not decode or act on
// is refused at admission: a duration Go cannot parse ("1d"), and a name
// whose ERS names would not fit a pod label.
func TestAdmissionRefusesBadDurationsAndLongNames(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t)
	ctx := context.Background()
	withContainer := func(name, strategy, container string) []byte {
		return []byte(`{"apiVersion":"eds.slipway.dev/v1alpha1","kind":"ExtendedDaemonSet","metadata":{"name":"` + name + `"},"spec":{"strategy":` + strategy +
			`,"template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[` + container + `]}}}}`)
	}
	doc := func(name, strategy string) []byte { return withContainer(name, strategy, `{"name":"d","image":"x"}`) }
	setting := func(cpu string) []byte {
		return []byte(`{"apiVersion":"eds.slipway.dev/v1alpha1","kind":"ExtendedDaemonsetSetting","metadata":{"generateName":"s-"},"spec":{"reference":{"kind":"ExtendedDaemonSet","name":"a"},` +
			`"nodeSelector":{},"containers":[{"name":"d","resources":{"requests":{"cpu":` + cpu + `}}}]}}`)
	}
	create := func(raw []byte) error {
		resource := "extendeddaemonsets"
		if strings.Contains(string(raw), "ExtendedDaemonsetSetting") {
			resource = "extendeddaemonsetsettings"
		}
		return h.eds.EdsV1alpha1().RESTClient().Post().Namespace(h.ns).Resource(resource).
			Body(raw).SetHeader("Content-Type", "application/json").Do(ctx).Error()
	}
	bad := map[string]struct {
		doc  []byte
		want string
	}{
		"canary duration 1d":          {doc("a", `{"canary":{"duration":"1d"}}`), "spec.strategy.canary.duration"},
		"reconcileFrequency in words": {doc("a", `{"reconcileFrequency":"ten seconds"}`), "spec.strategy.reconcileFrequency"},
		"slow start interval 5":       {doc("a", `{"rollingUpdate":{"slowStartIntervalDuration":"5"}}`), "slowStartIntervalDuration"},
		"canaryTimeout 2 days":        {doc("a", `{"canary":{"autoFail":{"canaryTimeout":"2d"}}}`), "canaryTimeout"},
		"a name of 53 characters":     {doc(strings.Repeat("a", 53), `{}`), "at most 52 characters"},
		// The pod template and resources have their real schemas (item 2).
		"containerPort a string": {withContainer("a", `{}`, `{"name":"d","image":"x","ports":[{"containerPort":"8080"}]}`),
			"spec.template.spec.containers[0].ports[0].containerPort: Invalid value: \"string\""},
		"cpu of 1 core": {withContainer("a", `{}`, `{"name":"d","image":"x","resources":{"limits":{"cpu":"1 core"}}}`),
			"spec.template.spec.containers[0].resources.limits.cpu: Invalid value: \"1 core\""},
		"a container without a name": {withContainer("a", `{}`, `{"image":"x"}`), "spec.template.spec.containers[0].name: Required value"},
		"setting cpu of 1 core":      {setting(`"1 core"`), "spec.containers[0].resources.requests.cpu: Invalid value: \"1 core\""},
	}
	for name, tc := range bad {
		if err := create(tc.doc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming %s", name, err, tc.want)
		}
	}
	for _, ok := range [][]byte{doc("ok", `{"canary":{"duration":"1h30m","noRestartsDuration":"90s","autoFail":{"canaryTimeout":"2h"}},"reconcileFrequency":"1.5s"}`),
		doc(strings.Repeat("b", 52), `{}`),
		withContainer("ports", `{}`, `{"name":"d","image":"x","ports":[{"containerPort":8080,"hostPort":8080}],"resources":{"limits":{"cpu":"500m","memory":"1Gi"},"requests":{"cpu":1}}}`),
		setting(`"250m"`)} {
		if err := create(ok); err != nil {
			t.Errorf("refused %s: %v", ok, err)
		}
	}
}
