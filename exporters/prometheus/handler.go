package prometheus

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// scrapeHandler serves a registry's scrape as vLLM serves /metrics: GET and
// HEAD only; gzip when the scraper accepts it; histogram families completed
// with the zero series of live engines (see completeStartup); in the text
// format, bucket bounds written as Python's prometheus_client writes them
// (see writePythonBuckets) unless goBuckets. Only the families of
// views.Families are rewritten: other collectors on the registry are
// served as client_golang writes them. It does what promhttp's
// handler does otherwise (format negotiation, name[] filter, HTTP 500 on a
// gathering error), which cannot rewrite the text or read q=0.
type scrapeHandler struct {
	gatherer    prometheus.Gatherer
	series      *instrument.SeriesSet // nil: no completion
	openMetrics bool                  // negotiate OpenMetrics too (WithOpenMetrics)
	goBuckets   bool
	views       viewFamilies // what the completion needs of the provider's views
	handle      func(error)  // gathering and writing errors

	mu        sync.Mutex
	unwrapped map[[2]string]bool // engines reported as recorded on an unwrapped provider
}

// maxUnwrappedReports bounds the engines a handler reports as recorded on a
// provider Exporter.Wrap did not wrap (and remembers, to report each once).
const maxUnwrappedReports = 1024

var (
	gzipPool    = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
	bufioPool   = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}
	scratchPool = sync.Pool{New: func() any { return new(scratch) }}
)

// scratch holds the buffers of one histogram family's text.
type scratch struct {
	text   bytes.Buffer
	python []byte
}

func (h *scrapeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: /metrics serves GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	released := h.series.Released()
	mfs, err := h.gatherer.Gather()
	if err != nil {
		h.handle(fmt.Errorf("exporters: prometheus scrape: gathering: %w", err))
		http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	if h.series != nil {
		engines := h.series.Engines()
		// A Recorder closed since the gathering has series in it but no
		// longer in engines: unwrapped engines are reported by a scrape
		// that no Close overlapped.
		if h.series.Released() == released {
			h.reportUnwrapped(mfs, engines)
		}
		mfs = completeStartup(mfs, engines, h.views)
	}
	if r.URL != nil {
		if names := r.URL.Query()["name[]"]; len(names) > 0 {
			kept := mfs[:0:0]
			for _, mf := range mfs {
				for _, n := range names {
					if mf.GetName() == n {
						kept = append(kept, mf)
						break
					}
				}
			}
			mfs = kept
		}
	}
	// Negotiate and NegotiateIncludingOpenMetrics, which prometheus/common
	// 0.72 deprecates as NegotiateAccept with DefaultAcceptedFormats or
	// DefaultOpenMetricsAcceptedFormats (0.71 and 0.72): go.mod's minimum
	// is OpenTelemetry 1.44's, 0.67.5, as client_golang 1.24's is 0.70.
	format := expfmt.Negotiate(r.Header)
	if h.openMetrics {
		format = expfmt.NegotiateIncludingOpenMetrics(r.Header)
	}
	header := w.Header()
	header.Set("Content-Type", string(format))
	header.Add("Vary", "Accept")
	header.Add("Vary", "Accept-Encoding")
	gz := acceptsGzip(r.Header)
	if gz {
		header.Set("Content-Encoding", "gzip")
	}
	if r.Method == http.MethodHead {
		return
	}
	var out io.Writer = w
	if gz {
		zw := gzipPool.Get().(*gzip.Writer)
		zw.Reset(w)
		defer func() {
			if err := zw.Close(); err != nil {
				h.handle(fmt.Errorf("exporters: prometheus scrape: writing: %w", err))
			}
			zw.Reset(nil)
			gzipPool.Put(zw)
		}()
		out = zw
	}
	if err := h.encode(out, format, mfs); err != nil {
		h.handle(fmt.Errorf("exporters: prometheus scrape: writing: %w", err))
	}
}

// reportUnwrapped reports, once each, the engines whose series the scrape
// holds but that no Recorder on a provider of Exporter.Wrap declared: the
// handler cannot complete their histogram families, which stay absent
// until their first observation, unlike vLLM's. Each is also counted on
// its Recorder's invalid events (instrument.CountUnwrapped).
func (h *scrapeHandler) reportUnwrapped(mfs []*dto.MetricFamily, engines []instrument.EngineSeries) {
	_, anchors := startupFamilies()
	var anchor *dto.MetricFamily
	for _, mf := range mfs {
		if mf.GetName() == anchors[0] {
			anchor = mf
			break
		}
	}
	if anchor == nil {
		return
	}
	known := make(map[[2]string]bool, len(engines))
	for _, e := range engines {
		known[modelEngine(e.Labels, func(l instrument.Label) (string, string) { return l.Name, l.Value })] = true
	}
	for _, m := range anchor.Metric {
		k := modelEngine(m.Label, func(l *dto.LabelPair) (string, string) { return l.GetName(), l.GetValue() })
		if known[k] || k[1] == "" {
			// A series without an engine is no Recorder's: the SDK's
			// overflow series, whose attributes are dropped.
			continue
		}
		h.mu.Lock()
		first := !h.unwrapped[k] && len(h.unwrapped) < maxUnwrappedReports
		if first {
			if h.unwrapped == nil {
				h.unwrapped = map[[2]string]bool{}
			}
			h.unwrapped[k] = true
		}
		h.mu.Unlock()
		if first {
			instrument.CountUnwrapped(k[0], k[1])
			h.handle(fmt.Errorf("exporters: prometheus scrape: model %q engine %q records on a MeterProvider this handler's Exporter.Wrap did not wrap: "+
				"its histogram families have no zero series before their first observation; pass prom.Wrap(provider) to instrument.WithMeterProvider",
				k[0], k[1]))
		}
	}
}

// modelEngine returns the model_name and engine label values of labels.
func modelEngine[L any](labels []L, nameValue func(L) (string, string)) [2]string {
	var k [2]string
	for _, l := range labels {
		switch n, v := nameValue(l); n {
		case instrument.KeyModelName:
			k[0] = v
		case instrument.KeyEngine:
			k[1] = v
		}
	}
	return k
}

// encode writes mfs in format.
func (h *scrapeHandler) encode(w io.Writer, format expfmt.Format, mfs []*dto.MetricFamily) error {
	if format.FormatType() != expfmt.TypeTextPlain || h.goBuckets {
		enc := expfmt.NewEncoder(w, format)
		proto := format.FormatType() == expfmt.TypeProtoDelim
		for _, mf := range mfs {
			if proto && exported(mf) {
				if err := encodeNativeExemplarSplit(enc, mf); err != nil {
					return err
				}
				continue
			}
			if err := enc.Encode(mf); err != nil {
				return err
			}
		}
		if c, ok := enc.(expfmt.Closer); ok {
			return c.Close()
		}
		return nil
	}
	bw := bufioPool.Get().(*bufio.Writer)
	bw.Reset(w)
	s := scratchPool.Get().(*scratch)
	defer func() {
		bw.Reset(nil)
		bufioPool.Put(bw)
		s.text.Reset()
		scratchPool.Put(s)
	}()
	scheme := format.ToEscapingScheme()
	for _, mf := range mfs {
		ours := exported(mf)
		mf = model.EscapeMetricFamily(mf, scheme)
		if t := mf.GetType(); (t != dto.MetricType_HISTOGRAM && t != dto.MetricType_GAUGE_HISTOGRAM) || !ours {
			if _, err := expfmt.MetricFamilyToText(bw, mf); err != nil {
				return err
			}
			continue
		}
		s.text.Reset()
		if _, err := expfmt.MetricFamilyToText(&s.text, mf); err != nil {
			return err
		}
		var err error
		if s.python, err = writePythonBuckets(bw, s.text.Bytes(), s.python); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// exported reports a histogram family of views.Families, which the handler
// serves as vLLM does; a user's collector on the same registry is not.
func exported(mf *dto.MetricFamily) bool {
	_, ok := exportedHistograms()[mf.GetName()]
	return ok
}

// exportedHistograms are the scrape names of the histogram families the
// views export: vLLM's, those of older vLLM versions, the HTTP server
// families, the GenAI ones and the usage ones.
var exportedHistograms = sync.OnceValue(func() map[string]struct{} {
	names := map[string]struct{}{}
	legacy := make([]views.Family, 0, len(views.LegacyFamilies()))
	for _, f := range views.LegacyFamilies() {
		legacy = append(legacy, f.Family)
	}
	for _, fs := range [][]views.Family{views.Families(), legacy, views.HTTPFamilies(), views.ClientFamilies(), views.ServerFamilies(),
		views.UsageFamilies()} {
		for _, f := range fs {
			if f.Type == instrument.Histogram.String() {
				names[f.ScrapeName()] = struct{}{}
			}
		}
	}
	return names
})

// encodeNativeExemplarSplit encodes a family in protobuf, with each series
// that carries native histogram exemplars at the start of a family message
// of its own (same name, help, type and unit). Prometheus's protobuf parser
// (model/textparse/protobufparse.go in 3.16, and on its main branch at
// commit d15adb9 of 2026-08-21) does not reset its position in a native
// histogram's exemplar list between the series of one family message: of
// the second series on it reads only the exemplars past the longest list
// before. A new message resets that position; Prometheus 3.16 and 2.42
// ingest the same series either way.
func encodeNativeExemplarSplit(enc expfmt.Encoder, mf *dto.MetricFamily) error {
	if t := mf.GetType(); (t != dto.MetricType_HISTOGRAM && t != dto.MetricType_GAUGE_HISTOGRAM) || len(mf.Metric) < 2 {
		return enc.Encode(mf)
	}
	part := func(metrics []*dto.Metric) *dto.MetricFamily {
		return &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type, Unit: mf.Unit, Metric: metrics}
	}
	start := 0
	for i := 1; i < len(mf.Metric); i++ {
		if len(mf.Metric[i].GetHistogram().GetExemplars()) == 0 {
			continue
		}
		if err := enc.Encode(part(mf.Metric[start:i])); err != nil {
			return err
		}
		start = i
	}
	if start == 0 {
		return enc.Encode(mf)
	}
	return enc.Encode(part(mf.Metric[start:]))
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip and
// prefers it to no compression: "gzip" (or "x-gzip", or "*" when neither is
// named) with a q-value above 0 and at least that of "identity" when named.
func acceptsGzip(h http.Header) bool {
	gzipQ, starQ, identityQ := -1.0, -1.0, 0.0
	for _, v := range h.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				if k, val, ok := strings.Cut(p, "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil && f >= 0 && f <= 1 {
						q = f
					} else {
						q = 0 // malformed: not acceptable
					}
				}
			}
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				gzipQ = max(gzipQ, q)
			case "*":
				starQ = max(starQ, q)
			case "identity":
				identityQ = q
			}
		}
	}
	if gzipQ < 0 {
		gzipQ = starQ
	}
	return gzipQ > 0 && gzipQ >= identityQ
}
