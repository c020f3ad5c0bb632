package e2e

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// slowDelay is how long the example holds its slow request back: its TTFT
// is above any other TTFT of the run (tens of milliseconds).
const slowDelay = 6 * time.Second

var slowLine = regexp.MustCompile(`(?m)^slow request: id=\d+ trace_id=([0-9a-f]{32}) `)

// TestExemplars runs the example with traced requests (-trace: a sampled
// span per request, exemplars on, OpenMetrics served) and one request held
// back, against a Prometheus with exemplar storage that scrapes the example
// and receives the collector's remote write. The TTFT exemplar of the slow
// request names its trace ID on both paths: scraped as OpenMetrics
// (path=direct), and pushed over OTLP to the collector and written to
// Prometheus with its exemplars (path=otlp).
func TestExemplars(t *testing.T) {
	tl := needTools(t)
	e := &env{tools: tl, work: t.TempDir(), promArgs: []string{"--enable-feature=exemplar-storage"}}
	ports := distinctPorts(t, 4)
	promPort, otlpPort := ports[0], ports[1]
	prefillAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	decodeAddr := fmt.Sprintf("127.0.0.1:%d", ports[3])
	e.startPrometheus(t, promPort, prefillAddr, decodeAddr)
	e.startCollector(t, otlpPort, promPort)
	pd := buildExample(t, e.work)
	start := time.Now()
	e.startExample(t, pd, prefillAddr, decodeAddr, fmt.Sprintf("127.0.0.1:%d", otlpPort),
		"-trace", "-slow-request", "3", "-slow-delay", slowDelay.String(),
		"-rate", "10", "-duration", "4s", "-idle", "1s")

	trace := e.slowTrace(t)
	for _, path := range []string{"direct", "otlp"} {
		query := fmt.Sprintf(`vllm:time_to_first_token_seconds_bucket{path=%q,role="prefill"}`, path)
		e.checkSlowExemplar(t, path, query, trace, start, true)
	}
}

// slowTrace waits for the example to print its slow request's trace ID
// (-slow-request) and returns it.
func (e *env) slowTrace(t *testing.T) string {
	t.Helper()
	var trace string
	poll(t, 30*time.Second, "the example printing the slow request's trace ID", func() (bool, string) {
		e.example.alive(t)
		b, _ := os.ReadFile(e.example.stdout)
		if m := slowLine.FindSubmatch(b); m != nil {
			trace = string(m[1])
			return true, ""
		}
		return false, fmt.Sprintf("stdout so far: %q", b)
	})
	t.Logf("slow request: trace_id=%s", trace)
	return trace
}

// checkSlowExemplar polls query_exemplars of query from start until an
// exemplar names the slow request's trace, and checks it: its value is at
// least slowDelay, it carries trace_id and span_id only, and, for a classic
// histogram's bucket series, it lies in its bucket. It returns the exemplar.
func (e *env) checkSlowExemplar(t *testing.T, what, query, trace string, start time.Time, classic bool) exemplarHit {
	t.Helper()
	var found exemplarHit
	poll(t, slowDelay+60*time.Second, what+": a TTFT exemplar naming the slow request's trace", func() (bool, string) {
		if !e.example.exited() {
			e.example.alive(t)
		}
		hits, err := e.prom.exemplars(query, start, time.Now())
		if err != nil {
			return false, err.Error()
		}
		for _, h := range hits {
			if h.traceID == trace {
				found = h
				return true, ""
			}
		}
		slowest := exemplarHit{value: -1}
		for _, h := range hits {
			if h.value > slowest.value {
				slowest = h
			}
		}
		return false, fmt.Sprintf("%d exemplars of %s, none with trace_id %s; the slowest %g (trace_id %s)",
			len(hits), query, trace, slowest.value, slowest.traceID)
	})
	t.Logf("%s: exemplar %s=%g on le=%q (span_id %s)", what, trace, found.value, found.le, found.spanID)
	if found.value < slowDelay.Seconds() {
		t.Errorf("%s: the slow request's TTFT exemplar is %gs, want at least its %s delay", what, found.value, slowDelay)
	}
	if le, err := strconv.ParseFloat(found.le, 64); classic && (err != nil || le < found.value) {
		t.Errorf("%s: exemplar %g on bucket le=%q: not the bucket of its value", what, found.value, found.le)
	}
	if len(found.labels) != 2 {
		t.Errorf("%s: exemplar labels %v, want trace_id and span_id only", what, found.labels)
	}
	return found
}

// exemplarHit is one exemplar of /api/v1/query_exemplars, with its series' le.
type exemplarHit struct {
	le, traceID, spanID string
	value, ts           float64 // ts in seconds
	labels, series      map[string]string
}

// exemplars runs a query_exemplars over [start, end].
func (p promAPI) exemplars(query string, start, end time.Time) ([]exemplarHit, error) {
	form := url.Values{"query": {query}, "start": {promTime(start)}, "end": {promTime(end)}}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   []struct {
			SeriesLabels map[string]string `json:"seriesLabels"`
			Exemplars    []struct {
				Labels    map[string]string `json:"labels"`
				Value     string            `json:"value"`
				Timestamp float64           `json:"timestamp"`
			} `json:"exemplars"`
		} `json:"data"`
	}
	if err := p.post("/api/v1/query_exemplars", form, &r); err != nil {
		return nil, fmt.Errorf("query_exemplars %q: %w", query, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query_exemplars %q: %s", query, r.Error)
	}
	var out []exemplarHit
	for _, s := range r.Data {
		for _, ex := range s.Exemplars {
			v, err := strconv.ParseFloat(ex.Value, 64)
			if err != nil {
				return nil, fmt.Errorf("query_exemplars %q: value %q: %w", query, ex.Value, err)
			}
			out = append(out, exemplarHit{le: s.SeriesLabels["le"], traceID: ex.Labels["trace_id"],
				spanID: ex.Labels["span_id"], value: v, ts: ex.Timestamp, labels: ex.Labels, series: s.SeriesLabels})
		}
	}
	return out, nil
}
