package mixin

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// exported are the families the rules and dashboards read: vLLM's, the
// HTTP server families, the GenAI client families and the usage families,
// as views exports them.
var exported = slices.Concat(views.Families(), views.HTTPFamilies(), views.ClientFamilies(), views.UsageFamilies())

// family returns the family exported from the instrument named name (an
// instrument.Name* constant); of the two families of vllm.prompt_tokens
// and vllm.prompt_tokens_cached, the total, without the source label.
func family(name string) views.Family { return findFamily(name, false) }

// familyBySource returns the by-source family of vllm.prompt_tokens or
// vllm.prompt_tokens_cached.
func familyBySource(name string) views.Family { return findFamily(name, true) }

// findFamily returns the one family of instrument name with or without the
// source label. A name the views do not export is a bug of this package,
// which every test finds: it panics.
func findFamily(name string, bySource bool) views.Family {
	var found []views.Family
	for _, f := range exported {
		if f.Instrument.Name == name && slices.Contains(f.Labels, instrument.KeySource) == bySource {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		panic(fmt.Sprintf("mixin: %d families of instrument %s (by source: %v), want 1", len(found), name, bySource))
	}
	return found[0]
}

// label is an attribute key as a Prometheus label.
func label(key string) string { return views.ScrapeLabel(key) }

// selector writes a series selector: name with the non-empty matchers.
func selector(name string, matchers ...string) string {
	var ms []string
	for _, m := range matchers {
		if m != "" {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return name
	}
	return name + "{" + strings.Join(ms, ", ") + "}"
}

// eq is the matcher label="value".
func eq(label, value string) string { return label + "=" + strconv.Quote(value) }

// grouping is the clause of an aggregation: by some labels, or over
// every series. There is no without: a label it does not name (priority,
// a LoRA adapter, one a user adds) would split the result.
type grouping struct {
	labels []string
}

func by(labels ...string) grouping { return grouping{labels: labels} }

// aggregate applies op (sum, max, ...) to expr with the grouping.
func (g grouping) aggregate(op, expr string) string {
	if len(g.labels) > 0 {
		return fmt.Sprintf("%s by (%s) (%s)", op, strings.Join(g.labels, ", "), expr)
	}
	return op + "(" + expr + ")"
}

// also returns g with more labels kept.
func (g grouping) also(labels ...string) grouping {
	return grouping{labels: slices.Concat(g.labels, labels)}
}

// buckets returns g as the grouping of a histogram's buckets: it keeps le
// too.
func (g grouping) buckets() grouping { return by(slices.Concat([]string{"le"}, g.labels)...) }

// query is where an expression reads its series: the extra matchers and
// the rate window.
type query struct {
	matchers []string
	window   string
}

// with returns q with more matchers.
func (q query) with(matchers ...string) query {
	return query{matchers: slices.Concat(q.matchers, matchers), window: q.window}
}

// sel selects the series of name.
func (q query) sel(name string) string { return selector(name, q.matchers...) }

// rate is the per-second rate of a counter series, or of a histogram's
// series of the given suffix (_bucket, _sum, _count).
func (q query) rate(name string) string { return "rate(" + q.sel(name) + "[" + q.window + "])" }

// sumRate sums the rate of a counter family with g.
func (q query) sumRate(f views.Family, g grouping) string { return q.sumRateOf(f.ScrapeName(), g) }

// sumRateOf sums the rate of the series of name (a histogram's _sum,
// _count or _bucket) with g.
func (q query) sumRateOf(name string, g grouping) string { return g.aggregate("sum", q.rate(name)) }

// increase is the increase of the series of name over window w.
func (q query) increase(name, w string) string { return "increase(" + q.sel(name) + "[" + w + "])" }

// sumIncrease sums the increase of a counter family over window w with g.
func (q query) sumIncrease(f views.Family, w string, g grouping) string {
	return g.aggregate("sum", q.increase(f.ScrapeName(), w))
}

// quantile is the q quantile of a histogram family over the window.
func (q query) quantile(quant float64, f views.Family, g grouping) string {
	return fmt.Sprintf("histogram_quantile(%s, %s)", number(quant), g.buckets().aggregate("sum", q.rate(f.ScrapeName()+"_bucket")))
}

// mean is a histogram family's mean observation over the window.
func (q query) mean(f views.Family, g grouping) string {
	return q.sumRateOf(f.ScrapeName()+"_sum", g) + " / " + q.sumRateOf(f.ScrapeName()+"_count", g)
}

// number writes a float as PromQL and YAML read it.
func number(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// leText is a bucket bound as vLLM's Python client writes it: 1.0, 0.5.
func leText(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return number(v)
}

// leMatcher selects the bucket of bound v however the bound is written:
// vLLM and Prometheus 3's scrape write 1.0, Go clients and the OTLP
// translation 1.
func leMatcher(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf(`le=~"%s|%s"`, number(v), strings.ReplaceAll(leText(v), ".", `\\.`))
	}
	return eq("le", leText(v))
}

// percent writes a share as a percentage for a human, to a millionth of
// a percent: 0.05 is 5%, 1 - 0.99 is 1%.
func percent(v float64) string { return number(math.Round(v*1e8)/1e6) + "%" }
