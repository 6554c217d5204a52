package eds

import (
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slipway.dev/slipway/ops/admission"
)

// The migration from a DaemonSet needs `update` on DaemonSets (RBAC cannot
// name the one an EDS's old-daemonset annotation names). This policy
// confines what the controller's ServiceAccount may change in any
// DaemonSet to what the migration changes (excludeNodes): the update
// strategy and the pod template's node affinity. Everything that carries
// code or privilege (containers, volumes, the ServiceAccount, host
// namespaces, the security context, tolerations, the template's labels,
// the selector) must stay as it is, so a stolen controller token cannot
// run its own code through someone's DaemonSet; it can still move a
// DaemonSet off nodes.

// frozenPodFields are the pod template's fields the controller may not change.
var frozenPodFields = []string{"containers", "initContainers", "ephemeralContainers", "volumes",
	"serviceAccountName", "serviceAccount", "automountServiceAccountToken", "hostNetwork", "hostPID", "hostIPC",
	"hostUsers", "securityContext", "runtimeClassName", "nodeName", "tolerations", "imagePullSecrets",
	"shareProcessNamespace", "os", "resourceClaims", "dnsConfig", "dnsPolicy", "hostAliases", "priorityClassName"}

// unchanged is a CEL expression: the field at path (below object and
// oldObject) is present in both with the same value, or in neither.
func unchanged(path string) string {
	o, old := "object."+path, "oldObject."+path
	return fmt.Sprintf("has(%[1]s) == has(%[2]s) && (!has(%[1]s) || %[1]s == %[2]s)", o, old)
}

// migrationPolicy is the ValidatingAdmissionPolicy on the controller's
// DaemonSet updates.
func migrationPolicy(o ManifestOptions, labels map[string]string) admission.UserPolicy {
	forbidden := metav1.StatusReasonForbidden
	var checks []admissionv1.Validation
	add := func(path, what string) {
		checks = append(checks, admissionv1.Validation{Expression: unchanged(path), Reason: &forbidden,
			Message: "the ExtendedDaemonSet controller may change a DaemonSet's update strategy and node affinity only (the migration), not " + what})
	}
	for _, f := range frozenPodFields {
		add("spec.template.spec."+f, "spec.template.spec."+f)
	}
	add("spec.template.metadata", "the pod template's metadata")
	add("spec.selector", "spec.selector")
	return admission.UserPolicy{Name: controllerName + "-daemonset-migration", Labels: labels,
		Users: []string{"system:serviceaccount:" + o.Namespace + ":" + controllerName},
		Group: "apps", Version: "v1", Resource: "daemonsets",
		Operations:  []admissionv1.OperationType{admissionv1.Update},
		Validations: checks}
}
