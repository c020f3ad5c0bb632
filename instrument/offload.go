package instrument

import (
	"context"
	"math"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// WithKVOffload declares a KV offloading tier (host memory or disk beneath
// the accelerator's KV cache, vLLM's OffloadingConnector), so that the
// vllm:kv_offload_* counters exist at zero from start-up. Steps report it in
// Scheduler.KVOffload.
func WithKVOffload() Option {
	return optionFunc(func(c *config) { c.kvOffload = true })
}

// WithKVOffloadCPU declares a host-memory KV offloading tier (vLLM's CPU
// offloading spec): WithKVOffload, and its CPU cache usage gauges exist
// from start-up too.
func WithKVOffloadCPU() Option {
	return optionFunc(func(c *config) { c.kvOffload, c.kvOffloadCPU = true, true })
}

// KVOffloadStoreThreshold says vllm:kv_offload_stores_skipped_total exists
// from start-up with WithKVOffloadStoreThreshold, otherwise from the first
// skipped store a step reports.
const KVOffloadStoreThreshold Feature = SimpleCPUOffload + 1

// WithKVOffloadStoreThreshold declares the store threshold of a host-memory
// KV offloading tier (vLLM's CPU offloading store_threshold): with 2 or
// more, a block is stored only once it has been offered that many times,
// and vllm:kv_offload_stores_skipped_total, which counts the others, exists
// at zero from start-up, as in vLLM, which registers it only then. It
// implies WithKVOffloadCPU. Steps report the skipped blocks in
// Scheduler.KVOffload.CPU.StoresSkipped.
func WithKVOffloadStoreThreshold(threshold int) Option {
	return optionFunc(func(c *config) {
		c.kvOffload, c.kvOffloadCPU, c.kvOffloadThreshold = true, true, threshold >= 2
	})
}

// offloadState is an engine's KV offloading configuration and its counter
// and gauge values, which the callback reports (see observeOffload).
type offloadState struct {
	on, cpu   bool // configured: reported from start-up
	threshold bool // WithKVOffloadStoreThreshold: stores skipped reported from start-up

	loadBytes, storeBytes, allocFailures atomic.Int64
	loadTime, storeTime                  atomic.Uint64 // float64 bits, seconds
	cpuUsage, cpuWrite, cpuRead          atomic.Uint64 // float64 bits, last value
	cpuSeen                              atomic.Bool   // a step reported a CPU tier
	storesSkipped                        atomic.Int64

	simple simpleOffloadState // the SimpleCPUOffloadConnector, see simpleoffload.go
}

// buildOffload sets an engine's offloading configuration.
func (e *engineState) buildOffload(cfg *config) {
	e.off.on, e.off.cpu, e.off.threshold = cfg.kvOffload, cfg.kvOffloadCPU, cfg.kvOffloadThreshold
	e.buildSimpleOffload(cfg)
}

// observeOffload reports the offloading counters, configured or above zero,
// the CPU gauges, configured or reported by a step, and the
// SimpleCPUOffloadConnector's.
func (e *engineState) observeOffload(o metric.Observer) {
	in, s, plain := e.inst, &e.off, e.plain.obs
	observeSome(o, in.kvOffloadLoadBytes, &s.loadBytes, s.on, plain)
	observeSome(o, in.kvOffloadStoreBytes, &s.storeBytes, s.on, plain)
	observeSome(o, in.kvOffloadAllocFail, &s.allocFailures, s.on, plain)
	observeSomeFloat(o, in.kvOffloadLoadTime, &s.loadTime, s.on, plain)
	observeSomeFloat(o, in.kvOffloadStoreTime, &s.storeTime, s.on, plain)
	observeSome(o, in.kvOffloadStoresSkipped, &s.storesSkipped, s.threshold, plain)
	if s.cpu || s.cpuSeen.Load() {
		o.ObserveFloat64(in.kvOffloadCPUUsage, math.Float64frombits(s.cpuUsage.Load()), plain...)
		o.ObserveFloat64(in.kvOffloadCPUWrite, math.Float64frombits(s.cpuWrite.Load()), plain...)
		o.ObserveFloat64(in.kvOffloadCPURead, math.Float64frombits(s.cpuRead.Load()), plain...)
	}
	e.observeSimpleOffload(o)
}

// observeSomeFloat reports a float counter that is configured or above zero.
func observeSomeFloat(o metric.Observer, inst metric.Float64ObservableCounter, a *atomic.Uint64, always bool, opts []metric.ObserveOption) {
	if v := math.Float64frombits(a.Load()); always || v > 0 {
		o.ObserveFloat64(inst, v, opts...)
	}
}

// recordOffloads records one step of the offloading tier and of the
// SimpleCPUOffloadConnector.
func (e *Engine) recordOffloads(ctx context.Context, s *stats.Scheduler) {
	e.recordOffload(ctx, s.KVOffload)
	e.recordSimpleOffload(s.SimpleKVOffload)
}

// recordOffload records one step of the offloading tier.
func (e *Engine) recordOffload(ctx context.Context, k *stats.KVOffload) {
	if k == nil {
		return
	}
	in, rec, s := e.inst, e.plain.rec, &e.off
	for _, t := range k.Loads {
		addPositive(&s.loadBytes, t.Bytes)
		addFloat(&s.loadTime, t.Seconds)
		in.kvOffloadLoadSize.Record(ctx, t.Bytes, rec...)
	}
	for _, t := range k.Stores {
		addPositive(&s.storeBytes, t.Bytes)
		addFloat(&s.storeTime, t.Seconds)
		in.kvOffloadStoreSize.Record(ctx, t.Bytes, rec...)
	}
	for _, v := range k.LookupSyncDelay {
		in.kvOffloadLookupSync.Record(ctx, v, rec...)
	}
	for _, v := range k.LookupAsyncDelay {
		in.kvOffloadLookupAsync.Record(ctx, v, rec...)
	}
	addPositive(&s.allocFailures, k.AllocationFailures)
	if c := k.CPU; c != nil {
		s.cpuUsage.Store(math.Float64bits(c.CacheUsage))
		s.cpuWrite.Store(math.Float64bits(c.WriteUsage))
		s.cpuRead.Store(math.Float64bits(c.ReadUsage))
		s.cpuSeen.Store(true)
		addPositive(&s.storesSkipped, c.StoresSkipped)
		for _, v := range c.AllocationChunks {
			in.kvOffloadCPUAlloc.Record(ctx, v, rec...)
		}
	}
}

// offload adds what a step's offloading data adds to the totals: the
// transfer bytes bound both their counter and their size histogram's sum.
func (in *increments) offload(k *stats.KVOffload) {
	if k == nil {
		return
	}
	for _, t := range k.Loads {
		in.add(totKVOffloadLoadBytes, t.Bytes)
	}
	for _, t := range k.Stores {
		in.add(totKVOffloadStoreBytes, t.Bytes)
	}
	in.add(totKVOffloadAllocFailures, k.AllocationFailures)
	if c := k.CPU; c != nil {
		for _, v := range c.AllocationChunks {
			in.add(totKVOffloadCPUChunks, v)
		}
		in.add(totKVOffloadStoresSkipped, c.StoresSkipped)
	}
}
