package main

import (
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// TestFaultFlags parses every fault flag, checks the faults it sets, that
// -h documents each, and that check refuses values out of range.
func TestFaultFlags(t *testing.T) {
	fs := flag.NewFlagSet("pd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f faults
	f.register(fs)
	var usage strings.Builder
	fs.SetOutput(&usage)
	fs.PrintDefaults()
	for _, name := range []string{"stuck-engine", "slow-prefill", "slow-decode", "decode-kv-tokens", "max-num-seqs",
		"handoff-delay", "http-5xx", "invalid-events", "cardinality-limit", "decode-down-after", "decode-down-on-signal", "cached-excess", "preempt-every", "shed"} {
		if u := usage.String(); !strings.Contains(u, "  -"+name+" ") && !strings.Contains(u, "  -"+name+"\n") { // a bool flag has no type after it
			t.Errorf("-h does not document -%s:\n%s", name, usage.String())
		}
	}
	if err := f.check(2); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if f != (faults{decodeKV: defaultDecodeKV, maxNumSeqs: maxRunning}) {
		t.Errorf("defaults inject %+v", f)
	}
	err := fs.Parse([]string{"-stuck-engine", "1", "-slow-prefill", "3s", "-slow-decode", "150ms", "-decode-kv-tokens", "8192",
		"-max-num-seqs", "1", "-handoff-delay", "1s", "-http-5xx", "0.5", "-invalid-events", "0.2", "-cardinality-limit", "5",
		"-decode-down-after", "20s", "-decode-down-on-signal", "-cached-excess", "64", "-preempt-every", "10", "-shed", "0.25"})
	if err != nil {
		t.Fatal(err)
	}
	want := faults{stuckEngine: 2, slowPrefill: 3 * time.Second, slowDecode: 150 * time.Millisecond, decodeKV: 8192,
		maxNumSeqs: 1, handoffDelay: time.Second, http5xx: 0.5, invalidEvents: 0.2, cardinalityLimit: 5,
		decodeDownAfter: 20 * time.Second, decodeDownOnSignal: true, cachedExcess: 64, preemptEvery: 10, shed: 0.25}
	if f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
	if err := f.check(2); err != nil {
		t.Error(err)
	}
	for _, bad := range []struct {
		f       faults
		engines int
	}{
		{faults{stuckEngine: 3, decodeKV: maxModelLen, maxNumSeqs: 1}, 2}, // rank 2 of 2 engines
		{faults{stuckEngine: 1, decodeKV: maxModelLen, maxNumSeqs: 1}, 1}, // nobody runs the requests
		{faults{decodeKV: maxModelLen - 1, maxNumSeqs: 1}, 2},
		{faults{decodeKV: maxModelLen}, 2},
		{faults{decodeKV: maxModelLen, maxNumSeqs: 1, http5xx: 1.5}, 2},
		{faults{decodeKV: maxModelLen, maxNumSeqs: 1, invalidEvents: -0.1}, 2},
		{faults{decodeKV: maxModelLen, maxNumSeqs: 1, slowDecode: -time.Second}, 2},
		{faults{decodeKV: maxModelLen, maxNumSeqs: 1, cardinalityLimit: -1}, 2},
		{faults{decodeKV: maxModelLen, maxNumSeqs: 1, cachedExcess: -1}, 2},
		{faults{decodeKV: maxModelLen, maxNumSeqs: 1, preemptEvery: -1}, 2},
		{faults{decodeKV: maxModelLen, maxNumSeqs: 1, shed: 1.1}, 2},
	} {
		if bad.f.check(bad.engines) == nil {
			t.Errorf("check(%+v, %d engines) accepted it", bad.f, bad.engines)
		}
	}
	if fs.Parse([]string{"-stuck-engine", "-1"}) == nil {
		t.Error("-stuck-engine -1 accepted")
	}
}

// -shed 0.25 refuses every fourth generated request at admission: it is
// counted in vllm:admission_rejections_total, by the limit vLLM counts a
// full queue under, and reaches no engine.
func TestShed(t *testing.T) {
	r := testutil.New(t)
	rec, err := instrument.NewRecorder(instrument.WithModelName(testModel), instrument.WithMeterProvider(r.Provider()))
	if err != nil {
		t.Fatal(err)
	}
	eng, _ := rec.Engine(0)
	in := &instance{engines: []*engine{newEngine(prefillRole, eng, 1, 1<<20, nil)}}
	s := &shedder{p: everyNth{share: 0.25}}
	var refused []int
	for i := 1; i <= 12; i++ {
		if s.refused(context.Background(), in) {
			refused = append(refused, i)
		}
	}
	if !slices.Equal(refused, []int{4, 8, 12}) {
		t.Errorf("refused %v, want the 4th, 8th and 12th", refused)
	}
	if v := r.Value("vllm:admission_rejections_total", "model_name", testModel, "reason", stats.AdmissionQueuedRequests.String()); v != 3 {
		t.Errorf("admission rejections %v, want 3", v)
	}
	var none *shedder
	if none.refused(context.Background(), in) || (&shedder{}).refused(context.Background(), in) {
		t.Error("no shedder, or a share of 0, refused a request")
	}
}

// testEngine is an engine of role r on a Recorder of its own (the global,
// no-op MeterProvider), with faults f applied, and three requests
// submitted.
func testEngine(t *testing.T, r role, f faults) *engine {
	t.Helper()
	rec, err := instrument.NewRecorder(instrument.WithModelName(testModel), instrument.WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	eng, _ := rec.Engine(0)
	e := newEngine(r, eng, 1, 1<<20, nil)
	f.apply(r, 0, e)
	for id := 1; id <= 3; id++ {
		if err := e.submit(request{id: id, arrival: time.Now(), prompt: 100, output: 50, prefix: -1}, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// scheduled admits and schedules the engine's requests once and returns
// the scheduler's snapshot.
func (e *engine) scheduled() stats.Scheduler {
	sched := stats.Scheduler{ConnectorPrefixCache: &stats.CacheQueries{}}
	var kv stats.KVTransfer
	e.schedule(e.admit(&kv), &sched)
	return sched
}

// TestStuckEngine checks that a stuck engine schedules none of the
// requests it holds, and that the instance routes no more to it once it
// holds one, even when the other engine holds more.
func TestStuckEngine(t *testing.T) {
	e := testEngine(t, decodeRole, faults{stuckEngine: 1})
	if s := e.scheduled(); s.Running != 0 || s.WaitingCapacity != 3 {
		t.Errorf("stuck engine: %d running, %d waiting; want 0 and 3", s.Running, s.WaitingCapacity)
	}
	if s := testEngine(t, decodeRole, faults{}).scheduled(); s.Running != 3 {
		t.Errorf("healthy engine: %d running, want 3", s.Running)
	}
	healthy, stuck := &engine{}, &engine{stuck: true}
	in := &instance{engines: []*engine{healthy, stuck}}
	healthy.load.Store(5)
	if got := in.leastLoaded(); got != stuck {
		t.Error("a stuck engine holding nothing got no request")
	}
	stuck.load.Store(1)
	if got := in.leastLoaded(); got != healthy {
		t.Error("a stuck engine holding a request got another")
	}
}

// TestMaxNumSeqs checks that a decode engine runs at most -max-num-seqs
// requests, and that the prefill role ignores it.
func TestMaxNumSeqs(t *testing.T) {
	if s := testEngine(t, decodeRole, faults{maxNumSeqs: 1}).scheduled(); s.Running != 1 || s.WaitingCapacity != 2 {
		t.Errorf("decode, -max-num-seqs 1: %d running, %d waiting; want 1 and 2", s.Running, s.WaitingCapacity)
	}
	if s := testEngine(t, prefillRole, faults{maxNumSeqs: 1}).scheduled(); s.Running != 3 {
		t.Errorf("prefill, -max-num-seqs 1: %d running, want 3", s.Running)
	}
}

// histogram is the histogram of family name on engine of the scrape.
func histogram(fams map[string]*dto.MetricFamily, name, engine string) *dto.Histogram {
	for _, m := range fams[name].GetMetric() {
		if label(m, "engine") == engine {
			return m.GetHistogram()
		}
	}
	return &dto.Histogram{}
}

// TestSlowStepsAndHandoff sends one request through a router with
// -slow-prefill, -slow-decode and -handoff-delay: the prefill instance's
// TTFT, every inter-token gap of the decode instance and the router's
// handoff are at least the delays (lower bounds: a loaded machine only
// adds).
func TestSlowStepsAndHandoff(t *testing.T) {
	const prefillDelay, decodeDelay, handoffDelay = 300 * time.Millisecond, 120 * time.Millisecond, 250 * time.Millisecond
	d := startFaultyDeployment(t, faults{slowPrefill: prefillDelay, slowDecode: decodeDelay, handoffDelay: handoffDelay}, &testutil.Errors{})
	body := `{"model":"test-model","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}`
	if res := post(t, context.Background(), d.router.base()+"/v1/chat/completions", body, nil); res.status != http.StatusOK {
		t.Fatalf("router: status %d", res.status)
	}
	prefill := scrapeWhen(t, d.prefill, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 1 })
	if h := histogram(prefill, "vllm:time_to_first_token_seconds", "0"); h.GetSampleCount() != 1 || h.GetSampleSum() < prefillDelay.Seconds() {
		t.Errorf("prefill TTFT: %d observations summing %gs, want 1 of at least %s", h.GetSampleCount(), h.GetSampleSum(), prefillDelay)
	}
	decode := scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 1 })
	var gaps, fast uint64
	for _, e := range []string{"0", "1"} {
		h := histogram(decode, "vllm:inter_token_latency_seconds", e)
		gaps += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() < decodeDelay.Seconds() {
				fast += b.GetCumulativeCount()
			}
		}
	}
	if gaps == 0 || fast != 0 {
		t.Errorf("decode ITL: %d gaps, %d bucket counts below %s; want gaps, none below", gaps, fast, decodeDelay)
	}
	router := scrapeWhen(t, d.router, func(f map[string]*dto.MetricFamily) bool {
		return histogram(f, "router_pd_handoff_duration_seconds", "0").GetSampleCount() == 1
	})
	if h := histogram(router, "router_pd_handoff_duration_seconds", "0"); h.GetSampleSum() < handoffDelay.Seconds() {
		t.Errorf("router handoff %gs, want at least %s", h.GetSampleSum(), handoffDelay)
	}
}

// TestHTTP5xx checks that -http-5xx 0.5 answers every second API request of
// an instance 503, recorded in its HTTP families as 5xx, and that the
// other instance, which gets none, answers all.
func TestHTTP5xx(t *testing.T) {
	d := startFaultyDeployment(t, faults{http5xx: 0.5}, &testutil.Errors{})
	var statuses []int
	for range 4 {
		resp, err := http.Get(d.decode.base() + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
	if want := []int{200, 503, 200, 503}; !slices.Equal(statuses, want) {
		t.Errorf("statuses %v, want %v", statuses, want)
	}
	fams := scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool { return total(f, "http_requests_total", nil) == 4 })
	for status, want := range map[string]float64{"2xx": 2, "5xx": 2} {
		if got := total(fams, "http_requests_total", map[string]string{"status": status}); got != want {
			t.Errorf("http_requests_total{status=%q} %v, want %v", status, got, want)
		}
	}
}

// TestInvalidEvents checks that -invalid-events 1 makes the decode
// instance's engine report a token after each finish, which the Recorder
// refuses and counts as kind output, while the request itself is answered
// and recorded whole.
func TestInvalidEvents(t *testing.T) {
	refused := &testutil.Errors{}
	d := startFaultyDeployment(t, faults{invalidEvents: 1}, refused)
	body := `{"model":"test-model","messages":[{"role":"user","content":"Hi"}],"max_tokens":3}`
	res := post(t, context.Background(), d.decode.base()+"/v1/chat/completions", body, nil)
	if res.status != http.StatusOK || res.finish != "length" {
		t.Fatalf("decode: status %d, finish %q; want 200, length", res.status, res.finish)
	}
	fams := scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool {
		return total(f, "infermetrics_invalid_events_total", nil) == 1 && finished(f, "") == 1
	})
	if got := total(fams, "infermetrics_invalid_events_total", map[string]string{"kind": stats.KindOutput.String()}); got != 1 {
		t.Errorf("infermetrics_invalid_events_total{kind=\"output\"} %v, want 1", got)
	}
	if got := finished(fams, "length"); got != 1 {
		t.Errorf("finished with length: %v, want 1: %v", got, fams["vllm:request_success_total"])
	}
	if errs := refused.Take(); len(errs) != 1 {
		t.Errorf("the Recorders reported %d refusals, want 1: %v", len(errs), errs)
	}
}

// TestCardinalityLimit checks that a small -cardinality-limit makes a
// family of two engines' series overflow into otel_metric_overflow="true".
func TestCardinalityLimit(t *testing.T) {
	d := startFaultyDeployment(t, faults{}, &testutil.Errors{}, exporters.WithCardinalityLimit(2))
	scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool {
		for _, m := range f["vllm:num_requests_running"].GetMetric() {
			if label(m, "otel_metric_overflow") == "true" {
				return true
			}
		}
		return false
	})
}

// TestDecodeDown checks that closeAfter closes the instance's listener:
// its /metrics stops answering.
func TestDecodeDown(t *testing.T) {
	d := startFaultyDeployment(t, faults{}, &testutil.Errors{})
	if _, err := get(d.decode.url()); err != nil {
		t.Fatal(err)
	}
	d.decode.closeAfter(time.Millisecond)
	checkDecodeDown(t, d)
}

// checkDecodeDown waits until the decode instance's /metrics stops
// answering, and checks that the prefill instance's still answers.
func checkDecodeDown(t *testing.T, d *deployment) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := get(d.decode.url()); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the decode instance still answers")
		}
	}
	if _, err := get(d.prefill.url()); err != nil {
		t.Errorf("the prefill instance is down too: %v", err)
	}
}

// TestDecodeDownOnSignal checks that closeOn closes the instance's
// listener when the signal comes, and not before.
func TestDecodeDownOnSignal(t *testing.T) {
	d := startFaultyDeployment(t, faults{}, &testutil.Errors{})
	sig := make(chan os.Signal, 1)
	d.decode.closeOn(t.Context(), sig)
	if _, err := get(d.decode.url()); err != nil {
		t.Fatalf("the decode instance is down before the signal: %v", err)
	}
	sig <- syscall.SIGUSR2
	checkDecodeDown(t, d)
}

// TestCachedExcess sends a chat completion through the router with
// -cached-excess on the instances: the client's usage reports more cached
// tokens than the prompt has, and the router's Recorder drops the value
// (kind value_dropped) and records the request.
func TestCachedExcess(t *testing.T) {
	d := startFaultyDeployment(t, faults{cachedExcess: 64}, &testutil.Errors{})
	body := `{"model":"test-model","messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`
	res := post(t, context.Background(), d.router.base()+"/v1/chat/completions", body, nil)
	if res.status != http.StatusOK || res.usage.Usage == nil {
		t.Fatalf("router: status %d, usage %v; want 200 and a usage", res.status, res.usage.Usage)
	}
	if u := res.usage.Usage; u.Details == nil || u.Details.CachedTokens <= u.PromptTokens {
		t.Errorf("usage %+v: want cached tokens above the prompt's", u)
	}
	scrapeWhen(t, d.router, func(f map[string]*dto.MetricFamily) bool {
		return total(f, "infermetrics_invalid_events_total", map[string]string{"kind": "value_dropped"}) > 0 && finished(f, "") == 1
	})
}

// TestPreemptEvery checks that -preempt-every 2 preempts the request
// scheduled last at every second step that runs two or more, and never
// the only one.
func TestPreemptEvery(t *testing.T) {
	e := testEngine(t, decodeRole, faults{preemptEvery: 2})
	e.scheduled()
	var it stats.Iteration
	now := time.Now()
	e.preemptIfFull(now, &it) // step 1
	if it.Preemptions != 0 || len(e.running) != 3 {
		t.Fatalf("step 1: %d preemptions, %d running; want 0 and 3", it.Preemptions, len(e.running))
	}
	e.preemptIfFull(now, &it) // step 2
	if it.Preemptions != 1 || len(e.running) != 2 || e.waiting[0].id != 3 {
		t.Fatalf("step 2: %d preemptions, %d running, waiting %v; want 1, 2 and request 3 first", it.Preemptions, len(e.running), e.waiting)
	}
	e.running = e.running[:1]
	e.preemptIfFull(now, &it)
	e.preemptIfFull(now, &it) // step 4, one running
	if it.Preemptions != 1 {
		t.Errorf("the only running request was preempted: %d preemptions", it.Preemptions)
	}
}
