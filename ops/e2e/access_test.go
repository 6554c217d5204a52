package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/testenv"
)

// The agents run as the manifest's ServiceAccount on their own node (the
// identity a DaemonSet pod's bound token carries), under the manifest's
// RBAC and own-Node admission policy: a call the manifest does not allow
// fails the rollout.
var agentIdentity = &testenv.Identity{
	User:   manifest.AgentUser(ns),
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
}

// accessOptions is the manifest as this package installs it: the agents'
// Jobs run the e2e image and command and read the local mirror, and the
// admission policies hold them to exactly that.
func accessOptions() manifest.Options {
	return manifest.Options{Namespace: ns, Image: "slipway:e2e", JobCommand: strings.Fields(upgradeCommand), MirrorDirs: []string{mirror},
		ReleaseSources: []string{manifest.DefaultChannelURL, slowMirrorURL}}
}

// grantAgentAccess creates the manifest's access objects before the agents start.
func grantAgentAccess(ctx context.Context, cfg *rest.Config) error {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return testenv.CreateAccess(ctx, c, manifest.AccessObjects(accessOptions()))
}

// rarelyCalled are grants the package's rollouts do not exercise, each
// with the condition under which the agent calls it.
var rarelyCalled = map[string]string{
	"namespace batch/jobs list":                   "an informer lists when the API server cannot stream its initial list (watch-list)",
	"cluster /nodes list":                         "its own Node's informer lists when the API server cannot stream its initial list (watch-list)",
	"cluster /events patch":                       "client-go's recorder folds a repeated Event into a patch of the first",
	"namespace ops.slipway.dev/nodeupdates list":  "its own NodeUpdate's informer lists when the API server cannot stream its initial list (watch-list)",
	"namespace ops.slipway.dev/nodeupdates watch": "the audit log records a watch when it ends, and the agent's own NodeUpdate's may last the whole run",
	"namespace /pods delete":                      "a day after a slot's Pod finished, its agent deletes it (ops/agent TestFinishedSlotPodsSweptAfterADay, under this RBAC)",
	"namespace /pods list":                        "the slot Pods' hourly sweep lists them (the sweep at start reads the work watches), and the pod informer lists when the API server cannot stream its initial list (watch-list)",
}

// checkAgentAccess compares what the agents and the controller called (the
// audit log, every request made as their ServiceAccounts) with the
// manifest's RBAC: no call refused, and no grant unused but those in
// rarelyCalled.
func checkAgentAccess(log string) error {
	events, err := testenv.ReadAuditAll(log)
	if err != nil {
		return err
	}
	var problems []string
	agentCluster, agentNamespaced := manifest.Rules(accessOptions())
	ctrlCluster, ctrlNamespaced := manifest.ControllerRules(accessOptions())
	for _, who := range []struct {
		user   string
		grants []string
		rarely map[string]string
	}{
		{agentIdentity.User, granted(agentCluster, agentNamespaced), rarelyCalled},
		{controllerIdentity.User, granted(ctrlCluster, ctrlNamespaced), controllerRarelyCalled},
	} {
		for _, p := range accessProblems(events, who.user, who.grants, who.rarely) {
			problems = append(problems, who.user+": "+p)
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		return fmt.Errorf("the RBAC is not what slipway calls:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// controllerRarelyCalled are the controller's grants the package's rollouts
// do not exercise, each with the condition under which it calls it.
var controllerRarelyCalled = map[string]string{
	"namespace ops.slipway.dev/updatechannels list": "an informer lists when the API server cannot stream its initial list (watch-list)",
	"namespace ops.slipway.dev/updatechannels watch": "the audit log records a watch when it ends, and the controller's lasts the whole run " +
		"(TestMain stops the API server before the controller; ops/agent's rollouts run the controller as its ServiceAccount)",
	"namespace ops.slipway.dev/updatechannels get": "a status write refused for a stale resourceVersion (another writer: a user) is retried on a fresh GET; the controller is the only status writer",
	"cluster /nodes watch":                         "the audit log records a watch when it ends, and the controller's (the nodes' reports) lasts the whole run",
	"cluster /nodes list":                          "its informer of Node metadata lists when the API server cannot stream its initial list (watch-list); a pass reads the nodes from that cache",
	"cluster /events patch":                        "client-go's recorder folds a repeated Event into a patch of the first",
	"namespace /secrets get":                       "a github-releases:// channel with spec.tokenSecretRef: the controller reads its token",
	"namespace batch/jobs get":                     "a slot held past the resync whose Pod is gone: the controller reads a Job of its name (from an agent before slot Pods) to tell it stale",
	"namespace /pods get":                          "a slot held past the resync: the controller reads its Pod to tell it stale",
	"namespace ops.slipway.dev/nodeupdates list":   "its informer of the NodeUpdates lists when the API server cannot stream its initial list (watch-list)",
	"namespace ops.slipway.dev/nodeupdates watch":  "the audit log records a watch when it ends, and the controller's lasts the whole run",
	"cluster /pods delete":                         "drain.force: pods left when the drain times out are deleted",
}

// accessProblems lists user's refused calls and its grants never called but those in rarely.
func accessProblems(events []testenv.AuditEvent, user string, grants []string, rarely map[string]string) []string {
	used, refused := map[string]bool{}, map[string]bool{}
	for _, ev := range events {
		if ev.User != user || ev.Resource == "" {
			continue
		}
		scope := "cluster"
		if ev.Namespace == ns && ev.Resource != "events" {
			scope = "namespace"
		}
		k := fmt.Sprintf("%s %s/%s %s", scope, ev.APIGroup, ev.Resource, ev.Verb)
		if ev.Code == 403 {
			refused[k+" ("+ev.Name+")"] = true
		}
		used[k] = true
	}
	var problems []string
	for k := range refused {
		problems = append(problems, "refused: "+k)
	}
	for _, k := range grants {
		if !used[k] && rarely[k] == "" {
			problems = append(problems, "granted, never called: "+k)
		}
	}
	return problems
}

// granted lists grants as "scope group/resource verb".
func granted(cluster, namespaced []rbacv1.PolicyRule) []string {
	var out []string
	for scope, rules := range map[string][]rbacv1.PolicyRule{"cluster": cluster, "namespace": namespaced} {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out = append(out, fmt.Sprintf("%s %s/%s %s", scope, g, res, v))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
