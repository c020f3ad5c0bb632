package main

import (
	"math/rand/v2"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// Simulated host-memory KV offload tier of the prefill engine.
const (
	offloadSlots       = 12      // shared prompts the tier holds
	offloadChunkBytes  = 2 << 20 // bytes per CPU chunk
	offloadRate        = 25e9    // bytes per second between accelerator and host memory
	offloadFailureRate = 0.05    // stores that find no free chunk
	offloadCapacity    = 4 << 30 // bytes of host memory, for the usage gauges
)

// offloadTier simulates a host-memory tier beneath an engine's prefix cache,
// as vLLM's OffloadingConnector with its CPU spec: the KV blocks an engine
// computes are stored to host memory, and a shared prompt the prefix cache
// has evicted is loaded back from there instead of being recomputed. The
// example counts a prompt loaded back as a local prefix-cache hit (the
// prefix cache holds it again), which keeps the prefill node free of
// external_kv_transfer tokens; vLLM's OffloadingConnector reports such
// tokens as connector (external) hits.
type offloadTier struct {
	rng     *rand.Rand
	held    map[int]time.Time // prefix -> last use
	step    stats.KVOffload   // this step's activity
	chunks  []int64           // CPU chunks allocated by this step's stores
	skipped int64             // blocks not stored this step (see offloadStoreThreshold)
}

// offloadStoreThreshold is the tier's store threshold (vLLM's
// store_threshold): a block is stored once offered that many times, so a
// prompt without a shared prefix, offered once, is not stored
// (vllm:kv_offload_stores_skipped_total).
const offloadStoreThreshold = 2

func newOffloadTier(seed uint64) *offloadTier {
	return &offloadTier{rng: rand.New(rand.NewPCG(seed, 0x0ff10ad)), held: map[int]time.Time{}}
}

// offloadLookup runs before the scheduler takes j's cache snapshot. A
// shared prompt missing from the prefix cache is loaded back from the tier
// when the tier holds it (the load touches the prefix cache, whose eviction,
// if any, is a sampled KV event of the step); the blocks computed now are
// stored to the tier, which then holds a shared prompt computed here.
func (e *engine) offloadLookup(now time.Time, j *job, sched *stats.Scheduler) {
	t := e.offload
	if t == nil {
		return
	}
	t.step.LookupSyncDelay = append(t.step.LookupSyncDelay, 2e-5+2e-4*t.rng.Float64())
	var hit int64
	newPrefix := false
	if j.prefix >= 0 {
		tokens := min(j.prefixLen, j.prompt-1) / blockSize * blockSize
		_, held := t.held[j.prefix]
		switch {
		case e.cache.has(j.prefix):
			hit = tokens
		case held:
			load := t.transfer(tokens)
			t.step.Loads = append(t.step.Loads, load)
			// The load completes asynchronously: the lookup resolves with it.
			t.step.LookupAsyncDelay = append(t.step.LookupAsyncDelay, load.Seconds)
			t.held[j.prefix] = now
			if ev, ok := e.cache.touch(j.prefix, now); ok {
				sched.Evictions = append(sched.Evictions, ev)
			}
			hit = tokens
		default:
			newPrefix = true
		}
	}
	computed := j.prompt/blockSize*blockSize - hit
	if computed <= 0 {
		return
	}
	if j.prefix < 0 {
		t.skipped += computed / blockSize
		return
	}
	if t.rng.Float64() < offloadFailureRate {
		t.step.AllocationFailures++
		return
	}
	store := t.transfer(computed)
	t.step.Stores = append(t.step.Stores, store)
	t.chunks = append(t.chunks, (store.Bytes+offloadChunkBytes-1)/offloadChunkBytes)
	if newPrefix {
		t.hold(j.prefix, now)
	}
}

// transfer is the move of tokens' KV between the accelerator and host memory.
func (t *offloadTier) transfer(tokens int64) stats.KVOffloadTransfer {
	bytes := tokens * kvBytesPerToken
	return stats.KVOffloadTransfer{Bytes: bytes, Seconds: 1e-4 + float64(bytes)/offloadRate}
}

// hold keeps a shared prompt in the tier, evicting the least recently used.
func (t *offloadTier) hold(prefix int, now time.Time) {
	t.held[prefix] = now
	if len(t.held) <= offloadSlots {
		return
	}
	victim, oldest := -1, now
	for p, used := range t.held {
		if !used.After(oldest) {
			victim, oldest = p, used
		}
	}
	delete(t.held, victim)
}

// take returns the step's offloading stats, with the host memory pinned by
// its transfers, and starts the next step; nil without a tier.
func (t *offloadTier) take() *stats.KVOffload {
	if t == nil {
		return nil
	}
	var load, store int64
	for _, x := range t.step.Loads {
		load += x.Bytes
	}
	for _, x := range t.step.Stores {
		store += x.Bytes
	}
	cpu := stats.KVOffloadCPU{ReadUsage: min(float64(load)/offloadCapacity, 1),
		WriteUsage: min(float64(store)/offloadCapacity, 1), AllocationChunks: t.chunks, StoresSkipped: t.skipped}
	cpu.CacheUsage = min(cpu.ReadUsage+cpu.WriteUsage, 1)
	s := t.step
	s.CPU = &cpu
	t.step, t.chunks, t.skipped = stats.KVOffload{}, nil, 0
	return &s
}
