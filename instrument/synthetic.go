package instrument

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// ErrUnknownFamily reports a family that Synthetic does not serve: a name
// not in the catalog, a gauge (set it with the Engine's setters), or a
// family with no synthetic path (see Synthetic).
var ErrUnknownFamily = errors.New("instrument: unknown family")

// MaxSyntheticObservations bounds the observations of one
// Synthetic.ObserveBuckets call (split a larger picture into several
// calls). The OpenTelemetry API has no record-with-count: each observation
// is one Record on the SDK's histogram: about 1,800 instructions with the
// vLLM views (BenchmarkSyntheticObserve under cachegrind), 0.9 µs on a
// loaded 2-core machine, so a call of this many takes tens of milliseconds.
const MaxSyntheticObservations = 1 << 16

// Synthetic serves chosen values under the library's families, for a
// simulator's "fake metrics" mode or a consumer's test: the values go to
// the Engine's own instruments, with their names, types, labels and
// buckets, so that views, the exporters and the Prometheus handler's zero
// series apply as to real values and no second series can arise. Get it
// from Engine.Synthetic. It is safe for concurrent use, and beside the
// Engine's Record methods and Events.
//
// Gauges are set with the Engine's setters (SetRunning, SetWaiting,
// SetKVCacheUsage, SetSleepState), which take chosen values as they are.
//
// A call is validated whole before anything is recorded: a refused call
// returns an error and records nothing; nothing is counted on
// NameInvalidEvents or reported to the error handler, the caller decides.
//
// Cumulative OpenTelemetry data cannot go down: a counter only grows and a
// histogram's counts are only added to, so a reset (a series made smaller,
// or a histogram's counts replaced) cannot be served. When every count
// grows, add the difference; otherwise build a new MeterProvider and
// Recorder and serve the new provider's handler in place of the old one:
// a scrape sees a restart, a counter reset that rate() and increase()
// handle (see docs/engines.md, "Synthetic series").
type Synthetic struct {
	e *Engine
	// series is what NewRecorder knows of the engine's series: its
	// configured features and its token-count histograms' bounds.
	series EngineSeries
}

// Synthetic returns the engine's Synthetic (nil for a nil or zero Engine;
// its methods then return ErrUnknownEngine).
func (e *Engine) Synthetic() *Synthetic {
	if e == nil || e.engineState == nil {
		return nil
	}
	return e.synthetic
}

func newSynthetic(e *Engine, cfg *config) *Synthetic {
	return &Synthetic{e: e, series: EngineSeries{MaxModelLen: cfg.maxModelLen, Features: configuredFeatures(cfg)}}
}

// AddCount adds n to a counter family: name is its instrument name
// (NameRequestSuccess, NamePromptTokens, ...) and labels give each of the
// family's attributes beyond model_name and engine (Descriptor.Attributes,
// plus KeyPriority on Descriptor.Priority families under
// WithPriorityScheduling) once, with a value of its closed set
// (stats.Source, stats.Tier, stats.FinishReason, a speculative decoding
// position below 64, stats.PriorityBucket). The counters served are the
// prompt tokens by source, the cached prompt tokens by tier, generation
// tokens, preemptions, request_success, the local, multimodal and external
// prefix cache queries and hits, and, with their options, corrupted
// requests, speculative decoding and the NIXL connector's counters. n
// counts against the engine's totals, as a Record method's values do.
func (s *Synthetic) AddCount(name string, n int64, labels ...Label) error {
	t, err := s.target(name, labels, true)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("instrument: Synthetic.AddCount %s: count %d: %w", name, n, stats.ErrNegative)
	}
	var inc increments
	inc.add(t.f.total, n)
	if err := s.e.reserve(&inc); err != nil {
		return err
	}
	if t.f.grow != nil {
		t.f.grow(s.e.engineState, t.value)
	}
	addPositive(t.f.counter(s.e.engineState, t.value, t.prio), n)
	return nil
}

// ObserveBuckets adds counts[i] observations to bucket i of a histogram
// family, on its instrument with its advisory bounds (Descriptors, or
// EngineSeries.Bounds for the token-count histograms). Each observation is
// its bucket's upper bound, which OpenTelemetry's explicit buckets include;
// past the last bound (the +Inf bucket, counts[len(bounds)]) it is the last
// bound + 1 (the next float64 above it where + 1 is lost to rounding). The
// histogram's sum grows by Σ counts[i] × value[i]. Trailing zeros may be
// omitted; more counts than the bounds + 1, a negative count or more than
// MaxSyntheticObservations in all are refused. A view that changes the
// bounds places these values in its own buckets. labels are as for
// AddCount: KeyPriority under priority scheduling; these families have no
// other labels. The histograms served are the engine's vLLM histograms: the
// request token counts and parameters, iteration tokens, preemptions per
// request, the latencies (TTFT, ITL, TPOT, e2e, queue, inference, prefill,
// decode), and, with their options, the KV residency and NIXL transfer
// histograms. An integer histogram's sum counts against the engine's
// totals.
func (s *Synthetic) ObserveBuckets(name string, counts []int64, labels ...Label) error {
	t, err := s.target(name, labels, false)
	if err != nil {
		return err
	}
	bounds := s.series.Bounds(t.d)
	if len(counts) > len(bounds)+1 {
		return fmt.Errorf("instrument: Synthetic.ObserveBuckets %s: %d counts, at most %d (%d bounds and +Inf): %w",
			name, len(counts), len(bounds)+1, len(bounds), stats.ErrOutOfRange)
	}
	var all int64
	for i, n := range counts {
		if n < 0 {
			return fmt.Errorf("instrument: Synthetic.ObserveBuckets %s: count %d of bucket %d: %w", name, n, i, stats.ErrNegative)
		}
		if all += n; n > MaxSyntheticObservations || all > MaxSyntheticObservations {
			return fmt.Errorf("instrument: Synthetic.ObserveBuckets %s: more than %d observations in one call: %w",
				name, MaxSyntheticObservations, stats.ErrOutOfRange)
		}
	}
	value := func(i int) float64 {
		if i < len(bounds) {
			return bounds[i]
		}
		last := bounds[len(bounds)-1] // every served histogram has bounds
		if v := last + 1; v > last {
			return v
		}
		return math.Nextafter(last, math.Inf(1)) // + 1 lost to rounding
	}
	ctx, rec := context.Background(), s.e.plain.rec
	if t.prio >= 0 {
		rec = s.e.prio.finished[t.prio].plain.rec
	}
	if t.f.int64H == nil {
		h := t.f.float64H(s.e.inst)
		for i, n := range counts {
			v := value(i)
			for range n {
				h.Record(ctx, v, rec...)
			}
		}
		return nil
	}
	// The SDK sums int64 observations in an int64: the sum counts against
	// the family's total, which keeps it from wrapping around.
	var inc increments
	for i, n := range counts {
		v := int64(value(i)) // integer bounds, far below 2^63
		if n > 0 && v > math.MaxInt64/n {
			return s.e.overflow(t.f.total)
		}
		inc.add(t.f.total, n*v)
	}
	if err := s.e.reserve(&inc); err != nil {
		return err
	}
	h := t.f.int64H(s.e.inst)
	for i, n := range counts {
		v := int64(value(i))
		for range n {
			h.Record(ctx, v, rec...)
		}
	}
	return nil
}

// SetLoRA makes l the engine's LoRA state (vllm:lora_requests_info), valued
// at at's Unix time, a simulator's chosen timestamp, where Engine.SetLoRA
// and a step's Scheduler.LoRA take the time of the call; the states kept
// are as for those. An invalid state (stats.LoRA.Validate) or a time before
// the Unix epoch or past 2262 is refused: its error is returned and nothing
// changes.
func (s *Synthetic) SetLoRA(l stats.LoRA, at time.Time) error {
	if s == nil {
		return nilSynthetic("SetLoRA")
	}
	return s.e.setLoRAAt(&l, at)
}

func nilSynthetic(method string) error {
	return fmt.Errorf("instrument: Synthetic.%s: %w: a nil Synthetic (get one from Engine.Synthetic)", method, ErrUnknownEngine)
}

// syntheticTarget is one resolved series of a Synthetic call.
type syntheticTarget struct {
	d     Descriptor
	f     syntheticFamily
	value int // index of the family's label value; 0 without one
	prio  int // priority bucket under priority scheduling; -1 otherwise
}

// target resolves a family and its labels, or returns why it cannot be
// served (a counter family when counter, else a histogram).
func (s *Synthetic) target(name string, labels []Label, counter bool) (syntheticTarget, error) {
	method := "ObserveBuckets"
	if counter {
		method = "AddCount"
	}
	if s == nil {
		return syntheticTarget{}, nilSynthetic(method)
	}
	if err := s.e.usable(false); err != nil {
		return syntheticTarget{}, err
	}
	f, ok := syntheticFamilies[name]
	if !ok || (f.counter != nil) != counter {
		return syntheticTarget{}, fmt.Errorf("instrument: Synthetic.%s %s: %w", method, quote(name), whyNotServed(name, counter))
	}
	t := syntheticTarget{d: f.d, f: f, prio: -1}
	if !s.series.Has(f.d.Feature) {
		return t, fmt.Errorf("instrument: Synthetic.%s %s: the Recorder was built without the option of its feature (WithKVConnector, WithSpecDecoding, ...): %w",
			method, name, ErrFeatureNotConfigured)
	}
	// The family's label keys: its one attribute, and the priority label.
	var keys [2]string
	var idx [2]*int
	nk := 0
	if f.values != nil {
		keys[nk], idx[nk] = f.d.Attributes[0], &t.value
		nk++
	}
	if f.d.Priority && s.e.prio.priority {
		keys[nk], idx[nk] = KeyPriority, &t.prio
		nk++
	}
	if len(labels) != nk {
		return t, fmt.Errorf("instrument: Synthetic.%s %s: %d labels given, want %q: %w",
			method, name, len(labels), keys[:nk], stats.ErrInvalidLabel)
	}
	for j, l := range labels {
		k := indexOf(keys[:nk], l.Name)
		if k < 0 {
			return t, fmt.Errorf("instrument: Synthetic.%s %s: no label %s: %w", method, name, quote(l.Name), stats.ErrInvalidLabel)
		}
		if seen(labels[:j], l.Name) {
			return t, fmt.Errorf("instrument: Synthetic.%s %s: label %s given twice: %w", method, name, l.Name, stats.ErrInvalidLabel)
		}
		values := f.values
		if l.Name == KeyPriority {
			values = priorityValues
		}
		if *idx[k] = indexOf(values, l.Value); *idx[k] < 0 {
			return t, fmt.Errorf("instrument: Synthetic.%s %s: label %s=%s is not one of its values: %w",
				method, name, l.Name, quote(l.Value), stats.ErrInvalidLabel)
		}
	}
	return t, nil
}

// whyNotServed says why name has no synthetic path of the kind asked for.
func whyNotServed(name string, counter bool) error {
	d, ok := lookup(name)
	_, served := syntheticFamilies[name]
	switch {
	case !ok:
		return fmt.Errorf("%w: not an instrument name of this package (Name... constants)", ErrUnknownFamily)
	case name == NameLoRARequestsInfo:
		return fmt.Errorf("%w: a gauge: set it with SetLoRA", ErrUnknownFamily)
	case d.Kind == Gauge:
		return fmt.Errorf("%w: a gauge: set it with the Engine's setters (SetRunning, SetWaiting, SetKVCacheUsage, SetSleepState)", ErrUnknownFamily)
	case d.Kind == Histogram && counter && served:
		return fmt.Errorf("%w: a histogram: use ObserveBuckets", ErrUnknownFamily)
	case d.Kind == Counter && !counter && served:
		return fmt.Errorf("%w: a counter: use AddCount", ErrUnknownFamily)
	}
	return fmt.Errorf("%w: a %s that Synthetic does not serve", ErrUnknownFamily, d.Kind)
}

// quote quotes a name or label value for an error, cut at 64 bytes so that
// hostile input does not make the error large.
func quote(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("... (%d bytes)", len(s))
}

func indexOf(values []string, v string) int {
	for i, x := range values {
		if x == v {
			return i
		}
	}
	return -1
}

// seen reports a label name among labels.
func seen(labels []Label, name string) bool {
	for _, l := range labels {
		if l.Name == name {
			return true
		}
	}
	return false
}

// syntheticFamily is Synthetic's path to one family: its counter cell or
// histogram instrument, the total that bounds it, and its label's values.
type syntheticFamily struct {
	d      Descriptor
	total  total    // bounds the counter, or an integer histogram's sum
	values []string // the closed set of the family's one label; nil without one
	// counter returns the cell of a label value and priority bucket (-1
	// without priority scheduling); grow, when set, builds what the
	// callback needs to report that cell first.
	counter  func(e *engineState, value, prio int) *atomic.Int64
	grow     func(e *engineState, value int)
	int64H   func(*instruments) metric.Int64Histogram
	float64H func(*instruments) metric.Float64Histogram
}

// stringsOf returns the label values of a closed set.
func stringsOf[T fmt.Stringer](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

var (
	priorityValues = stringsOf(stats.PriorityBuckets())
	positionValues = func() []string {
		out := make([]string, maxSpecPositions)
		for i := range out {
			out[i] = strconv.Itoa(i)
		}
		return out
	}()
)

// cell returns a counter path to one unlabelled cell.
func cell(c func(*cells) *atomic.Int64) func(*engineState, int, int) *atomic.Int64 {
	return func(e *engineState, _, _ int) *atomic.Int64 { return c(&e.c) }
}

// syntheticFamilies are the families Synthetic serves, by instrument name.
// Hits count against their queries' total, which bounds both (see total).
var syntheticFamilies = func() map[string]syntheticFamily {
	counters := map[string]syntheticFamily{
		NamePromptTokens: {total: totPromptTokens, values: stringsOf(stats.Sources()),
			counter: func(e *engineState, v, _ int) *atomic.Int64 { return &e.c.bySource[v] }},
		NamePromptTokensCached: {total: totPromptTokens, values: stringsOf(stats.Tiers()),
			counter: func(e *engineState, v, _ int) *atomic.Int64 { return &e.c.cachedByTier[v] }},
		NameRequestSuccess: {total: totRequests, values: stringsOf(stats.FinishReasons()),
			counter: func(e *engineState, v, prio int) *atomic.Int64 {
				if prio >= 0 {
					return &e.prio.success[v][prio]
				}
				return &e.c.success[v]
			}},
		NameSpecDecodeNumAcceptedTokensPerPos: {total: totSpecAcceptedPerPos, values: positionValues,
			counter: func(e *engineState, v, _ int) *atomic.Int64 { return &e.c.specPos[v] },
			grow:    func(e *engineState, v int) { e.positionMeasures(v + 1) }},
		NameGenerationTokens:            {total: totGenerationTokens, counter: cell(func(c *cells) *atomic.Int64 { return &c.generation })},
		NameNumPreemptions:              {total: totPreemptions, counter: cell(func(c *cells) *atomic.Int64 { return &c.preemptions })},
		NameCorruptedRequests:           {total: totCorrupted, counter: cell(func(c *cells) *atomic.Int64 { return &c.corrupted })},
		NamePrefixCacheQueries:          {total: totPrefixQueries, counter: cell(func(c *cells) *atomic.Int64 { return &c.prefixQ })},
		NamePrefixCacheHits:             {total: totPrefixQueries, counter: cell(func(c *cells) *atomic.Int64 { return &c.prefixH })},
		NameMMCacheQueries:              {total: totMMQueries, counter: cell(func(c *cells) *atomic.Int64 { return &c.mmQ })},
		NameMMCacheHits:                 {total: totMMQueries, counter: cell(func(c *cells) *atomic.Int64 { return &c.mmH })},
		NameExternalPrefixCacheQueries:  {total: totExtPrefixQueries, counter: cell(func(c *cells) *atomic.Int64 { return &c.extQ })},
		NameExternalPrefixCacheHits:     {total: totExtPrefixQueries, counter: cell(func(c *cells) *atomic.Int64 { return &c.extH })},
		NameSpecDecodeNumDrafts:         {total: totSpecDrafts, counter: cell(func(c *cells) *atomic.Int64 { return &c.specDrafts })},
		NameSpecDecodeNumDraftTokens:    {total: totSpecDraftTokens, counter: cell(func(c *cells) *atomic.Int64 { return &c.specDraftTokens })},
		NameSpecDecodeNumAcceptedTokens: {total: totSpecAccepted, counter: cell(func(c *cells) *atomic.Int64 { return &c.specAccepted })},
		NameNIXLNumFailedTransfers:      {total: totNIXLFailedTransfers, counter: cell(func(c *cells) *atomic.Int64 { return &c.nixlFailedTransfers })},
		NameNIXLNumFailedNotifs:         {total: totNIXLFailedNotifs, counter: cell(func(c *cells) *atomic.Int64 { return &c.nixlFailedNotifs })},
		NameNIXLNumKVExpiredReqs:        {total: totNIXLKVExpired, counter: cell(func(c *cells) *atomic.Int64 { return &c.nixlX })},
		NameNIXLNumNotifsAfterExp:       {total: totNIXLNotifsAfterExpiry, counter: cell(func(c *cells) *atomic.Int64 { return &c.nixlAfterExpiry })},
	}
	ints := map[string]struct {
		total total
		h     func(*instruments) metric.Int64Histogram
	}{
		NameRequestPromptTokens:            {totRequestPrompt, func(i *instruments) metric.Int64Histogram { return i.requestPrompt }},
		NameRequestPrefillKVComputedTokens: {totRequestPrompt, func(i *instruments) metric.Int64Histogram { return i.prefillKVComputed }},
		NameRequestGenerationTokens:        {totRequestGeneration, func(i *instruments) metric.Int64Histogram { return i.requestGeneration }},
		NameIterationTokens:                {totIterationTokens, func(i *instruments) metric.Int64Histogram { return i.iterationTokens }},
		NameRequestMaxNumGenerationTokens:  {totMaxGeneration, func(i *instruments) metric.Int64Histogram { return i.maxGeneration }},
		NameRequestParamsN:                 {totParamsN, func(i *instruments) metric.Int64Histogram { return i.paramsN }},
		NameRequestParamsMaxTokens:         {totParamsMaxTokens, func(i *instruments) metric.Int64Histogram { return i.paramsMaxTokens }},
		NameRequestNumPreemptions:          {totRequestPreemptions, func(i *instruments) metric.Int64Histogram { return i.requestNumPreemptions }},
		NameNIXLBytesTransferred:           {totNIXLBytes, func(i *instruments) metric.Int64Histogram { return i.nixlBytes }},
		NameNIXLNumDescriptors:             {totNIXLDescriptors, func(i *instruments) metric.Int64Histogram { return i.nixlDescriptors }},
	}
	floats := map[string]func(*instruments) metric.Float64Histogram{
		NameTimeToFirstToken:          func(i *instruments) metric.Float64Histogram { return i.ttft },
		NameInterTokenLatency:         func(i *instruments) metric.Float64Histogram { return i.itl },
		NameRequestTimePerOutputToken: func(i *instruments) metric.Float64Histogram { return i.tpot },
		NameE2ERequestLatency:         func(i *instruments) metric.Float64Histogram { return i.e2e },
		NameRequestQueueTime:          func(i *instruments) metric.Float64Histogram { return i.queueTime },
		NameRequestInferenceTime:      func(i *instruments) metric.Float64Histogram { return i.inferenceTime },
		NameRequestPrefillTime:        func(i *instruments) metric.Float64Histogram { return i.prefillTime },
		NameRequestDecodeTime:         func(i *instruments) metric.Float64Histogram { return i.decodeTime },
		NameKVBlockLifetime:           func(i *instruments) metric.Float64Histogram { return i.kvLifetime },
		NameKVBlockIdleBeforeEvict:    func(i *instruments) metric.Float64Histogram { return i.kvIdle },
		NameKVBlockReuseGap:           func(i *instruments) metric.Float64Histogram { return i.kvReuseGap },
		NameNIXLXferTime:              func(i *instruments) metric.Float64Histogram { return i.nixlXferTime },
		NameNIXLPostTime:              func(i *instruments) metric.Float64Histogram { return i.nixlPostTime },
	}
	out := map[string]syntheticFamily{}
	for name, f := range counters {
		out[name] = f
	}
	for name, h := range ints {
		out[name] = syntheticFamily{total: h.total, int64H: h.h}
	}
	for name, h := range floats {
		out[name] = syntheticFamily{float64H: h}
	}
	for name, f := range out {
		f.d, _ = lookup(name) // every name is the catalog's: TestSyntheticFamilies
		out[name] = f
	}
	return out
}()
