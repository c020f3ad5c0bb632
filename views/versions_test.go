package views_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

// The legacy families as vLLM's vllm/v1/metrics/loggers.py defined them
// before it hid them (docs/metrics.md names the code read): exposition
// name, type, and for the histogram its buckets, copied from that code.
var (
	gpuCacheUsage      = "vllm:gpu_cache_usage_perc"
	gpuPrefixQueries   = "vllm:gpu_prefix_cache_queries_total"
	gpuPrefixHits      = "vllm:gpu_prefix_cache_hits_total"
	timePerOutputToken = "vllm:time_per_output_token_seconds"
	promptRecomputed   = "vllm:prompt_tokens_recomputed_total"
	vllmTPOTBuckets    = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	legacyTypes = map[string]dto.MetricType{gpuCacheUsage: dto.MetricType_GAUGE,
		gpuPrefixQueries: dto.MetricType_COUNTER, gpuPrefixHits: dto.MetricType_COUNTER,
		timePerOutputToken: dto.MetricType_HISTOGRAM, promptRecomputed: dto.MetricType_COUNTER}
)

// versionFamilies are the legacy families each vLLM version exported by
// default (the scrape of that version without --show-hidden-metrics-for-version).
var versionFamilies = map[string][]string{
	"0.9":    {gpuCacheUsage, gpuPrefixHits, gpuPrefixQueries, timePerOutputToken},
	"0.10":   {gpuCacheUsage, gpuPrefixHits, gpuPrefixQueries, timePerOutputToken},
	"0.10.2": {gpuCacheUsage, gpuPrefixHits, gpuPrefixQueries, timePerOutputToken},
	"v0.10":  {gpuCacheUsage, gpuPrefixHits, gpuPrefixQueries, timePerOutputToken},
	"0.11":   {timePerOutputToken},
	"0.11.2": {timePerOutputToken},
	"0.12":   nil,
	"0.13":   nil,
	"0.15":   nil,
	"0.16":   {promptRecomputed},
	"0.17":   {promptRecomputed},
	"0.18":   {promptRecomputed},
	"0.19":   nil,
	"1.0":    nil,
}

// TestWithVersionFamilies: each version exports the legacy families it
// exported, each with exactly its replacement's values on every engine, and
// every current family stays.
func TestWithVersionFamilies(t *testing.T) {
	all := scenarioReader(t).Families()
	for v, want := range versionFamilies {
		t.Run(v, func(t *testing.T) {
			r := scenarioReader(t, views.WithVersion(v))
			got := r.Families()
			var legacy []string
			for _, name := range got {
				if !slices.Contains(all, name) {
					legacy = append(legacy, name)
				}
			}
			if !slices.Equal(legacy, want) {
				t.Fatalf("legacy families %v, want %v", legacy, want)
			}
			if n := len(got) - len(legacy); n != len(all) {
				t.Errorf("%d current families, want %d", n, len(all))
			}
			replaced := map[string]string{}
			for _, f := range views.LegacyFamilies() {
				replaced[f.Name] = f.Replacement
			}
			for _, name := range legacy {
				if replaced[name] == "" {
					continue // no replacement: TestPromptTokensRecomputed
				}
				var sum float64 // over the engines: the scenario leaves some at 0
				for _, engine := range []string{"0", "1"} {
					labels := []string{"model_name", modelName, "engine", engine}
					if legacyTypes[name] == dto.MetricType_HISTOGRAM {
						old, cur := r.Histogram(name, labels...), r.Histogram(replaced[name], labels...)
						if old.Count != cur.Count || old.Sum != cur.Sum || !slices.Equal(old.Counts, cur.Counts) || old.Count == 0 {
							t.Errorf("engine %s: %s %+v, %s %+v: want equal, observed", engine, name, old, replaced[name], cur)
						}
						continue
					}
					old, cur := r.Value(name, labels...), r.Value(replaced[name], labels...)
					if old != cur {
						t.Errorf("engine %s: %s = %g, %s = %g: want equal", engine, name, old, replaced[name], cur)
					}
					sum += cur
				}
				if legacyTypes[name] != dto.MetricType_HISTOGRAM && sum == 0 {
					t.Errorf("%s: 0 on every engine: the scenario does not test its value", name)
				}
			}
		})
	}
}

// TestWithVersionScrape: in a Prometheus scrape the legacy families have
// vLLM's names, types, label names and buckets, and a description of their own.
func TestWithVersionScrape(t *testing.T) {
	help := map[string]string{}
	for _, f := range views.LegacyFamilies() {
		help[f.Name] = f.Instrument.Description
	}
	for _, v := range []string{"0.10", "0.17"} {
		vs, err := views.VLLM(views.WithVersion(v))
		if err != nil {
			t.Fatal(err)
		}
		x := newExported(t, vs, scenarioOptions...)
		recordScenario(t, x.rec)
		fams := families(t, x.scrape())
		for _, name := range versionFamilies[v] {
			typ := legacyTypes[name]
			mf := fams[name]
			if mf == nil {
				t.Errorf("%s: %s absent from the scrape", v, name)
				continue
			}
			if mf.GetType() != typ {
				t.Errorf("%s: type %s, want %s", name, mf.GetType(), typ)
			}
			if mf.GetHelp() != help[name] || help[name] == "" {
				t.Errorf("%s: help %q, want the legacy family's description %q", name, mf.GetHelp(), help[name])
			}
			for _, m := range mf.GetMetric() {
				var keys []string
				for _, l := range m.GetLabel() {
					keys = append(keys, l.GetName())
				}
				if !slices.Equal(keys, []string{"engine", "model_name"}) {
					t.Errorf("%s: labels %v, want engine and model_name", name, keys)
				}
				if typ != dto.MetricType_HISTOGRAM {
					continue
				}
				var bounds []float64
				for _, b := range m.GetHistogram().GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) {
						bounds = append(bounds, b.GetUpperBound())
					}
				}
				if !slices.Equal(bounds, vllmTPOTBuckets) {
					t.Errorf("%s buckets %v, want vLLM's %v", name, bounds, vllmTPOTBuckets)
				}
			}
		}
	}
}

// TestWithVersionOptions: a bad or pre-V1 version is refused, and the
// options name a legacy family only where the version exports it.
func TestWithVersionOptions(t *testing.T) {
	for _, v := range []string{"0.8", "0.8.5", "0.8.5.post1"} {
		if _, err := views.VLLM(views.WithVersion(v)); !errors.Is(err, views.ErrOption) || !strings.Contains(err.Error(), "V0 engine") {
			t.Errorf("WithVersion(%q): %v, want ErrOption: before the V1 engine", v, err)
		}
	}
	if _, err := views.VLLM(views.WithVersion("0.11"), views.WithBuckets(timePerOutputToken, 0.1, 1)); err != nil {
		t.Errorf("WithBuckets of a legacy family the version exports: %v", err)
	}
	if _, err := views.VLLM(views.WithVersion("0.11"), views.WithAttributes(gpuPrefixHits, "model_name")); !errors.Is(err, views.ErrOption) {
		t.Errorf("WithAttributes of a legacy family 0.11 did not export: %v, want ErrOption", err)
	}
	if _, err := views.VLLM(views.WithBuckets(timePerOutputToken, 0.1, 1)); !errors.Is(err, views.ErrOption) {
		t.Errorf("WithBuckets of a legacy family without WithVersion: %v, want ErrOption", err)
	}
	r := scenarioReader(t, views.WithVersion("0.11"), views.WithBuckets(timePerOutputToken, 0.1, 1))
	h := r.Histogram(timePerOutputToken, "model_name", modelName, "engine", "0")
	if !slices.Equal(h.Bounds, []float64{0.1, 1}) {
		t.Errorf("%s bounds %v with WithBuckets, want [0.1 1]", timePerOutputToken, h.Bounds)
	}
	if cur := r.Histogram("vllm:inter_token_latency_seconds", "model_name", modelName, "engine", "0"); slices.Equal(cur.Bounds, h.Bounds) {
		t.Errorf("WithBuckets of the legacy family changed its replacement's buckets too: %v", cur.Bounds)
	}
}

// TestLegacyFamilies: each legacy family derives from its replacement's
// instrument, with that family's type, labels and buckets.
func TestLegacyFamilies(t *testing.T) {
	current := map[string]views.Family{}
	for _, f := range views.Families() {
		current[f.Name] = f
	}
	fs := views.LegacyFamilies()
	if len(fs) != len(legacyTypes) {
		t.Fatalf("%d legacy families, want %d", len(fs), len(legacyTypes))
	}
	for _, f := range fs {
		if f.Replacement == "" { // removed without a successor: an instrument of its own
			if !slices.ContainsFunc(instrument.LegacyDescriptors(), func(d instrument.Descriptor) bool { return d.Name == f.Instrument.Name }) ||
				f.Added == "" || f.Removed == "" || f.Changes == "" || !strings.EqualFold(f.Type, legacyTypes[f.Name].String()) {
				t.Errorf("%s: want an instrument of instrument.LegacyDescriptors, its type, and the versions that added and removed it: %+v", f.Name, f)
			}
			continue
		}
		r, ok := current[f.Replacement]
		if !ok {
			t.Errorf("%s: replacement %s is not a family of views.Families", f.Name, f.Replacement)
			continue
		}
		if f.Instrument.Name != r.Instrument.Name || f.Type != r.Type || !slices.Equal(f.Labels, r.Labels) ||
			!slices.Equal(f.Buckets, r.Buckets) || !strings.EqualFold(f.Type, legacyTypes[f.Name].String()) {
			t.Errorf("%s %+v does not derive from %s %+v", f.Name, f, r.Name, r)
		}
		if f.Deprecated == "" || f.Hidden == "" || f.Removed == "" || f.Changes == "" {
			t.Errorf("%s: a version or change missing: %+v", f.Name, f)
		}
	}
}

// vLLMVersions are version strings vLLM reports (vllm.__version__, PEP 440),
// each with the minor version whose legacy families it takes: releases of
// three and four numbers (0.10.1.1), release candidates, post releases,
// setuptools_scm's development versions (.devN+g<commit>, .d<date> when the
// tree was dirty), the device suffix setup.py's get_vllm_version appends
// (+cu128, .cu129 after a local version, +rocm700, +cpu; vllm-project/vllm
// setup.py @e0e14a82, which also shows 0.11.2.dev278+gdbc3d9991), and a
// git tag.
var vLLMVersions = map[string]string{
	"0.10.1.1":                             "0.10",
	"0.10.2":                               "0.10",
	"0.10.2+cu128":                         "0.10",
	"0.10.2rc1":                            "0.10",
	"0.11.0rc2":                            "0.11",
	"0.9.2.dev364+gb432b7a28":              "0.9",
	"0.11.2.dev278+gdbc3d9991":             "0.11",
	"0.11.2.dev278+gdbc3d9991.cu129":       "0.11",
	"0.10.1rc2.dev41+g5e99c1f8a.d20250815": "0.10",
	"0.12.0+rocm700":                       "0.12",
	"0.11.1+cpu":                           "0.11",
	"0.10.1.post1":                         "0.10",
	"0.9.0a1":                              "0.9",
	"0.9.0b2.dev1":                         "0.9",
	"v0.10.0":                              "0.10",
	"1.0.0":                                "1.0",
}

// TestWithVersionStrings: every version string vLLM reports is taken, with
// the legacy families of its minor version; anything else is refused whole
// with ErrOption and a message that quotes at most a bounded prefix of it.
func TestWithVersionStrings(t *testing.T) {
	for v, minor := range vLLMVersions {
		r := scenarioReader(t, views.WithVersion(v))
		var legacy []string
		for _, f := range views.LegacyFamilies() {
			if slices.Contains(r.Families(), f.Name) {
				legacy = append(legacy, f.Name)
			}
		}
		slices.Sort(legacy)
		if want := versionFamilies[minor]; !slices.Equal(legacy, want) {
			t.Errorf("WithVersion(%q): legacy families %v, want %s's %v", v, legacy, minor, want)
		}
	}
	long := strings.Repeat("1", 1<<20)
	for _, v := range []string{
		" 0.10", "0.10 ", "v0.10.x", "0.10.x", "0.x", "-1.0", "0.-1", "0", "10", "v", "0.", "0.10.",
		"0..10", "0.010", "00.10", "0.10rc", "0.10rc1rc2", "0.10.rc1", "0.10.post", "0.10.dev",
		"0.10.dev1.post1", "0.10+", "0.10+cu128+cpu", "0.10+cu 128", "0.10+cu..128", "0.10+cü128",
		"1!0.10", "V0.10", "vv0.10", "0.10-rc1", "0.10\x00", "0.99999999999999999999999",
		"0." + long, "0.10+" + long, long,
	} {
		_, err := views.VLLM(views.WithVersion(v))
		if !errors.Is(err, views.ErrOption) {
			t.Errorf("WithVersion(%.40q): %v, want ErrOption", v, err)
			continue
		}
		if len(err.Error()) > 400 {
			t.Errorf("WithVersion of %d bytes: an error of %d bytes, want the version cut short", len(v), len(err.Error()))
		}
	}
}

// WithVersion("") is no older family, as leaving the option out is: a flag
// or environment variable left unset passes straight through.
func TestWithVersionEmpty(t *testing.T) {
	with, err := views.VLLM(views.WithVersion(""))
	if err != nil {
		t.Fatalf(`WithVersion(""): %v, want no error`, err)
	}
	without, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	if len(with) != len(without) {
		t.Errorf(`WithVersion(""): %d views, want the %d of no version`, len(with), len(without))
	}
}

// vllm:prompt_tokens_recomputed_total (vLLM PR #33290, removed by #38709)
// counted, per request, the prompt token vLLM recomputed when its whole
// prompt was cached: 1 when the request computed exactly one prompt token
// (PromptTokenStats.update_from_output: num_cached_tokens + 1 ==
// prompt_len), 0 otherwise. WithVersion of the releases that exported it
// serves it from start-up, at zero on every engine, then one per finished
// request that computed one prompt token; no other version, and no
// version, exports it, under its vLLM name or its OpenTelemetry one.
func TestPromptTokensRecomputed(t *testing.T) {
	engine := func(e string) []string { return []string{"model_name", modelName, "engine", e} }
	for _, v := range []string{"0.16", "0.17.1", "0.18"} {
		t.Run(v, func(t *testing.T) {
			r := testutil.New(t, views.WithVersion(v))
			rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(modelName),
				instrument.WithEngines(0, 1), scenarioErrors(t))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(r.Families(), promptRecomputed) {
				t.Fatalf("%s absent before any request: %v", promptRecomputed, r.Families())
			}
			for _, c := range []struct {
				rank             int
				prompt, computed int64
			}{
				{0, 100, 1},  // a full prefix cache hit: the last token recomputed
				{0, 100, 60}, // a partial hit
				{0, 1, 1},    // a one-token prompt: 0 cached + 1 == 1, counted as vLLM did
				{1, 17, 1},
				{1, 17, 17}, // no hit
			} {
				rec.RecordFinished(t.Context(), c.rank, &stats.FinishedRequest{Reason: stats.FinishStop,
					PromptTokens: c.prompt, PrefillComputedTokens: c.computed, GenerationTokens: 1})
			}
			if got := r.Value(promptRecomputed, engine("0")...); got != 2 {
				t.Errorf("engine 0: %v, want 2", got)
			}
			if got := r.Value(promptRecomputed, engine("1")...); got != 1 {
				t.Errorf("engine 1: %v, want 1", got)
			}
		})
	}
	for _, opts := range [][]views.Option{nil, {views.WithVersion("0.15")}, {views.WithVersion("0.19")}} {
		r := scenarioReader(t, opts...)
		for _, name := range r.Families() {
			if strings.Contains(name, "recomputed") {
				t.Errorf("views %v export %s", opts, name)
			}
		}
	}
}
