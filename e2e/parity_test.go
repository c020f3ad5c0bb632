package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// exampleMaxModelLen is example/pd's maxModelLen: its token-count
// histograms are bucketed by instrument.LengthBuckets of it.
const exampleMaxModelLen = 8192

// histogramFamily is a histogram family of the library's catalog.
type histogramFamily struct {
	bounds []float64 // finite bucket bounds, ascending
	always bool      // exported by every engine, whatever it is configured with
}

// histogramFamilies returns the histogram families views.Families() lists,
// by exposition name.
func histogramFamilies() map[string]histogramFamily {
	m := map[string]histogramFamily{}
	for _, f := range views.Families() {
		if f.Type != "histogram" {
			continue
		}
		b := f.Buckets
		if f.Instrument.LengthBuckets {
			b = instrument.LengthBuckets(exampleMaxModelLen)
		}
		m[f.Name] = histogramFamily{bounds: b, always: f.Instrument.Feature == instrument.Always}
	}
	return m
}

// groupKey is a sample's identity without le: the histogram series (one
// label set) a _bucket, _sum or _count sample belongs to, named by family.
func groupKey(family string, se series) string {
	labels := maps.Clone(se.labels)
	delete(labels, "le")
	return identity(series{name: family, labels: labels})
}

// checkStartupZero: from Prometheus, at a moment after its first scrape of
// both instances and before the example's first request, every histogram
// family is present at zero on every engine: each one views.Families()
// marks always-present, and each one the engine exports after the load (a
// configured optional family exists from start-up too), prefill's
// inter-token latency included, with _count and _sum 0 and one zero bucket
// series per bound and +Inf.
func (e *env) checkStartupZero(t *testing.T, idleAt time.Time, final map[string]*scrape) {
	if up := e.prom.mustQuery(t, `up{path="direct"} == 1`, idleAt); len(up) != 2 {
		t.Fatalf("%d of 2 instances scraped by Prometheus before the first request (at %s), which the test waited for",
			len(up), idleAt.Format(time.RFC3339Nano))
	}
	catalog := histogramFamilies()
	// Expected families by role/engine.
	want := map[string]map[string]bool{}
	for _, k := range engineKeys() {
		want[k] = map[string]bool{}
		for name, f := range catalog {
			if f.always {
				want[k][name] = true
			}
		}
	}
	for _, s := range final {
		for _, se := range s.series {
			if fam, typ := s.family(se.name); typ == "histogram" && strings.HasPrefix(fam, "vllm:") {
				if k := engineKey(se); want[k] != nil {
					want[k][fam] = true
				}
			}
		}
	}
	// The prefill instance runs every request with max_tokens=1: it never
	// sees an inter-token latency, and exports the family all the same.
	if !want["prefill/0"]["vllm:inter_token_latency_seconds"] {
		t.Errorf("vllm:inter_token_latency_seconds is not among the always-present histograms of views.Families()")
	}
	// Every histogram sample Prometheus holds at idleAt, by sample name.
	byName := map[string][]series{}
	for _, se := range e.prom.mustQuery(t, `{__name__=~"vllm:.+_(bucket|sum|count)", path="direct"}`, idleAt) {
		byName[se.name] = append(byName[se.name], se)
	}
	checked := 0
	for _, k := range engineKeys() {
		for _, fam := range slices.Sorted(maps.Keys(want[k])) {
			checked++
			bounds, known := catalog[fam]
			counts := 0
			for _, suffix := range []string{"_count", "_sum"} {
				for _, se := range byName[fam+suffix] {
					if engineKey(se) != k {
						continue
					}
					if suffix == "_count" {
						counts++
					}
					if se.value != 0 {
						t.Errorf("%s: %s%s = %g before the first request, want 0", k, fam, suffix, se.value)
					}
				}
			}
			if counts == 0 {
				why := "always exported"
				if !bounds.always {
					why = "exported after the load, so configured"
				}
				t.Errorf("%s: %s (%s) absent before the first request: no _count series", k, fam, why)
				continue
			}
			les := map[string][]float64{}
			for _, se := range byName[fam+"_bucket"] {
				if engineKey(se) != k {
					continue
				}
				le, err := strconv.ParseFloat(se.labels["le"], 64)
				if err != nil {
					t.Errorf("%s: %s_bucket le %q: %v", k, fam, se.labels["le"], err)
					continue
				}
				if se.value != 0 {
					t.Errorf("%s: %s_bucket{le=%q} = %g before the first request, want 0", k, fam, se.labels["le"], se.value)
				}
				g := groupKey(fam, se)
				les[g] = append(les[g], le)
			}
			if len(les) != counts {
				t.Errorf("%s: %s: %d label sets with buckets, %d with _count", k, fam, len(les), counts)
			}
			for g, got := range les {
				sort.Float64s(got)
				if !known {
					t.Logf("%s: %s not in views.Families(): bounds not checked", k, g)
					continue
				}
				if exp := append(slices.Clone(bounds.bounds), math.Inf(1)); !slices.Equal(got, exp) {
					t.Errorf("%s: %s buckets before the first request %v, want %v", k, g, got, exp)
				}
			}
		}
	}
	t.Logf("%d histogram families × engines checked before the first request", checked)
}

// vLLM's overview dashboard offers these SLOs, substituted into le="...":
// the exact le text prometheus_client writes for those bounds.
var (
	ttftSLOs = []string{"0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "10.0"}
	tpotSLOs = []string{"0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.5"}
)

// goStyleLe matches the le text of a whole-number bound as Go writes it
// ("1", "1000"); Python's prometheus_client writes "1.0", "1000.0" below
// 1e6 and the same exponent form as Go from there.
const goStyleLe = `[0-9]+`

// checkLeText: le selectors written the way vLLM's dashboards write them
// return data on every engine, on the real Prometheus; no direct series
// carries a Go-style whole-number le.
// goStyleText matches a whole-number bucket bound as Go writes it (le="1").
var goStyleText = regexp.MustCompile(`le="` + goStyleLe + `"`)

func (e *env) checkLeText(t *testing.T, at time.Time, windowSeconds int) {
	// The text a Prometheus 2 without native histograms (or curl) gets: this
	// Prometheus negotiates protobuf and formats le itself, so read the text
	// format from the instances directly too.
	for role, u := range e.urls {
		body, err := httpGet(u)
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		if !bytes.Contains(body, []byte(`le="1.0"`)) || goStyleText.Match(body) {
			t.Errorf("%s text scrape: want whole-number bounds as le=\"1.0\", found le=%q", role, goStyleText.Find(body))
		}
	}
	type sel struct{ family, le string }
	var sels []sel
	for _, le := range ttftSLOs {
		sels = append(sels, sel{"vllm:time_to_first_token_seconds", le})
	}
	for _, le := range tpotSLOs {
		sels = append(sels, sel{"vllm:request_time_per_output_token_seconds", le})
	}
	sels = append(sels,
		sel{"vllm:request_prompt_tokens", "1000.0"},
		sel{"vllm:request_generation_tokens", "1000.0"},
		sel{"vllm:time_to_first_token_seconds", "+Inf"},
		sel{"vllm:request_time_per_output_token_seconds", "+Inf"},
		sel{"vllm:request_prompt_tokens", "+Inf"},
		sel{"vllm:iteration_tokens_total", "+Inf"},
	)
	for _, s := range sels {
		expr := fmt.Sprintf(`%s_bucket{path="direct", le=%q}`, s.family, s.le)
		got := e.byEngine(t, expr, at)
		for _, k := range engineKeys() {
			if _, ok := got[k]; !ok {
				t.Errorf("%s: %s returns no series", k, expr)
			}
		}
	}
	// The share of requests within vLLM's default TTFT SLO, as the
	// overview's SLO panel computes it: data, and a share.
	slo := fmt.Sprintf(`sum(rate(vllm:time_to_first_token_seconds_bucket{path="direct", le="1.0"}[%[1]ds])) / sum(rate(vllm:time_to_first_token_seconds_count{path="direct"}[%[1]ds]))`, windowSeconds)
	if v := e.prom.mustQuery(t, slo, at); len(v) != 1 || !(v[0].value > 0 && v[0].value <= 1) {
		t.Errorf("%s = %v, want one share in (0, 1]", slo, v)
	} else {
		t.Logf("share of requests with TTFT <= 1.0 s: %.3f", v[0].value)
	}
	for _, path := range []string{"direct", "otlp"} {
		goStyle := e.prom.mustQuery(t, fmt.Sprintf(`count by (__name__) ({path=%q, le=~%q})`, path, goStyleLe), at)
		var names []string
		for _, s := range goStyle {
			names = append(names, fmt.Sprintf("%s (%g series)", s.labels["__name__"], s.value))
		}
		sort.Strings(names)
		switch {
		case path == "direct" && len(names) > 0:
			t.Errorf("direct: Go-style whole-number le (le=~%q) on %s", goStyleLe, strings.Join(names, ", "))
		case len(names) > 0:
			// The collector's remote write formats le itself: not ours.
			t.Logf("%s: Go-style whole-number le on %d families (written by the collector), e.g. %s", path, len(names), names[0])
		}
	}
}

// newFamily is a family issue 11 added, and where the example exports it.
type newFamily struct {
	name  string // family name, or a prefix ending in "_"
	where string // everyEngine, everyDecode, someEngine or everyInstance
	// moving: a process_* family whose value moves between two scrapes;
	// only its presence is compared.
	moving bool
}

const (
	everyEngine   = "every engine"
	everyDecode   = "every decode engine"
	someEngine    = "some engine"
	everyInstance = "every instance"
)

var newFamilies = []newFamily{
	{name: "vllm:prompt_tokens_cached_by_source_total", where: everyEngine},
	{name: "vllm:request_num_preemptions", where: everyEngine},
	{name: "vllm:estimated_flops_per_gpu_total", where: everyEngine},
	{name: "vllm:estimated_read_bytes_per_gpu_total", where: everyEngine},
	{name: "vllm:estimated_write_bytes_per_gpu_total", where: everyEngine},
	// The decode instance receives KV: it is the KV consumer.
	{name: "vllm:num_requests_kv_fetch_by_stage", where: everyDecode},
	// Both instances have a KV connector (instrument.WithKVConnector).
	{name: "vllm:nixl_num_notifications_after_expiry_total", where: everyEngine},
	// Priority scheduling and a KV offload tier: on the instances the
	// example enables them for.
	{name: "vllm:request_priority", where: someEngine},
	{name: "vllm:scheduler_policy_info", where: someEngine},
	{name: "vllm:kv_offload_", where: someEngine},
	{name: "process_cpu_seconds_total", where: everyInstance, moving: true},
	{name: "process_resident_memory_bytes", where: everyInstance, moving: true},
	{name: "process_open_fds", where: everyInstance, moving: true},
	{name: "process_start_time_seconds", where: everyInstance},
	{name: "process_max_fds", where: everyInstance},
}

// matches reports whether family (an exposition family name) is nf.
func (nf newFamily) matches(family string) bool {
	if strings.HasSuffix(nf.name, "_") {
		return strings.HasPrefix(family, nf.name)
	}
	return family == nf.name
}

// tierSources are the values of vllm:prompt_tokens_cached_by_source_total's
// source label: the physical tier cached prompt tokens came from.
var tierSources = []string{"device", "host", "p2p", "disk", "external_unspecified"}

// checkNewFamilies: each family issue 11 added is in the final direct scrape
// where the example exports it, every one of its samples has the same value
// in Prometheus, and the values hold the simulation's invariants.
func (e *env) checkNewFamilies(t *testing.T, at time.Time, final map[string]*scrape) {
	// Samples of the new families in the final scrapes, and where.
	found := map[string]map[string]bool{} // new family -> role/engine or role
	scraped := map[string]float64{}       // identity -> value, non-moving samples
	var exprs []string
	for _, nf := range newFamilies {
		found[nf.name] = map[string]bool{}
		re := regexp.QuoteMeta(nf.name)
		if strings.HasSuffix(nf.name, "_") {
			re += ".+"
		}
		exprs = append(exprs, re)
	}
	for role, s := range final {
		for _, se := range s.series {
			fam, _ := s.family(se.name)
			for _, nf := range newFamilies {
				if !nf.matches(fam) {
					continue
				}
				where := role
				if nf.where != everyInstance {
					where = engineKey(se)
				}
				found[nf.name][where] = true
				if !nf.moving {
					scraped[role+" "+identity(se)] = se.value
				}
			}
		}
	}
	for _, nf := range newFamilies {
		var want []string
		switch nf.where {
		case everyEngine:
			want = engineKeys()
		case everyDecode:
			want = slices.DeleteFunc(engineKeys(), func(k string) bool { return !strings.HasPrefix(k, "decode/") })
		case everyInstance:
			want = []string{"prefill", "decode"}
		}
		for _, w := range want {
			if !found[nf.name][w] {
				t.Errorf("%s: %s absent from the final direct scrape", w, nf.name)
			}
		}
		if nf.where == someEngine && len(found[nf.name]) == 0 {
			t.Errorf("%s absent from both instances' final direct scrapes", nf.name)
		}
	}

	// The same values in Prometheus, sample by sample.
	inProm := map[string]float64{}
	sel := fmt.Sprintf(`{__name__=~"(%s)(_bucket|_sum|_count)?", path="direct"}`, strings.Join(exprs, "|"))
	for _, se := range e.prom.mustQuery(t, sel, at) {
		inProm[roleOf(e, se)+" "+identity(se)] = se.value
	}
	for id, want := range scraped {
		if got, ok := inProm[id]; !ok {
			t.Errorf("%s in the final scrape (%g) but not in prometheus", id, want)
		} else if !sameValue(got, want) {
			t.Errorf("%s = %g in prometheus, %g in the final scrape", id, got, want)
		}
	}
	t.Logf("%d samples of the new families identical in the final scrapes and in prometheus", len(scraped))

	// With priority scheduling on, finished-request families carry the
	// request's priority.
	if len(found["vllm:request_priority"]) > 0 {
		withPriority := e.prom.mustQuery(t, `count by (__name__) ({__name__=~"vllm:.+", __name__!~"vllm:(request_priority|scheduler_policy_info).*", path="direct", priority!=""})`, at)
		if len(withPriority) == 0 {
			t.Errorf("vllm:request_priority exported, but no finished-request family carries a priority label")
		}
	}

	// Invariants of the simulation.
	cached := e.byEngine(t, `sum by (role, engine) (vllm:prompt_tokens_cached_total{path="direct"})`, at)
	byTier := e.byEngine(t, `sum by (role, engine) (vllm:prompt_tokens_cached_by_source_total{path="direct"})`, at)
	success := e.byEngine(t, `sum by (role, engine) (vllm:request_success_total{path="direct"})`, at)
	preemptedRequests := e.byEngine(t, `sum by (role, engine) (vllm:request_num_preemptions_count{path="direct"})`, at)
	preemptions := e.byEngine(t, `sum by (role, engine) (vllm:num_preemptions_total{path="direct"})`, at)
	perRequestPreemptions := e.byEngine(t, `sum by (role, engine) (vllm:request_num_preemptions_sum{path="direct"})`, at)
	for _, k := range engineKeys() {
		if c, b := cached[k], byTier[k]; c != b {
			t.Errorf("%s: prompt_tokens_cached_total %g, sum over tiers of prompt_tokens_cached_by_source %g", k, c, b)
		}
		if s, p := success[k], preemptedRequests[k]; s != p || s == 0 {
			t.Errorf("%s: request_num_preemptions_count %g, request_success_total over reasons %g: want equal and > 0", k, p, s)
		}
		// After the drain every preemption belongs to a finished request.
		if n, r := preemptions[k], perRequestPreemptions[k]; n != r {
			t.Errorf("%s: num_preemptions_total %g, sum of request_num_preemptions %g", k, n, r)
		}
	}
	sources := map[string][]string{}
	for _, se := range e.prom.mustQuery(t, `vllm:prompt_tokens_cached_by_source_total{path="direct"}`, at) {
		sources[engineKey(se)] = append(sources[engineKey(se)], se.labels["source"])
	}
	for _, k := range engineKeys() {
		if !sameSet(sources[k], tierSources) {
			t.Errorf("%s: prompt_tokens_cached_by_source sources %v, want %v", k, sources[k], tierSources)
		}
	}
	p2p := e.byEngine(t, `sum by (role, engine) (vllm:prompt_tokens_cached_by_source_total{path="direct", source="p2p"})`, at)
	var decodeP2P float64
	for k, v := range p2p {
		if strings.HasPrefix(k, "decode/") {
			decodeP2P += v
		}
	}
	if decodeP2P <= 0 {
		t.Errorf("decode: prompt_tokens_cached_by_source{source=\"p2p\"} %g, want > 0: the KV handed over by prefill", decodeP2P)
	}
	t.Logf("cached prompt tokens by tier: %v; p2p on decode %g", byTier, decodeP2P)
	for _, fam := range []string{"vllm:estimated_flops_per_gpu_total", "vllm:estimated_read_bytes_per_gpu_total", "vllm:estimated_write_bytes_per_gpu_total"} {
		v := e.byEngine(t, fmt.Sprintf(`sum by (role, engine) (%s{path="direct"})`, fam), at)
		for _, k := range engineKeys() {
			if !(v[k] > 0) {
				t.Errorf("%s: %s %g, want > 0", k, fam, v[k])
			}
		}
	}
	for _, fam := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds", "process_open_fds", "process_max_fds"} {
		instances := e.prom.mustQuery(t, fmt.Sprintf(`count by (instance) (%s{path="direct"} > 0)`, fam), at)
		if len(instances) != 2 {
			t.Errorf("%s > 0 on %d of 2 instances in prometheus", fam, len(instances))
		}
	}
}

// roleOf is the role of a direct-path sample: its role label, or the
// instance whose address Prometheus scraped it from (process_* carry no
// role).
func roleOf(e *env, se series) string {
	if r := se.labels["role"]; r != "" {
		return r
	}
	for role, u := range e.urls {
		if strings.Contains(u, "//"+se.labels["instance"]+"/") {
			return role
		}
	}
	return ""
}

// zeroHistogramSamples returns the identities of the samples (buckets, sum,
// count) of the final scrapes' histogram series whose _count is 0: the
// Prometheus handler completes these at zero, and OpenTelemetry, which
// cannot create a histogram point without a measurement, does not send
// them over OTLP.
func zeroHistogramSamples(final map[string]*scrape) map[string]bool {
	zero := map[string]bool{}
	for _, s := range final {
		for _, se := range s.series {
			if fam, typ := s.family(se.name); typ == "histogram" && se.name == fam+"_count" && se.value == 0 {
				zero[groupKey(fam, se)] = true
			}
		}
	}
	ids := map[string]bool{}
	for _, s := range final {
		for _, se := range s.series {
			if fam, typ := s.family(se.name); typ == "histogram" && zero[groupKey(fam, se)] {
				ids[identity(se)] = true
			}
		}
	}
	return ids
}
