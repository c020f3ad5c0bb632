// Command events simulates an LLM engine without a scheduler step, as many Go
// engines and simulators are: one goroutine per request (per sequence with
// n = 2), each token produced on a timer. It records through
// instrument.Engine.Events, which forms one step per window of the engine's
// time per output token, sets its gauges when they change
// (Engine.SetRunning, SetWaiting, SetKVCacheUsage) and adds each prefix cache
// lookup (Engine.AddPrefixCache), and serves vLLM's /metrics.
//
// Requests arrive before they are tokenized (their Timeline starts without a
// prompt length), share system prompts that hit the prefix cache, wait for
// one of -max-running slots, and stop or reach max_tokens; some fail at
// tokenization (finish_reason error), and some clients give up (abort),
// their abort reported from the client's own goroutine while the request's
// goroutine may still be emitting tokens.
//
//	go run ./example/events
//	curl -s http://127.0.0.1:9403/metrics | grep -E 'iteration_tokens_total_(sum|count)|prompt_tokens_by_source|generation_tokens_total'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

const maxModelLen = 8192

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "events:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	listen     string
	model      string
	requests   int     // 0: until interrupted
	rate       float64 // requests per second
	seed       uint64
	maxRunning int
	itl        time.Duration // time per output token
	window     time.Duration // Events' window; 0: itl
	abort      float64       // share of clients that give up
	fail       float64       // share of sequences that fail at tokenization
	n2         float64       // share of requests with n = 2
	kvTokens   int64         // KV cache capacity in tokens
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:9403", "listen address of /metrics")
	fs.StringVar(&c.model, "model", "meta-llama/Llama-3.1-8B-Instruct", "served model name")
	fs.IntVar(&c.requests, "requests", 0, "requests to send, then keep serving /metrics (0: until interrupted)")
	fs.Float64Var(&c.rate, "rate", 8, "requests per second")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed of the workload")
	fs.IntVar(&c.maxRunning, "max-running", 16, "sequences running at once (vLLM's max_num_seqs); the others wait")
	fs.DurationVar(&c.itl, "itl", 20*time.Millisecond, "time per output token")
	fs.DurationVar(&c.window, "window", 0, "window of instrument.WithEventWindow (0: -itl)")
	fs.Float64Var(&c.abort, "abort", 0.05, "share of clients that give up before the end")
	fs.Float64Var(&c.fail, "fail", 0.02, "share of sequences that fail at tokenization")
	fs.Float64Var(&c.n2, "n2", 0.1, "share of requests sampled twice (n = 2)")
	fs.Int64Var(&c.kvTokens, "kv-tokens", 65536, "KV cache capacity in tokens")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.window == 0 {
		c.window = c.itl
	}
	if c.rate <= 0 || c.maxRunning < 1 || c.itl <= 0 || c.kvTokens < 1 {
		return c, errors.New("-rate, -max-running, -itl and -kv-tokens must be positive")
	}
	return c, nil
}

// run serves /metrics and the simulated engine until ctx is done: it prints
// the /metrics URL, and "served N requests (M sequences)" once the
// -requests are all finished.
func run(ctx context.Context, args []string, stdout io.Writer) (err error) {
	c, err := parse(args)
	if err != nil {
		return err
	}
	provider, err := exporters.Setup(ctx, exporters.WithServiceName("infermetrics-example-events"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, provider.Shutdown(context.Background())) }()
	rec, err := instrument.NewRecorder(
		instrument.WithMeterProvider(provider.MeterProvider()),
		instrument.WithModelName(c.model),
		instrument.WithMaxModelLen(maxModelLen),
		instrument.WithEventWindow(c.window),
	)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rec.Close()) }() // records the last window, before the provider's Shutdown
	e, err := rec.Engine(0)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", provider.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	fmt.Fprintf(stdout, "metrics: http://%s/metrics\n", ln.Addr())

	eng := newEngine(e, c)
	requests, sequences := eng.load(ctx, c)
	if ctx.Err() == nil {
		eng.events.Flush() // the last window, now rather than at its end
		fmt.Fprintf(stdout, "served %d requests (%d sequences)\n", requests, sequences)
	}
	<-ctx.Done()
	return nil
}

// request is one client request: its shape and what befalls each sequence.
type request struct {
	prompt    int64
	system    int // shared system prompt, or -1
	systemLen int64
	output    int64 // tokens before a stop token
	maxTokens int64
	patience  time.Duration // the client gives up after it; 0: never
	fails     []bool        // per sequence: fails at tokenization
}

// systemPrompts are the lengths of the shared system prompts.
var systemPrompts = []int64{256, 512, 1024, 128}

func draw(rng *rand.Rand, c config) request {
	r := request{system: -1, maxTokens: 48, fails: make([]bool, 1)}
	user := int64(math.Round(200 * math.Exp(0.8*rng.NormFloat64())))
	r.prompt = min(max(user, 4), 2048)
	if rng.Float64() < 0.7 {
		r.system = rng.IntN(len(systemPrompts))
		r.systemLen = systemPrompts[r.system]
		r.prompt += r.systemLen
	}
	r.output = 8 + rng.Int64N(56)
	if rng.Float64() < c.n2 {
		r.fails = make([]bool, 2)
	}
	for i := range r.fails {
		r.fails[i] = rng.Float64() < c.fail
	}
	if rng.Float64() < c.abort {
		r.patience = time.Duration(1+rng.IntN(200)) * time.Millisecond
	}
	return r
}

// engine runs each sequence on a goroutine of its own, and keeps the counts
// its gauges show.
type engine struct {
	rec        *instrument.Engine
	events     *instrument.Events
	slots      chan struct{}
	itl        time.Duration
	kvCapacity int64

	mu                        sync.Mutex // the counts and their gauges change together
	running, waiting, kvInUse int64
	cached                    map[int]bool // system prompts in the prefix cache
}

func newEngine(e *instrument.Engine, c config) *engine {
	return &engine{rec: e, events: e.Events(), slots: make(chan struct{}, c.maxRunning), itl: c.itl,
		kvCapacity: c.kvTokens, cached: map[int]bool{}}
}

// load sends the requests of the workload and waits for every sequence.
func (eng *engine) load(ctx context.Context, c config) (requests, sequences int) {
	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x9e3779b97f4a7c15))
	var wg sync.WaitGroup
	defer wg.Wait()
	for c.requests == 0 || requests < c.requests {
		if !sleep(ctx, time.Duration(rng.ExpFloat64()/c.rate*float64(time.Second))) {
			return requests, sequences
		}
		r := draw(rng, c)
		// The prompt length is not known at the arrival: each sequence's
		// goroutine tokenizes it.
		tls := stats.NewTimelines(stats.Request{Arrival: time.Now(), MaxTokens: r.maxTokens, N: int64(len(r.fails))})
		for i, tl := range tls {
			wg.Go(func() { eng.serve(ctx, tl, r, r.fails[i]) })
		}
		requests++
		sequences += len(tls)
	}
	return requests, sequences
}

// serve is one sequence's life: queued, tokenized, waiting for a slot,
// scheduled with its prefix cache hits, prefilled, one token per -itl.
func (eng *engine) serve(ctx context.Context, tl *stats.Timeline, r request, fails bool) {
	ev := eng.events
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A sequence that ends early (its client gave up, the engine shuts
	// down) is aborted; one that finished already drops this Finish.
	defer func() { ev.Finish(tl, time.Now(), stats.FinishAbort) }()
	if r.patience > 0 {
		// The client's goroutine ends the request, whatever the request's
		// goroutine is doing: Events drops its later events.
		giveUp := time.AfterFunc(r.patience, func() {
			ev.Finish(tl, time.Now(), stats.FinishAbort)
			cancel()
		})
		defer giveUp.Stop()
	}
	ev.Queued(tl, time.Now())
	eng.change(0, 1, 0)
	if !sleep(ctx, time.Millisecond+time.Duration(r.prompt)*time.Microsecond) { // tokenization
		eng.change(0, -1, 0)
		return
	}
	if fails {
		ev.Finish(tl, time.Now(), stats.FinishError)
		eng.change(0, -1, 0)
		return
	}
	ev.Tokenized(tl, time.Now(), r.prompt)
	select {
	case eng.slots <- struct{}{}:
	case <-ctx.Done():
		eng.change(0, -1, 0)
		return
	}
	defer func() { <-eng.slots }()
	hit := eng.lookup(r)
	eng.rec.AddPrefixCache(stats.CacheQueries{Queries: r.prompt, Hits: hit})
	ev.Scheduled(tl, time.Now(), hit, 0)
	eng.change(1, -1, r.prompt)
	held := r.prompt
	defer func() { eng.change(-1, 0, -held) }()

	if !sleep(ctx, time.Millisecond+time.Duration(r.prompt-hit)*10*time.Microsecond) { // prefill
		return
	}
	out := min(r.output, r.maxTokens)
	for i := range out {
		if i > 0 && !sleep(ctx, eng.itl) {
			return
		}
		ev.Output(tl, time.Now(), 1)
		eng.change(0, 0, 1)
		held++
	}
	reason := stats.FinishStop
	if out == r.maxTokens {
		reason = stats.FinishLength
	}
	ev.Finish(tl, time.Now(), reason)
}

// lookup returns the prompt tokens r finds in the prefix cache: its system
// prompt, once a request has computed it.
func (eng *engine) lookup(r request) int64 {
	if r.system < 0 {
		return 0
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.cached[r.system] {
		return r.systemLen
	}
	eng.cached[r.system] = true
	return 0
}

// change adds to the running and waiting sequences and the KV cache tokens
// in use, and sets the gauges that changed.
func (eng *engine) change(running, waiting, kv int64) {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	eng.running += running
	eng.waiting += waiting
	eng.kvInUse += kv
	if running != 0 {
		eng.rec.SetRunning(eng.running)
	}
	if waiting != 0 {
		eng.rec.SetWaiting(eng.waiting, 0)
	}
	if kv != 0 {
		eng.rec.SetKVCacheUsage(min(float64(eng.kvInUse)/float64(eng.kvCapacity), 1))
	}
}

// sleep waits for d, or returns false when ctx is done first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
