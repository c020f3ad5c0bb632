package main

import (
	"runtime"
	"testing"
)

// The proxy copies response bodies through buffers it keeps: a request
// allocates well under the 32 KiB buffer httputil.ReverseProxy makes for
// each without a BufferPool (the proxy allocated about 47 KB a request of
// BenchmarkProxyInProcess without one, 15 KB with).
func TestProxyReusesCopyBuffers(t *testing.T) {
	proxies, shutdown := benchProxies(t, "http://upstream.invalid", cannedUpstream{})
	defer shutdown()
	h := proxies["infermetrics"]
	serve := func() { serveInProcess(t, h, false) }
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
