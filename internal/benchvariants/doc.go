// Package benchvariants holds what the benchmarks of infermetrics compare
// against: one fixed engine step (DecodeStep, Finished, SchedulerStep) and
// three hand-written instrumentations that record exactly the measurements
// the Recorder makes for it, on the same families, attribute sets, buckets
// and start-up series:
//
//   - Naive: OpenTelemetry with metric.WithAttributes built on every call,
//     as most instrumentations do.
//   - Precomputed: the best hand-written OpenTelemetry code, with attribute
//     sets and option slices built once per engine.
//   - ClientGolang: prometheus/client_golang with children bound once per
//     engine (the in-process floor).
//
// Samples turns what each of them exports (OpenTelemetry metric data, a
// client_golang gather, a Prometheus text scrape) into one comparable form,
// so that tests can check that every variant exports the same values. It is
// used by _test files only; it is not part of the library's API.
package benchvariants
