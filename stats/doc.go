// Package stats is the plain-Go model of what an LLM inference engine reports
// about its work: where every prompt token came from, what one engine step did,
// how a finished request went, and what the scheduler looks like at a step.
//
// It imports no OpenTelemetry: an engine fills these values, directly or by
// driving a [Timeline] per request with one call per event ([Timeline.Queued],
// [Timeline.Tokenized] when the prompt length comes after the arrival, and
// [Timeline.Scheduled], then [Iteration.Output], [Iteration.Preempt] and
// [Iteration.Finish], which add each event's contribution to the step), and
// package instrument records them, from steps or, for an engine without
// them, from windows of its events (instrument's Engine.Events).
//
// Every prompt token is satisfied by exactly one [Source]: computed here
// ([LocalCompute]), taken from this instance's prefix cache ([LocalCacheHit]),
// or received as KV from another node ([ExternalKVTransfer]). [SplitPrompt]
// derives the three counts so that they always sum to the prompt length,
// [RemotePrefillCached] gives what a P/D decode node found (all of the
// prompt but its last token, which it computes), and [Iteration.TokensDone]
// is the single definition of the work done in a step.
//
// Durations are float64 seconds, the unit the metrics are exported in; every
// type has a Validate method whose errors name the field and the bad value and
// match the package's sentinel errors with [errors.Is].
package stats
