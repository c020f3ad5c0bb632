package views_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

// scrapeWith records the scenario through the given views and parses the scrape.
func scrapeWith(t *testing.T, vs []sdkmetric.View, err error) map[string]*dto.MetricFamily {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	x := newExported(t, vs, scenarioOptions...)
	recordScenario(t, x.rec)
	return families(t, x.scrape())
}

func TestWithBuckets(t *testing.T) {
	r := scenarioReader(t, views.WithBuckets("vllm:e2e_request_latency_seconds", 1, 10, 60))
	for _, engine := range []string{"0", "1"} {
		labels := []string{"model_name", modelName, "engine", engine}
		if got := r.Histogram("vllm:e2e_request_latency_seconds", labels...).Bounds; !slices.Equal(got, []float64{1, 10, 60}) {
			t.Errorf("vllm:e2e_request_latency_seconds of engine %s has bounds %v, want [1 10 60]", engine, got)
		}
		// The other latency families keep vLLM's list.
		if got := r.Histogram("vllm:request_queue_time_seconds", labels...).Bounds; !slices.Equal(got, specBuckets["latency"]) {
			t.Errorf("vllm:request_queue_time_seconds of engine %s has bounds %v, want %v", engine, got, specBuckets["latency"])
		}
	}
}

func TestSemconvWithBuckets(t *testing.T) {
	vs, err := views.Semconv(views.WithBuckets(views.GenAIServerRequestDuration, 0.5, 5))
	if err != nil {
		t.Fatal(err)
	}
	r := testutil.NewWithViews(t, vs...)
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(r.Provider()),
		instrument.WithModelName(modelName), instrument.WithGenAI("chat", "acme"), instrument.WithGenAISemconv()},
		scenarioOptions...)...)
	if err != nil {
		t.Fatal(err)
	}
	recordScenario(t, rec)
	got := r.Histogram(views.GenAIServerRequestDuration, "gen_ai.operation.name", "chat", "gen_ai.provider.name", "acme",
		"gen_ai.request.model", modelName)
	if !slices.Equal(got.Bounds, []float64{0.5, 5}) {
		t.Errorf("%s has boundaries %v, want [0.5 5]", views.GenAIServerRequestDuration, got.Bounds)
	}
}

// WithAttributes keeps only model_name on vllm:generation_tokens_total: both
// engines' series merge, and no other family loses its engine label.
func TestWithAttributes(t *testing.T) {
	r := scenarioReader(t, views.WithAttributes("vllm:generation_tokens_total", "model_name"))
	// Engine 0 generated 4 + 3 + 3 + 2 = 12 tokens, engine 1 three: 15.
	if got := r.Value("vllm:generation_tokens_total", "model_name", modelName); got != 15 {
		t.Errorf("vllm:generation_tokens_total{model_name} = %v, want 15", got)
	}
	for _, name := range []string{"vllm:prompt_tokens_total", "vllm:prompt_tokens_cached_total", "vllm:num_requests_running"} {
		for _, engine := range []string{"0", "1"} {
			r.Value(name, "model_name", modelName, "engine", engine) // fails the test if the series is missing
		}
	}
}

func TestOptionErrors(t *testing.T) {
	const e2e = "vllm:e2e_request_latency_seconds"
	for _, c := range []option{
		{"unknown family", views.VLLM, views.WithBuckets("vllm:nope", 1)},
		{"counter family", views.VLLM, views.WithBuckets("vllm:generation_tokens_total", 1)},
		{"gauge family", views.VLLM, views.WithBuckets("vllm:kv_cache_usage_perc", 1)},
		{"decreasing", views.VLLM, views.WithBuckets(e2e, 2, 1)},
		{"repeated", views.VLLM, views.WithBuckets(e2e, 1, 1)},
		{"NaN", views.VLLM, views.WithBuckets(e2e, 1, math.NaN())},
		{"infinite", views.VLLM, views.WithBuckets(e2e, 1, math.Inf(1))},
		{"attributes of an unknown family", views.VLLM, views.WithAttributes("vllm:nope", "model_name")},
		{"Semconv: a vLLM family", views.Semconv, views.WithBuckets(e2e, 1)},
		{"Semconv: attributes of a vLLM family", views.Semconv, views.WithAttributes("vllm:generation_tokens_total", "model_name")},
		{"Semconv: negative infinity", views.Semconv, views.WithBuckets(views.GenAIServerTimeToFirstToken, math.Inf(-1), 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs, err := c.fn(c.opt)
			if vs != nil || !errors.Is(err, views.ErrOption) {
				t.Errorf("got %d views, error %v; want none and ErrOption", len(vs), err)
			}
		})
	}
}

// option is one option given to VLLM or Semconv, for the option tests.
type option struct {
	name string
	fn   func(...views.Option) ([]sdkmetric.View, error)
	opt  views.Option
}

// Options name a family exactly as views.Families and the exposition do:
// counters with _total. Every family takes every option that applies to it.
func TestOptionsTakeExposedNames(t *testing.T) {
	for _, f := range views.Families() {
		var opts []views.Option
		if f.Type != "gauge" {
			opts = append(opts, views.WithAttributes(f.Name, "model_name"))
		}
		if f.Type == "histogram" {
			opts = append(opts, views.WithBuckets(f.Name, 1, 2))
		}
		if _, err := views.VLLM(opts...); err != nil {
			t.Errorf("%s (%s): %v", f.Name, f.Type, err)
		}
		if f.Type == "histogram" {
			if _, err := views.VLLM(views.WithExponential(f.Name)); err != nil {
				t.Errorf("%s: WithExponential: %v", f.Name, err)
			}
		}
		if f.Semconv != "" {
			if _, err := views.Semconv(views.WithBuckets(f.Semconv, 1, 2),
				views.WithAttributes(f.Semconv, "gen_ai.request.model")); err != nil {
				t.Errorf("%s: %v", f.Semconv, err)
			}
		}
	}
	r := scenarioReader(t, views.WithAttributes("vllm:generation_tokens_total", "model_name"))
	r.Value("vllm:generation_tokens_total", "model_name", modelName) // the engines merged into one series
}

// The names before 0.x (counters without _total, the OpenTelemetry instrument
// name, the Prometheus name of a GenAI family) are refused with the name to use.
func TestOptionsRefuseOtherNamesSayingTheRightOne(t *testing.T) {
	for _, c := range []struct {
		option
		want string
	}{
		{option{"counter without _total", views.VLLM, views.WithAttributes("vllm:generation_tokens", "model_name")}, `"vllm:generation_tokens_total"`},
		{option{"by source without _total", views.VLLM, views.WithAttributes(views.PromptTokensBySource, "model_name")}, `"vllm:prompt_tokens_by_source_total"`},
		{option{"instrument name", views.VLLM, views.WithBuckets("vllm.time_to_first_token", 1)}, `"vllm:time_to_first_token_seconds"`},
		{option{"histogram without _total", views.VLLM, views.WithBuckets("vllm:iteration_tokens", 1)}, `"vllm:iteration_tokens_total"`},
		{option{"Prometheus name of a GenAI family", views.Semconv, views.WithBuckets("gen_ai_server_request_duration_seconds", 1)}, `"gen_ai.server.request.duration"`},
		{option{"GenAI family given to VLLM", views.VLLM, views.WithBuckets(views.GenAIServerTimeToFirstToken, 1)}, "views.Semconv"},
		{option{"vLLM family given to Semconv", views.Semconv, views.WithBuckets("vllm:e2e_request_latency_seconds", 1)}, "views.VLLM"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs, err := c.fn(c.opt)
			if vs != nil || !errors.Is(err, views.ErrOption) || !strings.Contains(fmt.Sprint(err), c.want) {
				t.Errorf("got %d views, error %v; want ErrOption naming %s", len(vs), err, c.want)
			}
		})
	}
}

// Every counter named the old way, without _total, is refused with its name.
func TestOptionsRefuseCountersWithoutTotal(t *testing.T) {
	for _, f := range views.Families() {
		if f.Type != "counter" {
			continue
		}
		old := strings.TrimSuffix(f.Name, "_total")
		_, err := views.VLLM(views.WithAttributes(old, "model_name"))
		if !errors.Is(err, views.ErrOption) || !strings.Contains(fmt.Sprint(err), strconv.Quote(f.Name)) {
			t.Errorf("WithAttributes(%q): error %v; want ErrOption naming %q", old, err, f.Name)
		}
	}
}

// An allow-list must keep the family's model label; only counters and
// histograms, whose merged series are sums, take one.
func TestWithAttributesRules(t *testing.T) {
	for _, c := range []struct {
		option
		want string // in the error; "" when the option is accepted
	}{
		{option{"no keys", views.VLLM, views.WithAttributes("vllm:generation_tokens_total")}, "model_name"},
		{option{"no model_name", views.VLLM, views.WithAttributes("vllm:request_success_total", "engine", "finished_reason")}, "model_name"},
		{option{"histogram without model_name", views.VLLM, views.WithAttributes("vllm:time_to_first_token_seconds", "engine")}, "model_name"},
		{option{"gauge", views.VLLM, views.WithAttributes("vllm:num_requests_running", "model_name", "engine")}, "gauge"},
		{option{"info gauge", views.VLLM, views.WithAttributes("vllm:lora_requests_info", "max_lora")}, "gauge"},
		{option{"Semconv: no keys", views.Semconv, views.WithAttributes(views.GenAIServerRequestDuration)}, "gen_ai.request.model"},
		{option{"Semconv: no model", views.Semconv, views.WithAttributes(views.GenAIServerRequestDuration, "error.type")}, "gen_ai.request.model"},
		{option{"counter without engine", views.VLLM, views.WithAttributes("vllm:request_success_total", "model_name")}, ""},
		{option{"histogram without engine", views.VLLM, views.WithAttributes("vllm:e2e_request_latency_seconds", "model_name", "role")}, ""},
		{option{"Semconv: model only", views.Semconv, views.WithAttributes(views.GenAIServerRequestDuration, "gen_ai.request.model")}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs, err := c.fn(c.opt)
			if c.want == "" {
				if err != nil || vs == nil {
					t.Errorf("got %d views, error %v; want the option accepted", len(vs), err)
				}
				return
			}
			if vs != nil || !errors.Is(err, views.ErrOption) || !strings.Contains(fmt.Sprint(err), c.want) {
				t.Errorf("got %d views, error %v; want ErrOption mentioning %s", len(vs), err, c.want)
			}
		})
	}
}

// An empty bucket list would make a single +Inf bucket: refused, saying how
// to keep the default.
func TestWithBucketsEmpty(t *testing.T) {
	for _, c := range []option{
		{"VLLM", views.VLLM, views.WithBuckets("vllm:e2e_request_latency_seconds")},
		{"Semconv", views.Semconv, views.WithBuckets(views.GenAIServerRequestDuration)},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs, err := c.fn(c.opt)
			if vs != nil || !errors.Is(err, views.ErrOption) || !strings.Contains(fmt.Sprint(err), "omit") {
				t.Errorf("got %d views, error %v; want ErrOption saying to omit the option", len(vs), err)
			}
		})
	}
}

// The tier family is named by options as Families names it, apart from its
// total: an allow-list on it leaves vllm:prompt_tokens_cached_total alone.
func TestOptionsNameTheTierFamily(t *testing.T) {
	r := scenarioReader(t, views.WithAttributes("vllm:prompt_tokens_cached_by_source_total", "model_name", "source"))
	// Engines summed: device 256 (engine 0), p2p 3000 (engine 1).
	if got := r.Value("vllm:prompt_tokens_cached_by_source_total", "model_name", modelName, "source", "p2p"); got != 3000 {
		t.Errorf("p2p over engines = %v, want 3000", got)
	}
	if got := r.Value("vllm:prompt_tokens_cached_total", "model_name", modelName, "engine", "0"); got != 768 {
		t.Errorf("the total of engine 0 = %v, want 768", got)
	}
	if _, err := views.VLLM(views.WithAttributes("vllm:prompt_tokens_cached_by_source", "model_name")); !errors.Is(err, views.ErrOption) {
		t.Errorf("the name without _total: %v, want ErrOption", err)
	}
}
