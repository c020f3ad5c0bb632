package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	collpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver keeps the OTLP/HTTP metric exports it receives.
type otlpReceiver struct {
	mu   sync.Mutex
	reqs []*collpb.ExportMetricsServiceRequest
	raw  bytes.Buffer // the bodies of the exports, one after another
}

// rawString returns the bodies of the exports received, as text.
func (r *otlpReceiver) rawString() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.raw.String()
}

// startOTLP starts a receiver and points the proxy's OTLP exporter at it,
// with an export interval long enough that only the shutdown flush exports.
func startOTLP(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var m collpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, &m)
		r.raw.Write(b)
		r.mu.Unlock()
		out, _ := proto.Marshal(&collpb.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "3600000")
	return r
}

// requests returns the value of the counter name in the last export, for
// the data point whose attributes include every key, value pair of attrs.
func (r *otlpReceiver) counter(name string, attrs ...string) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		return 0, false
	}
	last := r.reqs[len(r.reqs)-1]
	var sum float64
	found := false
	for _, rm := range last.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name || m.GetSum() == nil {
					continue
				}
			points:
				for _, dp := range m.GetSum().DataPoints {
					for i := 0; i+1 < len(attrs); i += 2 {
						ok := false
						for _, kv := range dp.Attributes {
							ok = ok || (kv.Key == attrs[i] && kv.Value.GetStringValue() == attrs[i+1])
						}
						if !ok {
							continue points
						}
					}
					found = true
					sum += float64(dp.GetAsInt()) + dp.GetAsDouble()
				}
			}
		}
	}
	return sum, found
}

// exemplars counts the exemplars of the histograms and sums of every
// export.
func (r *otlpReceiver) exemplars() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, req := range r.reqs {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					for _, dp := range m.GetHistogram().GetDataPoints() {
						n += len(dp.Exemplars)
					}
					for _, dp := range m.GetSum().GetDataPoints() {
						n += len(dp.Exemplars)
					}
				}
			}
		}
	}
	return n
}

// drainUpstream streams one content chunk, then waits for release (or for
// its request to go) before finishing.
func drainUpstream(release <-chan struct{}) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
}

// startStream sends a streaming request and reads its first chunk.
func startStream(t *testing.T, p *testProxy) *http.Response {
	t.Helper()
	resp, err := http.Post(p.url("/v1/chat/completions"), "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 512)
	for !bytes.Contains(got, []byte(`"a"`)) {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatalf("first chunk: %v", err)
		}
		got = append(got, buf[:n]...)
	}
	return resp
}

func health(p *testProxy) int {
	resp, err := http.Get("http://" + p.metrics + "/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// On SIGTERM (its context canceled) the proxy reports 503 on /health, lets
// a stream in flight finish, then flushes its metrics over OTLP and exits 0.
func TestGracefulDrain(t *testing.T) {
	otlp := startOTLP(t)
	release := make(chan struct{})
	up := drainUpstream(release)
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL, "-shutdown-timeout", "5m")
	if code := health(p); code != http.StatusOK {
		t.Fatalf("health %d before shutdown", code)
	}
	resp := startStream(t, p)
	p.cancel()
	waitFor(t, func() (bool, string) {
		c := health(p)
		return c == http.StatusServiceUnavailable, fmt.Sprintf("health %d while draining", c)
	})
	close(release)
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream cut by the drain: %q %v", rest, err)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if v, ok := otlp.counter("vllm:request_success", "model_name", "m", "finished_reason", "stop"); v != 1 {
		t.Errorf("flushed request_success{stop} = %v (found %v), want 1\n%s", v, ok, p.logs)
	}
}

// A stream still running at the drain deadline is cut, recorded as an
// abort, and flushed.
func TestDrainDeadlineCuts(t *testing.T) {
	otlp := startOTLP(t)
	release := make(chan struct{})
	defer close(release)
	up := drainUpstream(release)
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL, "-shutdown-timeout", "50ms")
	resp := startStream(t, p)
	p.cancel()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the stream ended cleanly past the drain deadline")
	}
	resp.Body.Close()
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if v, _ := otlp.counter("vllm:request_success", "model_name", "m", "finished_reason", "abort"); v != 1 {
		t.Errorf("flushed request_success{abort} = %v, want 1\n%s", v, p.logs)
	}
	if !strings.Contains(p.logs.String(), "drain deadline passed") {
		t.Errorf("no log of the cut:\n%s", p.logs)
	}
}
