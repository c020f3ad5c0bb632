// Package benchcmp holds the per-chunk cost benchmarks of package
// openaihttp against otelhttp (go.opentelemetry.io/contrib, a benchmark
// dependency only: this is a module of its own, so the library's go.mod
// does not require it) and a plain handler and RoundTripper, in the same
// run, and the OpenTelemetry record of one inter-chunk time alone
// (BenchmarkChunkGapRecord), the floor of each side's per-chunk cost.
// scripts/bench.sh -only openaihttp runs them; docs/benchmarks.md has the
// numbers.
package benchcmp
