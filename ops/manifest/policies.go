package manifest

import (
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"slipway.dev/slipway/ops/admission"
)

// The admission policies that hold the agent to its own node where RBAC
// cannot (RBAC names verbs and resources, not whose node an object is
// about or what it holds). Each refusal comes from the API server, so a
// compromised agent cannot skip it. docs/security.md lists what each
// refuses; the attack suite (ops/attack) tries each with an agent's own
// bound token.

// HeartbeatLeasePrefix names the Lease the agent writes, its heartbeat
// (ops/protocol's AgentLeasePrefix; a test in ops/protocol keeps them equal).
const HeartbeatLeasePrefix = "slipway-agent-"

// JobCapabilities are the capabilities an upgrade Job may add (see ops/agent's buildJob).
var JobCapabilities = []string{"SYS_ADMIN", "CHOWN", "FOWNER", "DAC_OVERRIDE"}

// The Job contract the Job policy checks: ops/protocol's keys and values
// (a test in ops/protocol keeps them equal). JobNodeKey is the node label
// and annotation on a Job and its pod; JobActionKey the action annotation,
// one of JobActions ("" on a slot's upgrade Job); a Job's name starts
// with its kind (the action, or JobKindUpgrade), the length of its node's
// name and the node's name (protocol.JobNamePrefix).
const (
	JobNodeKey     = "ops.slipway.dev/node"
	JobActionKey   = "ops.slipway.dev/action"
	JobKindUpgrade = "upgrade"
)

// JobActions are the values of JobActionKey.
var JobActions = []string{"", "stage", "prune", "rollback"}

// JobCommands are the slipway commands an agent's Job may run.
var JobCommands = []string{"upgrade", "rollback", "prune"}

// policies are the admission policies: the agent's own Node, its Jobs'
// shape and node, its Leases, the controller's Lease and Node writes, the
// channels' resolved source.
func policies(o Options) []any {
	var out []any
	for _, objs := range [][]any{ownNodePolicy(o).Objects(), jobPolicy(o).Objects(), leasePolicy(o).Objects(), controllerLeasePolicy(o).Objects(),
		controllerNodePolicy(o).Objects(), sourcePolicy(o).Objects()} {
		out = append(out, objs...)
	}
	return out
}

// jobPolicy admits a Job created by the agent only in slipway's shape:
// pinned to the agent's own node, one container running the Job image
// with `slipway ops upgrade|rollback|prune`, no API token, no host
// namespaces, only the capabilities a swap needs, and hostPath volumes only
// for the system directory, the lock directory and (read-only) a mirror
// directory the manifest names.
func jobPolicy(o Options) admission.UserPolicy {
	images := append([]string{o.Image}, o.JobImages...)
	mirrors := o.mirrorDirs()
	m := func(format string, a ...any) string {
		return "the slipway agent may create only slipway's upgrade Jobs: " + fmt.Sprintf(format, a...)
	}
	return admission.UserPolicy{
		Name: AgentName + "-jobs-" + o.Namespace, Labels: labels("agent"), Users: []string{AgentUser(o.Namespace)}, Namespace: o.Namespace,
		Group: "batch", Version: "v1", Resource: "jobs", Operations: []admissionv1.OperationType{admissionv1.Create},
		Variables: append([]admissionv1.Variable{
			{Name: "node", Expression: admission.RequesterNode},
			{Name: "pod", Expression: "object.spec.template.spec"},
			{Name: "c", Expression: "object.spec.template.spec.containers[0]"},
			{Name: "args", Expression: "variables.c.?args.orValue([])"},
			{Name: "si", Expression: "variables.args.indexOf('--source')"},
			{Name: "source", Expression: "variables.si >= 0 && variables.si + 1 < size(variables.args) ? variables.args[variables.si + 1] : ''"},
		}, identityVariables()...),
		Validations: append([]admissionv1.Validation{
			{Expression: "variables.node != '' && variables.pod.?nodeName.orValue('') == variables.node",
				Message: m("pinned (spec.template.spec.nodeName) to the node the agent runs on")}}, append(identityValidations(m), []admissionv1.Validation{
			{Expression: "size(variables.pod.containers) == 1 && !has(variables.pod.initContainers) && !has(variables.pod.ephemeralContainers)",
				Message: m("one container")},
			{Expression: "variables.c.image in " + admission.CELList(images), Message: m("image one of %v", images)},
			{Expression: fmt.Sprintf("variables.c.?command.orValue([]) == %s && size(variables.c.?args.orValue([])) >= 2 && variables.c.args[0] == 'ops' && variables.c.args[1] in %s",
				admission.CELList(o.jobCommand()), admission.CELList(JobCommands)),
				Message: m("command %v ops %v", o.jobCommand(), JobCommands)},
			{Expression: "!variables.args.exists(a, a.matches('^--?source(=.*)?$') && a != '--source') && variables.si == variables.args.lastIndexOf('--source')",
				Message: m("one release source at most, written `--source URL`")},
			{Expression: o.sourceAllowed(), Message: m("an upgrade's --source one of %v, their GitHub repositories' download addresses (%s<owner>/<repo>/releases), "+
				"or under a mirror directory %v; to allow another, add it to the manifest (`slipway ops manifest --release-source URL`, the chart's releaseSources)",
				o.releaseSources(), o.GitHubDownloadBase, o.mirrorDirs())},
			{Expression: "!variables.pod.?hostPID.orValue(false) && !variables.pod.?hostNetwork.orValue(false) && !variables.pod.?hostIPC.orValue(false)",
				Message: m("no host PID, network or IPC namespace")},
			{Expression: "variables.pod.?automountServiceAccountToken.orValue(true) == false && variables.pod.?serviceAccountName.orValue('default') == 'default' && variables.pod.?serviceAccount.orValue('default') == 'default'",
				Message: m("no ServiceAccount token")},
			{Expression: "!variables.c.?securityContext.?privileged.orValue(false) && variables.c.?securityContext.?allowPrivilegeEscalation.orValue(true) == false && " +
				"variables.c.?securityContext.?capabilities.?add.orValue([]).all(x, x in " + admission.CELList(JobCapabilities) + ")",
				Message: m("not privileged, no privilege escalation, capabilities among %v", JobCapabilities)},
			{Expression: fmt.Sprintf("variables.pod.?volumes.orValue([]).all(v, has(v.hostPath) && (v.name == 'system' && v.hostPath.path == %q || v.name == 'lock' && v.hostPath.path == %q || v.name == 'mirror' && v.hostPath.path in %s))",
				o.HostSystemDir, o.HostLockDir, admission.CELList(mirrors)),
				Message: m("volumes only the host's %s, %s and the mirror directories %v", o.HostSystemDir, o.HostLockDir, mirrors)},
			{Expression: "variables.c.?volumeMounts.orValue([]).all(v, v.name != 'mirror' || v.?readOnly.orValue(false)) && !has(variables.c.volumeDevices)",
				Message: m("the mirror mounted read-only")},
			{Expression: "!has(variables.c.envFrom) && variables.c.?env.orValue([]).all(e, e.name == 'GITHUB_TOKEN' && e.?valueFrom.?secretKeyRef.?name.orValue('') in " +
				admission.CELList(o.tokenSecrets()) + ")",
				Message: m("no environment but GITHUB_TOKEN from the token Secrets %v", o.tokenSecrets())},
		}...)...),
	}
}

// identityVariables are the CEL variables of a Job's identity: its kind
// (from its action annotation) and the name prefix of the requester's
// node's Jobs of that kind (protocol.JobNamePrefix).
func identityVariables() []admissionv1.Variable {
	return []admissionv1.Variable{
		{Name: "action", Expression: fmt.Sprintf("object.metadata.?annotations[?%q].orValue('')", JobActionKey)},
		{Name: "kind", Expression: fmt.Sprintf("variables.action == '' ? %q : variables.action", JobKindUpgrade)},
		{Name: "prefix", Expression: "variables.kind + '-' + string(size(variables.node)) + '-' + variables.node.lowerAscii().replace('.', '-') + '-'"},
		// protocol.LabelValue of the node: itself up to 63 characters, else cut with a hash.
		{Name: "nodeLabel", Expression: "size(variables.node) <= 63 ? [variables.node] : []"},
	}
}

// identityValidations bind every identity a reader of Jobs trusts to the
// requester's node: the name (under its node's prefix for the Job's kind:
// no agent can take a name another node's agent will create), the node
// label and annotation on the Job and on its pod template, the action on
// both. Readers take a Job for a node's only when it is pinned to that
// node (protocol.JobOfNode); these make its name and labels say the same.
func identityValidations(m func(string, ...any) string) []admissionv1.Validation {
	label := func(path string) string {
		v := fmt.Sprintf("%s.?labels[?%q].orValue('')", path, JobNodeKey)
		return fmt.Sprintf("(size(variables.nodeLabel) == 1 ? %[1]s == variables.node : size(%[1]s) == 63 && %[1]s.startsWith(variables.node.substring(0, 50)))", v)
	}
	ann := func(path, key string) string { return fmt.Sprintf("%s.?annotations[?%q].orValue('')", path, key) }
	kinds := admission.CELList(JobActions)
	return []admissionv1.Validation{
		{Expression: "variables.action in " + kinds + " && " + ann("object.spec.template.metadata", JobActionKey) + " == variables.action",
			Message: m("the action annotation %s one of %s, the same on the Job and its pod", JobActionKey, kinds)},
		{Expression: "!has(object.metadata.generateName) && object.metadata.name.startsWith(size(variables.prefix) <= 54 ? variables.prefix : variables.prefix.substring(0, 50))",
			Message: m("named after the agent's own node: <kind>-<length of the node's name>-<node>-..., kind upgrade, stage, prune or rollback (its action)")},
		{Expression: ann("object.metadata", JobNodeKey) + " == variables.node && " + ann("object.spec.template.metadata", JobNodeKey) + " == variables.node",
			Message: m("annotated %s=<the agent's own node> on the Job and its pod", JobNodeKey)},
		{Expression: label("object.metadata") + " && " + label("object.spec.template.metadata"),
			Message: m("labelled %s=<the agent's own node> on the Job and its pod", JobNodeKey)},
	}
}

// leasePolicy lets the agent write only its own heartbeat Lease (named
// after its node, held by its node): no other node's heartbeat, no
// election Lease, no foreign Lease.
func leasePolicy(o Options) admission.UserPolicy {
	return admission.UserPolicy{
		Name: AgentName + "-leases-" + o.Namespace, Labels: labels("agent"), Users: []string{AgentUser(o.Namespace)}, Namespace: o.Namespace,
		Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Variables: []admissionv1.Variable{{Name: "node", Expression: admission.RequesterNode}},
		Validations: []admissionv1.Validation{{
			Expression: fmt.Sprintf("variables.node != '' && object.metadata.name == %q + variables.node && object.spec.?holderIdentity.orValue('') == variables.node",
				HeartbeatLeasePrefix),
			Message: "the slipway agent may write only its own node's heartbeat Lease (" + HeartbeatLeasePrefix + "<its node>, held by its node)",
		}},
	}
}

// sourcePolicy pins status.resolved.source of a github-releases:// channel
// to the download address of that channel's own repository (or the
// channel URL itself, for a private repository whose Jobs use the API):
// a status writer cannot point every node's Job at another release.
func sourcePolicy(o Options) admission.UserPolicy {
	base := o.GitHubDownloadBase
	return admission.UserPolicy{
		Name: AgentName + "-resolved-source-" + o.Namespace, Labels: labels("channel"), Namespace: o.Namespace,
		Group: "ops.slipway.dev", Version: "v1", Resource: "updatechannels/status", Operations: []admissionv1.OperationType{admissionv1.Update},
		Variables: []admissionv1.Variable{
			{Name: "path", Expression: "object.spec.url.startsWith('github-releases://') ? object.spec.url.substring(18) : ''"},
			{Name: "repo", Expression: "variables.path.endsWith('/') ? variables.path.substring(0, size(variables.path) - 1) : variables.path"},
			{Name: "source", Expression: "has(object.status.resolved) ? object.status.resolved.?source.orValue('') : ''"},
		},
		Validations: []admissionv1.Validation{{
			Expression: fmt.Sprintf("variables.repo == '' || variables.source == '' || variables.source == object.spec.url || variables.source == %q + variables.repo + '/releases'", base),
			Message:    "status.resolved.source of a github-releases:// channel must be its own repository's download address (" + base + "<owner>/<repo>/releases) or the channel URL",
		}},
	}
}

// sourceAllowed is the CEL test of a Job's release source (variables.source,
// after its only --source): none for a rollback or a prune; for an
// upgrade, one of the release sources, the download address of a
// github-releases:// one's repository, or a path under a mirror
// directory (file:// or bare), never with "..".
func (o Options) sourceAllowed() string {
	sources := admission.CELList(o.releaseSources())
	return fmt.Sprintf("variables.si < 0 ? !(size(variables.args) >= 2 && variables.args[1] == 'upgrade') : "+
		"!variables.source.contains('..') && (variables.source in %[1]s || "+
		"%[1]s.exists(u, u.startsWith('github-releases://') && variables.source == %[2]q + (u.endsWith('/') ? u.substring(18, size(u) - 1) : u.substring(18)) + '/releases') || "+
		"%[3]s.exists(d, [d, 'file://' + d].exists(p, variables.source == p || variables.source.startsWith(p + '/'))))",
		sources, o.GitHubDownloadBase, admission.CELList(o.mirrorDirs()))
}

// releaseSources are the sources an upgrade Job may name (ReleaseSources,
// or the default channel's URL).
func (o Options) releaseSources() []string {
	if len(o.ReleaseSources) > 0 {
		return slices.Clone(o.ReleaseSources)
	}
	if o.Channel.URL != "" {
		return []string{o.Channel.URL}
	}
	return []string{DefaultChannelURL}
}

func (o Options) mirrorDirs() []string {
	if o.MirrorDirs == nil {
		return []string{}
	}
	return o.MirrorDirs
}

// tokenSecrets are the Secrets a Job may read its GitHub token from.
func (o Options) tokenSecrets() []string {
	out := slices.Clone(o.TokenSecrets)
	if len(out) == 0 {
		out = []string{DefaultTokenSecret}
	}
	return out
}

func (o Options) jobCommand() []string {
	if len(o.JobCommand) == 0 {
		return []string{"slipway"}
	}
	return o.JobCommand
}
