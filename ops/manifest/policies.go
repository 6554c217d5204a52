package manifest

import (
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

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
	JobChannelKey  = "ops.slipway.dev/channel"
	JobKindUpgrade = "upgrade"
	AppNameKey     = "app.kubernetes.io/name"
	UpgradeAppName = "slipway-upgrade"
	ManagedByKey   = "app.kubernetes.io/managed-by"
	AgentManagedBy = "slipway-agent"
)

// The bounds of a Job's name prefix (protocol.JobPrefixMax, JobNodeHead,
// JobNodeTail; a test in ops/protocol keeps them equal).
const (
	JobPrefixMax = 54
	JobNodeHead  = 24
	JobNodeTail  = 15
)

// JobActions are the values of JobActionKey.
var JobActions = []string{"", "stage", "prune", "rollback"}

// JobCommands are the slipway commands an agent's Job may run.
var JobCommands = []string{"upgrade", "rollback", "prune"}

// policies are the admission policies: the agent's own Node, its Jobs'
// and slot Pods' shape and node, its Leases, its NodeUpdate's status, the controller's
// Lease, Node and NodeUpdate writes, the channels' resolved source.
func policies(o Options) []any {
	var out []any
	all := [][]any{ownNodePolicy(o).Objects(), jobPolicy(o).Objects(), leasePolicy(o).Objects(), controllerLeasePolicy(o).Objects(),
		controllerNodePolicy(o).Objects(), sourcePolicy(o).Objects(), eventPolicy(o).Objects(), nodeUpdatePolicy(o).Objects(),
		controllerNodeUpdatePolicy(o).Objects()}
	if o.SlotPods() {
		all = append(all, slotPodPolicy(o).Objects(), slotPodDeletePolicy(o).Objects())
	}
	for _, objs := range all {
		out = append(out, objs...)
	}
	return out
}

// SlotPods reports whether the agents run a slot's work in Pods of their
// own (ops/agent's SlotPods), with the rights and policies for them: under
// the policy isolation. Under the webhook isolation a slot's work stays a
// Job: the webhook's own pod runs in slipway's namespace, and a webhook
// that had to admit every pod created there could not admit its own
// replacement once its pod is gone (nor let the old one be deleted).
func (o Options) SlotPods() bool { return o.Isolation != IsolationWebhook }

// jobPolicy admits a Job created by the agent only in slipway's shape: an
// allow-list, the whole Job compared with the canonical Job of its kind
// (upgrade, activate, stage, prune, rollback: ops/agent's buildJob and its
// variants) with holes only for what differs between two legitimate Jobs
// (the version, the channel, the attempt, the deadline, the release
// source, the token Secret, the mirror directory). Every other field is
// absent or at its default. Its identity (name, node label and
// annotation, pod template's) is bound to the agent's own node.
func jobPolicy(o Options) admission.UserPolicy {
	m := func(format string, a ...any) string {
		return "the slipway agent may create only slipway's upgrade Jobs: " + fmt.Sprintf(format, a...)
	}
	return admission.UserPolicy{
		Name: AgentName + "-jobs-" + o.Namespace, Labels: labels("agent"), Users: []string{AgentUser(o.Namespace)}, Namespace: o.Namespace,
		Group: "batch", Version: "v1", Resource: "jobs", Operations: []admissionv1.OperationType{admissionv1.Create},
		Variables:   podVariables(jobPod),
		Validations: append(append(podIdentity(jobPod, m), jobShape(o, m)...), podShape(o, jobPod, m)...),
	}
}

// slotPodPolicy admits a Pod created by the agent only as a slot's Pod
// (ops/agent's SlotPods: the slot Job's pod, bound to the node, with the
// Job's deadline): the canonical comparison of jobPolicy on the Pod
// itself, of a slot's kinds only (an upgrade, an activation, a rollback
// slot's rollback: the staging, pruning and rollback Jobs stay Jobs),
// bound (spec.nodeName) to the agent's own node, with no owner: an owner
// the requester names is read by the garbage collector, a party that
// deletes, and by readers that trust a pod's controller.
func slotPodPolicy(o Options) admission.UserPolicy {
	m := func(format string, a ...any) string {
		return "the slipway agent may create only slipway's slot Pods: " + fmt.Sprintf(format, a...)
	}
	return admission.UserPolicy{
		Name: AgentName + "-slot-pods-" + o.Namespace, Labels: labels("agent"), Users: []string{AgentUser(o.Namespace)}, Namespace: o.Namespace,
		Group: "", Version: "v1", Resource: "pods", Operations: []admissionv1.OperationType{admissionv1.Create},
		Variables:   podVariables(barePod),
		Validations: append(append(podIdentity(barePod, m), slotPodShape(m)...), podShape(o, barePod, m)...),
	}
}

// slotPodDeletePolicy lets the agent delete only its own node's slot Pods
// (it deletes them a day after they finished, JobTTL): bound to its node,
// labelled as slipway's upgrade, with no owner (protocol.SlotPodOfNode).
// No other pod: not another node's, not a Job's, not a component's.
func slotPodDeletePolicy(o Options) admission.UserPolicy {
	return admission.UserPolicy{
		Name: AgentName + "-slot-pod-deletes-" + o.Namespace, Labels: labels("agent"), Users: []string{AgentUser(o.Namespace)}, Namespace: o.Namespace,
		Group: "", Version: "v1", Resource: "pods", Operations: []admissionv1.OperationType{admissionv1.Delete},
		Variables: []admissionv1.Variable{{Name: "node", Expression: admission.RequesterNode}},
		Validations: []admissionv1.Validation{{
			Expression: fmt.Sprintf("variables.node != '' && oldObject.spec.?nodeName.orValue('') == variables.node && "+
				"oldObject.metadata.?labels[?%q].orValue('') == %q && !has(oldObject.metadata.ownerReferences)", AppNameKey, UpgradeAppName),
			Message: fmt.Sprintf("the slipway agent may delete only its own node's slot Pods (bound to the node its token is bound to, labelled %s=%s, no owner)",
				AppNameKey, UpgradeAppName),
		}},
	}
}

// podAt is where a policy finds the pod it checks: a Job's pod template
// (jobPod) or a Pod itself (barePod). The pod's checks are the same on
// both (podShape, podIdentity); only their paths and words differ.
type podAt struct {
	meta, spec string // CEL paths of the pod's metadata and spec
	// on names in messages what carries the identity: "the Job and its pod".
	on string
	// job: the pod is a Job's template (the Job's own metadata is checked too).
	job bool
	// extraSpec are the pod spec's fields beyond a Job template's: what a
	// bare Pod holds that a Job's controller would have set.
	extraSpec []string
}

var (
	jobPod  = podAt{meta: "object.spec.template.metadata", spec: "object.spec.template.spec", on: "the Job and its pod", job: true}
	barePod = podAt{meta: "object.metadata", spec: "object.spec", on: "the Pod",
		extraSpec: []string{"activeDeadlineSeconds", "serviceAccountName", "serviceAccount", "priority", "priorityClassName", "preemptionPolicy"}}
)

// podVariables are the CEL variables of the pod at: the requester's node,
// the pod spec, its container, arguments, release source and security
// context, and its identity (identityVariables).
func podVariables(at podAt) []admissionv1.Variable {
	c := at.spec + ".containers[0]"
	return append([]admissionv1.Variable{
		{Name: "node", Expression: admission.RequesterNode},
		{Name: "pod", Expression: at.spec},
		{Name: "c", Expression: c},
		{Name: "args", Expression: "variables.c.?args.orValue([])"},
		{Name: "si", Expression: "variables.args.indexOf('--source')"},
		{Name: "source", Expression: "variables.si >= 0 && variables.si + 1 < size(variables.args) ? variables.args[variables.si + 1] : ''"},
		{Name: "sc", Expression: c + ".securityContext"},
	}, identityVariables()...)
}

// podIdentity: the pod bound to the requester's node (spec.nodeName) and
// every identity a reader trusts its own (identityValidations).
func podIdentity(at podAt, m func(string, ...any) string) []admissionv1.Validation {
	return append([]admissionv1.Validation{
		{Expression: "variables.node != '' && variables.pod.?nodeName.orValue('') == variables.node",
			Message: m("pinned (%s.nodeName) to the node the agent runs on", strings.TrimPrefix(at.spec, "object."))}},
		identityValidations(at, m)...)
}

// podShape is the canonical comparison of the pod at with slipway's
// (ops/agent's buildJob and its variants): its spec, its one container,
// what it runs and what it mounts (podSpecShape, podWork).
func podShape(o Options, at podAt, m func(string, ...any) string) []admissionv1.Validation {
	return append(podSpecShape(o, at, m), podWork(o, at, m)...)
}

// podWork: the pod's one container runs slipway's image and one of its
// commands with slipway's flags, mounts the host's system and lock
// directories (and a mirror) only, and reads only the token Secret.
func podWork(o Options, at podAt, m func(string, ...any) string) []admissionv1.Validation {
	images := append([]string{o.Image}, o.JobImages...)
	mirrors := o.mirrorDirs()
	return []admissionv1.Validation{
		{Expression: "size(variables.pod.containers) == 1 && !has(variables.pod.initContainers) && !has(variables.pod.ephemeralContainers)",
			Message: m("one container")},
		{Expression: "variables.c.image in " + admission.CELList(images), Message: m("image one of %v", images)},
		{Expression: fmt.Sprintf("variables.c.?command.orValue([]) == %s && size(variables.args) >= 2 && variables.args[0] == 'ops' && variables.args[1] == {'upgrade': 'upgrade', 'stage': 'upgrade', 'prune': 'prune', 'rollback': 'rollback'}[variables.kind] && "+
			"variables.c.name == variables.kind && (variables.kind == 'upgrade' || variables.kind == 'stage') == (variables.args[1] == 'upgrade')",
			admission.CELList(o.jobCommand())),
			Message: m("command %v ops %v, the container named after its kind, `ops upgrade` for an upgrade or a staging Job", o.jobCommand(), JobCommands)},
		{Expression: "variables.args.all(a, a.startsWith('--') || variables.args.indexOf(a) <= 1 || variables.args[variables.args.indexOf(a) - 1] in " + admission.CELList(jobValueFlags) + ") && " +
			"variables.args.filter(a, a.startsWith('--')).all(a, a.split('=')[0] in " + admission.CELList(jobFlags) + ")",
			Message: m("arguments only the flags %v", jobFlags)},
		{Expression: "(variables.kind == 'stage') == (variables.args.indexOf('--phase') >= 0 && variables.args.indexOf('--phase') + 1 < size(variables.args) && variables.args[variables.args.indexOf('--phase') + 1] == 'stage') && " +
			"variables.args.indexOf('--phase') == variables.args.lastIndexOf('--phase') && (variables.args.indexOf('--phase') < 0 || variables.args.indexOf('--phase') + 1 < size(variables.args) && variables.args[variables.args.indexOf('--phase') + 1] in ['stage', 'activate']) && (variables.args.indexOf('--reboot=false') > 1) == (variables.args[1] != 'prune')",
			Message: m("--phase stage exactly on a staging Job, --reboot=false on every Job that swaps")},
		{Expression: "!variables.args.exists(a, a.matches('^--?source(=.*)?$') && a != '--source') && variables.si == variables.args.lastIndexOf('--source')",
			Message: m("one release source at most, written `--source URL`")},
		{Expression: o.sourceAllowed(), Message: m("an upgrade's --source one of %v, their GitHub repositories' download addresses (%s<owner>/<repo>/releases), "+
			"or under a mirror directory %v; to allow another, add it to the manifest (`slipway ops manifest --release-source URL`, the chart's releaseSources)",
			o.releaseSources(), o.GitHubDownloadBase, o.mirrorDirs())},
		{Expression: fmt.Sprintf("variables.pod.?volumes.orValue([]).all(v, has(v.hostPath) && (v.name == 'system' && v.hostPath.path == %q && v.hostPath.?type.orValue('') == 'Directory' || "+
			"v.name == 'lock' && v.hostPath.path == %q && v.hostPath.?type.orValue('') == 'DirectoryOrCreate' || v.name == 'mirror' && v.hostPath.path in %s && v.hostPath.?type.orValue('') == 'Directory')) && "+
			"variables.pod.?volumes.orValue([]).exists(v, v.name == 'system') && variables.pod.?volumes.orValue([]).exists(v, v.name == 'lock')",
			o.HostSystemDir, o.HostLockDir, admission.CELList(mirrors)),
			Message: m("volumes the host's %s (system, a Directory), %s (lock, DirectoryOrCreate) and a mirror directory %v (mirror)", o.HostSystemDir, o.HostLockDir, mirrors)},
		{Expression: fmt.Sprintf("variables.c.?volumeMounts.orValue([]).all(v, (v.name == 'system' && v.mountPath == %q && !v.?readOnly.orValue(false) || v.name == 'lock' && v.mountPath == %q && !v.?readOnly.orValue(false) || "+
			"v.name == 'mirror' && v.?readOnly.orValue(false) && variables.pod.volumes.exists(w, w.name == 'mirror' && w.hostPath.path == v.mountPath)) && "+
			"!has(v.subPath) && !has(v.subPathExpr) && !has(v.mountPropagation) && !has(v.recursiveReadOnly)) && !has(variables.c.volumeDevices) && "+
			"size(variables.c.?volumeMounts.orValue([])) == size(variables.pod.?volumes.orValue([]))",
			JobSystemDir, JobLockDir),
			Message: m("the system directory at %s, the lock directory at %s, the mirror read-only at its own path; each volume mounted once, whole", JobSystemDir, JobLockDir)},
		{Expression: "!has(variables.c.envFrom) && variables.c.?env.orValue([]).all(e, e.name == 'GITHUB_TOKEN' && e.?valueFrom.?secretKeyRef.?name.orValue('') in " +
			admission.CELList(o.tokenSecrets()) + ")",
			Message: m("no environment but GITHUB_TOKEN from the token Secrets %v", o.tokenSecrets())},
	}
}

// Where the Job's container sees the host's directories (ops/agent's
// jobSystemDir and jobLockDir).
const (
	JobSystemDir = "/k3os/system"
	JobLockDir   = "/run/k3os"
)

// JobTTL is how long a finished Job stays (ops/agent's jobTTL): a day.
const JobTTL = 24 * 60 * 60

// JobMaxDeadline bounds a Job's activeDeadlineSeconds: a channel's
// upgradeTimeout, at most a week (ops/plan refuses a longer one).
const JobMaxDeadline = 7 * 24 * 60 * 60

// jobValueFlags are the flags of jobFlags that take the next argument as their value.
var jobValueFlags = []string{"--system-dir", "--lock-file", "--source", "--version", "--phase", "--keep", "--from"}

// jobFlags are the flags of `ops upgrade|prune|rollback` an agent's Job may pass.
var jobFlags = []string{"--system-dir", "--lock-file", "--source", "--version", "--reboot", "--remount", "--rootfs", "--kernel", "--k3s",
	"--phase", "--keep", "--from"}

// only is a CEL expression: the object at path has no field but keys
// (present and set: an absent path has none).
func only(path string, keys ...string) string {
	return fmt.Sprintf("dyn(%s).all(k, k in %s)", path, admission.CELList(keys))
}

// metaShape is a CEL expression: the labels, annotations and no owner of
// the Job or its pod (at path): slipway's labels (and extraLabels),
// annotations under ops.slipway.dev/ and, where apparmor, AppArmor's beta
// annotation for the container, unconfined.
func metaShape(path string, apparmor bool, extraLabels ...string) string {
	keys := append([]string{AppNameKey, ManagedByKey, JobNodeKey, JobChannelKey}, extraLabels...)
	annotation := "k.startsWith('ops.slipway.dev/')"
	if apparmor {
		annotation += fmt.Sprintf(" || k == %s && %s.annotations[k] == %q", appArmorAnnotation, path, corev1.DeprecatedAppArmorBetaProfileNameUnconfined)
	}
	return fmt.Sprintf("%[1]s.?labels.orValue({}).all(k, k in %[2]s) && %[1]s.?labels[?%[3]q].orValue('') == %[4]q && %[1]s.?labels[?%[5]q].orValue('') == %[6]q && %[7]q in %[1]s.?labels.orValue({}) && "+
		"%[1]s.?annotations.orValue({}).all(k, %[8]s) && !has(%[1]s.ownerReferences) && !has(%[1]s.finalizers)",
		path, admission.CELList(keys), AppNameKey, UpgradeAppName, ManagedByKey, AgentManagedBy, JobChannelKey, annotation)
}

// metaWords say what metaShape admits.
var metaWords = fmt.Sprintf("labels %s=%s, %s=%s, %s and %s only, annotations under ops.slipway.dev/ only, no owner or finalizer",
	AppNameKey, UpgradeAppName, ManagedByKey, AgentManagedBy, JobNodeKey, JobChannelKey)

// jobShape is the Job's part of the allow-list: its metadata and its
// pod template's, and its spec (one pod, no retry, a deadline, kept a
// day). A field this list does not name (one a later Kubernetes adds
// included) is refused.
func jobShape(o Options, m func(string, ...any) string) []admissionv1.Validation {
	return []admissionv1.Validation{
		{Expression: metaShape("object.metadata", false) + " && " +
			metaShape("object.spec.template.metadata", o.Isolation == IsolationWebhook, "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name", "controller-uid", "job-name") +
			" && " + only("object.spec.template.metadata", "labels", "annotations", "creationTimestamp") +
			// An API server before 1.35 sends the template's zero creationTimestamp as null.
			" && object.spec.template.metadata.?creationTimestamp.orValue(null) == null",
			Message: m("%s, on the Job and its pod%s", metaWords, map[bool]string{true: " (AppArmor's annotation for its container, unconfined, on the pod)"}[o.Isolation == IsolationWebhook])},
		{Expression: only("object.spec", "parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "selector", "manualSelector", "template",
			"ttlSecondsAfterFinished", "completionMode", "suspend", "podReplacementPolicy") + " && " +
			fmt.Sprintf("object.spec.?parallelism.orValue(1) == 1 && object.spec.?completions.orValue(1) == 1 && object.spec.?backoffLimit.orValue(6) == 0 && "+
				"object.spec.?activeDeadlineSeconds.orValue(0) > 0 && object.spec.activeDeadlineSeconds <= %d && object.spec.?ttlSecondsAfterFinished.orValue(0) == %d && "+
				"!object.spec.?manualSelector.orValue(false) && !object.spec.?suspend.orValue(false) && object.spec.?completionMode.orValue('NonIndexed') == 'NonIndexed' && "+
				"object.spec.?podReplacementPolicy.orValue('TerminatingOrFailed') == 'TerminatingOrFailed'", JobMaxDeadline, JobTTL),
			Message: m("one pod, no retry, a deadline of at most %ds, kept %ds, no manual selector, not suspended, not indexed, no failure or success policy, managed by the Job controller",
				JobMaxDeadline, JobTTL)},
	}
}

// slotPodShape is a slot Pod's part of the allow-list: a slot's kind, its
// metadata, and what a bare Pod holds that a Job's template does not: the
// deadline (the Job's, on the Pod), and what the API server fills in (the
// default ServiceAccount, without its token; the priority of no class, or
// of a cluster's default class, never a system class's).
func slotPodShape(m func(string, ...any) string) []admissionv1.Validation {
	return []admissionv1.Validation{
		{Expression: "variables.kind in ['upgrade', 'stage', 'rollback'] && !(variables.kind == 'rollback' && variables.args.exists(a, a.startsWith('--phase')))",
			Message: m("of a slot's kind: an upgrade (no action annotation, `--phase activate` for an activation), a staging run (action stage, `--phase stage`) " +
				"or a rollback slot's (action rollback); pruning and rollback run as Jobs")},
		// Under the webhook isolation the Pod carries AppArmor's beta
		// annotation; a server of 1.30+ may add it beside the field.
		{Expression: metaShape("object.metadata", true),
			Message: m("%s (AppArmor's annotation for its container, unconfined)", metaWords)},
		{Expression: fmt.Sprintf("variables.pod.?activeDeadlineSeconds.orValue(0) > 0 && variables.pod.activeDeadlineSeconds <= %d && "+
			"variables.pod.?serviceAccountName.orValue('default') == 'default' && variables.pod.?serviceAccount.orValue('default') == 'default' && "+
			"variables.pod.?priority.orValue(0) < %d && variables.pod.?preemptionPolicy.orValue('PreemptLowerPriority') in ['PreemptLowerPriority', 'Never']",
			JobMaxDeadline, systemPriorityMin),
			Message: m("a deadline (activeDeadlineSeconds) of at most %ds, the namespace's default ServiceAccount, no system priority class", JobMaxDeadline)},
	}
}

// systemPriorityMin is the lowest priority of a system priority class
// (system-cluster-critical, system-node-critical): above every class a
// user can define (scheduling's HighestUserDefinablePriority + 1). The
// kubelet evicts other pods to admit a pod of such a priority.
const systemPriorityMin = 1000000001

// podSpecShape is the pod's part of the allow-list: its spec, its
// container and what they hold may have only the fields a slipway pod
// sets (or the API server fills in with its defaults), each holding its
// canonical value or a hole's.
func podSpecShape(o Options, at podAt, m func(string, ...any) string) []admissionv1.Validation {
	// The AppArmor profile: the field (Kubernetes 1.30+). Under the webhook
	// isolation the server may be older and drop the field, so the pod
	// carries the beta annotation, exactly "unconfined", and the field is
	// either dropped or Unconfined.
	appArmor := "has(variables.sc.appArmorProfile) && " + only("variables.sc.appArmorProfile", "type") + " && variables.sc.appArmorProfile.type == 'Unconfined'"
	appArmorWords := "AppArmor unconfined (for its remount)"
	if o.Isolation == IsolationWebhook {
		appArmor = fmt.Sprintf("(!has(variables.sc.appArmorProfile) || %s && variables.sc.appArmorProfile.type == 'Unconfined') && "+
			"%s.?annotations[?%s].orValue('') == %q",
			only("variables.sc.appArmorProfile", "type"), at.meta, appArmorAnnotation, corev1.DeprecatedAppArmorBetaProfileNameUnconfined)
		appArmorWords = fmt.Sprintf("AppArmor unconfined (for its remount) by the pod's annotation %s<container>: %s (and the field, on servers that keep it)",
			corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix, corev1.DeprecatedAppArmorBetaProfileNameUnconfined)
	}
	specKeys := append([]string{"volumes", "containers", "restartPolicy", "terminationGracePeriodSeconds", "dnsPolicy", "automountServiceAccountToken",
		"nodeName", "securityContext", "schedulerName", "tolerations", "enableServiceLinks"}, at.extraSpec...)
	return []admissionv1.Validation{
		{Expression: only("variables.pod", specKeys...) + " && " +
			"variables.pod.restartPolicy == 'Never' && variables.pod.?terminationGracePeriodSeconds.orValue(30) == 30 && variables.pod.?dnsPolicy.orValue('ClusterFirst') == 'ClusterFirst' && " +
			"variables.pod.?schedulerName.orValue('default-scheduler') == 'default-scheduler' && variables.pod.?enableServiceLinks.orValue(true) && " +
			"variables.pod.?automountServiceAccountToken.orValue(true) == false && (!has(variables.pod.securityContext) || " + only("variables.pod.securityContext") + ")",
			Message: m("a pod restarted never, with no ServiceAccount token, no pod security context (sysctl, seccomp, SELinux, AppArmor), the default grace period, DNS and scheduler, " +
				"and no host namespace, placement, host name, runtime class, priority, image pull Secret, resources or gates")},
		{Expression: "size(variables.pod.?tolerations.orValue([])) == 1 && " + only("variables.pod.tolerations[0]", "operator") + " && variables.pod.tolerations[0].?operator.orValue('') == 'Exists'",
			Message: m("one toleration: of everything (operator Exists)")},
		{Expression: only("variables.c", "name", "image", "command", "args", "env", "resources", "volumeMounts", "terminationMessagePath", "terminationMessagePolicy",
			"imagePullPolicy", "securityContext") + " && " +
			"variables.c.?imagePullPolicy.orValue('IfNotPresent') == 'IfNotPresent' && variables.c.?terminationMessagePath.orValue('/dev/termination-log') == '/dev/termination-log' && " +
			"variables.c.?terminationMessagePolicy.orValue('File') == 'File' && (!has(variables.c.resources) || " + only("variables.c.resources") + ") && " +
			"variables.c.?env.orValue([]).all(e, " + only("e", "name", "valueFrom") + " && has(e.valueFrom) && " + only("e.valueFrom", "secretKeyRef") + " && " +
			only("e.valueFrom.secretKeyRef", "name", "key") + ") && variables.c.?volumeMounts.orValue([]).all(v, " + only("v", "name", "mountPath", "readOnly") + ") && " +
			"variables.pod.?volumes.orValue([]).all(v, " + only("v", "name", "hostPath") + " && has(v.hostPath) && " + only("v.hostPath", "path", "type") + ")",
			Message: m("a container with no port, probe, lifecycle hook, working directory, resources, restart policy or terminal; hostPath volumes mounted whole")},
		{Expression: "has(variables.c.securityContext) && " + only("variables.sc", "runAsUser", "allowPrivilegeEscalation", "capabilities", "appArmorProfile") + " && " +
			"variables.sc.?runAsUser.orValue(-1) == 0 && variables.sc.?allowPrivilegeEscalation.orValue(true) == false && " +
			"has(variables.sc.capabilities) && " + only("variables.sc.capabilities", "drop", "add") + " && variables.sc.capabilities.?drop.orValue([]) == ['ALL'] && " +
			"variables.sc.capabilities.?add.orValue([]).all(x, x in " + admission.CELList(JobCapabilities) + ") && " +
			appArmor,
			Message: m("a container as root, not privileged, no privilege escalation, all capabilities dropped but %v, %s, "+
				"the runtime's seccomp profile, no SELinux type, no proc mount, no other user or group", JobCapabilities, appArmorWords)},
		{Expression: fmt.Sprintf("variables.args.indexOf('--system-dir') > 1 && variables.args.indexOf('--system-dir') + 1 < size(variables.args) && variables.args[variables.args.indexOf('--system-dir') + 1] == %q && "+
			"variables.args.indexOf('--lock-file') > 1 && variables.args.indexOf('--lock-file') + 1 < size(variables.args) && variables.args[variables.args.indexOf('--lock-file') + 1] == %q && "+
			"variables.args.filter(a, a.startsWith('--system-dir') || a.startsWith('--lock-file')).size() == 2", JobSystemDir, JobLockDir+"/upgrade.lock"),
			Message: m("--system-dir %s --lock-file %s, once each", JobSystemDir, JobLockDir+"/upgrade.lock")},
	}
}

// appArmorAnnotation is, in CEL, the key of AppArmor's beta annotation
// for the Job's container (corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + its name).
var appArmorAnnotation = fmt.Sprintf("(%q + variables.c.name)", corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix)

// identityVariables are the CEL variables of a Job's identity: its kind
// (from its action annotation) and the name prefix of the requester's
// node's Jobs of that kind (protocol.JobNamePrefix).
func identityVariables() []admissionv1.Variable {
	return []admissionv1.Variable{
		{Name: "action", Expression: fmt.Sprintf("object.metadata.?annotations[?%q].orValue('')", JobActionKey)},
		{Name: "kind", Expression: fmt.Sprintf("variables.action == '' ? %q : variables.action", JobKindUpgrade)},
		// protocol.JobNamePrefix: the node's name whole while the prefix
		// fits in protocol.JobPrefixMax, else its head and tail.
		{Name: "prefix", Expression: fmt.Sprintf("variables.kind + '-' + string(size(variables.node)) + '-' + "+
			"(size(variables.kind + '-' + string(size(variables.node)) + '-' + variables.node + '-') <= %[1]d ? variables.node : "+
			"(variables.node.substring(0, %[2]d) + '-' + variables.node.substring(size(variables.node) - %[3]d)).replace('.-', '--').replace('-.', '--')) + '-'",
			JobPrefixMax, JobNodeHead, JobNodeTail)},
		// protocol.LabelValue of the node: itself up to 63 characters, else cut with a hash.
		{Name: "nodeLabel", Expression: "size(variables.node) <= 63 ? [variables.node] : []"},
	}
}

// identityValidations bind every identity a reader of Jobs (or slot
// Pods) trusts to the requester's node: the name (under its node's prefix
// for the kind: no agent can take a name another node's agent will
// create), the node label and annotation on the Job and on its pod
// template (on the Pod), the action on both. Readers take a Job for a
// node's only when it is pinned to that node (protocol.JobOfNode), a Pod
// only when bound to it (protocol.SlotPodOfNode); these make its name and
// labels say the same.
func identityValidations(at podAt, m func(string, ...any) string) []admissionv1.Validation {
	label := func(path string) string {
		v := fmt.Sprintf("%s.?labels[?%q].orValue('')", path, JobNodeKey)
		return fmt.Sprintf("(size(variables.nodeLabel) == 1 ? %[1]s == variables.node : size(%[1]s) == 63 && %[1]s.startsWith(variables.node.substring(0, 50)))", v)
	}
	ann := func(path, key string) string { return fmt.Sprintf("%s.?annotations[?%q].orValue('')", path, key) }
	// both: the expression of each path holds, on the Job and its pod template (once on a Pod).
	both := func(expr func(path string) string) string {
		if !at.job {
			return expr(at.meta)
		}
		return expr("object.metadata") + " && " + expr(at.meta)
	}
	kinds := admission.CELList(JobActions)
	return []admissionv1.Validation{
		{Expression: "variables.action in " + kinds + " && " + ann(at.meta, JobActionKey) + " == variables.action",
			Message: m("the action annotation %s one of %s, the same on %s", JobActionKey, kinds, at.on)},
		{Expression: "!has(object.metadata.generateName) && object.metadata.name.startsWith(variables.prefix)",
			Message: m("named after the agent's own node: <kind>-<length of the node's name>-<node>-..., kind upgrade, stage, prune or rollback (its action)")},
		{Expression: both(func(path string) string { return ann(path, JobNodeKey) + " == variables.node" }),
			Message: m("annotated %s=<the agent's own node> on %s", JobNodeKey, at.on)},
		{Expression: both(label),
			Message: m("labelled %s=<the agent's own node> on %s", JobNodeKey, at.on)},
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
			Expression: fmt.Sprintf("variables.node != '' && object.metadata.name == %q + variables.node && object.spec.?holderIdentity.orValue('') == variables.node && "+
				"%s", HeartbeatLeasePrefix, LeaseMetadataPlain),
			Message: "the slipway agent may write only its own node's heartbeat Lease (" + HeartbeatLeasePrefix + "<its node>, held by its node, no owner reference or finalizer)",
		}},
	}
}

// nodeUpdatePolicy lets the agent write the status of its own node's
// NodeUpdate only (named after the node in its token), and nothing of its
// metadata (RBAC gives it the status subresource only: the API server
// keeps the spec, the controller's, as it was).
func nodeUpdatePolicy(o Options) admission.UserPolicy {
	return admission.UserPolicy{
		Name: AgentName + "-nodeupdates-" + o.Namespace, Labels: labels("agent"), Users: []string{AgentUser(o.Namespace)}, Namespace: o.Namespace,
		Group: "ops.slipway.dev", Version: "v1", Resource: "nodeupdates/status", Operations: []admissionv1.OperationType{admissionv1.Update},
		Variables: []admissionv1.Variable{{Name: "node", Expression: admission.RequesterNode}},
		Validations: []admissionv1.Validation{
			{Expression: "variables.node != '' && object.metadata.name == variables.node",
				Message: "the slipway agent may write only its own node's NodeUpdate (named after the node its token is bound to)"},
			{Expression: admission.FrozenExcept(".metadata", "managedFields", "resourceVersion", "generation"),
				Message: "the slipway agent may not change a NodeUpdate's metadata"},
		},
	}
}

// eventPolicy lets the agent write only Events in its namespace (RBAC
// grants events cluster-wide: its recorder's grant), signed by its own
// node (source.host and reportingInstance: the node named in its token),
// about a channel of its namespace or its own node's NodeUpdate (what it
// reports on when the channel is gone: the API admits an Event about a
// Node only in "default", outside slipway's namespace). The text of an
// Event is free: an agent can still say anything on a channel, but every
// reader sees which node said it, and no agent writes an Event that looks
// like another node's, or one about another node's NodeUpdate.
func eventPolicy(o Options) admission.UserPolicy {
	return admission.UserPolicy{
		Name: AgentName + "-events-" + o.Namespace, Labels: labels("agent"), Users: []string{AgentUser(o.Namespace)},
		Group: "", Version: "v1", Resource: "events", Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Variables: []admissionv1.Variable{{Name: "node", Expression: admission.RequesterNode}},
		Validations: []admissionv1.Validation{{
			Expression: fmt.Sprintf("variables.node != '' && object.metadata.namespace == %q && object.?source.?host.orValue('') == variables.node && object.?reportingInstance.orValue(variables.node) == variables.node && "+
				"object.involvedObject.?namespace.orValue('') == %q && "+
				"(object.involvedObject.?kind.orValue('') == 'NodeUpdate' ? object.involvedObject.?name.orValue('') == variables.node : "+
				"object.involvedObject.?kind.orValue('') == 'UpdateChannel')", o.Namespace, o.Namespace),
			Message: "the slipway agent may write only Events from its own node (source.host), in " + o.Namespace + ", about its own node's NodeUpdate or a channel of " + o.Namespace,
		}},
	}
}

// LeaseMetadataPlain is a CEL expression: a Lease with no owner reference
// (the garbage collector would delete it), no finalizer (it would outlive
// its delete) and no generated name.
const LeaseMetadataPlain = "!has(object.metadata.ownerReferences) && !has(object.metadata.finalizers) && !has(object.metadata.generateName)"

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
