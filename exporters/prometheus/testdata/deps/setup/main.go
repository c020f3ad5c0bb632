// Command setup is the same engine on exporters.Setup, which links OTLP
// (docs/install.md: its dependency cost).
package main

import (
	"context"
	"log"
	"net/http"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
)

func main() {
	ctx := context.Background()
	p, err := exporters.Setup(ctx)
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
