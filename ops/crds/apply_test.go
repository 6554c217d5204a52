package crds_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	opsv1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/crds"
	"slipway.dev/slipway/ops/generated/clientset/versioned"
	"slipway.dev/slipway/ops/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{}, &env)) }

func TestApplyAgainstAPIServer(t *testing.T) {
	e := testenv.Need(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Twice: the first creates, the second updates what exists.
	for i := 0; i < 2; i++ {
		if err := crds.Apply(ctx, e.Config, "ops.slipway.dev"); err != nil {
			t.Fatalf("apply %d: %v", i+1, err)
		}
	}
	ext, err := apiextclient.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "updatechannels.ops.slipway.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !crds.Established(crd) {
		t.Fatal("Apply returned before the CRD was Established")
	}

	client, err := versioned.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	api := client.OpsV1().UpdateChannels("default")
	got, err := api.Create(ctx, &opsv1.UpdateChannel{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults"},
		Spec:       opsv1.UpdateChannelSpec{URL: "github-releases://example/os"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a minimal UpdateChannel: %v", err)
	}
	s := got.Spec
	checks := []struct {
		name      string
		got, want any
	}{
		{"concurrency", s.Concurrency, 1},
		{"maxFailures", s.MaxFailures, 1},
		{"pollInterval", s.PollInterval, &metav1.Duration{Duration: 15 * time.Minute}},
		{"rebootDelay", s.RebootDelay, &metav1.Duration{Duration: 5 * time.Second}},
		{"upgradeTimeout", s.UpgradeTimeout, &metav1.Duration{Duration: 15 * time.Minute}},
		{"nodeReadyTimeout", s.NodeReadyTimeout, &metav1.Duration{Duration: 10 * time.Minute}},
	}
	for _, c := range checks {
		if !equalValue(c.got, c.want) {
			t.Errorf("server default %s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if s.Drain == nil || s.Drain.Enabled == nil || !*s.Drain.Enabled || s.Drain.IgnoreDaemonSets == nil || !*s.Drain.IgnoreDaemonSets ||
		s.Drain.Timeout == nil || s.Drain.Timeout.Duration != 10*time.Minute {
		t.Errorf("server default drain = %+v", s.Drain)
	}
	if c := s.Components; c == nil || !*c.Rootfs || !*c.Kernel || *c.K3s {
		t.Errorf("server default components = %+v", c)
	}

	// Status goes through its subresource.
	got.Status.LatestVersion = "v2"
	got.Status.Counts.Nodes = 3
	if _, err := api.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}

	// Cheap schema validation rejects what can never work.
	for _, bad := range []opsv1.UpdateChannelSpec{
		{URL: "x", Concurrency: -1},
		{URL: "x", MaxFailures: -2},
	} {
		_, err := api.Create(ctx, &opsv1.UpdateChannel{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-"}, Spec: bad}, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "should be greater than or equal to 1") {
			t.Errorf("spec %+v: err = %v, want a minimum violation", bad, err)
		}
	}
}

func equalValue(got, want any) bool {
	switch w := want.(type) {
	case *metav1.Duration:
		g, ok := got.(*metav1.Duration)
		return ok && g != nil && g.Duration == w.Duration
	default:
		return got == want
	}
}
