package testutil_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

// newRecorder returns a Recorder of model "m" with engines 0 and 1 on the
// reader's provider, with one step, one finished request and one scheduler
// step recorded on engine 0.
func newRecorder(t *testing.T, r *testutil.Reader, opts ...instrument.Option) *instrument.Recorder {
	t.Helper()
	ctx := context.Background()
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(r.Provider()),
		instrument.WithModelName("m"), instrument.WithEngines(0, 1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	split, err := stats.SplitPrompt(10, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec.RecordIteration(ctx, 0, &stats.Iteration{PromptTokens: split, GenerationTokens: 5})
	rec.RecordFinished(ctx, 0, &stats.FinishedRequest{Reason: stats.FinishStop, PromptTokens: 10,
		GenerationTokens: 5, E2ELatency: 4.5})
	rec.RecordScheduler(ctx, 0, &stats.Scheduler{Running: 3, KVCacheUsage: 0.25})
	return rec
}

func TestValue(t *testing.T) {
	r := testutil.New(t)
	newRecorder(t, r)
	for _, c := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"vllm:generation_tokens_total", []string{"model_name", "m", "engine", "0"}, 5},
		{"vllm:generation_tokens_total", []string{"engine", "1", "model_name", "m"}, 0},
		{"vllm:prompt_tokens_by_source_total", []string{"model_name", "m", "engine", "0", "source", "local_cache_hit"}, 4},
		{"vllm:request_success_total", []string{"model_name", "m", "engine", "0", "finished_reason", "stop"}, 1},
		{"vllm:num_requests_running", []string{"model_name", "m", "engine", "0"}, 3},
		{"vllm:kv_cache_usage_perc", []string{"model_name", "m", "engine", "0"}, 0.25},
	} {
		if got := r.Value(c.family, c.labels...); got != c.want {
			t.Errorf("Value(%s, %q) = %v, want %v", c.family, c.labels, got, c.want)
		}
	}
}

func TestHistogram(t *testing.T) {
	r := testutil.New(t, views.WithBuckets("vllm:e2e_request_latency_seconds", 1, 5, 10))
	newRecorder(t, r)
	got := r.Histogram("vllm:e2e_request_latency_seconds", "model_name", "m", "engine", "0")
	want := testutil.Histogram{Count: 1, Sum: 4.5, Bounds: []float64{1, 5, 10}, Counts: []uint64{0, 1, 0, 0}}
	if got.Count != want.Count || got.Sum != want.Sum || !slices.Equal(got.Bounds, want.Bounds) || !slices.Equal(got.Counts, want.Counts) {
		t.Errorf("Histogram = %+v, want %+v", got, want)
	}
	// An integer histogram.
	if got := r.Histogram("vllm:request_prompt_tokens", "model_name", "m", "engine", "0"); got.Count != 1 || got.Sum != 10 {
		t.Errorf("vllm:request_prompt_tokens = %+v, want count 1, sum 10", got)
	}
}

// A Snapshot reads what was collected when it was taken: the same values as
// the Reader then, and not what is recorded after.
func TestSnapshot(t *testing.T) {
	r := testutil.New(t)
	rec := newRecorder(t, r)
	s := r.Snapshot()
	engine0 := []string{"model_name", "m", "engine", "0"}
	rec.RecordIteration(context.Background(), 0, &stats.Iteration{GenerationTokens: 2})
	rec.RecordFinished(context.Background(), 0, &stats.FinishedRequest{Reason: stats.FinishStop, PromptTokens: 1, E2ELatency: 1})
	if got, now := s.Value("vllm:generation_tokens_total", engine0...), r.Value("vllm:generation_tokens_total", engine0...); got != 5 || now != 7 {
		t.Errorf("generation tokens: snapshot %v, reader %v; want 5 and 7", got, now)
	}
	if got, now := s.Histogram("vllm:e2e_request_latency_seconds", engine0...).Count, r.Histogram("vllm:e2e_request_latency_seconds", engine0...).Count; got != 1 || now != 2 {
		t.Errorf("e2e latency count: snapshot %v, reader %v; want 1 and 2", got, now)
	}
	if !slices.Equal(s.Families(), r.Families()) || s.Provider() != r.Provider() {
		t.Errorf("the snapshot's families or provider differ from the reader's")
	}
}

// The GenAI histograms of views.Semconv keep their OpenTelemetry names.
func TestNewWithViews(t *testing.T) {
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := views.Semconv()
	if err != nil {
		t.Fatal(err)
	}
	r := testutil.NewWithViews(t, append(vs, sc...)...)
	newRecorder(t, r, instrument.WithGenAI("chat", "acme"), instrument.WithGenAISemconv())
	got := r.Histogram(views.GenAIServerRequestDuration, "gen_ai.operation.name", "chat",
		"gen_ai.provider.name", "acme", "gen_ai.request.model", "m")
	if got.Count != 1 || got.Sum != 4.5 {
		t.Errorf("%s = %+v, want count 1, sum 4.5", views.GenAIServerRequestDuration, got)
	}
}

// Families names every family as views.Families does.
func TestFamilies(t *testing.T) {
	r := testutil.New(t)
	newRecorder(t, r)
	exposed := map[string]bool{}
	for _, f := range views.Families() {
		exposed[f.Name] = true
	}
	got := r.Families()
	for _, name := range got {
		if !exposed[name] {
			t.Errorf("Families() has %s, which views.Families() does not name", name)
		}
	}
	for _, name := range []string{"vllm:generation_tokens_total", "vllm:num_requests_running", "vllm:iteration_tokens_total"} {
		if !slices.Contains(got, name) {
			t.Errorf("Families() = %v, want %s among them", got, name)
		}
	}
}

// fakeTB records the message of Fatalf and ends its goroutine, as
// testing.T's does.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatal runs call in a goroutine of its own and returns the Fatalf message
// it ended with, "" when it returned.
func fatal(f *fakeTB, call func()) string {
	f.msg = ""
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	<-done
	return f.msg
}

func TestFailures(t *testing.T) {
	f := &fakeTB{TB: t}
	r := testutil.New(f)
	newRecorder(t, r)
	for _, c := range []struct {
		name string
		call func()
		want []string // in the message
	}{
		{"old name", func() { r.Value("vllm:generation_tokens", "model_name", "m", "engine", "0") },
			[]string{"no family vllm:generation_tokens;", "did you mean vllm:generation_tokens_total?"}},
		{"unknown family", func() { r.Value("vllm:nope") }, []string{"no family vllm:nope; the provider has ", "vllm:num_requests_running, "}},
		{"no such series", func() { r.Value("vllm:generation_tokens_total", "model_name", "m", "engine", "7") },
			[]string{`no series {engine="7",model_name="m"}`, `{engine="0",model_name="m"}, {engine="1",model_name="m"}`}},
		{"labels missing", func() { r.Value("vllm:generation_tokens_total", "model_name", "m") },
			[]string{`no series {model_name="m"}`}},
		{"odd labels", func() { r.Value("vllm:generation_tokens_total", "model_name") }, []string{"name/value pairs"}},
		{"label twice", func() { r.Value("vllm:generation_tokens_total", "engine", "0", "engine", "1") }, []string{"twice"}},
		{"histogram without observations", func() {
			r.Histogram("vllm:e2e_request_latency_seconds", "model_name", "m", "engine", "1")
		}, []string{`no series {engine="1",model_name="m"}`}},
		{"value of a histogram", func() { r.Value("vllm:e2e_request_latency_seconds", "model_name", "m", "engine", "0") },
			[]string{"is a histogram", "use Histogram"}},
		{"histogram of a counter", func() { r.Histogram("vllm:generation_tokens_total", "model_name", "m", "engine", "0") },
			[]string{"is a counter", "use Value"}},
		{"bad option", func() { testutil.New(f, views.WithBuckets("vllm:e2e_request_latency_seconds")) },
			[]string{"testutil.New", "omit the option"}},
	} {
		msg := fatal(f, c.call)
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: failed with %q, want it to say %q", c.name, msg, w)
			}
		}
	}
	// A lookup that succeeds does not fail.
	if msg := fatal(f, func() { r.Value("vllm:generation_tokens_total", "model_name", "m", "engine", "0") }); msg != "" {
		t.Errorf("a lookup of a series that is there failed: %s", msg)
	}
}

// The provider is shut down when the test ends.
func TestCleanup(t *testing.T) {
	var mp *sdkmetric.MeterProvider
	t.Run("inner", func(t *testing.T) {
		mp = testutil.New(t).Provider().(*sdkmetric.MeterProvider)
	})
	if err := mp.Shutdown(context.Background()); err == nil {
		t.Error("the provider was not shut down at the end of the test")
	}
}
