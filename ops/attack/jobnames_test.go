package attack

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"slipway.dev/slipway/ops/agent"
	v1 "slipway.dev/slipway/ops/apis/ops.slipway.dev/v1"
	"slipway.dev/slipway/ops/manifest"
)

// TestJobNamesBindOneNode: the agent of a node whose name another node's
// Job names could be taken for (a dash where the other has a dot, a long
// name that differs only near its end, one longer than a label) creates
// its own Jobs and slot Pods of every kind, and none under the other
// node's Job names (a slot Pod has its Job's name):
// a name taken would leave the other node's agent unable to create its
// Job (JobNameTaken) until its slot timed out. Before the policy bound the
// whole prefix (dots kept, the long form's head and tail), each of these
// was admitted.
func TestJobNamesBindOneNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	agentOnA(ctx, t) // the manifest's access objects
	ch := channelOf(v1.UpdateChannelSpec{URL: "file:///srv/mirror", Version: "v2"})
	since := metav1.Now()
	jobsOf := func(node string) map[string]string {
		jobs, err := agent.Jobs(agent.Options{NodeName: node, Image: agentOpts.Image, Namespace: agentOpts.Namespace}, ch,
			v1.Slot{Node: node, Version: "v2", Attempt: 1, Since: since})
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]string{}
		for kind, j := range jobs {
			names[kind] = j.Name
		}
		return names
	}
	mid := func(n int, tail string) string {
		return "gke-prod-pool-a-" + strings.Repeat("x", n-16-len(tail)) + tail
	}
	for _, tc := range []struct{ what, attacker, victim string }{
		{"a dash where the victim has a dot", "dot-a-b.lan", "dot-a.b.lan"},
		{"a name of 42 characters: literal in some kinds' prefixes, long in others'", mid(42, "-1a2b"), mid(42, "-1a2c")},
		{"a name of 44 characters at the bound of the literal form", mid(44, "-1.lan"), mid(44, "-2.lan")},
		{"a long name that differs near its end", mid(60, "-1a2b"), mid(60, "-1a2c")},
		{"a name of 63 characters that differs near its end", mid(63, "-1a2b"), mid(63, "-9a2b")},
	} {
		t.Run(tc.what, func(t *testing.T) {
			jobs := kubernetes.NewForConfigOrDie(podOn(ctx, t, agentOpts.Namespace, manifest.AgentName, tc.attacker)).BatchV1().Jobs(agentOpts.Namespace)
			own, err := agent.Jobs(agent.Options{NodeName: tc.attacker, Image: agentOpts.Image, Namespace: agentOpts.Namespace}, ch,
				v1.Slot{Node: tc.attacker, Version: "v2", Attempt: 1, Since: since})
			if err != nil {
				t.Fatal(err)
			}
			victim := jobsOf(tc.victim)
			ownPods, err := agent.SlotPods(agent.Options{NodeName: tc.attacker, Image: agentOpts.Image, Namespace: agentOpts.Namespace}, ch,
				v1.Slot{Node: tc.attacker, Version: "v2", Attempt: 1, Since: since})
			if err != nil {
				t.Fatal(err)
			}
			waitPolicy(t, "upgrade Jobs", func() error {
				j := own[agent.JobUpgrade].DeepCopy()
				j.Spec.Template.Spec.NodeName = tc.victim
				_, err := jobs.Create(ctx, j, metav1.CreateOptions{DryRun: dryRun})
				return err
			})
			for kind, j := range own {
				if _, err := jobs.Create(ctx, j, metav1.CreateOptions{DryRun: dryRun}); err != nil {
					t.Errorf("%s: the agent's own %s Job %s is refused: %v", tc.attacker, kind, j.Name, err)
				}
				squat := j.DeepCopy()
				squat.Name = victim[kind]
				_, err := jobs.Create(ctx, squat, metav1.CreateOptions{DryRun: dryRun})
				if why := refused(err, "named after the agent's own node"); why != "" {
					t.Errorf("%s took %s's %s Job name %s: %s", tc.attacker, tc.victim, kind, squat.Name, why)
				}
			}
			// Its slot Pods: the name of the Job each stands for.
			pods := kubernetes.NewForConfigOrDie(podOn(ctx, t, agentOpts.Namespace, manifest.AgentName, tc.attacker)).CoreV1().Pods(agentOpts.Namespace)
			waitPodPolicy(ctx, t, pods, ownPods[agent.PodUpgrade])
			for kind, p := range ownPods {
				if _, err := pods.Create(ctx, p, metav1.CreateOptions{DryRun: dryRun}); err != nil {
					t.Errorf("%s: the agent's own %s Pod %s is refused: %v", tc.attacker, kind, p.Name, err)
				}
				squat := p.DeepCopy()
				squat.Name = victim[kind]
				_, err := pods.Create(ctx, squat, metav1.CreateOptions{DryRun: dryRun})
				if why := refused(err, "named after the agent's own node"); why != "" {
					t.Errorf("%s took %s's %s Pod name %s: %s", tc.attacker, tc.victim, kind, squat.Name, why)
				}
			}
		})
	}
}
