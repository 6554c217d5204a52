package eds

// Event reasons of the controller.
const (
	EventCanaryStarted   = "CanaryStarted"
	EventCanaryPaused    = "CanaryPaused"
	EventCanaryUnpaused  = "CanaryUnpaused"
	EventCanaryFailed    = "CanaryFailed"
	EventCanaryValidated = "CanaryValidated"
	EventRollingUpdate   = "RollingUpdate"
	EventRolledOut       = "RolledOut"
	EventStateChanged    = "StateChanged"
	EventInvalid         = "Invalid"
	EventUndecodable     = "Undecodable"
	EventCreateFailed    = "FailedCreate"
	EventSettingInvalid  = "SettingInvalid"
	EventMigrating       = "Migrating"
	EventReconcileError  = "ReconcileError"
	EventAdopted         = "Adopted"
	EventMigrated        = "Migrated"
	// EventCanaryAnalysisFailed (Warning) names the query of the canary's
	// analysis that failed it, its value and the canary nodes.
	EventCanaryAnalysisFailed = "CanaryAnalysisFailed"
)

// ReasonAnalysisHolding is status.reason of a running canary whose analysis
// cannot be judged (status.canary.analysis says why).
const ReasonAnalysisHolding = "AnalysisHolding"
