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
)
