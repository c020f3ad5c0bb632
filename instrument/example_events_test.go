package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// An engine without a scheduler step: one goroutine per request, which
// reports each event of its request as it happens. Events gathers them into
// one step per 10 ms window; no goroutine of the engine ends the windows.
func ExampleEngine_Events() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	vllmViews, err := views.VLLM()
	if err != nil {
		log.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vllmViews...))
	defer provider.Shutdown(ctx)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(provider), instrument.WithModelName("llama-3.1-8b"),
		instrument.WithEventWindow(10*time.Millisecond)) // about the engine's time per output token
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Close() // records the last window
	engine, err := rec.Engine(0)
	if err != nil {
		log.Fatal(err)
	}
	events := engine.Events()

	// serve is one request's goroutine: queued at its arrival, tokenized,
	// scheduled with the prefix cache's hits, then one token per output.
	serve := func(prompt, cached, outputs int64) {
		arrival := time.Now()
		req := stats.NewTimeline(stats.Request{Arrival: arrival}) // prompt length not known yet
		events.Queued(req, arrival)
		events.Tokenized(req, time.Now(), prompt)
		engine.AddPrefixCache(stats.CacheQueries{Queries: prompt, Hits: cached})
		events.Scheduled(req, time.Now(), cached, 0)
		for range outputs {
			events.Output(req, time.Now(), 1)
		}
		events.Finish(req, time.Now(), stats.FinishStop)
	}
	var wg sync.WaitGroup
	wg.Go(func() { serve(600, 200, 20) })
	wg.Go(func() { serve(100, 0, 5) })
	wg.Go(func() { serve(300, 256, 12) })
	wg.Wait()
	events.Flush() // the open window, now, to read the counters below

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, s := range []string{"local_compute", "local_cache_hit"} {
		fmt.Printf("prompt tokens from %s: %d\n", s, counterValue(rm, "vllm:prompt_tokens_by_source", "source", s))
	}
	fmt.Println("generation tokens:", counterValue(rm, "vllm:generation_tokens"))
	_, sum := histogramOf(rm, "vllm:iteration_tokens_total")
	fmt.Println("iteration tokens, over all windows:", sum)
	fmt.Println("prefix cache hits:", counterValue(rm, "vllm:prefix_cache_hits"))
	fmt.Println("requests stopped:", counterValue(rm, "vllm:request_success", "finished_reason", "stop"))
	// Output:
	// prompt tokens from local_compute: 544
	// prompt tokens from local_cache_hit: 456
	// generation tokens: 37
	// iteration tokens, over all windows: 581
	// prefix cache hits: 456
	// requests stopped: 3
}

// An engine whose time per output token changes at run time (a simulator's
// new configuration, another model loaded) changes the window with it: the
// open window keeps its end, the next one lasts the new length.
func ExampleEvents_SetWindow() {
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(sdkmetric.NewMeterProvider()),
		instrument.WithModelName("llama-3.1-8b"), instrument.WithEventWindow(10*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Close()
	engine, err := rec.Engine(0)
	if err != nil {
		log.Fatal(err)
	}
	events := engine.Events()

	// The engine's configuration now takes 25 ms per output token.
	if err := events.SetWindow(25 * time.Millisecond); err != nil {
		log.Fatal(err)
	}
	// A window beyond MaxEventWindow is refused; the window stays 25 ms.
	err = events.SetWindow(2 * time.Minute)
	fmt.Println("2 min refused:", errors.Is(err, instrument.ErrConfig))
	// Output:
	// 2 min refused: true
}
