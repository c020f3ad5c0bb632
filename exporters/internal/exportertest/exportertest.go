// Package exportertest holds what the tests of package exporters and of
// package exporters/prometheus share: reading a /metrics handler and
// collecting reported errors.
package exportertest

import (
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/infermetrics/infermetrics/internal/benchvariants"
)

// Scrape GETs h and returns the status and body.
func Scrape(t *testing.T, h http.Handler, accept string) (int, string, http.Header) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	body, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(body), w.Result().Header
}

// ProtobufAccept is the Accept header of Prometheus 2.42 started with
// --enable-feature=native-histograms.
const ProtobufAccept = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.8," +
	"application/openmetrics-text;version=1.0.0;q=0.6,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"

// ScrapeProtobuf GETs h with ProtobufAccept and decodes its family messages
// in order, failing the test unless it answers 200 in delimited protobuf.
func ScrapeProtobuf(t *testing.T, h http.Handler) []*dto.MetricFamily {
	t.Helper()
	code, body, header := Scrape(t, h, ProtobufAccept)
	if code != 200 {
		t.Fatalf("scrape: HTTP %d\n%s", code, body)
	}
	if expfmt.ResponseFormat(header).FormatType() != expfmt.TypeProtoDelim {
		t.Fatalf("Content-Type %q, want delimited protobuf", header.Get("Content-Type"))
	}
	dec := expfmt.NewDecoder(strings.NewReader(body), expfmt.NewFormat(expfmt.TypeProtoDelim))
	var out []*dto.MetricFamily
	for {
		mf := new(dto.MetricFamily)
		if err := dec.Decode(mf); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("decoding the protobuf scrape: %v", err)
		}
		out = append(out, mf)
	}
}

// Sample is one series' value in a form both a scrape and OTLP map to.
type Sample struct {
	Value   float64
	Count   uint64
	Sum     float64
	Buckets map[float64]uint64 // cumulative counts by finite upper bound
}

// ParseScrape maps every counter, gauge and histogram series of a text
// scrape by benchvariants.Key.
func ParseScrape(t *testing.T, body string) map[string]Sample {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, body)
	}
	out := map[string]Sample{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			key := benchvariants.Key(name, labels)
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = Sample{Value: m.GetCounter().GetValue()}
			case dto.MetricType_GAUGE:
				out[key] = Sample{Value: m.GetGauge().GetValue()}
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				s := Sample{Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Buckets: map[float64]uint64{}}
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) {
						s.Buckets[b.GetUpperBound()] = b.GetCumulativeCount()
					}
				}
				out[key] = s
			}
		}
	}
	return out
}

// Errors collects the errors given to Handle, from any goroutine.
type Errors struct {
	mu   sync.Mutex
	errs []error
}

// Handle adds err.
func (s *Errors) Handle(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

// Get returns the errors handled so far.
func (s *Errors) Get() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}
