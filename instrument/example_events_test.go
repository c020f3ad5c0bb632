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
	_, engine, done := exampleRecorder(instrument.WithEventWindow(10 * time.Millisecond))
	defer done()
	events := engine.Events()

	// The engine's configuration now takes 25 ms per output token.
	if err := events.SetWindow(25 * time.Millisecond); err != nil {
		log.Fatal(err)
	}
	// A window beyond MaxEventWindow is refused; the window stays 25 ms.
	err := events.SetWindow(2 * time.Minute)
	fmt.Println("2 min refused:", errors.Is(err, instrument.ErrConfig))
	// Output:
	// 2 min refused: true
}

// A text completion with several prompts and n choices each: vLLM's
// completions endpoint makes one engine request per prompt, each with the
// request's n, so each prompt is a parent of n children of its own. Here 2
// prompts (12 and 30 tokens) with n = 3: 6 finished requests, each counting
// its prompt; request_params_n observed once per prompt.
func ExampleEvents_severalPrompts() {
	reader, engine, done := exampleRecorder()
	defer done()
	events := engine.Events()

	const n = 3
	arrival := time.Now()
	for _, prompt := range []int64{12, 30} {
		// One parent per prompt: its n children, each with the prompt.
		children := stats.NewTimelines(stats.Request{Arrival: arrival, PromptTokens: prompt, MaxTokens: 16, N: n})
		for i, child := range children {
			at := arrival.Add(time.Millisecond)
			events.Scheduled(child, at, 0, 0)
			for range 4 + i { // the children generate 4, 5 and 6 tokens
				at = at.Add(time.Millisecond)
				events.Output(child, at, 1)
			}
			events.Finish(child, at, stats.FinishStop)
		}
	}
	events.Flush()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	fmt.Println("requests finished:", counterValue(rm, "vllm:request_success", "finished_reason", "stop"))
	fmt.Println("prompt tokens:", counterValue(rm, "vllm:prompt_tokens"))
	count, sum := histogramOf(rm, "vllm:request_prompt_tokens")
	fmt.Printf("request_prompt_tokens: %d observations, sum %d\n", count, sum)
	count, sum = histogramOf(rm, "vllm:request_params_n")
	fmt.Printf("request_params_n: %d observations, sum %d\n", count, sum)
	count, sum = histogramOf(rm, "vllm:request_max_num_generation_tokens")
	fmt.Printf("request_max_num_generation_tokens: %d observations, sum %d\n", count, sum)
	fmt.Println("generation tokens:", counterValue(rm, "vllm:generation_tokens"))
	// Output:
	// requests finished: 6
	// prompt tokens: 126
	// request_prompt_tokens: 6 observations, sum 126
	// request_params_n: 2 observations, sum 6
	// request_max_num_generation_tokens: 2 observations, sum 12
	// generation tokens: 30
}

// exampleRecorder is the set-up of the Events examples: a Recorder of
// llama-3.1-8b on a MeterProvider with vLLM's views that reader reads, and
// its engine 0; done closes the Recorder (its last window recorded), then
// the provider.
func exampleRecorder(opts ...instrument.Option) (reader *sdkmetric.ManualReader, engine *instrument.Engine, done func()) {
	reader = sdkmetric.NewManualReader()
	vllmViews, err := views.VLLM()
	if err != nil {
		log.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vllmViews...))
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(provider),
		instrument.WithModelName("llama-3.1-8b")}, opts...)...)
	if err != nil {
		log.Fatal(err)
	}
	if engine, err = rec.Engine(0); err != nil {
		log.Fatal(err)
	}
	return reader, engine, func() {
		_ = rec.Close()
		_ = provider.Shutdown(context.Background())
	}
}
