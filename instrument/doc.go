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
//	// every step:
//	err = engine.RecordScheduler(ctx, &sched)
//	err = engine.RecordIteration(ctx, &iteration)
//
// Every Record method validates its whole input first: invalid input returns
// an error (matching the sentinels of package stats, or ErrUnknownEngine) and
// records nothing, so a bad value can never make a counter go backwards.
//
// Prompt tokens are one counter (vllm.prompt_tokens) measured with a source
// attribute; package views derives both vllm:prompt_tokens (the total) and
// vllm:prompt_tokens_by_source from it. The iteration-tokens histogram observes
// stats.Iteration.TokensDone once per iteration: prompt tokens computed in the
// step plus generation tokens, never cache hits or transferred KV.
//
// Counter and gauge series exist at zero from construction for every engine,
// source and finish reason, as in vLLM. Histograms appear with their first
// observation: OpenTelemetry cannot create a histogram series without one.
// Descriptors lists every instrument with its name, unit, description and
// advisory buckets; docs/metrics.md is generated from it.
package instrument
