package exporters_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
)

// scrapeEngineCounts are the engine counts of BenchmarkScrapeEngines: a
// gateway recording many models reaches series counts an engine never does.
var scrapeEngineCounts = []int{64, 256, 1024}

// BenchmarkScrapeEngines serves /metrics of n engines with every family
// (benchvariants.ScrapeSteps recorded on each) through our Prometheus reader
// and handler, which completes every engine's start-up series, and through
// native client_golang with the same series, in the same run: the
// completion must stay linear in the engines.
func BenchmarkScrapeEngines(b *testing.B) {
	for _, n := range scrapeEngineCounts {
		ranks := ranksUpTo(n)
		b.Run(fmt.Sprintf("engines=%d/infermetrics", n), func(b *testing.B) {
			p, err := exporters.NewPrometheus()
			if err != nil {
				b.Fatal(err)
			}
			mp := benchMeterProvider(b, sdkmetric.WithReader(p.Reader), sdkmetric.WithCardinalityLimit(1<<20))
			rec, err := instrument.NewRecorder(benchvariants.RecorderOptions(p.Wrap(mp), ranks...)...)
			if err != nil {
				b.Fatal(err)
			}
			populateRanks(b, ranks, func(rank int) engineRecorder {
				e, err := rec.Engine(rank)
				if err != nil {
					b.Fatal(err)
				}
				return oursRecorder{e}
			})
			benchScrape(b, p.Handler)
		})
		b.Run(fmt.Sprintf("engines=%d/client_golang", n), func(b *testing.B) {
			c, err := benchvariants.NewClientGolang(ranks...)
			if err != nil {
				b.Fatal(err)
			}
			populateRanks(b, ranks, func(rank int) engineRecorder { return promRecorder{c.Engine(rank)} })
			benchScrape(b, promhttp.HandlerFor(c.Registry, promhttp.HandlerOpts{}))
		})
	}
}
