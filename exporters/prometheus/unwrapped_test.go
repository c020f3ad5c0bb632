package prometheus

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/infermetrics/infermetrics/instrument"
)

// A Recorder on the provider itself, not on prom.Wrap's, gets no zero
// series from the handler: the scrape reports it, once per engine, naming
// the fix, and counts it on the Recorder's invalid events; a Recorder on
// the wrapped provider is neither reported nor counted.
func TestScrapeReportsUnwrappedProvider(t *testing.T) {
	var errs errorSink
	prom, mp, _ := wrappedRecorder(t, WithErrorHandler(errs.Handle))
	if code, body, _ := scrape(t, prom.Handler, ""); code != 200 || len(errs.Get()) != 0 {
		t.Fatalf("wrapped only: HTTP %d, errors %v\n%.300s", code, errs.Get(), body)
	}
	plain, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("plain"),
		instrument.WithEngines(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for range 2 {
		if code, _, _ := scrape(t, prom.Handler, ""); code != 200 {
			t.Fatalf("HTTP %d", code)
		}
	}
	got := errs.Get()
	if len(got) != 2 {
		t.Fatalf("reports %v, want one per engine of the unwrapped Recorder (2)", got)
	}
	for i, err := range got {
		msg := err.Error()
		if !strings.Contains(msg, `model "plain"`) || !strings.Contains(msg, "Exporter.Wrap") || !strings.Contains(msg, `engine "`) {
			t.Errorf("report %d: %q, want the model, the engine and the fix (Exporter.Wrap)", i, msg)
		}
	}
	// Each report is counted once on the Recorder's invalid events.
	_, body, _ := scrape(t, prom.Handler, "")
	for _, engine := range []string{"0", "1"} {
		want := `infermetrics_invalid_events_total{engine="` + engine + `",kind="unwrapped_provider",model_name="plain"} 1` + "\n"
		if !strings.Contains(body, want) {
			t.Errorf("the scrape lacks %q", want)
		}
	}
	if strings.Contains(body, `kind="unwrapped_provider",model_name="wrapped"`) {
		t.Error("the wrapped Recorder's engine is counted as unwrapped")
	}
}

// gatherThen is a registry's Gather followed by then: the ordering of a
// Recorder closed between the scrape's gathering and its reading of the
// live engines, made certain.
type gatherThen struct {
	prometheus.Gatherer
	then func()
}

func (g gatherThen) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := g.Gatherer.Gather()
	g.then()
	return mfs, err
}

// A Recorder on the wrapped provider closed while a scrape runs, after the
// gathering (which holds its series) and before the handler reads the live
// engines, is no wiring error: the scrape reports nothing. An unwrapped
// Recorder in that scrape is reported at the next one, which no Close
// overlaps.
func TestScrapeRecorderClosedDuringScrape(t *testing.T) {
	var errs errorSink
	prom, mp, rec := wrappedRecorder(t, WithErrorHandler(errs.Handle))
	plain, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	h := prom.Handler.(*scrapeHandler)
	registry := h.gatherer
	h.gatherer = gatherThen{registry, func() { _ = rec.Close() }}
	if code, body, _ := scrape(t, h, ""); code != 200 || !strings.Contains(body, `model_name="m"`) {
		t.Fatalf("HTTP %d, want 200 with the closed Recorder's series:\n%.300s", code, body)
	}
	for _, err := range errs.Get() {
		if strings.Contains(err.Error(), `model "m"`) {
			t.Errorf("the Recorder closed during the scrape is reported as a wiring error: %v", err)
		}
	}
	h.gatherer = registry
	if code, _, _ := scrape(t, h, ""); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	got := errs.Get()
	if len(got) != 1 || !strings.Contains(got[0].Error(), `model "plain"`) {
		t.Errorf("after a scrape with no Close: reports %v, want the unwrapped Recorder's engine once", got)
	}
}
