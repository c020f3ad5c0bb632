package exporters

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	collpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// httpReceiver is an in-process OTLP/HTTP metrics receiver: it decodes the
// protobuf body of every POST and keeps it with its path.
type httpReceiver struct {
	srv  *httptest.Server
	addr string // host:port

	mu        sync.Mutex
	reqs      []*collpb.ExportMetricsServiceRequest
	paths     []string
	encodings []string
	headers   []http.Header
}

func startHTTPReceiver(t *testing.T) *httpReceiver {
	t.Helper()
	r := &httpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serveHTTP))
	t.Cleanup(r.srv.Close)
	r.addr = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

func (r *httpReceiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m collpb.ExportMetricsServiceRequest
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a POST of application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	if err := proto.Unmarshal(b, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, &m)
	r.paths = append(r.paths, req.URL.Path)
	r.encodings = append(r.encodings, req.Header.Get("Content-Encoding"))
	r.headers = append(r.headers, req.Header.Clone())
	r.mu.Unlock()
	out, _ := proto.Marshal(&collpb.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// points returns the points of the int counter name, one per export.
func (r *httpReceiver) points(name string) []counterPoint {
	r.mu.Lock()
	reqs := slices.Clone(r.reqs)
	r.mu.Unlock()
	var out []counterPoint
	for _, req := range reqs {
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					if m.GetName() == name && m.GetSum() != nil {
						for _, dp := range m.GetSum().GetDataPoints() {
							out = append(out, counterPoint{m.GetSum().GetAggregationTemporality(), dp.GetAsInt()})
						}
					}
				}
			}
		}
	}
	return out
}

func (r *httpReceiver) last() (path, encoding string, h http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.paths) == 0 {
		return "<no request>", "", nil
	}
	n := len(r.paths) - 1
	return r.paths[n], r.encodings[n], r.headers[n]
}

var cumulativeFiveEight = []counterPoint{
	{metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE, 5},
	{metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE, 8},
}

// The protocol follows OTEL_EXPORTER_OTLP_METRICS_PROTOCOL, then
// OTEL_EXPORTER_OTLP_PROTOCOL, then the default http/protobuf; before, the
// variables were ignored and gRPC was sent to the HTTP port.
func TestOTLPProtocolFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name            string
		general, metric string
		wantHTTP        bool
	}{
		{name: "default", wantHTTP: true},
		{name: "http/protobuf", general: "http/protobuf", wantHTTP: true},
		{name: "grpc", general: "grpc"},
		{name: "metrics variable wins", general: "grpc", metric: "http/protobuf", wantHTTP: true},
		{name: "metrics variable wins over http", general: "http/protobuf", metric: "grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(EnvOTLPProtocol, tc.general)
			t.Setenv(EnvOTLPMetricsProtocol, tc.metric)
			hr, gr := startHTTPReceiver(t), startReceiver(t)
			addr := gr.addr
			if tc.wantHTTP {
				addr = hr.addr
			}
			t.Setenv(EnvOTLPEndpoint, "http://"+addr)
			r, err := NewOTLP(context.Background(), WithInterval(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			exportTwice(t, r)
			got := counterPoints(gr, "c")
			if tc.wantHTTP {
				got = hr.points("c")
				if path, _, _ := hr.last(); path != "/v1/metrics" {
					t.Errorf("path %q, want /v1/metrics", path)
				}
			}
			if len(got) < 2 || !slices.Equal(got[:2], cumulativeFiveEight) {
				t.Errorf("points = %v, want cumulative 5 then 8", got)
			}
		})
	}
}

// Over HTTP, the options and the environment reach the exporter: endpoint
// URL with its path as given, headers, gzip, delta temporality.
func TestOTLPHTTPOptions(t *testing.T) {
	cleanEnv(t)
	hr := startHTTPReceiver(t)
	t.Setenv(EnvOTLPProtocol, "grpc") // the option wins
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-tenant=env")
	r, err := NewOTLP(context.Background(), WithProtocol(ProtocolHTTPProtobuf),
		WithEndpointURL("http://"+hr.addr+"/custom/metrics"), WithCompression("gzip"),
		WithTemporality(Delta), WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	exportTwice(t, r)
	delta := metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
	if got := hr.points("c"); len(got) < 2 || got[0] != (counterPoint{delta, 5}) || got[1] != (counterPoint{delta, 3}) {
		t.Errorf("points = %v, want delta 5 then 3", got)
	}
	path, enc, h := hr.last()
	if path != "/custom/metrics" || enc != "gzip" || h.Get("x-tenant") != "env" {
		t.Errorf("path %q, encoding %q, x-tenant %q: want /custom/metrics, gzip, env", path, enc, h.Get("x-tenant"))
	}
}

// Setup pushes over HTTP when asked and the scrape keeps working.
func TestSetupOTLPHTTP(t *testing.T) {
	cleanEnv(t)
	hr := startHTTPReceiver(t)
	t.Setenv(EnvOTLPMetricsEndpoint, "http://"+hr.addr+"/v1/metrics")
	p, err := Setup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	recordGeneration(t, newRecorder(t, p), 4)
	if code, body, _ := scrape(t, p.Handler(), ""); code != 200 || !strings.Contains(body, generationSeries+" 4") {
		t.Errorf("scrape: HTTP %d, want the series at 4:\n%s", code, body)
	}
	shutdown(t, p)
	found := false
	hr.mu.Lock()
	for _, req := range hr.reqs {
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					if m.GetName() == "vllm:generation_tokens" {
						found = true
					}
				}
			}
		}
	}
	hr.mu.Unlock()
	if !found {
		t.Error("vllm:generation_tokens did not reach the OTLP/HTTP receiver")
	}
}

// A malformed endpoint is an error; before, it turned OTLP on and the
// exporter silently sent to localhost.
func TestOTLPMalformedEndpoint(t *testing.T) {
	// The OTLP exporter reads the variables itself too, and logs what it
	// cannot parse.
	logged := captureOTelLog(t)
	defer logged.expect(t, "parse url")
	for _, v := range []string{"127.0.0.1:4318", "localhost:4317", "collector", "grpc://collector:4317", "http://"} {
		for _, key := range []string{EnvOTLPEndpoint, EnvOTLPMetricsEndpoint} {
			t.Run(key+"="+v, func(t *testing.T) {
				cleanEnv(t)
				t.Setenv(key, v)
				p, err := Setup(t.Context())
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), key) {
					t.Errorf("Setup: err = %v, want ErrConfig naming %s", err, key)
				}
				if p != nil {
					shutdown(t, p)
				}
			})
		}
	}
	// An endpoint option replaces the variable, which is not checked then.
	cleanEnv(t)
	t.Setenv(EnvOTLPEndpoint, "127.0.0.1:4318")
	r, err := NewOTLP(context.Background(), WithEndpoint(closedAddr(t)), WithInsecure())
	if err != nil {
		t.Fatalf("with WithEndpoint: %v", err)
	}
	_ = r.Shutdown(context.Background())
}

// An unsupported protocol is reported to the Setup's handler and ignored
// (http/protobuf is used), as the specification asks.
func TestOTLPUnsupportedProtocolWarns(t *testing.T) {
	cleanEnv(t)
	hr := startHTTPReceiver(t)
	t.Setenv(EnvOTLPMetricsProtocol, "http/json")
	t.Setenv(EnvOTLPEndpoint, "http://"+hr.addr)
	var sink errorSink
	p, err := Setup(t.Context(), WithErrorHandler(sink.Handle))
	if err != nil {
		t.Fatal(err)
	}
	recordGeneration(t, newRecorder(t, p), 2)
	shutdown(t, p)
	errs := sink.Get()
	if len(errs) != 1 || !errors.Is(errs[0], ErrConfig) || !strings.Contains(errs[0].Error(), EnvOTLPMetricsProtocol) {
		t.Errorf("handler got %v, want one ErrConfig warning about %s", errs, EnvOTLPMetricsProtocol)
	}
	hr.mu.Lock()
	n := len(hr.reqs)
	hr.mu.Unlock()
	if n == 0 {
		t.Error("nothing reached the OTLP/HTTP receiver")
	}
}
