package instrument

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// Names of the HTTP server families of vLLM's API server, which it exports
// through prometheus-fastapi-instrumentator's default metrics
// (trallnag/prometheus-fastapi-instrumentator,
// src/prometheus_fastapi_instrumentator/metrics.py, default(); attached in
// vLLM's vllm/entrypoints/serve/instrumentator/metrics.py) and vLLM's
// overview dashboard reads. They are already Prometheus names and keep them
// in every export: http_requests_total,
// http_request_duration_seconds and http_request_duration_highr_seconds.
// The instrumentator's two Summary families (http_request_size_bytes,
// http_response_size_bytes) have no OpenTelemetry counterpart and are not
// offered.
const (
	NameHTTPRequests            = "http_requests"
	NameHTTPRequestDuration     = "http_request_duration"
	NameHTTPRequestDurationHigh = "http_request_duration_highr"
)

// Attribute keys of the HTTP server families, the instrumentator's labels.
const (
	// KeyHTTPHandler is the route template that served the request
	// ("/v1/chat/completions"), HTTPHandlerNone when there is none.
	KeyHTTPHandler = "handler"
	// KeyHTTPMethod is the request method, HTTPMethodOther for a
	// non-standard one.
	KeyHTTPMethod = "method"
	// KeyHTTPStatus is the status class, "2xx" ... "5xx".
	KeyHTTPStatus = "status"
)

// Values of the HTTP server attributes that bound what a client can send.
const (
	// HTTPHandlerNone is the handler of a request without a route
	// template (as the instrumentator groups untemplated requests), and of
	// routes past the first 256 of an engine or longer than
	// MaxModelNameLen bytes.
	HTTPHandlerNone = "none"
	// HTTPMethodOther is the method of a request whose method is not one of
	// net/http's nine.
	HTTPMethodOther = "_OTHER"
)

// HTTPServer says the HTTP server families' series appear with the first
// request (Engine.RecordHTTPRequest).
const HTTPServer Feature = GenAISemconv + 1

// maxHTTPHandlers bounds the handler values of one engine.
const maxHTTPHandlers = 256

const perHTTP = "each HTTP request served (Engine.RecordHTTPRequest; openaihttp.WithHTTPMetrics)"

// The instrumentator's default buckets: few for the per-handler histogram,
// many for the unlabelled one.
var (
	httpDurationBuckets     = []float64{0.1, 0.5, 1}
	httpDurationHighBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10, 30, 60}
)

// httpCatalog is the catalog of the HTTP server families, which
// HTTPDescriptors returns; lookup finds them with the others. Like the
// instrumentator's, they carry no model_name, engine or constant
// attribute.
var httpCatalog = []Descriptor{
	{Name: NameHTTPRequests, Kind: Counter, Integer: true, Unit: "{request}", Recorded: perHTTP, Feature: HTTPServer,
		Attributes:  []string{KeyHTTPMethod, KeyHTTPStatus, KeyHTTPHandler},
		Description: "Total number of requests by method, status and handler."},
	{Name: NameHTTPRequestDuration, Kind: Histogram, Unit: "s", Buckets: httpDurationBuckets, Recorded: perHTTP, Feature: HTTPServer,
		Attributes:  []string{KeyHTTPMethod, KeyHTTPHandler},
		Description: "Latency with only few buckets by handler: from a request's arrival to the end of its response."},
	{Name: NameHTTPRequestDurationHigh, Kind: Histogram, Unit: "s", Buckets: httpDurationHighBuckets, Recorded: perHTTP, Feature: HTTPServer,
		Description: "Latency with many buckets but no API specific labels: from a request's arrival to the end of its response."},
}

// HTTPDescriptors returns the HTTP server families the Recorder creates
// beside those of Descriptors, in a stable order.
func HTTPDescriptors() []Descriptor { return copyDescriptors(httpCatalog) }

// httpKey is one series set of the HTTP server families.
type httpKey struct {
	handler, method string
	class           int // status / 100
}

// httpMeasures are one key's attribute sets.
type httpMeasures struct {
	requests []metric.AddOption
	duration measure
}

// httpSeries are an engine's HTTP server attribute sets, bounded: at most
// maxHTTPHandlers + 1 handlers, 10 methods and 5 status classes.
type httpSeries struct {
	mu       sync.RWMutex
	m        map[httpKey]*httpMeasures
	handlers map[string]struct{}
	plain    measure // the unlabelled highr histogram
}

// RecordHTTPRequest records one HTTP request an API server served, as
// prometheus-fastapi-instrumentator does for vLLM: http_requests_total by
// method, status class and handler, http_request_duration_seconds by method
// and handler, http_request_duration_highr_seconds. handler is the route
// template ("" for none: HTTPHandlerNone). Client-sent values are bounded
// (see HTTPHandlerNone, HTTPMethodOther); a status outside 100..599 counts
// as 5xx. A bad duration is refused: nothing is recorded, and the refusal
// is counted and reported (see RecordIteration).
func (e *Engine) RecordHTTPRequest(ctx context.Context, handler, method string, status int, seconds float64) {
	if err := e.recordHTTPRequest(ctx, handler, method, status, seconds); err != nil {
		e.refuse(refusedHTTPRequest, "RecordHTTPRequest", err)
	}
}

// recordHTTPRequest is RecordHTTPRequest, returning its refusal.
func (e *Engine) recordHTTPRequest(ctx context.Context, handler, method string, status int, seconds float64) error {
	if err := e.usable(false); err != nil {
		return err
	}
	if err := stats.CheckSeconds("seconds", seconds); err != nil {
		return err
	}
	m := e.httpMeasuresOf(handler, method, status)
	e.inst.httpRequests.Add(ctx, 1, m.requests...)
	e.inst.httpDuration.Record(ctx, seconds, m.duration.rec...)
	e.inst.httpDurationHigh.Record(ctx, seconds, e.http.plainMeasure().rec...)
	return nil
}

func (s *httpSeries) plainMeasure() measure {
	s.mu.RLock()
	p := s.plain
	s.mu.RUnlock()
	if p.rec != nil {
		return p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plain.rec == nil {
		s.plain = newMeasure()
	}
	return s.plain
}

func (e *Engine) httpMeasuresOf(handler, method string, status int) *httpMeasures {
	k := httpKey{handler: handler, method: method, class: status / 100}
	if k.class < 1 || k.class > 5 {
		k.class = 5
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
	default:
		k.method = HTTPMethodOther
	}
	if k.handler == "" || len(k.handler) > MaxModelNameLen || !utf8.ValidString(k.handler) {
		k.handler = HTTPHandlerNone
	}
	s := &e.http
	s.mu.RLock()
	m := s.m[k]
	s.mu.RUnlock()
	if m != nil {
		return m
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.handlers[k.handler]; !known && k.handler != HTTPHandlerNone {
		if len(s.handlers) >= maxHTTPHandlers {
			k.handler = HTTPHandlerNone
		} else {
			if s.handlers == nil {
				s.handlers = map[string]struct{}{}
			}
			s.handlers[k.handler] = struct{}{}
		}
	}
	if m := s.m[k]; m != nil {
		return m
	}
	if s.m == nil {
		s.m = map[httpKey]*httpMeasures{}
	}
	methodKV, handlerKV := attribute.String(KeyHTTPMethod, k.method), attribute.String(KeyHTTPHandler, k.handler)
	statusKV := attribute.String(KeyHTTPStatus, strconv.Itoa(k.class)+"xx")
	m = &httpMeasures{
		requests: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(methodKV, statusKV, handlerKV))},
		duration: newMeasure(methodKV, handlerKV),
	}
	s.m[k] = m
	return m
}
