package instrument_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

const loraFamily = "vllm:lora_requests_info"

// loraSeries returns the LoRA info series of a snapshot.
func loraSeries(s snapshot) map[string]point {
	got := map[string]point{}
	for k, p := range s {
		if strings.HasPrefix(k, loraFamily+"{") {
			got[k] = p
		}
	}
	return got
}

func recordLoRA(t *testing.T, e *instrument.Engine, l stats.LoRA) {
	t.Helper()
	e.RecordScheduler(context.Background(), &stats.Scheduler{LoRA: &l})
}

func loraKey(maxLoRA, waiting, running string) string {
	return series(loraFamily, instrument.KeyMaxLoRA, maxLoRA, instrument.KeyWaitingLoRA, waiting, instrument.KeyRunningLoRA, running)
}

// vllm:lora_requests_info reports each engine's current adapter state only:
// a state no longer current leaves the next collection (the provider is
// cumulative), and adapter names are sorted, so the same adapters in another
// order are the same state.
func TestLoRACurrentStateOnly(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0, 1))
	e0, e1 := h.engine(0), h.engine(1)
	before := time.Now()
	recordLoRA(t, e0, stats.LoRA{MaxLoRA: 4, Running: []string{"sql", "chat"}, Waiting: []string{"math"}})
	got := loraSeries(h.collect())
	p, ok := got[loraKey("4", "math", "chat,sql")]
	if len(got) != 1 || !ok {
		t.Fatalf("after one state: %v, want the state with sorted names", got)
	}
	if now := float64(time.Now().UnixNano()) / 1e9; p.kind != "gauge" || p.value < float64(before.Unix()) || p.value > now {
		t.Errorf("value %v, want the Unix time of the update", p)
	}

	// Another state replaces it.
	recordLoRA(t, e0, stats.LoRA{MaxLoRA: 4, Running: []string{"math"}})
	got = loraSeries(h.collect())
	if _, ok := got[loraKey("4", "", "math")]; len(got) != 1 || !ok {
		t.Errorf("after a new state: %v, want only the new state", got)
	}

	// The same adapters in another order are the same state; each engine
	// reports its own.
	recordLoRA(t, e0, stats.LoRA{MaxLoRA: 4, Running: []string{"b", "a"}})
	recordLoRA(t, e1, stats.LoRA{MaxLoRA: 4, Running: []string{"a", "b"}})
	got = loraSeries(h.collect())
	if _, ok := got[loraKey("4", "", "a,b")]; len(got) != 1 || !ok {
		t.Errorf("two engines, same adapters in two orders: %v, want one series", got)
	}
	recordLoRA(t, e1, stats.LoRA{MaxLoRA: 4, Running: []string{"c"}})
	got = loraSeries(h.collect())
	_, ok0 := got[loraKey("4", "", "a,b")]
	_, ok1 := got[loraKey("4", "", "c")]
	if len(got) != 2 || !ok0 || !ok1 {
		t.Errorf("two engines in two states: %v, want both", got)
	}
}

// 3,000 state changes, past the SDK's cardinality limit of 2,000, leave
// exactly one series, with the newest labels (not the overflow series).
func TestLoRAManyStates(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	const changes = 3000
	for i := range changes {
		recordLoRA(t, e, stats.LoRA{MaxLoRA: 8, Running: []string{fmt.Sprintf("adapter-%04d", i)}})
	}
	got := loraSeries(h.collect())
	if _, ok := got[loraKey("8", "", fmt.Sprintf("adapter-%04d", changes-1))]; len(got) != 1 || !ok {
		t.Errorf("after %d states: %d series, want the newest only", changes, len(got))
	}
}

// loraAt is a chosen time of a LoRA state, i seconds after t0.
func loraAt(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

// unixOf is vllm:lora_requests_info's value for a time.
func unixOf(at time.Time) float64 { return float64(at.UnixNano()) / 1e9 }

// setLoRAAt sets a state at a chosen time, failing the test on a refusal.
func setLoRAAt(t *testing.T, e *instrument.Engine, l stats.LoRA, at time.Time) {
	t.Helper()
	if err := instrument.SetLoRAAtErr(e, &l, at); err != nil {
		t.Fatalf("setLoRAAt(%+v, %v): %v", l, at, err)
	}
}

// SetLoRA sets the state without a Scheduler, names in any order, at the
// time of the call, leaving the caller's lists as they were.
func TestSetLoRA(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	running, waiting := []string{"sql", "chat"}, []string{"math"}
	before := time.Now()
	e.SetLoRA(stats.LoRA{MaxLoRA: 4, Running: running, Waiting: waiting})
	after := time.Now()
	got := loraSeries(h.collect())
	p, ok := got[loraKey("4", "math", "chat,sql")]
	if len(got) != 1 || !ok {
		t.Fatalf("after SetLoRA: %v, want the state with sorted names", got)
	}
	if p.kind != "gauge" || p.value < unixOf(before) || p.value > unixOf(after) {
		t.Errorf("value %v, want the Unix time of the call (%v to %v)", p, unixOf(before), unixOf(after))
	}
	if running[0] != "sql" || running[1] != "chat" {
		t.Errorf("SetLoRA reordered the caller's list: %v", running)
	}
	e.SetLoRA(stats.LoRA{MaxLoRA: 4, Waiting: []string{"chat"}})
	got = loraSeries(h.collect())
	if _, ok := got[loraKey("4", "chat", "")]; len(got) != 1 || !ok {
		t.Errorf("after a second SetLoRA: %v, want only the new state", got)
	}
}

// SetLoRA refuses an invalid state whole, by stats.LoRA.Validate: the state
// stays, and the refusal is counted (kind scheduler) and reported with the
// method.
func TestSetLoRARefused(t *testing.T) {
	testlog.StdLogger(t) // what a nil Engine refuses goes to otel.Handle, which logs it: to the test's log
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option())
	e, _ := rec.Engine(0)
	e.SetLoRA(stats.LoRA{MaxLoRA: 2, Running: []string{"sql"}})
	for _, c := range []struct {
		l       stats.LoRA
		mention string
	}{
		{stats.LoRA{MaxLoRA: -1}, "MaxLoRA"},
		{stats.LoRA{Running: []string{"a", "a"}}, "Running[1]"},
		{stats.LoRA{Waiting: []string{"a,b"}}, "Waiting[0]"},
		{stats.LoRA{MaxLoRA: 1, Running: []string{"a", "b"}}, "MaxLoRA 1"},
	} {
		e.SetLoRA(c.l)
		got := errs.Take()
		if len(got) != 1 || !strings.Contains(got[0].Error(), "SetLoRA") || !strings.Contains(got[0].Error(), c.mention) {
			t.Errorf("SetLoRA(%+v) reported %v, want one report naming SetLoRA and %q", c.l, got, c.mention)
		}
	}
	if got := r.Value(invalidFamily, withLabels("kind", "scheduler")...); got != 4 {
		t.Errorf("invalid scheduler events %v, want 4", got)
	}
	if got := r.Value(loraFamily, instrument.KeyMaxLoRA, "2", instrument.KeyWaitingLoRA, "", instrument.KeyRunningLoRA, "sql"); got == 0 {
		t.Error("a refused state replaced the one set before")
	}
	var none *instrument.Engine
	none.SetLoRA(stats.LoRA{}) // reported to otel.Handle, no panic
}

// Setting a state the engine keeps allocates nothing: the current one with
// the default history, and any of the kept ones with a longer history.
func TestSetLoRAUnchangedDoesNotAllocate(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0, 1), instrument.WithLoRAHistory(3))
	current := stats.LoRA{MaxLoRA: 4, Running: []string{"sql", "chat"}, Waiting: []string{"math"}}
	e0 := newHarness(t).engine(0)
	e0.SetLoRA(current)
	if n := testing.AllocsPerRun(1000, func() { e0.SetLoRA(current) }); n != 0 {
		t.Errorf("SetLoRA of the current state: %v allocations, want 0", n)
	}
	e1 := h.engine(1)
	other := stats.LoRA{MaxLoRA: 4, Running: []string{"code"}}
	e1.SetLoRA(current)
	e1.SetLoRA(other)
	if n := testing.AllocsPerRun(1000, func() { e1.SetLoRA(current); e1.SetLoRA(other) }); n != 0 {
		t.Errorf("SetLoRA of two kept states in turn: %v allocations, want 0", n)
	}
	s := stats.Scheduler{LoRA: &current}
	if n := testing.AllocsPerRun(1000, func() { e1.RecordSchedulerCounts(t.Context(), &s) }); n != 0 {
		t.Errorf("RecordSchedulerCounts of a kept state: %v allocations, want 0", n)
	}
}

// setLoRAAt values the state at the chosen time exactly and returns its
// refusal instead of reporting it.
func TestSetLoRAAt(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	setLoRAAt(t, e, stats.LoRA{MaxLoRA: 2, Running: []string{"b", "a"}}, loraAt(7))
	if got := loraSeries(h.collect()); len(got) != 1 || got[loraKey("2", "", "a,b")].value != unixOf(loraAt(7)) {
		t.Errorf("after setLoRAAt: %v, want the state valued at %v", got, unixOf(loraAt(7)))
	}
	for _, c := range []struct {
		l    *stats.LoRA
		at   time.Time
		want error
	}{
		{nil, loraAt(8), instrument.ErrNilStats},
		{&stats.LoRA{Running: []string{""}}, loraAt(8), stats.ErrInvalidLabel},
		{&stats.LoRA{}, time.Time{}, stats.ErrOutOfRange},
		{&stats.LoRA{}, time.Unix(-1, 0), stats.ErrOutOfRange},
		{&stats.LoRA{}, time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC), stats.ErrOutOfRange},
	} {
		if err := instrument.SetLoRAAtErr(e, c.l, c.at); !errors.Is(err, c.want) {
			t.Errorf("setLoRAAt(%+v, %v) = %v, want %v", c.l, c.at, err, c.want)
		}
	}
	if err := h.refused(); err != nil {
		t.Errorf("setLoRAAt reported its refusals: %v", err)
	}
	if got := loraSeries(h.collect()); len(got) != 1 || got[loraKey("2", "", "a,b")].value != unixOf(loraAt(7)) {
		t.Errorf("after refusals: %v, want the state set before", got)
	}
	if err := instrument.SetLoRAAtErr(nil, &stats.LoRA{}, loraAt(1)); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("setLoRAAt on a nil Engine = %v, want ErrUnknownEngine", err)
	}
}

// WithLoRAHistory takes 1 to MaxLoRAHistory.
func TestWithLoRAHistoryBounds(t *testing.T) {
	for _, k := range []int{0, -1, instrument.MaxLoRAHistory + 1} {
		_, err := instrument.NewRecorder(instrument.WithMeterProvider(newHarness(t).mp), instrument.WithModelName(model),
			instrument.WithLoRAHistory(k))
		if !errors.Is(err, instrument.ErrConfig) || !errors.Is(err, stats.ErrOutOfRange) || !strings.Contains(fmt.Sprint(err), "WithLoRAHistory") {
			t.Errorf("WithLoRAHistory(%d): %v, want ErrConfig naming the option", k, err)
		}
	}
	for _, k := range []int{1, instrument.MaxLoRAHistory} {
		h := newHarness(t, instrument.WithLoRAHistory(k))
		for i := range k + 1 {
			setLoRAAt(t, h.engine(0), stats.LoRA{Running: []string{fmt.Sprint(i)}}, loraAt(i))
		}
		if got := loraSeries(h.collect()); len(got) != k {
			t.Errorf("WithLoRAHistory(%d) after %d states: %d series, want %d", k, k+1, len(got), k)
		}
	}
}

// loraStates are five distinct states, set in turn in the history tests.
var loraStates = []stats.LoRA{
	{MaxLoRA: 2, Running: []string{"sql"}},
	{MaxLoRA: 2, Running: []string{"sql", "chat"}},
	{MaxLoRA: 2, Running: []string{"chat"}, Waiting: []string{"sql"}},
	{MaxLoRA: 2, Waiting: []string{"code"}},
	{MaxLoRA: 2, Running: []string{"code", "math"}, Waiting: []string{"chat"}},
}

// loraKeyOf is the series key of a state (names sorted, as exported).
func loraKeyOf(l stats.LoRA) string {
	running, waiting := slices.Sorted(slices.Values(l.Running)), slices.Sorted(slices.Values(l.Waiting))
	return loraKey(fmt.Sprint(l.MaxLoRA), strings.Join(waiting, ","), strings.Join(running, ","))
}

// WithLoRAHistory(1) is the default: the same collection, each engine's
// newest state, whatever the states set.
func TestLoRAHistoryOneIsDefault(t *testing.T) {
	def, one := newHarness(t, instrument.WithEngines(0, 1)), newHarness(t, instrument.WithEngines(0, 1), instrument.WithLoRAHistory(1))
	for _, h := range []*harness{def, one} {
		for i, l := range loraStates {
			setLoRAAt(t, h.engine(0), l, loraAt(i))
			setLoRAAt(t, h.engine(1), loraStates[len(loraStates)-1-i], loraAt(i))
		}
		setLoRAAt(t, h.engine(0), loraStates[1], loraAt(9)) // a state again
	}
	d, o := def.collect(), one.collect()
	if d.String() != o.String() {
		t.Errorf("WithLoRAHistory(1) collects\n%s\nthe default\n%s", o, d)
	}
	got := loraSeries(d)
	if len(got) != 2 || got[loraKeyOf(loraStates[1])].value != unixOf(loraAt(9)) ||
		got[loraKeyOf(loraStates[0])].value != unixOf(loraAt(4)) {
		t.Errorf("default: %v, want each engine's newest state only, valued at its time", got)
	}
}

// A history of 3 keeps the last three distinct states, each valued at the
// time it was last set; a state set again becomes the newest, so the next
// new state drops the oldest set, not the oldest first seen.
func TestLoRAHistoryKeepsLastStates(t *testing.T) {
	h := newHarness(t, instrument.WithLoRAHistory(3))
	e := h.engine(0)
	for i, l := range loraStates {
		setLoRAAt(t, e, l, loraAt(i))
	}
	want := map[string]point{}
	for i := 2; i < 5; i++ {
		want[loraKeyOf(loraStates[i])] = point{kind: "gauge", value: unixOf(loraAt(i))}
	}
	if got := loraSeries(h.collect()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after five states:\n%v\nwant the last three\n%v", got, want)
	}

	setLoRAAt(t, e, loraStates[2], loraAt(10)) // the oldest kept, again
	setLoRAAt(t, e, loraStates[0], loraAt(11)) // a new one: drops states[3]
	delete(want, loraKeyOf(loraStates[3]))
	want[loraKeyOf(loraStates[2])] = point{kind: "gauge", value: unixOf(loraAt(10))}
	want[loraKeyOf(loraStates[0])] = point{kind: "gauge", value: unixOf(loraAt(11))}
	if got := loraSeries(h.collect()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after a kept state again and a new one:\n%v\nwant\n%v", got, want)
	}
}

// A state set now, when the wall clock is behind a kept state's time (a
// clock stepped back), is valued just above it: the newest state keeps the
// largest value, which consumers take.
func TestLoRAHistoryNewestHasLargestValue(t *testing.T) {
	h := newHarness(t, instrument.WithLoRAHistory(3))
	e := h.engine(0)
	ahead := time.Now().Add(time.Hour)
	setLoRAAt(t, e, loraStates[0], ahead)
	e.SetLoRA(loraStates[1])
	got := loraSeries(h.collect())
	old, newest := got[loraKeyOf(loraStates[0])], got[loraKeyOf(loraStates[1])]
	if len(got) != 2 || old.value != unixOf(ahead) || newest.value <= old.value || newest.value > unixOf(ahead)+1e-3 {
		t.Errorf("after a state set behind a kept one's time: %v, want the newest just above %v", got, unixOf(ahead))
	}
}

// The consumers of vllm:lora_requests_info read the newest state as the
// series with the largest value: llm-d's router
// (pkg/epp/framework/plugins/datalayer/extractor/metrics/loraspec.go,
// LoRASpec.getLatestMetric, llm-d/llm-d-router @ebab6879: the first series
// of strictly larger value wins; its running, waiting and max_lora labels
// give the adapters) and a PromQL topk(1, vllm:lora_requests_info). Through
// the SDK and the library's Prometheus exporter, both give the newest state
// with the default and with a history.
func TestLoRAConsumersReadNewest(t *testing.T) {
	for _, k := range []int{1, 3, instrument.MaxLoRAHistory} {
		t.Run(fmt.Sprint("history ", k), func(t *testing.T) {
			h := newScrapedHarness(t, instrument.WithLoRAHistory(k))
			e := h.engine(0)
			for i, l := range loraStates {
				setLoRAAt(t, e, l, loraAt(i))
			}
			e.SetLoRA(loraStates[1]) // a kept state again, now
			family := scrapedFamily(t, h.scrape(), loraFamily)
			if want := min(k, len(loraStates)); len(family.GetMetric()) != want {
				t.Errorf("%d series, want %d", len(family.GetMetric()), want)
			}
			want := loraStates[1]
			for name, newest := range map[string]*dto.Metric{
				"llm-d's LoRASpec.getLatestMetric": routerLatest(family),
				"topk(1, vllm:lora_requests_info)": topk(family, 1)[0],
			} {
				got := loraFromLabels(t, newest)
				if got.MaxLoRA != want.MaxLoRA || !slices.Equal(got.Running, slices.Sorted(slices.Values(want.Running))) ||
					!slices.Equal(got.Waiting, want.Waiting) {
					t.Errorf("%s reads %+v, want the newest state %+v", name, got, want)
				}
			}
		})
	}
}

// scrapedFamily parses a text exposition and returns one family, failing the
// test when it is missing.
func scrapedFamily(t *testing.T, body, name string) *dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	f, ok := families[name]
	if !ok || f.GetType() != dto.MetricType_GAUGE {
		t.Fatalf("no gauge %s in the scrape:\n%s", name, body)
	}
	return f
}

// routerLatest is llm-d's choice of the LoRA series: the first of the
// largest value.
func routerLatest(f *dto.MetricFamily) *dto.Metric {
	var latest *dto.Metric
	recent := -1.0
	for _, m := range f.GetMetric() {
		if v := m.GetGauge().GetValue(); v > recent {
			recent, latest = v, m
		}
	}
	return latest
}

// topk is PromQL's topk(k, family): the k series of the largest values.
func topk(f *dto.MetricFamily, k int) []*dto.Metric {
	ms := slices.Clone(f.GetMetric())
	slices.SortStableFunc(ms, func(a, b *dto.Metric) int {
		return cmp.Compare(b.GetGauge().GetValue(), a.GetGauge().GetValue())
	})
	return ms[:min(k, len(ms))]
}

// loraFromLabels reads a state from a series' labels as llm-d does
// (populateLoRAMetrics), failing the test on a label vLLM's series lacks.
func loraFromLabels(t *testing.T, m *dto.Metric) stats.LoRA {
	t.Helper()
	var l stats.LoRA
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	for _, lp := range m.GetLabel() {
		switch lp.GetName() {
		case instrument.KeyMaxLoRA:
			n, err := strconv.ParseInt(lp.GetValue(), 10, 64)
			if err != nil {
				t.Errorf("max_lora %q: %v", lp.GetValue(), err)
			}
			l.MaxLoRA = n
		case instrument.KeyRunningLoRA:
			l.Running = split(lp.GetValue())
		case instrument.KeyWaitingLoRA:
			l.Waiting = split(lp.GetValue())
		default:
			t.Errorf("label %s=%q, which vLLM's series has not", lp.GetName(), lp.GetValue())
		}
	}
	return l
}

// A history keeps at most its k series whatever the distinct states set: a
// million (a tenth under the race detector) leave k series, the newest, held
// in the slice the first k filled (reused, so memory does not grow with the
// states).
func TestLoRAHistoryBounded(t *testing.T) {
	t.Parallel()
	const k = 8
	states := 1_000_000
	if sample.Race {
		states = 100_000
	}
	h := newHarness(t, instrument.WithLoRAHistory(k))
	e := h.engine(0)
	l := stats.LoRA{MaxLoRA: 1, Running: []string{""}}
	name := make([]byte, 0, 16)
	var backing any
	for i := range states {
		name = strconv.AppendInt(append(name[:0], 'a'), int64(i), 10)
		l.Running[0] = string(name)
		setLoRAAt(t, e, l, loraAt(i))
		if i == k-1 {
			_, backing = instrument.LoRAKept(e)
		}
		if i%10_000 == k-1 {
			if n, b := instrument.LoRAKept(e); n != min(i+1, k) || b != backing {
				t.Fatalf("after %d states: %d kept, slice %p, want %d in %p", i+1, n, b, min(i+1, k), backing)
			}
		}
	}
	got := loraSeries(h.collect())
	for i := states - k; i < states; i++ {
		key := loraKey("1", "", "a"+strconv.Itoa(i))
		if p, ok := got[key]; !ok || p.value != unixOf(loraAt(i)) {
			t.Errorf("series %s: %v, want it at %v", key, p, unixOf(loraAt(i)))
		}
	}
	if len(got) != k {
		t.Errorf("%d series after %d states, want %d", len(got), states, k)
	}
}

// vllm:lora_requests_info has no engine label, so the states of a
// Recorder's engines are one set of series: a state two engines keep is one
// series valued at the later time either set it, whichever engine set it
// last, so that the newest state has the largest value. Engine 1 sets
// sql-lora, engine 2 chat-lora, then engine 0 sql-lora again: the newest is
// sql-lora, through Engine.SetLoRA (the time of the call) and
// Synthetic.SetLoRA (chosen times), with the default history and a longer
// one.
func TestLoRANewestAcrossEngines(t *testing.T) {
	sql := stats.LoRA{MaxLoRA: 2, Running: []string{"sql-lora"}}
	chat := stats.LoRA{MaxLoRA: 2, Running: []string{"chat-lora"}}
	set := map[string]func(t *testing.T, e *instrument.Engine, l stats.LoRA, i int){
		"Engine.SetLoRA": func(_ *testing.T, e *instrument.Engine, l stats.LoRA, _ int) { e.SetLoRA(l) },
		"Synthetic.SetLoRA": func(t *testing.T, e *instrument.Engine, l stats.LoRA, i int) {
			if err := e.Synthetic().SetLoRA(l, time.Unix(int64(100*(i+1)), 0)); err != nil {
				t.Fatalf("Synthetic.SetLoRA: %v", err)
			}
		},
	}
	for name, set := range set {
		for _, k := range []int{instrument.DefaultLoRAHistory, 3} {
			t.Run(fmt.Sprintf("%s history %d", name, k), func(t *testing.T) {
				h := newScrapedHarness(t, instrument.WithEngines(0, 1, 2), instrument.WithLoRAHistory(k))
				for i, step := range []struct {
					rank int
					l    stats.LoRA
				}{{1, sql}, {2, chat}, {0, sql}} {
					set(t, h.engine(step.rank), step.l, i)
				}
				family := scrapedFamily(t, h.scrape(), loraFamily)
				if len(family.GetMetric()) != 2 {
					t.Errorf("%d series, want 2 (sql-lora and chat-lora):\n%v", len(family.GetMetric()), family)
				}
				for name, newest := range map[string]*dto.Metric{
					"llm-d's LoRASpec.getLatestMetric": routerLatest(family),
					"topk(1, vllm:lora_requests_info)": topk(family, 1)[0],
				} {
					if got := loraFromLabels(t, newest); !slices.Equal(got.Running, sql.Running) {
						t.Errorf("%s reads %+v, want the newest state %+v:\n%v", name, got, sql, family)
					}
				}
			})
		}
	}
}

// A state set now is valued above every state another engine of the
// Recorder set before, as above every state of its own engine: after
// engine 1's state at a time ahead of the wall clock (a clock stepped back,
// or two engines' updates within the clock's resolution), engine 2's state
// set now is the newest, just above it.
func TestLoRANewestAboveOtherEngines(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0, 1, 2))
	ahead := time.Now().Add(time.Hour)
	setLoRAAt(t, h.engine(1), loraStates[0], ahead)
	h.engine(2).SetLoRA(loraStates[1])
	got := loraSeries(h.collect())
	old, newest := got[loraKeyOf(loraStates[0])], got[loraKeyOf(loraStates[1])]
	if len(got) != 2 || old.value != unixOf(ahead) || newest.value <= old.value || newest.value > unixOf(ahead)+1e-3 {
		t.Errorf("after engine 2's state set behind engine 1's time: %v, want engine 2's just above %v", got, unixOf(ahead))
	}
}

// The package doc's bound on vllm:lora_requests_info's series is the one
// the Recorder keeps: the sentence that gives it names WithLoRAHistory's k,
// and k distinct states set on each of two engines, then more, leave k
// series per engine.
func TestPackageDocLoRABound(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	const claim = "at most k series per engine (k of WithLoRAHistory"
	doc := strings.Join(strings.Fields(f.Doc.Text()), " ")
	if !strings.Contains(doc, claim) {
		t.Errorf("instrument's package doc does not bound vllm:lora_requests_info by WithLoRAHistory: want %q in\n%s", claim, doc)
	}
	for _, k := range []int{instrument.DefaultLoRAHistory, 3} {
		h := newHarness(t, instrument.WithEngines(0, 1), instrument.WithLoRAHistory(k))
		for i := range 2 * k {
			for rank := range 2 {
				setLoRAAt(t, h.engine(rank), stats.LoRA{Running: []string{fmt.Sprint(rank, "-", i)}}, loraAt(i))
			}
		}
		if got := loraSeries(h.collect()); len(got) != 2*k {
			t.Errorf("WithLoRAHistory(%d), two engines, %d states each: %d series, want %d", k, 2*k, len(got), 2*k)
		}
	}
}
