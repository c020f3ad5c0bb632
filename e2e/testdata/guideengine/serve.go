package main

import (
	"context"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// serve is what TestDashboardsPerPath (e2e/paths_test.go) adds to
// docs/engines.md's first program, as the line serve(mux, rec) at the end
// of its main, which the test builds from the guide as it is: the
// program's mux served on $GUIDE_ENGINE_LISTEN, and POST /load?requests=N,
// which records N requests on each of its two engines the way the guide
// records one (a stats.Timeline per request, a stats.Iteration per step,
// a stats.Scheduler per step) and returns when they are recorded.
func serve(mux *http.ServeMux, rec *instrument.Recorder) {
	var engines []*instrument.Engine
	for rank := range 2 {
		e, err := rec.Engine(rank)
		if err != nil {
			log.Fatal(err)
		}
		engines = append(engines, e)
	}
	mux.HandleFunc("POST /load", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.FormValue("requests"))
		if err != nil || n < 1 {
			http.Error(w, "requests: want a count above 0", http.StatusBadRequest)
			return
		}
		for i := range n {
			for rank, e := range engines {
				record(r.Context(), e, i, rank)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	l, err := net.Listen("tcp", os.Getenv("GUIDE_ENGINE_LISTEN"))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving http://%s/metrics", l.Addr())
	log.Fatal(http.Serve(l, mux))
}

// record records request i on engine e (of rank rank), its times set in
// the past so that they do not depend on the machine's speed: 600 prompt
// tokens, 200 of them found in the local prefix cache; 16 generated, the
// first 3 s after arrival for every fourth request (beyond the 2.5 s of
// the TTFT objective) and 0.2 s otherwise, then one every 50 ms but every
// eighth after 200 ms (beyond the ITL objective's 0.1 s); every fifth
// request preempted once after its fourth token; every third stopped by
// its length. Each step also reports a bad prefix-cache count (more hits
// than queries), which the Recorder refuses and counts. The scheduler is
// left with one request running and two waiting, per rank.
func record(ctx context.Context, e *instrument.Engine, i, rank int) {
	const prompt, cached, outputs = 600, 200, 16
	ttft := 200 * time.Millisecond
	if i%4 == 0 {
		ttft = 3 * time.Second
	}
	gap := func(k int) time.Duration {
		if k%8 == 0 {
			return 200 * time.Millisecond
		}
		return 50 * time.Millisecond
	}
	total := ttft
	for k := 1; k < outputs; k++ {
		total += gap(k)
	}
	arrival := time.Now().Add(-total - time.Second)
	req := stats.NewTimeline(stats.Request{Arrival: arrival, PromptTokens: prompt, MaxTokens: outputs})
	req.Queued(arrival)
	req.Scheduled(arrival.Add(10*time.Millisecond), cached, 0)
	e.RecordScheduler(ctx, &stats.Scheduler{Running: 1, WaitingCapacity: 2, KVCacheUsage: 0.25 + 0.25*float64(rank),
		PrefixCache: stats.CacheQueries{Queries: prompt, Hits: cached}})
	e.RecordScheduler(ctx, &stats.Scheduler{Running: 1, WaitingCapacity: 2, PrefixCache: stats.CacheQueries{Queries: 1, Hits: 2}})
	var step stats.Iteration
	at := arrival.Add(ttft)
	step.Output(req, at, 1)
	e.RecordIteration(ctx, &step)
	step.Reset()
	for k := 1; k < outputs; k++ {
		at = at.Add(gap(k))
		if k == 4 && i%5 == 0 {
			step.Preempt(req, at)
			e.RecordIteration(ctx, &step)
			step.Reset()
			req.Scheduled(at, 0, 0)
		}
		step.Output(req, at, 1)
		if k == outputs-1 {
			reason := stats.FinishStop
			if i%3 == 0 {
				reason = stats.FinishLength
			}
			step.Finish(req, at, reason)
		}
		e.RecordIteration(ctx, &step)
		step.Reset()
	}
}
