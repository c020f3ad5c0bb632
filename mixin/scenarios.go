package mixin

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// Every alert's unit tests hold, beside its own scenarios, two derived
// from its first firing one, so that no alert splits a page by a label
// the rules should sum away or mixes deployments:
//   - the priority label present: every series of a family that carries
//     it under priority scheduling (views' Instrument.Priority, vLLM's
//     finished-request families) split into two priorities, half each
//     (or, for an alert that reads none, such series beside), and the
//     alert still fires exactly as before: once per model and deployment;
//   - two deployments: the series of its first quiet scenario beside,
//     under another deployment, and only the faulty one fires;
//   - outside Kubernetes: the series without the job labels a plain
//     Prometheus lacks (cluster, namespace: every one but the varied one
//     and those of the selector), and the alert fires all the same, its
//     description naming the deployment by the labels it has.

// Names of the derived scenarios, which TestEveryAlertHasDerivedScenarios
// looks for.
const (
	priorityScenario = "priority label present"
	twoDeployments   = "two deployments, one at fault"
	plainScenario    = "outside Kubernetes, without"
)

// priorities are the priority label values of the derived scenario.
var priorities = []string{"0", "1"}

// otherDeployment is the value of the varied job label of the quiet
// deployment of the two-deployment scenario.
const otherDeployment = testJob + "-b"

// withDerived returns a with the derived scenarios; varied is the label
// whose value tells the two deployments apart.
func (r rules) withDerived(a alert, engine0 labelSet, varied string, sel labelSet) alert {
	fi := slices.IndexFunc(a.scenarios, func(s scenario) bool { return len(s.firing) > 0 })
	qi := slices.IndexFunc(a.scenarios, func(s scenario) bool { return len(s.firing) == 0 })
	if fi < 0 || qi < 0 {
		panic("mixin: alert " + a.name + " needs a firing and a quiet scenario")
	}
	faulty, quiet := a.scenarios[fi], a.scenarios[qi]
	prio := scenario{name: priorityScenario + " (" + faulty.name + ")", at: faulty.at, firing: faulty.firing}
	split := false
	for _, s := range faulty.series {
		if !priorityFamily(s.series) {
			prio.series = append(prio.series, s)
			continue
		}
		split = true
		for _, p := range priorities {
			prio.series = append(prio.series, inputSeries{withLabel(s.series, instrument.KeyPriority, p),
				scaleValues(s.values, 1/float64(len(priorities)))})
		}
	}
	if !split {
		n := int(faulty.at/time.Minute) + 5
		for _, p := range priorities {
			prio.series = append(prio.series, inputSeries{engine0.with(labelPair{finishedReason, stats.FinishStop.String()},
				labelPair{instrument.KeyPriority, p}).series(requestSuccess.ScrapeName()), ramp(0, 30, n)})
		}
	}
	two := scenario{name: twoDeployments + " (" + faulty.name + ", " + quiet.name + ")", at: max(faulty.at, quiet.at),
		firing: faulty.firing, series: slices.Clone(faulty.series)}
	from, to := eq(varied, testJob), eq(varied, otherDeployment)
	for _, s := range quiet.series {
		if !strings.Contains(s.series, from) {
			panic("mixin: alert " + a.name + ": a quiet series without " + from + ": " + s.series)
		}
		two.series = append(two.series, inputSeries{strings.Replace(s.series, from, to, 1), s.values})
	}
	a.scenarios = append(a.scenarios, prio, two)
	if absent := r.plainAbsent(varied, sel); len(absent) > 0 {
		plain := scenario{name: plainScenario + " " + strings.Join(absent, ", ") + " (" + faulty.name + ")", at: faulty.at}
		for _, s := range faulty.series {
			for _, l := range engine0 {
				if slices.Contains(absent, l.name) {
					s.series = withoutLabel(s.series, eq(l.name, l.value))
				}
			}
			plain.series = append(plain.series, s)
		}
		for _, f := range faulty.firing {
			f.labels = slices.DeleteFunc(slices.Clone(f.labels), func(p labelPair) bool { return slices.Contains(absent, p.name) })
			plain.firing = append(plain.firing, f)
		}
		a.scenarios = append(a.scenarios, plain)
	}
	return a
}

// plainAbsent are the job labels the outside-Kubernetes scenario leaves
// out: those before varied (the last job label the selector does not set)
// that the selector does not set either.
func (r rules) plainAbsent(varied string, sel labelSet) []string {
	return slices.DeleteFunc(slices.Clone(r.JobLabels[:slices.Index(r.JobLabels, varied)]), func(l string) bool {
		return slices.ContainsFunc(sel, func(m labelPair) bool { return m.name == l })
	})
}

// withoutLabel removes the matcher m (label="value") from a test series's
// selector.
func withoutLabel(series, m string) string {
	name, rest, ok := strings.Cut(series, "{")
	if !ok {
		return series
	}
	ms := strings.Split(strings.TrimSuffix(rest, "}"), ", ")
	ms = slices.DeleteFunc(ms, func(x string) bool { return x == m })
	return selector(name, ms...)
}

// variedLabel is the job label the two-deployment scenarios vary: the
// last of JobLabels the selector does not set, job by default; "" when the
// selector sets them all.
func (r rules) variedLabel(sel labelSet) string {
	for _, l := range slices.Backward(r.JobLabels) {
		if !slices.ContainsFunc(sel, func(m labelPair) bool { return m.name == l }) {
			return l
		}
	}
	return ""
}

// priorityFamily reports whether a test series is of a family that
// carries the priority label under priority scheduling.
func priorityFamily(series string) bool {
	name, _, _ := strings.Cut(series, "{")
	for _, f := range exported {
		if !f.Instrument.Priority {
			continue
		}
		base := f.ScrapeName()
		if name == base || (f.Type == instrument.Histogram.String() &&
			slices.Contains([]string{base + "_bucket", base + "_count", base + "_sum"}, name)) {
			return true
		}
	}
	return false
}

// withLabel adds name="value" to a test series's selector.
func withLabel(series, name, value string) string {
	if strings.HasSuffix(series, "}") {
		return strings.TrimSuffix(series, "}") + ", " + eq(name, value) + "}"
	}
	return series + "{" + eq(name, value) + "}"
}

// valueTerm is one term of promtool's series notation: a, a+bxn, a-bxn,
// axn (a and b numbers), or _ and stale, which have no number.
var valueTerm = regexp.MustCompile(`^([-+]?[0-9.]+(?:e[-+]?[0-9]+)?)(?:([-+])([0-9.]+(?:e[-+]?[0-9]+)?))?(x[0-9]+)?$`)

// scaleValues multiplies every number of a series's values by f.
func scaleValues(values string, f float64) string {
	terms := strings.Fields(values)
	for i, t := range terms {
		m := valueTerm.FindStringSubmatch(t)
		if m == nil {
			continue // _, stale, _xn
		}
		terms[i] = scale(m[1], f)
		if m[2] != "" {
			terms[i] += m[2] + scale(m[3], f)
		}
		terms[i] += m[4]
	}
	return strings.Join(terms, " ")
}

// scale multiplies a number of the notation by f.
func scale(n string, f float64) string {
	v, err := strconv.ParseFloat(n, 64)
	if err != nil {
		panic(fmt.Sprintf("mixin: %q in a test series: %v", n, err))
	}
	return number(v * f)
}
