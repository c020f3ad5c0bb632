package prometheus

import (
	"slices"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/views"
)

// A legacy histogram family the views export (views.WithVersion) is in the
// first scrape at zero for every engine, with its bounds written as vLLM
// writes them; one they do not export is not, nor without the provider's
// views.
func TestStartupLegacyHistogramsAtZero(t *testing.T) {
	const family = "vllm:time_per_output_token_seconds"
	for _, c := range []struct {
		name     string
		version  string
		provider bool // the handler knows the provider's views
		want     bool
	}{
		{"0.11", "0.11", true, true},
		{"0.12", "0.12", true, false},
		{"no version", "", true, false},
		{"0.11 without the provider's views", "0.11", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var vopts []views.Option
			if c.version != "" {
				vopts = append(vopts, views.WithVersion(c.version))
			}
			vs, err := views.VLLM(vopts...)
			if err != nil {
				t.Fatal(err)
			}
			var popts []Option
			if c.provider {
				popts = append(popts, WithProviderViews(vs...))
			}
			prom, mp := startupProvider(t, popts, vopts...)
			rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"),
				instrument.WithEngines(0, 1))
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Close()
			body := scrapeOK(t, prom)
			got := parseScrape(t, body)
			for _, engine := range []string{"0", "1"} {
				key := benchvariants.Key(family, map[string]string{"model_name": "m", "engine": engine})
				s, ok := got[key]
				if ok != c.want {
					t.Fatalf("%s in the first scrape: %v, want %v", key, ok, c.want)
				}
				if !ok {
					continue
				}
				var itl []float64
				for _, f := range views.Families() {
					if f.Instrument.Name == instrument.NameInterTokenLatency {
						itl = f.Buckets
					}
				}
				if s.Count != 0 || s.Sum != 0 || !slices.Equal(boundsOf(s), itl) {
					t.Errorf("%s = %+v, want zero with the inter-token latency bounds %v", key, s, itl)
				}
			}
			if c.want {
				if !strings.Contains(body, family+`_bucket{engine="0",model_name="m",le="1.0"} 0`) {
					t.Errorf("no le=\"1.0\" bucket of %s as vLLM writes it in:\n%s", family, grepLines(body, family))
				}
				promtoolClean(t, body)
			}
		})
	}
}
