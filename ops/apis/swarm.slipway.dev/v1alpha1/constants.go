package v1alpha1

// Condition types of a Swarm (status.conditions[].type).
const (
	// ConditionBalanced is True when every job is assigned exactly once and
	// worker loads differ by at most one (dedicated workers aside).
	ConditionBalanced = "Balanced"
	// ConditionConverged is True when every worker reports the version of its
	// share and no restart is in flight.
	ConditionConverged = "Converged"
	// ConditionInvalid is True when the spec or the job list cannot be
	// assigned; the previous assignment stays in force and the reason says why.
	ConditionInvalid = "Invalid"
)

// Worker phases (status.workers[].phase).
const (
	PhaseConverged  = "Converged"
	PhasePending    = "Pending"
	PhaseRestarting = "Restarting"
)

// Refresh modes (spec.refresh).
const (
	RefreshRestart = "restart"
	RefreshReload  = "reload"
)

// Defaults the CRD schema applies; the same values for code that reads a
// spec the API server did not default.
const (
	DefaultMaxUnavailable = 1
	DefaultJobsKey        = "jobs"
	// ConfigMapKey is the key of the workers' ConfigMap holding the assignment.
	ConfigMapKey = "config.yml"
	// ConfigMapSuffix names the default workers' ConfigMap: <swarm>-worker-config.
	ConfigMapSuffix = "-worker-config"
	// AppliedVersionAnnotation is written by the worker (slipway swarm worker)
	// on its own pod: the version of its share it applied. The controller
	// reads it to know the worker converged.
	AppliedVersionAnnotation = "swarm.slipway.dev/applied-version"
	// SwarmLabel is set by the controller on the workers' ConfigMap: the Swarm's name.
	SwarmLabel = "swarm.slipway.dev/swarm"
)
