package v1

import "time"

// Condition types of an UpdateChannel (status.conditions[].type).
const (
	// ConditionPolled is True when the last poll of the channel succeeded.
	ConditionPolled = "Polled"
	// ConditionProgressing is True while nodes hold slots or wait for one.
	ConditionProgressing = "Progressing"
	// ConditionComplete is True when every selected node runs the target version.
	ConditionComplete = "Complete"
	// ConditionDegraded is True while failures reach spec.maxFailures and no new node starts.
	ConditionDegraded = "Degraded"
	// ConditionInvalid is True when the spec cannot be acted on; the reason says why.
	ConditionInvalid = "Invalid"
	// ConditionAnalysisFailed is True while a failed analysis halts the
	// rollout (status.analysis.failed names the query, its value and the wave).
	ConditionAnalysisFailed = "AnalysisFailed"
	// ConditionAnalysisHolding is True while the analysis holds new slots:
	// a wave bakes, or it cannot be evaluated (the message says why).
	ConditionAnalysisHolding = "AnalysisHolding"
)

// VersionLatest in spec.version means: follow the channel's newest release.
const VersionLatest = "latest"

// Defaults the CRD schema applies; the same values for code that builds specs itself.
const (
	DefaultConcurrency      = 1
	DefaultMaxFailures      = 1
	DefaultPollInterval     = 15 * time.Minute
	DefaultRebootDelay      = 5 * time.Second
	DefaultUpgradeTimeout   = 15 * time.Minute
	DefaultNodeReadyTimeout = 10 * time.Minute
	DefaultDrainTimeout     = 10 * time.Minute
)
