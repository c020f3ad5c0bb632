// Command minimal shows the few lines a service adds to the MeterProvider it
// already has: the vLLM views, a Recorder, and the Prometheus reader of
// package exporters/prometheus, whose scrape is vLLM's. It records one engine
// step of a prefill/decode decode node and prints the vLLM families it
// produced. It serves only a scrape, so it links no OTLP exporter and no gRPC.
//
//	go run ./example/minimal
package main

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters/prometheus"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "minimal:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	ctx := context.Background()

	// The service's own provider gets the Prometheus reader,
	scrape, err := prometheus.New()
	if err != nil {
		return err
	}
	// the vLLM views
	vllmViews, err := views.VLLM()
	if err != nil {
		return err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(scrape.Reader), sdkmetric.WithView(vllmViews...))
	defer provider.Shutdown(ctx)

	// and a Recorder, on the provider wrapped so that the scrape shows every
	// family at zero from start-up.
	recorder, err := instrument.NewRecorder(instrument.WithMeterProvider(scrape.Wrap(provider)), instrument.WithModelName("my-model"))
	if err != nil {
		return err
	}

	defer recorder.Close()

	// The engine drives one timeline per request and records each step. Here
	// a 512-token prompt arrives with its KV computed by a prefill node: all
	// of it but its last token, which this node computes, came through the KV
	// connector (stats.RemotePrefillCached). No recording call returns an
	// error: the Recorder counts and reports what it refuses.
	arrival := time.Now()
	req := stats.NewTimeline(stats.Request{Arrival: arrival, PromptTokens: 512})
	req.Queued(arrival)
	found, err := stats.RemotePrefillCached(512, 0)
	if err != nil {
		return err
	}
	req.ScheduledWith(arrival.Add(time.Millisecond), found)
	var step stats.Iteration
	step.Output(req, arrival.Add(20*time.Millisecond), 1)
	recorder.RecordIteration(ctx, 0, &step)

	srv := httptest.NewUnstartedServer(scrape.Handler)
	srv.Config.ReadHeaderTimeout = 10 * time.Second // never wait forever for a client's headers
	srv.Start()
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "vllm:prompt_tokens") || strings.HasPrefix(line, "vllm:iteration_tokens_total_sum") ||
			strings.HasPrefix(line, "vllm:generation_tokens_total") {
			fmt.Fprintln(w, line)
		}
	}
	return nil
}
