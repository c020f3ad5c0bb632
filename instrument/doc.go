// Package instrument records an inference engine's stats (package stats) on
// OpenTelemetry instruments, covering every vLLM metric family.
//
// A Recorder is built from any metric.MeterProvider (the global one by
// default) and imports only the OpenTelemetry API, never the SDK: the service
// chooses its SDK, views and exporters. Each data-parallel engine gets an
// Engine handle whose attribute sets and option slices are built once, so
// recording allocates nothing:
//
//	rec, err := instrument.NewRecorder(
//		instrument.WithMeterProvider(provider),
//		instrument.WithModelName("meta-llama/Llama-3.1-8B-Instruct"),
//		instrument.WithEngines(0, 1),
//	)
//	engine, err := rec.Engine(0)
//	// every step, no error to check:
//	engine.RecordScheduler(ctx, &sched)
//	engine.RecordIteration(ctx, &iteration)
//	iteration.Reset()
//
// An engine without a scheduler step (one goroutine per request, tokens on
// timers) reports each request's events as they happen through
// Engine.Events, which forms one step per window of WithEventWindow, and
// sets each gauge or adds each count when it changes (Engine.SetRunning,
// Engine.AddPrefixCache, Engine.RecordSchedulerCounts, ...):
//
//	events := engine.Events() // safe for concurrent use
//	// on each request's goroutine:
//	events.Output(req, time.Now(), 1)
//
// Only construction returns errors (NewRecorder, Recorder.Engine,
// Engine.Backend): a metrics call never changes an engine's control flow.
// Every Record method validates its whole input first: invalid input records
// nothing, so a bad value can never make a counter go backwards, and no input
// makes the library panic. The refusal (an error matching the sentinels of
// package stats, or ErrUnknownEngine, ErrNilStats, ErrClosed,
// ErrRecordedTwice) is counted on NameInvalidEvents by kind and engine and
// reported to the error handler (WithErrorHandler; default otel.Handle, at
// most one report per ErrorReportInterval). The events a step's Timelines
// and Iteration refused (stats.Iteration.Refused) are counted and reported
// by RecordIteration. Tests use testutil.StrictErrors. Each engine also
// keeps the totals since start of what it adds to integer counters and
// histogram sums, which the SDK keeps in int64s that would wrap around and,
// before sdk/metric 1.47, serves exactly only up to 2^53: a step that would
// take one past MaxTotal (2^53) is refused (stats.ErrOverflow). (A view
// that merges engines or models into one series adds their totals, which
// this check does not see.) Recording never
// blocks on an exporter.
//
// NewRecorder fails with ErrDuplicateSeries when a live Recorder already
// exports the same series (same model name, an engine rank in common, same
// constant attributes) on the same MeterProvider, where the SDK would merge
// them silently, or on a provider exported together with it, such as the
// providers read into one Prometheus registry by package exporters (see
// SeriesSetProvider), where every scrape would fail. Series stay claimed
// as long as they are reported: until Close (or until the MeterProvider
// itself is garbage).
//
// Counters and gauges (all but vllm.cache_config_info) are observable
// instruments: each Engine keeps their values in atomics, and one callback
// per Recorder, registered on the MeterProvider, reports them at each
// collection, so recording them costs an atomic add. Histograms (there is no
// asynchronous histogram in OpenTelemetry) and vllm.cache_config_info are
// synchronous. The observable series are reported only while the callback
// is registered, that is until Recorder.Close: a Recorder should live as
// long as its MeterProvider. Like the SDK's synchronous series, they keep
// being reported (with their last values) after the Recorder and its Engines
// are no longer reachable, and so stay claimed. Close flushes the
// MeterProvider, then unregisters the callback and releases the claims;
// Record methods then refuse their input (ErrClosed). So closing before
// the provider's Shutdown loses nothing. A service that unloads a model
// closes its Recorder.
//
// Series cardinality is bounded by the SDK: each stream keeps at most its
// provider's cardinality limit (2000 by default, see
// exporters.WithCardinalityLimit) and adds the rest into one overflow
// series. vllm:lora_requests_info reports each engine's last distinct LoRA
// states (adapter names sorted; the current one only by default), so it has
// at most k series per engine (k of WithLoRAHistory, DefaultLoRAHistory by
// default) however many distinct adapter lists it sees; a state several
// engines keep is one series.
//
// Prompt tokens are one counter (vllm.prompt_tokens) measured with a source
// attribute; package views derives both vllm:prompt_tokens (the total) and
// vllm:prompt_tokens_by_source from it. The iteration-tokens histogram observes
// stats.Iteration.TokensDone once per iteration: prompt tokens computed in the
// step plus generation tokens, never cache hits or transferred KV.
//
// Counter and gauge series exist at zero from construction for every engine,
// source and finish reason, as in vLLM (vllm/v1/metrics/loggers.py creates
// every per-engine child at start-up). OpenTelemetry cannot create a
// histogram series without an observation, so the Recorder exports none at
// zero; package exporters' Prometheus handler adds every absent histogram
// series of each live engine at zero (see SeriesSet.Engines), while OTLP
// keeps OpenTelemetry's semantics.
// Descriptors lists every instrument with its name, unit, description and
// advisory buckets; docs/metrics.md is generated from it.
package instrument
