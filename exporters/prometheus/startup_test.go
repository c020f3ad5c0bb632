package prometheus

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// startupProvider wires a provider as Setup does: NewPrometheus, views.VLLM
// (with vopts), Wrap.
func startupProvider(t *testing.T, popts []Option, vopts ...views.Option) (*Exporter, *sdkmetric.MeterProvider) {
	t.Helper()
	prom, err := New(popts...)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := views.VLLM(vopts...)
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return prom, mp
}

func scrapeOK(t *testing.T, prom *Exporter) string {
	t.Helper()
	code, body, _ := scrape(t, prom.Handler, "")
	if code != 200 {
		t.Fatalf("scrape: HTTP %d\n%s", code, body)
	}
	return body
}

// wantBounds returns the bounds a histogram family has for a Recorder with
// max model length maxLen.
func wantBounds(f views.Family, maxLen int) []float64 {
	if f.Instrument.LengthBuckets {
		return instrument.LengthBuckets(maxLen)
	}
	return f.Instrument.Buckets
}

func boundsOf(s sample) []float64 {
	var b []float64
	for le := range s.Buckets {
		b = append(b, le)
	}
	slices.Sort(b)
	return b
}

// The first scrape of a fresh Recorder has every histogram family vLLM
// pre-creates at zero for every engine, with exact bounds; optional
// families only when configured; the text parses and passes promtool.
func TestStartupHistogramsAtZero(t *testing.T) {
	prom, mp := startupProvider(t, nil)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"),
		instrument.WithEngines(0, 1), instrument.WithMaxModelLen(1000), instrument.WithKVConnector())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	body := scrapeOK(t, prom)
	got := parseScrape(t, body)
	var checked int
	for _, f := range views.Families() {
		if f.Type != "histogram" {
			continue
		}
		for _, engine := range []string{"0", "1"} {
			key := benchvariants.Key(f.Name, map[string]string{"model_name": "m", "engine": engine})
			s, ok := got[key]
			switch f.Instrument.Feature {
			case instrument.Always, instrument.KVConnector:
				if !ok {
					t.Errorf("%s missing from the first scrape", key)
					continue
				}
				if s.Count != 0 || s.Sum != 0 || !slices.Equal(boundsOf(s), wantBounds(f, 1000)) {
					t.Errorf("%s = %+v, want zero with bounds %v", key, s, wantBounds(f, 1000))
				}
				for le, n := range s.Buckets {
					if n != 0 {
						t.Errorf("%s bucket %v = %d", key, le, n)
					}
				}
				checked++
			default:
				if ok {
					t.Errorf("%s (feature %d, not configured) in the scrape", key, f.Instrument.Feature)
				}
			}
		}
	}
	if checked < 2*15 {
		t.Errorf("only %d zero series checked", checked)
	}
	promtoolClean(t, body)
}

// promtoolClean runs promtool check metrics on a scrape when promtool is
// installed, ignoring its complaints about ':' in names (all of vLLM's) and
// about vLLM's histogram vllm:iteration_tokens_total, named so by vLLM.
func promtoolClean(t *testing.T, body string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: not checked")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	var problems []string
	for line := range strings.SplitSeq(string(out), "\n") {
		if line != "" && !strings.HasSuffix(line, "metric names should not contain ':'") &&
			line != `vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix` {
			problems = append(problems, line)
		}
	}
	if len(problems) > 0 || (err != nil && cmd.ProcessState.ExitCode() != 3) {
		t.Errorf("promtool check metrics: %v\n%q", err, problems)
	}
}

var countLine = regexp.MustCompile(`(?m)^vllm:time_to_first_token_seconds_count\{[^}]*\} .*$`)

// Observed series replace the zero ones (no duplicates); the zero series of
// a closed Recorder disappear; the completed families' HELP and TYPE lines
// are the ones the exporter writes.
func TestStartupHistogramsReplacedAndClosed(t *testing.T) {
	prom, mp := startupProvider(t, nil)
	fresh, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"),
		instrument.WithEngines(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	before := scrapeOK(t, prom)
	fresh.RecordIteration(context.Background(), 0, &stats.Iteration{GenerationTokens: 1, TTFT: []float64{0.2}})
	after := scrapeOK(t, prom)
	if got := countLine.FindAllString(after, -1); !slices.Equal(got, []string{
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 1`,
		`vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 0`,
	}) {
		t.Errorf("TTFT count lines after one observation on engine 0: %q", got)
	}
	headers := func(text string) []string {
		var out []string
		for line := range strings.SplitSeq(text, "\n") {
			if strings.HasPrefix(line, "# ") && strings.Contains(line, "time_to_first_token") {
				out = append(out, line)
			}
		}
		return out
	}
	if a, b := headers(before), headers(after); !slices.Equal(a, b) || len(a) != 2 {
		t.Errorf("HELP/TYPE of the completed family %q, of the exported one %q", a, b)
	}

	// Another Recorder on the registry; closing the first removes its zero
	// series, not the series it recorded nor the other's.
	other, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := fresh.Close(); err != nil {
		t.Fatal(err)
	}
	closed := scrapeOK(t, prom)
	if got := countLine.FindAllString(closed, -1); !slices.Equal(got, []string{
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 1`,
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="other"} 0`,
	}) {
		t.Errorf("TTFT count lines after Close: %q", got)
	}
	if strings.Contains(closed, `vllm:inter_token_latency_seconds_count{engine="1",model_name="m"}`) {
		t.Error("a closed Recorder's zero series are still served")
	}
	parseScrape(t, closed)
}

// The zero series take what the family's views export: bucket overrides
// (from the views the handler is told, or once a series of the family shows
// them), attribute filters, the constant,
// scope and resource labels.
func TestStartupHistogramsFollowViews(t *testing.T) {
	const ttft = "vllm:time_to_first_token_seconds"
	ctx := context.Background()

	t.Run("WithBuckets", func(t *testing.T) {
		prom, mp := startupProvider(t, nil, views.WithBuckets(ttft, 0.5, 1, 2))
		rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"), instrument.WithEngines(0, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Close()
		rec.RecordIteration(ctx, 0, &stats.Iteration{TTFT: []float64{0.2}})
		s := parseScrape(t, scrapeOK(t, prom))[benchvariants.Key(ttft, map[string]string{"model_name": "m", "engine": "1"})]
		if !slices.Equal(boundsOf(s), []float64{0.5, 1, 2}) || s.Count != 0 {
			t.Errorf("engine 1's zero TTFT series: %+v, want the overridden bounds", s)
		}
	})

	// Before any observation, the views' bounds, when the handler is told
	// the views (as Setup and NewProvider tell it): a family's, and its
	// kind's, which covers a length-bucket family too.
	t.Run("bounds before the first observation", func(t *testing.T) {
		const prompt = "vllm:request_prompt_tokens"
		vs, err := views.VLLM(views.WithBuckets(ttft, 0.5, 1, 2),
			views.WithCustomHistogramBuckets(map[views.BucketKind][]float64{views.BucketKindRequestTokens: {10, 100}}))
		if err != nil {
			t.Fatal(err)
		}
		prom, err := New(WithProviderViews(vs...))
		if err != nil {
			t.Fatal(err)
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vs...))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"),
			instrument.WithMaxModelLen(1000))
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Close()
		got := parseScrape(t, scrapeOK(t, prom))
		want := map[string][]float64{ttft: {0.5, 1, 2}, prompt: {10, 100}}
		const untouched = "vllm:e2e_request_latency_seconds"
		for _, f := range views.Families() {
			if f.Name == untouched {
				want[untouched] = wantBounds(f, 1000)
			}
		}
		if len(want[untouched]) == 0 {
			t.Fatalf("no bounds for %s", untouched)
		}
		for family, want := range want {
			s, ok := got[benchvariants.Key(family, map[string]string{"model_name": "m", "engine": "0"})]
			if !ok || !slices.Equal(boundsOf(s), want) || s.Count != 0 {
				t.Errorf("%s zero series: %+v (found %v), want bounds %v", family, s, ok, want)
			}
		}
	})

	t.Run("WithAttributes", func(t *testing.T) {
		prom, mp := startupProvider(t, nil, views.WithAttributes(ttft, instrument.KeyModelName))
		rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"), instrument.WithEngines(0, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Close()
		rec.RecordIteration(ctx, 1, &stats.Iteration{TTFT: []float64{0.2}})
		if got := countLine.FindAllString(scrapeOK(t, prom), -1); !slices.Equal(got, []string{
			`vllm:time_to_first_token_seconds_count{model_name="m"} 1`}) {
			t.Errorf("TTFT without the engine label: %q", got)
		}
	})

	t.Run("constant, scope and resource labels", func(t *testing.T) {
		prom, mp := startupProvider(t, []Option{WithScopeInfo()})
		rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"),
			instrument.WithAttributes(attribute.String("role", "decode")))
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Close()
		// A Recorder of the same model and engine without the attribute
		// has its own series.
		plain, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		scope := `otel_scope_name="` + instrument.ScopeName + `",otel_scope_schema_url="",otel_scope_version="` + instrument.Version + `"`
		if got := countLine.FindAllString(scrapeOK(t, prom), -1); !slices.Equal(got, []string{
			`vllm:time_to_first_token_seconds_count{engine="0",model_name="m",` + scope + `} 0`,
			`vllm:time_to_first_token_seconds_count{engine="0",model_name="m",` + scope + `,role="decode"} 0`,
		}) {
			t.Errorf("TTFT zero series: %q", got)
		}
	})
}

// Without vLLM's views (families under OpenTelemetry names) or without Wrap
// the handler adds nothing.
func TestStartupHistogramsOnlyUnderVLLMViews(t *testing.T) {
	testlog.StdLogger(t) // what a scrape reports goes to otel.Handle, which logs it: to the test's log
	prom, err := New()
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if body := scrapeOK(t, prom); strings.Contains(body, "vllm:") || strings.Contains(body, "_bucket") {
		t.Errorf("no-views scrape has vLLM families or histograms:\n%s", body)
	}

	prom2, mp2 := startupProvider(t, nil)
	rec2, err := instrument.NewRecorder(instrument.WithMeterProvider(mp2), instrument.WithModelName("m")) // not wrapped
	if err != nil {
		t.Fatal(err)
	}
	defer rec2.Close()
	if body := scrapeOK(t, prom2); !strings.Contains(body, "vllm:generation_tokens_total") || bytes.Contains([]byte(body), []byte("_bucket")) {
		t.Errorf("unwrapped provider: want counters and no histogram:\n%.400s", body)
	}
}

// Under priority scheduling and with a KV offload tier, the first scrape has
// the families of both features at zero, and each priority-labelled
// histogram family has one zero series per priority value and none without
// the label.
func TestStartupHistogramsWithPriorityAndOffload(t *testing.T) {
	prom, mp := startupProvider(t, nil)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"),
		instrument.WithPriorityScheduling(), instrument.WithKVOffloadCPU())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	body := scrapeOK(t, prom)
	got := parseScrape(t, body)
	base := map[string]string{"model_name": "m", "engine": "0"}
	for _, f := range views.Families() {
		if f.Type != "histogram" {
			continue
		}
		switch f.Instrument.Feature {
		case instrument.Always, instrument.PriorityScheduling, instrument.KVOffload, instrument.KVOffloadCPU:
		default:
			continue
		}
		_, plain := got[benchvariants.Key(f.Name, base)]
		if !f.Instrument.Priority {
			if !plain {
				t.Errorf("%s%v missing from the first scrape", f.Name, base)
			}
			continue
		}
		if plain {
			t.Errorf("%s%v without a priority label under priority scheduling", f.Name, base)
		}
		for _, b := range stats.PriorityBuckets() {
			labels := map[string]string{"model_name": "m", "engine": "0", "priority": b.String()}
			if s, ok := got[benchvariants.Key(f.Name, labels)]; !ok || s.Count != 0 {
				t.Errorf("%s%v = %+v, %v: want a zero series", f.Name, labels, s, ok)
			}
		}
	}
	promtoolClean(t, body)
}

// WithKVResidency and WithCorruptionDetection put their families in the
// first scrape, at zero; without them the families wait for data.
func TestStartupResidencyAndCorruption(t *testing.T) {
	for _, configured := range []bool{false, true} {
		prom, mp := startupProvider(t, nil)
		opts := []instrument.Option{instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m")}
		if configured {
			opts = append(opts, instrument.WithKVResidency(), instrument.WithCorruptionDetection())
		}
		rec, err := instrument.NewRecorder(opts...)
		if err != nil {
			t.Fatal(err)
		}
		got := parseScrape(t, scrapeOK(t, prom))
		base := map[string]string{"model_name": "m", "engine": "0"}
		for _, name := range []string{"vllm:kv_block_lifetime_seconds", "vllm:kv_block_idle_before_evict_seconds",
			"vllm:kv_block_reuse_gap_seconds", "vllm:corrupted_requests_total"} {
			s, ok := got[benchvariants.Key(name, base)]
			if ok != configured || (ok && (s.Count != 0 || s.Value != 0)) {
				t.Errorf("configured %v: %s in the first scrape %v (%+v), want %v at zero", configured, name, ok, s, configured)
			}
		}
		rec.Close()
	}
}
