// Command prom is an engine's Prometheus-only set-up: instrument, views and
// prometheus.NewProvider (docs/install.md: its dependency cost).
package main

import (
	"context"
	"log"
	"net/http"

	"github.com/infermetrics/infermetrics/exporters/prometheus"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

func main() {
	ctx := context.Background()
	p, err := prometheus.NewProvider(ctx, prometheus.WithViewOptions(views.WithVersion("0.10")))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Shutdown(ctx)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"))
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Close()
	http.Handle("/metrics", p.Handler())
	log.Fatal(http.ListenAndServe("localhost:8000", nil))
}
