package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// faults are the failures the example can inject, each one that an alert of
// mixin/ pages on (its end-to-end test, e2e/faults_test.go, injects each and
// waits for the page). Their zero value injects none.
type faults struct {
	// stuckEngine is 1 + the rank of a decode engine that holds the
	// requests routed to it as waiting and runs none (0: none).
	stuckEngine int
	// slowPrefill and slowDecode lengthen every step of the prefill
	// (decode) instance's engines: a slow GPU.
	slowPrefill, slowDecode time.Duration
	// decodeKV is the KV cache of each decode engine, in tokens.
	decodeKV int64
	// maxNumSeqs is the most requests a decode engine runs at once (0:
	// maxRunning).
	maxNumSeqs int
	// preemptEvery: a decode engine preempts a request every this many
	// steps (0: never).
	preemptEvery int
	// handoffDelay is how long the router waits between a request's
	// prefill leg and its decode leg.
	handoffDelay time.Duration
	// http5xx is the share of the instances' API requests answered 503.
	http5xx float64
	// invalidEvents is the share of the decode instance's finished requests
	// for which the engine reports one more token after the finish.
	invalidEvents float64
	// cardinalityLimit is every server's exporters.WithCardinalityLimit (0:
	// the default).
	cardinalityLimit int
	// decodeDownAfter is when the decode instance's listener closes (0:
	// never).
	decodeDownAfter time.Duration
	// decodeDownOnSignal: the decode instance's listener closes on
	// SIGUSR2, when a test has seen it scraped.
	decodeDownOnSignal bool
	// cachedExcess is how many cached prompt tokens more than the prompt
	// has the instances' API usage reports.
	cachedExcess int64
	// shed is the share of the generated requests the prefill instance
	// refuses at admission.
	shed float64
}

// defaultDecodeKV is a decode engine's KV cache in tokens, -decode-kv-tokens'
// default.
const defaultDecodeKV = 10 << 10

// register defines the fault flags on fs.
func (f *faults) register(fs *flag.FlagSet) {
	fs.Func("stuck-engine", "fault: the rank of a decode engine that holds the requests routed to it as waiting and runs none, "+
		"as a hung engine does (VLLMRequestsStuck); the instance routes it no more once it holds one (default: none)", func(v string) error {
		rank, err := strconv.Atoi(v)
		if err != nil || rank < 0 {
			return fmt.Errorf("%q: want an engine rank, 0 or more", v)
		}
		f.stuckEngine = rank + 1
		return nil
	})
	fs.DurationVar(&f.slowPrefill, "slow-prefill", 0, "fault: extra time of every step of the prefill instance's engines, a slow GPU: its TTFT grows by as much (the TTFT burn rate); 0: none")
	fs.DurationVar(&f.slowDecode, "slow-decode", 0, "fault: extra time of every step of the decode instance's engines, a slow GPU: every inter-token gap grows by as much (the ITL burn rate); 0: none")
	fs.Int64Var(&f.decodeKV, "decode-kv-tokens", defaultDecodeKV, "KV cache of each decode engine, in tokens (at least the model's length, "+fmt.Sprint(maxModelLen)+"); a small one under load saturates and preempts (VLLMKVCacheSaturated, VLLMPreemptionsHigh)")
	fs.IntVar(&f.maxNumSeqs, "max-num-seqs", maxRunning, "most requests a decode engine runs at once (vLLM's --max-num-seqs); a low one under load makes the queue grow (VLLMQueueGrowing)")
	fs.IntVar(&f.preemptEvery, "preempt-every", 0, "fault: every this many steps that run two requests or more, a decode engine preempts the one it scheduled last, as vLLM's priority "+
		"scheduler does for a request of higher priority (VLLMPreemptionsHigh); 0: never")
	fs.DurationVar(&f.handoffDelay, "handoff-delay", 0, "fault: how long the P/D router waits between a request's prefill leg and its decode leg (InfermetricsPDHandoffSlow); 0: none")
	fs.Float64Var(&f.http5xx, "http-5xx", 0, "fault: share of the instances' API requests answered 503 before they reach an engine, every 1/share-th one (the HTTP families' 5xx ratio); 0: none")
	fs.Float64Var(&f.invalidEvents, "invalid-events", 0, "fault: share of the decode instance's finished requests for which its engine reports one more token after the finish, which the Recorder refuses "+
		"(infermetrics_invalid_events_total{kind=\"output\"}: InfermetricsInvalidEvents); 0: none")
	fs.IntVar(&f.cardinalityLimit, "cardinality-limit", 0, "most series per family of every server (exporters.WithCardinalityLimit); a small one overflows (InfermetricsCardinalityOverflow); 0: the default, "+
		"exporters.DefaultCardinalityLimit")
	fs.Int64Var(&f.cachedExcess, "cached-excess", 0, "fault: the instances' OpenAI usage reports this many cached prompt tokens more than the prompt has, as some providers do "+
		"(xAI through Azure AI Foundry): a gateway in front (the P/D router, infermetrics-proxy) drops the value "+
		"(infermetrics_invalid_events_total{kind=\"value_dropped\"}: InfermetricsUpstreamValuesDropped); 0: none")
	fs.Float64Var(&f.shed, "shed", 0, "fault: share of the generated requests the prefill instance refuses at admission, every 1/share-th one, as vLLM's "+
		"--max-num-queued-reqs does: they reach no engine and count in vllm:admission_rejections_total (VLLMLoadShedding); 0: none")
	fs.DurationVar(&f.decodeDownAfter, "decode-down-after", 0, "fault: when the decode instance's listener closes (its /metrics and API stop answering, as a crashed server's; its engines run on), "+
		"after start (VLLMTargetDown); 0: never")
	fs.BoolVar(&f.decodeDownOnSignal, "decode-down-on-signal", false, "fault: the decode instance's listener closes on SIGUSR2, as with -decode-down-after, "+
		"at a moment the sender chooses (a test: once Prometheus has scraped it, however slow the machine)")
}

// check reports a fault flag out of its range.
func (f *faults) check(decodeEngines int) error {
	switch {
	case f.stuckEngine > decodeEngines:
		return fmt.Errorf("-stuck-engine %d: want a decode engine's rank below -decode-engines %d", f.stuckEngine-1, decodeEngines)
	case f.stuckEngine > 0 && decodeEngines < 2:
		return fmt.Errorf("-stuck-engine needs another decode engine to run the requests (-decode-engines %d)", decodeEngines)
	case f.slowPrefill < 0 || f.slowDecode < 0 || f.handoffDelay < 0 || f.decodeDownAfter < 0:
		return fmt.Errorf("-slow-prefill, -slow-decode, -handoff-delay and -decode-down-after must not be negative")
	case f.decodeKV < maxModelLen:
		return fmt.Errorf("-decode-kv-tokens %d: want at least the model's length, %d, or its longest requests never run", f.decodeKV, maxModelLen)
	case f.maxNumSeqs < 1:
		return fmt.Errorf("-max-num-seqs %d: want at least 1", f.maxNumSeqs)
	case f.preemptEvery < 0:
		return fmt.Errorf("-preempt-every %d: want 0 (never) or a number of steps", f.preemptEvery)
	case !(f.http5xx >= 0 && f.http5xx <= 1) || !(f.invalidEvents >= 0 && f.invalidEvents <= 1) || !(f.shed >= 0 && f.shed <= 1):
		return fmt.Errorf("-http-5xx, -invalid-events and -shed must be 0 to 1")
	case f.cardinalityLimit < 0:
		return fmt.Errorf("-cardinality-limit %d: want 0 (the default) or a limit", f.cardinalityLimit)
	case f.cachedExcess < 0:
		return fmt.Errorf("-cached-excess %d: want 0 or more tokens", f.cachedExcess)
	}
	return nil
}

// invalidSalt is the draw salt of a request's extra output (-invalid-events).
const invalidSalt = 0x1a7a

// reportAfterFinish reports, for the share invalidEvents of the requests
// (picked by id), one more token of j after its finish in it, as an engine
// with a bookkeeping bug would: the Recorder refuses it (KindOutput), counts
// it in infermetrics_invalid_events_total and records nothing of it.
func (e *engine) reportAfterFinish(now time.Time, j *job, it *stats.Iteration) {
	if e.invalidEvents > 0 && draw(j.id, invalidSalt) < e.invalidEvents {
		it.Output(j.tl, now, 1)
	}
}

// everyNth picks a share of what it is asked about, in order: the n-th
// (from 1) when n*share reaches a whole number more than (n-1)*share did,
// so exactly that share of every 1/share, whatever their timing.
type everyNth struct {
	share float64
	n     atomic.Int64
}

// next reports whether the next one is picked.
func (p *everyNth) next() bool {
	i := float64(p.n.Add(1))
	return int64(i*p.share) > int64((i-1)*p.share)
}

// failing answers the share of requests 503 before h sees them (everyNth).
func failing(share float64, h http.Handler) http.Handler {
	if share == 0 {
		return h
	}
	p := &everyNth{share: share}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.next() {
			writeError(w, &apiError{http.StatusServiceUnavailable, "the server is overloaded (-http-5xx)"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// shedder refuses the share -shed of the generated requests at the prefill
// instance's admission (everyNth), as vLLM's front end refuses what its
// queue limit would not take: counted in vllm:admission_rejections_total,
// reaching no engine.
type shedder struct {
	p everyNth
}

// refused reports whether the next request is refused, counting it on in.
func (s *shedder) refused(ctx context.Context, in *instance) bool {
	if s == nil || s.p.share == 0 || !s.p.next() {
		return false
	}
	in.engines[0].rec.RecordAdmissionRejection(ctx, stats.AdmissionQueuedRequests)
	return true
}

// apply sets the faults of role's engine of rank on e.
func (f faults) apply(r role, rank int, e *engine) {
	switch r {
	case prefillRole:
		e.stepDelay = f.slowPrefill
	case decodeRole:
		e.stepDelay = f.slowDecode
		if f.maxNumSeqs > 0 {
			e.maxNumSeqs = f.maxNumSeqs
		}
		e.invalidEvents, e.preemptEvery = f.invalidEvents, f.preemptEvery
		e.stuck = rank+1 == f.stuckEngine
	}
}

// closeAfter closes the instance's listener after d (-decode-down-after):
// closed, not shut down, so that the requests in flight are cut as a crash
// cuts them; the engines run on. Stop the timer to cancel it.
func (in *instance) closeAfter(d time.Duration) *time.Timer {
	return time.AfterFunc(d, func() { _ = in.server.Close() })
}

// closeOn closes the instance's listener, as closeAfter does, when a
// signal comes on sig (-decode-down-on-signal), unless ctx ends first.
func (in *instance) closeOn(ctx context.Context, sig <-chan os.Signal) {
	go func() {
		select {
		case <-sig:
			_ = in.server.Close()
		case <-ctx.Done():
		}
	}()
}
