package main

import (
	"io"
	"log/slog"
	"runtime"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
)

// The proxy copies response bodies through buffers it keeps: a request
// allocates well under the 32 KiB buffer httputil.ReverseProxy makes for
// each without a BufferPool (the proxy allocated about 47 KB a request of
// BenchmarkProxyInProcess without one, 15 KB with).
func TestProxyReusesCopyBuffers(t *testing.T) {
	c, err := parseConfig([]string{"-upstream", "http://upstream.invalid"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(sdkmetric.NewMeterProvider()), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(c, cannedUpstream{}, func(string) *instrument.Engine { return e }, e, func(err error) { t.Error(err) }, log)
	serve := func() { serveInProcess(t, h) }
	for range 10 {
		serve()
	}
	const n = 1000 // enough that what other goroutines allocate meanwhile is lost in it
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		serve()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 28<<10 {
		t.Errorf("%d bytes allocated per request, want under 28 KiB: the copy buffer is not reused", per)
	}
}
