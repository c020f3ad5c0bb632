package instrument_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/stats"
)

// scrapeLines returns the lines of a scrape that start with one of the
// prefixes, in the scrape's order.
func scrapeLines(scrape string, prefixes ...string) []string {
	var out []string
	for line := range strings.Lines(scrape) {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, strings.TrimSuffix(line, "\n"))
				break
			}
		}
	}
	return out
}

// wantLines fails the test unless every line of want is in the scrape.
func wantLines(t *testing.T, scrape string, want ...string) {
	t.Helper()
	have := map[string]bool{}
	for line := range strings.Lines(scrape) {
		have[strings.TrimSuffix(line, "\n")] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("scrape lacks %s", w)
		}
	}
}

func label(name, value string) instrument.Label { return instrument.Label{Name: name, Value: value} }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// simPicture serves llm-d-inference-sim's fake-metrics picture on an engine.
func simPicture(t *testing.T, e *instrument.Engine) {
	t.Helper()
	syn := e.Synthetic()
	must(t, syn.ObserveBuckets(instrument.NameTimeToFirstToken, []int64{0, 3, 5, 1}))
	// The last of e2e's 22 buckets is +Inf: observed at 7680 + 1.
	e2e := make([]int64, 22)
	e2e[0], e2e[21] = 4, 2
	must(t, syn.ObserveBuckets(instrument.NameE2ERequestLatency, e2e))
	must(t, syn.ObserveBuckets(instrument.NameRequestTimePerOutputToken, []int64{1, 0, 2}))
	must(t, syn.ObserveBuckets(instrument.NameRequestPromptTokens, []int64{0, 0, 1, 0, 2})) // 5 and 3 × 20
	must(t, syn.AddCount(instrument.NameRequestSuccess, 20, label(instrument.KeyFinishedReason, "stop")))
	must(t, syn.AddCount(instrument.NameRequestSuccess, 3, label(instrument.KeyFinishedReason, "length")))
	must(t, syn.AddCount(instrument.NamePromptTokens, 59, label(instrument.KeySource, "local_compute")))
	must(t, syn.AddCount(instrument.NamePromptTokens, 80, label(instrument.KeySource, "local_cache_hit")))
	must(t, syn.AddCount(instrument.NameGenerationTokens, 21))
	must(t, syn.AddCount(instrument.NamePrefixCacheQueries, 100))
	must(t, syn.AddCount(instrument.NamePrefixCacheHits, 80))
	must(t, syn.SetLoRA(stats.LoRA{MaxLoRA: 2, Running: []string{"sql-lora", "chat-lora"}}, time.Unix(1_700_000_000, 500_000_000)))
	e.SetRunning(3)
	e.SetWaiting(2, 0)
	e.SetKVCacheUsage(0.25)
}

// TestSyntheticScrape serves the sim's picture through views.VLLM and the
// Prometheus exporter, and reads it under vLLM's names.
func TestSyntheticScrape(t *testing.T) {
	h := newScrapedHarness(t)
	simPicture(t, h.engine(0))
	s := h.scrape()
	const l = `engine="0",model_name="` + model + `"`
	wantLines(t, s,
		`vllm:time_to_first_token_seconds_bucket{`+l+`,le="0.001"} 0`,
		`vllm:time_to_first_token_seconds_bucket{`+l+`,le="0.005"} 3`,
		`vllm:time_to_first_token_seconds_bucket{`+l+`,le="0.01"} 8`,
		`vllm:time_to_first_token_seconds_bucket{`+l+`,le="0.02"} 9`,
		`vllm:time_to_first_token_seconds_bucket{`+l+`,le="2560.0"} 9`,
		`vllm:time_to_first_token_seconds_bucket{`+l+`,le="+Inf"} 9`,
		`vllm:time_to_first_token_seconds_count{`+l+`} 9`,
		`vllm:e2e_request_latency_seconds_bucket{`+l+`,le="0.3"} 4`,
		`vllm:e2e_request_latency_seconds_bucket{`+l+`,le="7680.0"} 4`,
		`vllm:e2e_request_latency_seconds_bucket{`+l+`,le="+Inf"} 6`,
		`vllm:e2e_request_latency_seconds_sum{`+l+`} 15363.2`, // 4 × 0.3 + 2 × 7681
		`vllm:request_time_per_output_token_seconds_bucket{`+l+`,le="0.01"} 1`,
		`vllm:request_time_per_output_token_seconds_bucket{`+l+`,le="0.05"} 3`,
		`vllm:request_prompt_tokens_bucket{`+l+`,le="2.0"} 0`,
		`vllm:request_prompt_tokens_bucket{`+l+`,le="5.0"} 1`,
		`vllm:request_prompt_tokens_bucket{`+l+`,le="20.0"} 3`,
		`vllm:request_prompt_tokens_sum{`+l+`} 45`,
		`vllm:request_success_total{engine="0",finished_reason="stop",model_name="`+model+`"} 20`,
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="`+model+`"} 3`,
		`vllm:request_success_total{engine="0",finished_reason="abort",model_name="`+model+`"} 0`,
		`vllm:prompt_tokens_total{`+l+`} 139`,
		`vllm:prompt_tokens_by_source_total{`+l+`,source="local_compute"} 59`,
		`vllm:prompt_tokens_by_source_total{`+l+`,source="local_cache_hit"} 80`,
		`vllm:generation_tokens_total{`+l+`} 21`,
		`vllm:prefix_cache_queries_total{`+l+`} 100`,
		`vllm:prefix_cache_hits_total{`+l+`} 80`,
		`vllm:num_requests_running{`+l+`} 3`,
		`vllm:num_requests_waiting{`+l+`} 2`,
		`vllm:kv_cache_usage_perc{`+l+`} 0.25`,
		// The LoRA state at the chosen time, names sorted.
		`vllm:lora_requests_info{max_lora="2",running_lora_adapters="chat-lora,sql-lora",waiting_lora_adapters=""} 1.7000000005e+09`,
		// A family the picture leaves out is at zero from start-up.
		`vllm:request_queue_time_seconds_count{`+l+`} 0`,
	)
	// The TTFT sum is Σ counts × upper bounds: 3 × 0.005 + 5 × 0.01 + 0.02.
	sum := scrapeLines(s, `vllm:time_to_first_token_seconds_sum{`)
	if len(sum) != 1 {
		t.Fatalf("TTFT sum lines %q", sum)
	}
	got, err := strconv.ParseFloat(sum[0][strings.LastIndexByte(sum[0], ' ')+1:], 64)
	if err != nil || !approx(got, 0.085) {
		t.Errorf("TTFT sum %s, want 0.085", sum[0])
	}
	if n := len(scrapeLines(s, "vllm:request_success_total{")); n != len(stats.FinishReasons()) {
		t.Errorf("%d request_success series, want one per finish reason (%d)", n, len(stats.FinishReasons()))
	}
}

// TestSyntheticAddsToRecorded: synthetic values go to the same series as
// recorded ones, and to the same totals.
func TestSyntheticAddsToRecorded(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	tl := request(t, 10, 0, 1, 0, 0)
	stepAt(t, 2).out(tl, 1).finish(tl, stats.FinishStop).record(e)
	must(t, e.Synthetic().AddCount(instrument.NameRequestSuccess, 4, label(instrument.KeyFinishedReason, "stop")))
	must(t, e.Synthetic().ObserveBuckets(instrument.NameTimeToFirstToken, []int64{2}))
	s := h.collect()
	checkCounter(t, s, 5, "vllm:request_success", engineLabels("0", instrument.KeyFinishedReason, "stop")...)
	if got := s.get(t, "vllm:time_to_first_token_seconds", engineLabels("0")...); got.count != 3 {
		t.Errorf("TTFT count %d, want 1 recorded + 2 synthetic", got.count)
	}
	// The totals are the engine's: a synthetic count that fills one
	// leaves no room for a recorded value.
	must(t, e.Synthetic().AddCount(instrument.NameGenerationTokens, instrument.MaxTotal-1))
	before := h.collect()
	if err := e.Synthetic().AddCount(instrument.NameGenerationTokens, 1); !errors.Is(err, stats.ErrOverflow) {
		t.Errorf("AddCount past the total: %v, want ErrOverflow", err)
	}
	e.RecordIteration(context.Background(), &stats.Iteration{GenerationTokens: 1})
	if err := h.refused(); !errors.Is(err, stats.ErrOverflow) {
		t.Errorf("RecordIteration past the total: %v, want ErrOverflow", err)
	}
	after := h.collect()
	delete(after, series(instrument.NameInvalidEvents, engineLabels("0", "kind", "iteration")...)) // RecordIteration's refusal is counted
	if after.String() != before.String() {
		t.Errorf("refused calls changed the collection:\n%s\nwant:\n%s", after, before)
	}
}

// TestSyntheticPriority: under priority scheduling the finished-request
// families take the priority label.
func TestSyntheticPriority(t *testing.T) {
	h := newHarness(t, instrument.WithPriorityScheduling())
	syn := h.engine(0).Synthetic()
	must(t, syn.AddCount(instrument.NameRequestSuccess, 7,
		label(instrument.KeyPriority, "-1"), label(instrument.KeyFinishedReason, "abort")))
	must(t, syn.ObserveBuckets(instrument.NameTimeToFirstToken, []int64{0, 2}, label(instrument.KeyPriority, ">1")))
	must(t, syn.ObserveBuckets(instrument.NameInterTokenLatency, []int64{1})) // not priority-labelled
	s := h.collect()
	checkCounter(t, s, 7, "vllm:request_success", engineLabels("0", instrument.KeyFinishedReason, "abort", instrument.KeyPriority, "-1")...)
	checkHistogram(t, s, 2, 0.01, map[int]uint64{1: 2}, "vllm:time_to_first_token_seconds", engineLabels("0", instrument.KeyPriority, ">1")...)
	checkHistogram(t, s, 1, 0.01, map[int]uint64{0: 1}, "vllm:inter_token_latency_seconds", engineLabels("0")...)
	if err := syn.AddCount(instrument.NameRequestSuccess, 1, label(instrument.KeyFinishedReason, "stop")); !errors.Is(err, stats.ErrInvalidLabel) {
		t.Errorf("request_success without its priority: %v, want ErrInvalidLabel", err)
	}
}

// TestSyntheticOptionalFamilies: an optional family is served once its
// option is given; a draft position beyond the configured ones is reported.
func TestSyntheticOptionalFamilies(t *testing.T) {
	h := newHarness(t, instrument.WithSpecDecoding(2), instrument.WithKVConnector())
	syn := h.engine(0).Synthetic()
	must(t, syn.AddCount(instrument.NameSpecDecodeNumAcceptedTokensPerPos, 9, label(instrument.KeyPosition, "10")))
	must(t, syn.AddCount(instrument.NameNIXLNumFailedTransfers, 2))
	must(t, syn.ObserveBuckets(instrument.NameNIXLBytesTransferred, []int64{1})) // 2^11 bytes
	for _, pos := range []string{"64", "-1", "01", "1e1"} {
		if err := syn.AddCount(instrument.NameSpecDecodeNumAcceptedTokensPerPos, 1, label(instrument.KeyPosition, pos)); !errors.Is(err, stats.ErrInvalidLabel) {
			t.Errorf("position %q: %v, want ErrInvalidLabel", pos, err)
		}
	}
	s := h.collect()
	checkCounter(t, s, 9, "vllm:spec_decode_num_accepted_tokens_per_pos", engineLabels("0", instrument.KeyPosition, "10")...)
	checkCounter(t, s, 2, "vllm:nixl_num_failed_transfers", engineLabels("0")...)
	checkHistogram(t, s, 1, 2048, map[int]uint64{0: 1}, "vllm:nixl_bytes_transferred", engineLabels("0")...)
}

// TestSyntheticRefusals: each refused call returns its error and records
// nothing: the scrape is the same before and after.
func TestSyntheticRefusals(t *testing.T) {
	h := newScrapedHarness(t)
	e := h.engine(0)
	syn := e.Synthetic()
	must(t, syn.AddCount(instrument.NameGenerationTokens, 5))
	before := h.scrape()
	huge := strings.Repeat("x", 1<<20)
	tooMany := make([]int64, 24) // TTFT: 22 bounds and +Inf
	stop := label(instrument.KeyFinishedReason, "stop")
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"unknown family", syn.AddCount("vllm.nope", 1), instrument.ErrUnknownFamily},
		{"exposition name", syn.AddCount("vllm:request_success_total", 1, stop), instrument.ErrUnknownFamily},
		{"a gauge", syn.AddCount(instrument.NameNumRequestsRunning, 1), instrument.ErrUnknownFamily},
		{"a histogram as a counter", syn.AddCount(instrument.NameTimeToFirstToken, 1), instrument.ErrUnknownFamily},
		{"a counter as a histogram", syn.ObserveBuckets(instrument.NameGenerationTokens, []int64{1}), instrument.ErrUnknownFamily},
		{"a family not served", syn.AddCount(instrument.NameKVOffloadLoadBytes, 1), instrument.ErrUnknownFamily},
		{"a client family", syn.ObserveBuckets(instrument.NameGenAIClientTokenUsage, []int64{1}), instrument.ErrUnknownFamily},
		{"without its option", syn.AddCount(instrument.NameCorruptedRequests, 1), instrument.ErrFeatureNotConfigured},
		{"histogram without its option", syn.ObserveBuckets(instrument.NameNIXLXferTime, []int64{1}), instrument.ErrFeatureNotConfigured},
		{"a label missing", syn.AddCount(instrument.NameRequestSuccess, 1), stats.ErrInvalidLabel},
		{"a label the family lacks", syn.AddCount(instrument.NameGenerationTokens, 1, stop), stats.ErrInvalidLabel},
		{"the engine's own label", syn.AddCount(instrument.NameRequestSuccess, 1, stop, label(instrument.KeyModelName, "x")), stats.ErrInvalidLabel},
		{"a label given twice", syn.AddCount(instrument.NameRequestSuccess, 1, stop, stop), stats.ErrInvalidLabel},
		{"a value outside the set", syn.AddCount(instrument.NameRequestSuccess, 1, label(instrument.KeyFinishedReason, "remote_decode")), stats.ErrInvalidLabel},
		{"a tier as a source", syn.AddCount(instrument.NamePromptTokens, 1, label(instrument.KeySource, "device")), stats.ErrInvalidLabel},
		{"speculative decoding without its option", syn.AddCount(instrument.NameSpecDecodeNumAcceptedTokensPerPos, 1, label(instrument.KeyPosition, "0")), instrument.ErrFeatureNotConfigured},
		{"priority without priority scheduling", syn.ObserveBuckets(instrument.NameTimeToFirstToken, []int64{1}, label(instrument.KeyPriority, "0")), stats.ErrInvalidLabel},
		{"a 1 MiB label value", syn.AddCount(instrument.NameRequestSuccess, 1, label(instrument.KeyFinishedReason, huge)), stats.ErrInvalidLabel},
		{"a 1 MiB label name", syn.AddCount(instrument.NameRequestSuccess, 1, label(huge, "stop")), stats.ErrInvalidLabel},
		{"a negative count", syn.AddCount(instrument.NameGenerationTokens, -1), stats.ErrNegative},
		{"the least int64", syn.AddCount(instrument.NameGenerationTokens, math.MinInt64), stats.ErrNegative},
		{"a count past the total", syn.AddCount(instrument.NameGenerationTokens, math.MaxInt64), stats.ErrOverflow},
		{"a negative bucket count", syn.ObserveBuckets(instrument.NameTimeToFirstToken, []int64{1, -1}), stats.ErrNegative},
		{"more counts than buckets", syn.ObserveBuckets(instrument.NameTimeToFirstToken, tooMany), stats.ErrOutOfRange},
		{"too many observations", syn.ObserveBuckets(instrument.NameTimeToFirstToken, []int64{instrument.MaxSyntheticObservations, 1}), stats.ErrOutOfRange},
		{"a LoRA time before the epoch", syn.SetLoRA(stats.LoRA{MaxLoRA: 1}, time.Unix(-1, 0)), stats.ErrOutOfRange},
		{"an invalid LoRA state", syn.SetLoRA(stats.LoRA{MaxLoRA: -1}, time.Unix(1, 0)), stats.ErrNegative},
		{"a LoRA name with a comma", syn.SetLoRA(stats.LoRA{MaxLoRA: 1, Running: []string{"a,b"}}, time.Unix(1, 0)), stats.ErrInvalidLabel},
		{"the most int64 observations", syn.ObserveBuckets(instrument.NameRequestPromptTokens, []int64{math.MaxInt64, math.MaxInt64}), stats.ErrOutOfRange},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
		if c.err != nil && len(c.err.Error()) > 1024 {
			t.Errorf("%s: a %d-byte error", c.name, len(c.err.Error()))
		}
	}
	if after := h.scrape(); after != before {
		t.Errorf("refused calls changed the scrape:\n%s\nwant:\n%s", after, before)
	}
}

// TestSyntheticManyLabelValues: a million distinct label values, in one
// call and one a call, are all refused and add no series.
func TestSyntheticManyLabelValues(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	syn := h.engine(0).Synthetic()
	before := h.collect().String()
	n := 1_000_000
	if testing.Short() || sample.Race {
		n = 100_000
	}
	many := make([]instrument.Label, n)
	for i := range many {
		many[i] = label(instrument.KeyFinishedReason, strconv.Itoa(i))
	}
	if err := syn.AddCount(instrument.NameRequestSuccess, 1, many...); !errors.Is(err, stats.ErrInvalidLabel) {
		t.Fatalf("%d labels in one call: %v, want ErrInvalidLabel", n, err)
	}
	for i, l := range many {
		if err := syn.AddCount(instrument.NameRequestSuccess, 1, l); !errors.Is(err, stats.ErrInvalidLabel) {
			t.Fatalf("value %d: %v, want ErrInvalidLabel", i, err)
		}
	}
	if after := h.collect().String(); after != before {
		t.Errorf("refused label values changed the collection")
	}
}

// TestSyntheticUnusable: a nil Synthetic and one of a closed Recorder refuse.
func TestSyntheticUnusable(t *testing.T) {
	var e *instrument.Engine
	if syn := e.Synthetic(); syn != nil {
		t.Fatalf("a nil Engine's Synthetic: %v, want nil", syn)
	}
	var syn *instrument.Synthetic
	if err := syn.AddCount(instrument.NameGenerationTokens, 1); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("nil AddCount: %v", err)
	}
	if err := syn.ObserveBuckets(instrument.NameTimeToFirstToken, []int64{1}); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("nil ObserveBuckets: %v", err)
	}
	if err := syn.SetLoRA(stats.LoRA{}, time.Unix(1, 0)); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("nil SetLoRA: %v", err)
	}
	if err := (&instrument.Engine{}).Synthetic().AddCount(instrument.NameGenerationTokens, 1); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("a zero Engine's AddCount: %v", err)
	}
	h := newHarness(t)
	syn = h.engine(0).Synthetic()
	must(t, h.rec.Close())
	if err := syn.AddCount(instrument.NameGenerationTokens, 1); !errors.Is(err, instrument.ErrClosed) {
		t.Errorf("AddCount after Close: %v, want ErrClosed", err)
	}
	if err := syn.SetLoRA(stats.LoRA{}, time.Unix(1, 0)); !errors.Is(err, instrument.ErrClosed) {
		t.Errorf("SetLoRA after Close: %v, want ErrClosed", err)
	}
}

// TestSyntheticIntegerSum: an integer histogram's sum counts against its
// total, so that the SDK's int64 sum cannot wrap around.
func TestSyntheticIntegerSum(t *testing.T) {
	h := newHarness(t, instrument.WithMaxModelLen(math.MaxInt))
	syn := h.engine(0).Synthetic()
	bounds := instrument.LengthBuckets(math.MaxInt)
	counts := make([]int64, len(bounds)+1)
	counts[len(bounds)] = 2 // 2 × (5e18 + 1)
	before := h.collect().String()
	if err := syn.ObserveBuckets(instrument.NameRequestPromptTokens, counts); !errors.Is(err, stats.ErrOverflow) {
		t.Errorf("a sum past int64: %v, want ErrOverflow", err)
	}
	if counts[len(bounds)] = 1; syn.ObserveBuckets(instrument.NameRequestPromptTokens, counts) == nil {
		t.Error("a sum past MaxTotal (5e18 + 1) accepted")
	}
	// One observation of 5e15 fits MaxTotal (2^53, about 9.007e15); a
	// second, into a family sharing its total, does not.
	i := slices.Index(bounds, 5e15)
	counts = make([]int64, i+1)
	counts[i] = 1
	must(t, syn.ObserveBuckets(instrument.NameRequestPromptTokens, counts))
	if err := syn.ObserveBuckets(instrument.NameRequestPrefillKVComputedTokens, counts); !errors.Is(err, stats.ErrOverflow) {
		t.Errorf("a second sum past the shared total: %v, want ErrOverflow", err)
	}
	if p, ok := h.collect()[series("vllm:request_prefill_kv_computed_tokens", engineLabels("0")...)]; ok {
		t.Errorf("refused observations recorded: %v; before:\n%s", p, before)
	}
}

// BenchmarkSyntheticObserve measures ObserveBuckets per observation on an
// SDK histogram with the vLLM views.
func BenchmarkSyntheticObserve(b *testing.B) {
	h := newHarness(b)
	syn := h.engine(0).Synthetic()
	counts := []int64{0, 500, 500}
	b.ReportAllocs()
	for b.Loop() {
		if err := syn.ObserveBuckets(instrument.NameTimeToFirstToken, counts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/observation")
}

// FuzzSynthetic: hostile calls never panic, and a refused one changes
// nothing collected.
func FuzzSynthetic(f *testing.F) {
	names := []string{"vllm.nope", ""}
	for _, d := range instrument.Descriptors() {
		names = append(names, d.Name)
	}
	f.Add(uint8(0), int64(1), "", "", []byte(nil))
	f.Add(uint8(3), int64(-1), instrument.KeyFinishedReason, "stop", []byte{1, 0, 255, 255})
	f.Add(uint8(17), int64(math.MaxInt64), instrument.KeySource, "local_compute", []byte(nil))
	f.Add(uint8(40), int64(math.MinInt64), instrument.KeyPriority, "\xff", []byte{0x7f, 0xff, 0x7f, 0xff, 0x7f, 0xff})
	f.Fuzz(func(t *testing.T, family uint8, n int64, key, value string, raw []byte) {
		h := newHarness(t, instrument.WithSpecDecoding(1))
		syn := h.engine(0).Synthetic()
		name := names[int(family)%len(names)]
		var labels []instrument.Label
		if key != "" || value != "" {
			labels = append(labels, label(key, value))
		}
		before := h.collect().String()
		var err error
		if len(raw) == 0 {
			err = syn.AddCount(name, n, labels...)
		} else {
			counts := make([]int64, 0, len(raw)/2)
			for i := 0; i+1 < len(raw); i += 2 {
				counts = append(counts, int64(int16(uint16(raw[i])<<8|uint16(raw[i+1])))*(n%64))
			}
			err = syn.ObserveBuckets(name, counts, labels...)
		}
		if err != nil && h.collect().String() != before {
			t.Errorf("refused %s (%v) changed the collection", name, err)
		}
	})
}

// TestSyntheticRefusalSays: a family refused names the way to serve it.
func TestSyntheticRefusalSays(t *testing.T) {
	syn := newHarness(t).engine(0).Synthetic()
	for _, c := range []struct {
		err  error
		says string
	}{
		{syn.AddCount(instrument.NameNumRequestsWaiting, 1), "SetWaiting"},
		{syn.AddCount(instrument.NameLoRARequestsInfo, 1), "SetLoRA"},
		{syn.AddCount(instrument.NameTimeToFirstToken, 1), "use ObserveBuckets"},
		{syn.ObserveBuckets(instrument.NameRequestSuccess, []int64{1}), "use AddCount"},
		{syn.ObserveBuckets(instrument.NameEstimatedFlopsPerGPU, []int64{1}), "a counter that Synthetic does not serve"},
		{syn.AddCount(instrument.NameKVOffloadLoadSize, 1), "a histogram that Synthetic does not serve"},
		{syn.AddCount(strings.Repeat("é", 1<<20), 1), `"éé`},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("%v, want it to say %q", c.err, c.says)
		}
	}
}

// TestSyntheticConcurrent: Synthetic calls from several goroutines, beside
// recorded steps, add up exactly.
func TestSyntheticConcurrent(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	const goroutines, calls = 4, 100
	errs := make(chan error, goroutines)
	for range goroutines {
		go func() {
			var err error
			for range calls {
				err = errors.Join(err,
					e.Synthetic().AddCount(instrument.NameGenerationTokens, 2),
					e.Synthetic().ObserveBuckets(instrument.NameTimeToFirstToken, []int64{1, 1}))
				e.RecordIteration(context.Background(), &stats.Iteration{GenerationTokens: 1})
			}
			errs <- err
		}()
	}
	for range goroutines {
		must(t, <-errs)
	}
	s := h.collect()
	checkCounter(t, s, goroutines*calls*3, "vllm:generation_tokens", engineLabels("0")...)
	checkHistogram(t, s, goroutines*calls*2, goroutines*calls*(0.001+0.005), map[int]uint64{0: goroutines * calls, 1: goroutines * calls},
		"vllm:time_to_first_token_seconds", engineLabels("0")...)
}
