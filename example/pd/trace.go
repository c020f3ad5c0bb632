package main

import (
	"context"
	"crypto/rand"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// tracing gives requests a sampled span context, as a traced API server
// would (no tracing SDK: only the IDs matter for exemplars), and makes one
// request deliberately slow so that its exemplar stands out.
type tracing struct {
	on     bool
	slowID int           // the id of the slow request (0: none)
	delay  time.Duration // how long the slow request waits before reaching the prefill instance
}

// requestContext returns a context with a new sampled span: in trace, when
// parent carries one (the decode instance's span of a handed-off request),
// else in a new trace.
func requestContext(parent context.Context) context.Context {
	var tid trace.TraceID
	var sid trace.SpanID
	if sc := trace.SpanContextFromContext(parent); sc.HasTraceID() {
		tid = sc.TraceID()
	} else {
		_, _ = rand.Read(tid[:])
	}
	_, _ = rand.Read(sid[:])
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
}

// traceID returns the trace ID of ctx's span, or "" without one.
func traceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
