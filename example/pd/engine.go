package main

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// Simulated hardware and scheduler limits of one engine.
const (
	blockSize        = 16
	maxBatchedTokens = 4096 // prefill tokens per step
	maxRunning       = 256
	kvBytesPerToken  = 128 << 10 // an 8B model: 2 x 32 layers x 8 KV heads x 128 dims x 2 bytes
	transferRate     = 20e9      // bytes per second between the nodes
	prefixCacheSlots = 4         // shared prompts a prefix cache holds
	kvFailureEvery   = 100       // a KV transfer in this many fails and falls back to local prefill: an engine's 10th, 110th, ...
	kvFailureFirst   = 10        // the first to fail
	stepBase         = 12 * time.Millisecond
	modelParams      = 8e9  // parameters, for the MFU estimates
	weightBytes      = 16e9 // bf16 weights read once per step
	expiryEvery      = 10   // a prefill node's KV of one handoff in this many expires before it is read
	failedNotifEvery = 25   // a notification of one handoff in this many fails
)

// role says what an instance does in the prefill/decode deployment.
type role string

const (
	prefillRole role = "prefill"
	decodeRole  role = "decode"
)

// job is a request inside one engine: its timeline and the simulation state.
type job struct {
	request
	tl        *stats.Timeline
	limit     int64 // max_tokens this engine runs the request with (0: none)
	toCompute int64 // prompt (or recompute) tokens still to prefill
	kvTokens  int64 // KV cache tokens held
	kvReady   time.Time
	fetchAt   time.Time // when its KV transfer starts (decode role)
	transfer  bool      // its KV arrives from the prefill node
	preempted bool
	// stream is the API client waiting for its outputs, or nil for a
	// request of the workload generator (see stream.go).
	stream *stream
}

// engine simulates one data-parallel engine driving stats.Timeline per
// request and the Recorder each step, exactly as a real engine would.
type engine struct {
	role       role
	rec        *instrument.Engine
	rng        *rand.Rand
	kvCapacity int64
	inbox      chan *job
	handoff    func(request) // prefill role: passes finished prefills on
	load       atomic.Int64  // jobs held, for routing

	arrived, deferred, waiting, running []*job // arrived: the step's new jobs, see admit
	kvUsed                              int64
	cache                               *prefixCache
	offload                             *offloadTier   // host-memory KV tier, or nil (see offload.go)
	simple                              *simpleOffload // SimpleCPUOffloadConnector, or nil (see simpleoffload.go)
	weights                             *weightUpdater // RL weight updates, or nil (see weights.go)
	mm                                  mmCache        // multimodal cache (see multimodal.go)
	spec                                *specDecoder   // speculative decoding, or nil (see specdecode.go)
	sleep                               *sleeper       // sleep mode when idle, or nil (see sleep.go)
	lora                                bool           // requests name LoRA adapters (see lora.go)
	corruptRate                         float64        // share of requests found corrupted (see corrupt.go)
	invalidEvents                       float64        // share of requests reported after their finish (see faults.go)
	stuck                               bool           // holds its requests waiting and runs none (-stuck-engine)
	stepDelay                           time.Duration  // extra time of every step (-slow-prefill, -slow-decode)
	maxNumSeqs                          int            // most requests running at once
	preemptEvery                        int            // preempts one of its requests every this many steps (0: never)
	steps                               int64          // steps that ran requests
	priority                            bool           // priority scheduling: TTFT observed at the finish
	observed                            *observations  // latencies recorded, for -observations, or nil

	// Prefill role: handoffs so far, and the KV expiries, late and failed
	// notifications not yet reported.
	handoffs, expired, lateNotifs, failedNotifs int64
	transfers                                   int64 // KV transfers read (kvFailureEvery)
}

func newEngine(r role, rec *instrument.Engine, seed uint64, kvCapacity int64, handoff func(request)) *engine {
	return &engine{
		role: r, rec: rec, kvCapacity: kvCapacity, handoff: handoff,
		rng:        rand.New(rand.NewPCG(seed, uint64(rec.Rank())+1)),
		inbox:      make(chan *job, 4096),
		maxNumSeqs: maxRunning,
		cache:      newPrefixCache(prefixCacheSlots),
	}
}

// submit hands a request to the engine; it is queued at the next step.
func (e *engine) submit(r request, maxTokens int64, transfer bool) error {
	return e.submitStream(r, maxTokens, transfer, nil)
}

// submitStream is submit for an API request whose outputs go to s.
func (e *engine) submitStream(r request, maxTokens int64, transfer bool, s *stream) error {
	tl := stats.NewTimeline(stats.Request{Arrival: r.arrival, PromptTokens: r.prompt, MaxTokens: maxTokens,
		Priority: requestPriority(r.id), Context: r.ctx})
	if err := tl.Err(); err != nil { // an API request the metrics would refuse
		return err
	}
	e.load.Add(1)
	e.inbox <- &job{request: r, tl: tl, limit: maxTokens, transfer: transfer, stream: s}
	return nil
}

// run steps the engine until ctx is done, idling while there is no work.
func (e *engine) run(ctx context.Context) {
	for ctx.Err() == nil {
		busy := e.step(ctx)
		if !busy {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// step runs one engine step and reports whether there was any work.
func (e *engine) step(ctx context.Context) bool {
	var it stats.Iteration
	var sched stats.Scheduler
	sched.ConnectorPrefixCache = &stats.CacheQueries{}
	var kv stats.KVTransfer

	start := e.admit(&kv)
	computed := e.schedule(start, &sched)
	busy := len(e.running) > 0 || len(e.deferred) > 0 || len(e.waiting) > 0
	sched.SleepState = e.updateSleep(start, busy)
	if !busy {
		e.report(ctx, &it, &sched, &kv)
		return false
	}

	// The step's cost: a fixed part, the prefill tokens and the batch size.
	cost := stepBase + e.stepDelay + time.Duration(computed)*4*time.Microsecond + time.Duration(len(e.running))*150*time.Microsecond
	select {
	case <-ctx.Done():
		return false
	case <-time.After(cost):
	}
	end := time.Now()

	e.abortGone(end, &it)
	e.emit(end, &it)
	e.updateWeights(ctx, end)
	sched.SpecDecoding = e.spec.take()
	// Rejected draft tokens were computed too.
	sched.Perf = e.estimate(computed, it.GenerationTokens+rejected(sched.SpecDecoding))
	e.preemptIfFull(end, &it)
	sched.LoRA = e.loraState() // only when busy: its info gauge's value is the time of the update
	e.report(ctx, &it, &sched, &kv)
	return true
}

// estimate returns a rough MFU estimate of a step on this engine's one GPU:
// 2 x parameters FLOPs per token processed; the weights and the running
// requests' KV read; the new tokens' KV written.
func (e *engine) estimate(computed, generated int64) *stats.PerfEstimate {
	tokens := float64(computed + generated)
	var kvRead int64
	for _, j := range e.running {
		kvRead += j.kvTokens
	}
	return &stats.PerfEstimate{
		FLOPs:      2 * modelParams * tokens,
		ReadBytes:  weightBytes + float64(kvRead*kvBytesPerToken),
		WriteBytes: tokens * kvBytesPerToken,
	}
}

// admit queues new jobs (jobs whose KV is being transferred wait deferred)
// and returns the step's start. It reads the clock after taking the jobs
// from the inbox, so after each one's arrival: a start read before a job
// arrived made its Queued, Scheduled and Output come before its Arrival, and
// the Recorder refused them all.
func (e *engine) admit(kv *stats.KVTransfer) time.Time {
	e.arrived = e.arrived[:0]
	for {
		select {
		case j := <-e.inbox:
			e.arrived = append(e.arrived, j)
			continue
		default:
		}
		break
	}
	now := time.Now()
	for _, j := range e.arrived {
		j.tl.Queued(now)
		e.lookupImages(j)
		e.simpleLoad(j)
		if j.transfer {
			bytes := (j.prompt - e.localHit(j)) * kvBytesPerToken
			j.fetchAt = now.Add(2 * time.Millisecond)
			j.kvReady = j.fetchAt.Add(time.Duration(float64(bytes) / transferRate * float64(time.Second)))
			e.deferred = append(e.deferred, j)
		} else {
			e.waiting = append(e.waiting, j)
		}
	}
	clear(e.arrived)
	ready := e.deferred[:0]
	for _, j := range e.deferred {
		if now.Before(j.kvReady) {
			ready = append(ready, j)
			continue
		}
		bytes := (j.prompt - e.localHit(j)) * kvBytesPerToken
		// By count, not by a draw: a run that transfers as many has
		// failed transfers to show (the dashboards' panels read them),
		// however its draws fall.
		if e.transfers++; e.transfers%kvFailureEvery == kvFailureFirst {
			kv.FailedTransfers++
			j.transfer = false // the decode node prefills it itself
		} else {
			kv.XferTime = append(kv.XferTime, j.kvReady.Sub(j.arrival).Seconds())
			kv.PostTime = append(kv.PostTime, 0.0005+0.001*e.rng.Float64())
			kv.BytesTransferred = append(kv.BytesTransferred, bytes)
			kv.NumDescriptors = append(kv.NumDescriptors, (j.prompt+blockSize-1)/blockSize*2)
		}
		e.waiting = append(e.waiting, j)
	}
	e.deferred = ready
	return now
}

// localHit is the prompt tokens of j found in this engine's prefix cache,
// whole blocks only.
func (e *engine) localHit(j *job) int64 {
	if j.prefix < 0 || !e.cache.has(j.prefix) {
		return 0
	}
	return min(j.prefixLen, j.prompt-1) / blockSize * blockSize
}

// schedule moves waiting jobs to running while KV and the token budget allow,
// taking the prefix-cache and KV-connector snapshot, and returns the prompt
// tokens computed this step.
func (e *engine) schedule(now time.Time, sched *stats.Scheduler) int64 {
	budget := int64(maxBatchedTokens)
	var computed int64
	for _, j := range e.running {
		if j.toCompute > 0 {
			c := min(j.toCompute, budget)
			j.toCompute -= c
			budget -= c
			computed += c
		}
	}
	for !e.stuck && len(e.waiting) > 0 && len(e.running) < e.maxNumSeqs && budget > 0 {
		j := e.waiting[0]
		need := j.prompt + j.tl.Generated()
		if e.kvUsed+need > e.kvCapacity {
			break
		}
		e.offloadLookup(now, j, sched)
		local := e.localHit(j)
		cached := stats.Cached{Local: local}
		if j.transfer && !j.preempted {
			// The KV comes from the prefill node (p2p), but the part of the
			// shared prefix offloaded to this node's host memory loads from there.
			// As in vLLM, the last prompt token is recomputed for its logits:
			// Scheduler._update_waiting_for_remote_kv sets the computed tokens
			// to the prompt's less one (see remoteComputed).
			cached.External = remoteComputed(j.prompt) - local
			host := min(e.offloadedHit(j)-local, cached.External)
			cached.ExternalTiers = stats.ExternalTiers{Host: max(host, 0), P2P: cached.External - max(host, 0)}
		}
		external := cached.External
		j.tl.ScheduledWith(now, cached)
		j.stream.scheduled(local + external)
		if !j.preempted {
			sched.PrefixCache.Queries += j.prompt
			sched.PrefixCache.Hits += local
			sched.ConnectorPrefixCache.Queries += j.prompt - local
			sched.ConnectorPrefixCache.Hits += external
		}
		if j.prefix >= 0 {
			if ev, ok := e.cache.touch(j.prefix, now); ok {
				sched.Evictions = append(sched.Evictions, ev)
			}
		}
		j.toCompute = need - local - external
		c := min(j.toCompute, budget)
		j.toCompute -= c
		budget -= c
		computed += c
		j.kvTokens = need
		e.kvUsed += need
		e.waiting = e.waiting[1:]
		e.running = append(e.running, j)
	}
	sched.Running = int64(len(e.running))
	sched.WaitingCapacity = int64(len(e.waiting))
	sched.WaitingDeferred = int64(len(e.deferred))
	sched.KVCacheUsage = min(float64(e.kvUsed)/float64(e.kvCapacity), 1)
	if e.role == decodeRole {
		sched.KVFetch = e.fetchStages(now)
	}
	return computed
}

// remoteComputed is the prompt tokens a decode engine counts computed once
// a remote prefill's KV has arrived: the prompt less its last token, which
// is recomputed, as vLLM's Scheduler._update_waiting_for_remote_kv does
// (vllm/v1/core/sched/scheduler.py at 00024d314514900f361ad072af6931e403b7f589:
// the blocks' tokens capped at the request's, less one when they cover it).
// vLLM sets num_cached_tokens, the usage's cached_tokens, to this count, its
// local prefix-cache hits included.
func remoteComputed(prompt int64) int64 { return max(prompt-1, 0) }

// offloadedHit is the prompt tokens of j found in this engine's host memory
// tier, whole blocks only: a shared prefix evicted from the prefix cache is
// offloaded there.
func (e *engine) offloadedHit(j *job) int64 {
	if j.prefix < 0 || !e.cache.offloaded[j.prefix] {
		return 0
	}
	return min(j.prefixLen, j.prompt-1) / blockSize * blockSize
}

// fetchStages counts the waiting requests whose KV comes from the prefill
// node by the stage of its transfer.
func (e *engine) fetchStages(now time.Time) *stats.KVFetch {
	var k stats.KVFetch
	for _, j := range e.deferred {
		if now.Before(j.fetchAt) {
			k.WaitingToStart++
		} else {
			k.InProgress++
		}
	}
	for _, j := range e.waiting {
		if j.transfer && !j.preempted {
			k.CompletedWaiting++
		}
	}
	return &k
}

// emit produces this step's outputs: a token (more under speculative
// decoding) for every running job whose prompt is fully computed, and
// finishes the jobs that are done or found corrupted.
func (e *engine) emit(now time.Time, it *stats.Iteration) {
	kept := e.running[:0]
	for _, j := range e.running {
		if j.toCompute > 0 {
			kept = append(kept, j)
			continue
		}
		tokens := e.spec.tokens(j)
		generated := j.tl.Generated()
		if it.Output(j.tl, now, tokens); j.tl.Generated() == generated {
			// Refused (the Recorder reports it): the job would never reach
			// its length or stop, so it ends here instead of running on.
			e.finish(now, j, stats.FinishError, it)
			continue
		}
		j.kvTokens += tokens
		e.kvUsed += tokens
		j.stream.emit(tokens)
		if e.corrupted(j, tokens) {
			it.CorruptedRequests++
			e.finish(now, j, stats.FinishError, it)
			continue
		}
		if reason, done := e.finishReason(j); done {
			e.finish(now, j, reason, it)
			continue
		}
		kept = append(kept, j)
	}
	e.running = kept
}

// finishReason says whether j is done after its latest token, and why.
func (e *engine) finishReason(j *job) (stats.FinishReason, bool) {
	gen := j.tl.Generated()
	switch {
	case j.abortAfter > 0 && gen >= j.abortAfter:
		return stats.FinishAbort, true
	case j.limit > 0 && gen >= j.limit:
		return stats.FinishLength, true
	case gen >= j.output:
		return stats.FinishStop, true
	}
	return 0, false
}

func (e *engine) finish(now time.Time, j *job, reason stats.FinishReason, it *stats.Iteration) {
	it.Finish(j.tl, now, reason)
	e.reportAfterFinish(now, j, it)
	e.simpleStore(j, reason)
	e.drop(j)
	j.stream.finish(reason, j.tl.Generated())
	if e.role == prefillRole && reason == stats.FinishLength && j.handsOff(e) {
		if j.stream == nil {
			e.handoff(j.request)
		}
		// Now and then the KV kept for the decode node expires before it is
		// read; every second time the decode node's notification comes late.
		if e.handoffs++; e.handoffs%expiryEvery == 0 {
			e.expired++
			if e.handoffs%(2*expiryEvery) == 0 {
				e.lateNotifs++
			}
		}
		// Rarer still, the notification from the decode node fails.
		if e.handoffs%failedNotifEvery == 0 {
			e.failedNotifs++
		}
	}
}

// drop releases a job's KV cache.
func (e *engine) drop(j *job) {
	e.kvUsed -= j.kvTokens
	j.kvTokens = 0
	e.load.Add(-1)
}

// preemptIfFull preempts the most recently scheduled jobs while the KV cache
// is over capacity, and one every preemptEvery steps (-preempt-every); they
// go back to the front of the waiting queue and recompute their KV when
// scheduled again.
func (e *engine) preemptIfFull(now time.Time, it *stats.Iteration) {
	for e.kvUsed > e.kvCapacity && len(e.running) > 1 {
		e.preemptLast(now, it)
	}
	e.steps++
	if e.preemptEvery > 0 && e.steps%int64(e.preemptEvery) == 0 && len(e.running) > 1 {
		e.preemptLast(now, it) // -preempt-every
	}
}

// preemptLast preempts the most recently scheduled job.
func (e *engine) preemptLast(now time.Time, it *stats.Iteration) {
	j := e.running[len(e.running)-1]
	e.running = e.running[:len(e.running)-1]
	it.Preempt(j.tl, now)
	e.kvUsed -= j.kvTokens
	j.kvTokens, j.preempted = 0, true
	e.waiting = append([]*job{j}, e.waiting...)
}

// report records the step: the scheduler stats always, the iteration when
// the step produced outputs or preemptions.
func (e *engine) report(ctx context.Context, it *stats.Iteration, sched *stats.Scheduler, kv *stats.KVTransfer) {
	kv.ExpiredRequests += e.expired
	kv.NotificationsAfterExpiry += e.lateNotifs
	kv.FailedNotifications += e.failedNotifs
	e.expired, e.lateNotifs, e.failedNotifs = 0, 0, 0
	sched.KVTransfer = kv
	sched.KVOffload = e.offload.take()
	sched.SimpleKVOffload = e.simple.take()
	sched.MultimodalCache = e.mm.take()
	e.rec.RecordScheduler(ctx, sched)
	if it.GenerationTokens == 0 && it.Preemptions == 0 && len(it.Finished) == 0 {
		return
	}
	e.rec.RecordIteration(ctx, it)
	e.observed.add(e.role, e.priority, it)
}

// prefixCache is a small LRU of shared prompts. Evicted prompts are
// offloaded to host memory, which keeps them all.
type prefixCache struct {
	slots     int
	entry     map[int]*cacheEntry
	offloaded map[int]bool
}

type cacheEntry struct {
	inserted, used time.Time
	gaps           []float64 // seconds between consecutive uses, the first maxReuseGaps
}

// maxReuseGaps bounds the reuse gaps an evicted entry reports, as vLLM
// samples its KV block events.
const maxReuseGaps = 8

func newPrefixCache(slots int) *prefixCache {
	return &prefixCache{slots: slots, entry: map[int]*cacheEntry{}, offloaded: map[int]bool{}}
}

func (c *prefixCache) has(prefix int) bool { return c.entry[prefix] != nil }

// touch marks prefix as used, inserting it and evicting the least recently
// used entry when full; the eviction is returned as a sampled KV event.
func (c *prefixCache) touch(prefix int, now time.Time) (stats.KVEviction, bool) {
	if e := c.entry[prefix]; e != nil {
		if len(e.gaps) < maxReuseGaps {
			e.gaps = append(e.gaps, now.Sub(e.used).Seconds())
		}
		e.used = now
		return stats.KVEviction{}, false
	}
	var ev stats.KVEviction
	evicted := false
	if len(c.entry) >= c.slots {
		victim, oldest := -1, now
		for p, e := range c.entry {
			if !e.used.After(oldest) {
				victim, oldest = p, e.used
			}
		}
		if v := c.entry[victim]; v != nil {
			ev = stats.KVEviction{Lifetime: now.Sub(v.inserted).Seconds(), IdleBeforeEvict: now.Sub(v.used).Seconds(),
				ReuseGaps: v.gaps}
			delete(c.entry, victim)
			c.offloaded[victim] = true
			evicted = true
		}
	}
	c.entry[prefix] = &cacheEntry{inserted: now, used: now}
	return ev, evicted
}
