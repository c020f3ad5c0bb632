package mixin

import (
	"fmt"

	"github.com/infermetrics/infermetrics/views"
)

// sloPanel is one latency objective of the SLO panels: the dashboard
// variable of its latency bound, which a bucket boundary of family takes
// (default the Config's), and the share of observations within it.
type sloPanel struct {
	name, variable, title, what string
	family                      views.Family
	slo                         SLO
}

// sloPanels are the TTFT and ITL objectives: requests whose first token
// came within the bound, gaps between two tokens within the bound.
func sloPanels(c Config) []sloPanel {
	return []sloPanel{
		{name: "TTFT", variable: "ttft_seconds", title: "TTFT objective (s)", what: "requests whose first token came", family: ttft, slo: c.TTFT},
		{name: "ITL", variable: "itl_seconds", title: "ITL objective (s)", what: "gaps between two tokens of a request", family: itl, slo: c.ITL},
	}
}

// sloVariables are the custom variables of the SLO panels' bounds.
func sloVariables(c Config) []variable {
	var out []variable
	for _, p := range sloPanels(c) {
		out = append(out, variable{name: p.variable, title: p.title, options: p.family.Buckets, current: p.slo.Seconds})
	}
	return out
}

// within is the share of p's observations within its bound over window,
// in s. The bucket's le is written 1 or 1.0 depending on the scrape (see
// leMatcher): the matcher takes both.
func (p sloPanel) within(s scope, window string) string {
	bound := s.with(`le=~"$`+p.variable+`(\\.0)?"`).of(p.family, window).sumRateOf(p.family.ScrapeName()+"_bucket", by())
	return bound + " / " + s.of(p.family, window).sumRateOf(p.family.ScrapeName()+"_count", by())
}

// sloRow is the row of the SLO panels in s: for TTFT and ITL, the share
// within the objective's bound over time, over the dashboard's range, and
// the error budget left over that range (1 is all of it, below 0 spent).
func sloRow(c Config, s scope) boardRow {
	var stats, series []panel
	for _, p := range sloPanels(c) {
		bound := "$" + p.variable
		objective := number(p.slo.Objective)
		stats = append(stats,
			panel{title: fmt.Sprintf("%s within %s s over the range", p.name, bound), unit: "percentunit", width: 6, stat: true,
				description: fmt.Sprintf("The share of %s within the objective's bound (%s, $%s, a bucket boundary; default the Config's %s s) over the dashboard's time range; the objective is %s.",
					p.what, p.family.ScrapeName(), p.variable, number(p.slo.Seconds), percent(p.slo.Objective)),
				targets: []target{{p.within(s, dashboardRange), "attainment"}}},
			panel{title: fmt.Sprintf("%s error budget left over the range", p.name), unit: "percentunit", width: 6, stat: true,
				description: fmt.Sprintf("The share of the error budget (%s of %s may miss $%s) left over the dashboard's time range: 1 - misses / budget; 100%% is untouched, 0 spent, below 0 overspent.",
					percent(1-p.slo.Objective), p.what, p.variable),
				targets: []target{{fmt.Sprintf("1 - (1 - (%s)) / (1 - %s)", p.within(s, dashboardRange), objective), "budget left"}}})
		series = append(series, panel{title: fmt.Sprintf("%s within %s s", p.name, bound), unit: "percentunit", width: 12,
			description: fmt.Sprintf("The share of %s within $%s over time, against the objective %s.", p.what, p.variable, percent(p.slo.Objective)),
			targets:     []target{{p.within(s, rateInterval), "within " + bound + " s"}, {"vector(" + objective + ")", "objective"}}})
	}
	return boardRow{title: "Latency SLOs", panels: append(stats, series...)}
}
