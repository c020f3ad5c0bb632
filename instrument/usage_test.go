package instrument_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// newAttribution returns an Attribution of dims, failing the test on an error.
func newAttribution(t testing.TB, dims ...instrument.Dimension) *instrument.Attribution {
	t.Helper()
	a, err := instrument.NewAttribution(dims...)
	if err != nil {
		t.Fatalf("NewAttribution: %v", err)
	}
	return a
}

// usageRequest is a request with usage: prompt tokens, of which cached
// were read from a prompt cache, and generation tokens.
func usageRequest(prompt, cached, generation int64, values ...string) stats.ObservedRequest {
	r := stats.ObservedRequest{Reason: stats.FinishStop, E2ELatency: 1.25, FirstToken: true, TimeToFirstToken: 0.2,
		TimeToLastToken: 1.2, UsageKnown: true, PromptTokens: prompt, CachedPromptTokens: cached,
		GenerationTokens: generation, Attribution: values}
	if cached > 0 {
		r.Details.Set(stats.TokenCacheRead, cached)
	}
	return r
}

// failed is a request without usage that ended for a reason and error type.
func failed(reason stats.FinishReason, t stats.ErrorType, values ...string) stats.ObservedRequest {
	return stats.ObservedRequest{Reason: reason, ErrorType: t, E2ELatency: 0.5, Attribution: values}
}

// The usage families record each request by its attribution values: tokens
// by kind (input the prompt less its cache reads and writes), requests by
// finish reason and error type, cost and the uncached cost, unpriced
// requests, duration and TTFT; vLLM's families keep their labels.
func TestUsageFamilies(t *testing.T) {
	a := newAttribution(t, instrument.Dimension{Name: "tenant"}, instrument.Dimension{Name: "user"})
	h := newHarness(t, instrument.WithAttribution(a), instrument.WithPriceTable())
	e := h.engine(0)
	ctx := t.Context()

	r1 := usageRequest(100, 40, 11, "acme", "u1")
	r1.Details.Set(stats.TokenCacheWrite, 10)
	r1.Details.Set(stats.TokenReasoning, 5)
	r1.Details.Set(stats.TokenInputAudio, 3)
	r1.Cost = stats.Cost{Known: true, Charged: 0.5, Uncached: 0.75}
	r2 := usageRequest(20, 0, 3, "acme", "u1")
	r2.Cost = stats.Cost{Known: true, Charged: 0.25, Uncached: 0.25}
	r3 := failed(stats.FinishError, stats.ErrorNone, "acme", "") // a failure of unknown cause
	r4 := failed(stats.FinishAbort, stats.ErrorClientCanceled, "beta")
	r4.UsageKnown, r4.PromptTokens = true, 7 // usage, no price: unpriced
	r5 := failed(stats.FinishError, stats.ErrorRateLimited, "beta")
	for _, r := range []*stats.ObservedRequest{&r1, &r2, &r3, &r4, &r5} {
		e.RecordRequest(ctx, r)
	}
	if err := h.refused(); err != nil {
		t.Fatal(err)
	}
	s := h.collect()
	acme := func(extra ...string) []string {
		return engineLabels("0", append([]string{"tenant", "acme", "user", "u1"}, extra...)...)
	}
	beta := func(extra ...string) []string {
		return engineLabels("0", append([]string{"tenant", "beta", "user", "_none"}, extra...)...)
	}
	for kind, want := range map[string]float64{"input": 50 + 20, "cache_read": 40, "cache_write": 10, "output": 14, "reasoning": 5, "input_audio": 3} {
		checkCounter(t, s, want, instrument.NameUsageTokens, acme("kind", kind)...)
	}
	checkCounter(t, s, 7, instrument.NameUsageTokens, beta("kind", "input")...)
	for _, k := range []string{series(instrument.NameUsageTokens, acme("kind", "output_audio")...),
		series(instrument.NameUsageTokens, beta("kind", "output")...)} { // not reported, or 0
		if p, ok := s[k]; ok {
			t.Errorf("%s = %v, want no series", k, p)
		}
	}
	checkCounter(t, s, 2, instrument.NameUsageRequests, acme("finished_reason", "stop")...)
	checkCounter(t, s, 1, instrument.NameUsageRequests,
		engineLabels("0", "tenant", "acme", "user", "_none", "finished_reason", "error", "error.type", "_OTHER")...)
	checkCounter(t, s, 1, instrument.NameUsageRequests, beta("finished_reason", "abort", "error.type", "client_canceled")...)
	checkCounter(t, s, 1, instrument.NameUsageRequests, beta("finished_reason", "error", "error.type", "rate_limited")...)
	checkCounter(t, s, 0.75, instrument.NameUsageCost, acme()...)
	checkCounter(t, s, 1, instrument.NameUsageCostUncached, acme()...)
	checkCounter(t, s, 1, instrument.NameUsageUnpricedRequests, beta()...)
	if p, ok := s[series(instrument.NameUsageUnpricedRequests, acme()...)]; ok {
		t.Errorf("priced requests counted as unpriced: %v", p)
	}
	checkHistogram(t, s, 2, 2.5, map[int]uint64{7: 2}, instrument.NameUsageRequestDuration, acme()...)
	checkHistogram(t, s, 2, 0.4, map[int]uint64{8: 2}, instrument.NameUsageTimeToFirstToken, acme()...)
	checkHistogram(t, s, 2, 1, map[int]uint64{6: 2}, instrument.NameUsageRequestDuration, beta()...)
	// vLLM's families are unchanged: no dimension on them.
	checkCounter(t, s, 2, "vllm:request_success", engineLabels("0", "finished_reason", "stop")...)
	checkCounter(t, s, 14, "vllm:generation_tokens", engineLabels("0")...)
}

// Values are bounded: "" and a missing value are _none; a value longer
// than 128 bytes, not UTF-8 or equal to one of ours is _invalid; a new
// value past the cap is _overflow, counted by dimension.
func TestAttributionValueCap(t *testing.T) {
	a := newAttribution(t, instrument.Dimension{Name: "tenant", MaxValues: 2})
	h := newHarness(t, instrument.WithAttribution(a))
	e := h.engine(0)
	long := strings.Repeat("x", instrument.MaxAttributionValueLen)
	for _, v := range []string{"a", "b", "c", "a", "d", "", long + "x", "\xff", instrument.AttributionOverflow, long} {
		r := failed(stats.FinishStop, stats.ErrorNone, v)
		e.RecordRequest(t.Context(), &r)
	}
	r := failed(stats.FinishStop, stats.ErrorNone) // no value at all
	e.RecordRequest(t.Context(), &r)
	s := h.collect()
	tenant := func(v string) []string { return engineLabels("0", "tenant", v, "finished_reason", "stop") }
	for v, want := range map[string]float64{"a": 2, "b": 1, "_overflow": 3, "_none": 2, "_invalid": 3} {
		checkCounter(t, s, want, instrument.NameUsageRequests, tenant(v)...)
	}
	for _, v := range []string{"c", "d", long} {
		if p, ok := s[series(instrument.NameUsageRequests, tenant(v)...)]; ok {
			t.Errorf("value %.10q past the cap has a series: %v", v, p)
		}
	}
	checkCounter(t, s, 3, instrument.NameAttributionOverflow, engineLabels("0", "dimension", "tenant")...)
}

// The combinations are capped at twice the largest dimension's cap: a new
// combination past it is recorded with every dimension _overflow and
// counted as _combinations; the combination of every dimension overflowed
// is outside the cap.
func TestAttributionCombinationCap(t *testing.T) {
	a := newAttribution(t, instrument.Dimension{Name: "tenant", MaxValues: 1}, instrument.Dimension{Name: "user", MaxValues: 1})
	if n := a.MaxCombinations(); n != 2 {
		t.Fatalf("MaxCombinations = %d, want 2", n)
	}
	h := newHarness(t, instrument.WithAttribution(a))
	e := h.engine(0)
	for _, vs := range [][]string{{"a", "x"}, {"a", ""}, {"b", "x"}, {"a", "x"}, {"c", "y"}, {"a", "y"}} {
		r := failed(stats.FinishStop, stats.ErrorNone, vs...)
		e.RecordRequest(t.Context(), &r)
	}
	s := h.collect()
	req := func(tenant, user string) []string {
		return engineLabels("0", "tenant", tenant, "user", user, "finished_reason", "stop")
	}
	checkCounter(t, s, 2, instrument.NameUsageRequests, req("a", "x")...)
	checkCounter(t, s, 1, instrument.NameUsageRequests, req("a", "_none")...)
	// (b, x): tenant overflowed, and (_overflow, x) is a third combination;
	// (c, y) both overflowed; (a, y): user overflowed, a third combination.
	checkCounter(t, s, 3, instrument.NameUsageRequests, req("_overflow", "_overflow")...)
	if p, ok := s[series(instrument.NameUsageRequests, req("_overflow", "x")...)]; ok {
		t.Errorf("a combination past the cap has a series: %v", p)
	}
	for dim, want := range map[string]float64{"tenant": 2, "user": 2, "_combinations": 2} {
		checkCounter(t, s, want, instrument.NameAttributionOverflow, engineLabels("0", "dimension", dim)...)
	}
}

// NewAttribution refuses dimensions that cannot be labels of their own,
// and caps out of range, with ErrConfig.
func TestNewAttributionRefuses(t *testing.T) {
	many := make([]instrument.Dimension, instrument.MaxDimensions+1)
	for i := range many {
		many[i].Name = fmt.Sprintf("d%d", i)
	}
	for _, c := range []struct {
		name  string
		dims  []instrument.Dimension
		label bool // the error is about a name
	}{
		{"none", nil, false},
		{"too many", many, false},
		{"empty name", []instrument.Dimension{{Name: ""}}, true},
		{"not UTF-8", []instrument.Dimension{{Name: "t\xff"}}, true},
		{"leading underscore", []instrument.Dimension{{Name: "_tenant"}}, true},
		{"reserved prefix", []instrument.Dimension{{Name: "__name__"}}, true},
		{"model_name", []instrument.Dimension{{Name: "model_name"}}, true},
		{"model.name becomes model_name", []instrument.Dimension{{Name: "model.name"}}, true},
		{"engine", []instrument.Dimension{{Name: "engine"}}, true},
		{"kind", []instrument.Dimension{{Name: "kind"}}, true},
		{"finished_reason", []instrument.Dimension{{Name: "finished_reason"}}, true},
		{"error.type", []instrument.Dimension{{Name: "error.type"}}, true},
		{"error_type", []instrument.Dimension{{Name: "error_type"}}, true},
		{"dimension", []instrument.Dimension{{Name: "dimension"}}, true},
		{"le", []instrument.Dimension{{Name: "le"}}, true},
		{"scope label", []instrument.Dimension{{Name: "otel.scope.name"}}, true},
		{"overflow label", []instrument.Dimension{{Name: "otel_metric_overflow"}}, true},
		{"twice", []instrument.Dimension{{Name: "tenant"}, {Name: "tenant"}}, true},
		{"twice as labels", []instrument.Dimension{{Name: "x-tenant"}, {Name: "x.tenant"}}, true},
		{"negative cap", []instrument.Dimension{{Name: "tenant", MaxValues: -1}}, false},
		{"cap too high", []instrument.Dimension{{Name: "tenant", MaxValues: instrument.MaxMaxValues + 1}}, false},
	} {
		a, err := instrument.NewAttribution(c.dims...)
		if a != nil || !errors.Is(err, instrument.ErrConfig) || errors.Is(err, stats.ErrInvalidLabel) != c.label {
			t.Errorf("%s: %v, %v; want ErrConfig (ErrInvalidLabel %v)", c.name, a, err, c.label)
		}
	}
	a := newAttribution(t, instrument.Dimension{Name: "tenant"}, instrument.Dimension{Name: "api_key", MaxValues: 7})
	if got := a.Dimensions(); len(got) != 2 || got[0].MaxValues != instrument.DefaultMaxValues || got[1].MaxValues != 7 {
		t.Errorf("Dimensions() = %v, want the default cap applied", got)
	}
}

// NewRecorder refuses a dimension exported as the same label as a constant
// attribute or a label of the exporter, and an Attribution not made by
// NewAttribution.
func TestWithAttributionRefused(t *testing.T) {
	withResource := &opaque{resourceLabels{noop.NewMeterProvider()}}
	tenant := newAttribution(t, instrument.Dimension{Name: "tenant"})
	job := newAttribution(t, instrument.Dimension{Name: "job"})
	for _, c := range []struct {
		name string
		opts []instrument.Option
		on   bool // on the provider with resource labels
	}{
		{"constant attribute", []instrument.Option{instrument.WithAttribution(tenant),
			instrument.WithAttributes(attribute.String("tenant", "x"))}, false},
		{"constant attribute dimension", []instrument.Option{instrument.WithAttribution(tenant),
			instrument.WithAttributes(attribute.String("dimension", "x"))}, false},
		{"resource label", []instrument.Option{instrument.WithAttribution(job)}, true},
		{"zero Attribution", []instrument.Option{instrument.WithAttribution(&instrument.Attribution{})}, false},
	} {
		mp := noop.NewMeterProvider()
		var err error
		if c.on {
			_, err = newOn(withResource, "m", c.opts...)
		} else {
			_, err = newOn(mp, "m", c.opts...)
		}
		if !errors.Is(err, instrument.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", c.name, err)
		}
	}
	// The same Attribution on a provider without those labels is fine.
	if _, err := newOn(noop.NewMeterProvider(), "m", instrument.WithAttribution(job),
		instrument.WithAttributes(attribute.String("dimension2", "x"))); err != nil {
		t.Errorf("job without resource labels: %v", err)
	}
}

// A request with more values than dimensions, or values on a Recorder
// without WithAttribution, is refused whole.
func TestAttributionValuesRefused(t *testing.T) {
	a := newAttribution(t, instrument.Dimension{Name: "tenant"})
	for _, c := range []struct {
		name string
		opts []instrument.Option
		vs   []string
	}{
		{"more values than dimensions", []instrument.Option{instrument.WithAttribution(a)}, []string{"a", "b"}},
		{"values without WithAttribution", []instrument.Option{instrument.WithPriceTable()}, []string{"a"}},
		{"values without usage families", nil, []string{"a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.opts...)
			r := usageRequest(10, 0, 1, c.vs...)
			h.engine(0).RecordRequest(t.Context(), &r)
			if err := h.refused(); !errors.Is(err, stats.ErrOutOfRange) {
				t.Errorf("refused %v, want ErrOutOfRange", err)
			}
			s := h.collect()
			checkCounter(t, s, 0, "vllm:request_success", engineLabels("0", "finished_reason", "stop")...)
			for k := range s {
				if strings.HasPrefix(k, "infermetrics.usage.") {
					t.Errorf("a refused request recorded %s", k)
				}
			}
		})
	}
}

// With a price table and no attribution the usage families are by model;
// without either option none is recorded.
func TestUsageWithoutAttribution(t *testing.T) {
	priced := usageRequest(10, 0, 2)
	priced.Cost = stats.Cost{Known: true, Charged: 0.125, Uncached: 0.125}
	unpriced := usageRequest(10, 0, 2)
	noUsage := failed(stats.FinishStop, stats.ErrorNone)

	h := newHarness(t, instrument.WithPriceTable())
	for _, r := range []*stats.ObservedRequest{&priced, &unpriced, &noUsage} {
		h.engine(0).RecordRequest(t.Context(), r)
	}
	s := h.collect()
	checkCounter(t, s, 3, instrument.NameUsageRequests, engineLabels("0", "finished_reason", "stop")...)
	checkCounter(t, s, 20, instrument.NameUsageTokens, engineLabels("0", "kind", "input")...)
	checkCounter(t, s, 0.125, instrument.NameUsageCost, engineLabels("0")...)
	checkCounter(t, s, 1, instrument.NameUsageUnpricedRequests, engineLabels("0")...) // noUsage is not unpriced

	h = newHarness(t)
	h.engine(0).RecordRequest(t.Context(), &priced)
	for k := range h.collect() {
		if strings.HasPrefix(k, "infermetrics.usage.") || strings.HasPrefix(k, "infermetrics.attribution.") {
			t.Errorf("recorded %s without WithAttribution or WithPriceTable", k)
		}
	}
}

// Attribution without a price table counts no request as unpriced.
func TestAttributionWithoutPrices(t *testing.T) {
	h := newHarness(t, instrument.WithAttribution(newAttribution(t, instrument.Dimension{Name: "tenant"})))
	r := usageRequest(10, 0, 2, "acme")
	h.engine(0).RecordRequest(t.Context(), &r)
	for k := range h.collect() {
		if strings.HasPrefix(k, instrument.NameUsageUnpricedRequests) || strings.HasPrefix(k, instrument.NameUsageCost) {
			t.Errorf("recorded %s without a price table", k)
		}
	}
}

// A Prometheus scrape shows the usage families under the names of
// views.UsageFamilies, with dotted keys as labels of their own.
func TestUsageScrape(t *testing.T) {
	a := newAttribution(t, instrument.Dimension{Name: "x.tenant", MaxValues: 1})
	h := newScrapedHarness(t, instrument.WithAttribution(a), instrument.WithPriceTable())
	e := h.engine(0)
	r := usageRequest(10, 0, 2, "acme")
	r.Cost = stats.Cost{Known: true, Charged: 0.5, Uncached: 0.5}
	e.RecordRequest(t.Context(), &r)
	r = usageRequest(10, 0, 2, "other") // past the cap
	e.RecordRequest(t.Context(), &r)
	r = failed(stats.FinishError, stats.ErrorTimeout, "acme")
	e.RecordRequest(t.Context(), &r)
	body := h.scrape()
	for _, f := range views.UsageFamilies() {
		if !strings.Contains(body, "\n"+f.ScrapeName()) && !strings.Contains(body, "\n"+f.ScrapeName()+"_bucket") {
			t.Errorf("family %s (%s) is not in the scrape", f.Name, f.ScrapeName())
		}
	}
	for _, line := range []string{
		`infermetrics_usage_tokens_total{engine="0",kind="input",model_name="llama-3.1-8b",x_tenant="acme"} 10`,
		`infermetrics_usage_requests_total{engine="0",error_type="timeout",finished_reason="error",model_name="llama-3.1-8b",x_tenant="acme"} 1`,
		`infermetrics_usage_cost_total{engine="0",model_name="llama-3.1-8b",x_tenant="acme"} 0.5`,
		`infermetrics_usage_cost_uncached_total{engine="0",model_name="llama-3.1-8b",x_tenant="acme"} 0.5`,
		`infermetrics_usage_unpriced_requests_total{engine="0",model_name="llama-3.1-8b",x_tenant="_overflow"} 1`,
		`infermetrics_attribution_overflow_total{dimension="x.tenant",engine="0",model_name="llama-3.1-8b"} 1`,
		`infermetrics_usage_request_duration_seconds_count{engine="0",model_name="llama-3.1-8b",x_tenant="acme"} 2`,
		`infermetrics_usage_time_to_first_token_seconds_count{engine="0",model_name="llama-3.1-8b",x_tenant="acme"} 1`,
		// Whole-number bounds as vLLM writes them, like every family the views export.
		`infermetrics_usage_time_to_first_token_seconds_bucket{engine="0",model_name="llama-3.1-8b",x_tenant="acme",le="1.0"} 1`,
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("the scrape has no line\n%s", line)
		}
	}
}

// Recording a known combination allocates nothing, nor does one whose
// values overflow the caps.
func TestUsageDoesNotAllocate(t *testing.T) {
	a := newAttribution(t, instrument.Dimension{Name: "tenant", MaxValues: 1}, instrument.Dimension{Name: "user"},
		instrument.Dimension{Name: "key"})
	h := newHarness(t, instrument.WithAttribution(a), instrument.WithPriceTable())
	e := h.engine(0)
	known := usageRequest(100, 40, 11, "acme", "u1", "k")
	known.Details.Set(stats.TokenReasoning, 3)
	known.Cost = stats.Cost{Known: true, Charged: 0.01, Uncached: 0.02}
	over := usageRequest(100, 0, 11, "beta", "u1", "k") // tenant past its cap
	failure := failed(stats.FinishError, stats.ErrorRateLimited, "acme", "u1", "k")
	for _, r := range []*stats.ObservedRequest{&known, &over, &failure} {
		t.Run(r.Attribution[0]+"/"+r.Reason.String(), func(t *testing.T) {
			checkNoAllocs(t, func() error { e.RecordRequest(t.Context(), r); return h.refused() })
		})
	}
}

// Many goroutines recording many values: the caps hold, every request is
// counted once, and each overflowed value is counted on the overflow
// counter. Run with -race.
func TestAttributionConcurrent(t *testing.T) {
	const (
		goroutines = 8
		each       = 400
		capacity   = 50
	)
	a := newAttribution(t, instrument.Dimension{Name: "tenant", MaxValues: capacity})
	h := newHarness(t, instrument.WithAttribution(a), instrument.WithEngines(0, 1))
	values := make([]string, 300)
	for i := range values {
		values[i] = fmt.Sprintf("tenant-%d", i)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := h.engine(g % 2)
			for i := range each {
				r := usageRequest(10, 0, 1, values[(g*each+i*7)%len(values)])
				e.RecordRequest(t.Context(), &r)
			}
		}()
	}
	wg.Wait()
	distinct := map[string]bool{}
	var requests, overflowed, counted float64
	for k, p := range h.collect() {
		switch {
		case strings.HasPrefix(k, instrument.NameUsageRequests+"{"):
			requests += p.value
			v := strings.SplitN(strings.SplitN(k, "tenant=", 2)[1], ",", 2)[0]
			v = strings.TrimSuffix(v, "}")
			if v == instrument.AttributionOverflow {
				overflowed += p.value
			} else {
				distinct[v] = true
			}
		case strings.HasPrefix(k, instrument.NameAttributionOverflow+"{"):
			counted += p.value
		}
	}
	if requests != goroutines*each {
		t.Errorf("%v requests counted, want %d", requests, goroutines*each)
	}
	if len(distinct) != capacity {
		t.Errorf("%d distinct values have series, want the cap %d", len(distinct), capacity)
	}
	if overflowed == 0 || overflowed != counted {
		t.Errorf("%v requests _overflow, %v counted as overflowed; want equal, above 0", overflowed, counted)
	}
}

// MaxSetsPerRecorder counts the combinations, the cap and the overflowed
// one, times the requests family's finish reasons and error types: stop,
// length and repetition without error.type, abort with none or any, error
// with any.
func TestMaxSetsPerRecorder(t *testing.T) {
	calls := 3 + stats.NumErrorTypes + (stats.NumErrorTypes - 1)
	a := newAttribution(t, instrument.Dimension{Name: "tenant", MaxValues: 10})
	if got, want := a.MaxSetsPerRecorder(), (20+1)*calls; got != want {
		t.Errorf("MaxSetsPerRecorder = %d, want %d", got, want)
	}
	if got := (*instrument.Attribution)(nil).MaxSetsPerRecorder(); got != calls {
		t.Errorf("nil MaxSetsPerRecorder = %d, want %d", got, calls)
	}
}
