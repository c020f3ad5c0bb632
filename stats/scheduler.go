package stats

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// SleepState is the engine's sleep mode (vllm:engine_sleep_state): Awake,
// WeightsOffloaded or DiscardAll.
type SleepState uint8

const (
	// Awake: the engine serves requests.
	Awake SleepState = iota
	// WeightsOffloaded: sleep level 1, weights moved off the accelerator.
	WeightsOffloaded
	// DiscardAll: sleep level 2, weights and KV cache discarded.
	DiscardAll

	numSleepStates = iota
)

var sleepStateLabels = [numSleepStates]string{"awake", "weights_offloaded", "discard_all"}

// SleepStates returns every SleepState in label order.
func SleepStates() []SleepState { return []SleepState{Awake, WeightsOffloaded, DiscardAll} }

// String returns the sleep_state label value.
func (s SleepState) String() string {
	if int(s) < numSleepStates {
		return sleepStateLabels[s]
	}
	return "unknown"
}

// Validate reports ErrUnknownSleepState for a value not in SleepStates().
func (s SleepState) Validate() error {
	if int(s) >= numSleepStates {
		return fieldErr("SleepState", uint8(s), ErrUnknownSleepState)
	}
	return nil
}

// CacheQueries counts, for one step, the tokens (or multimodal items) looked
// up in a cache and the ones found.
type CacheQueries struct {
	Queries int64
	Hits    int64
}

// Validate reports negative counts and more hits than queries.
func (c CacheQueries) Validate() error {
	if err := checkCount("Queries", c.Queries); err != nil {
		return err
	}
	if err := checkCount("Hits", c.Hits); err != nil {
		return err
	}
	if c.Hits > c.Queries {
		return hintedErr("Hits", c.Hits, ErrOutOfRange, fmt.Sprintf("more than Queries (%d)", c.Queries))
	}
	return nil
}

// SpecDecoding counts speculative decoding work in one step.
type SpecDecoding struct {
	// Drafts is the number of drafts proposed in the step: one per request
	// that the drafter proposed tokens for (SpecDecodingStats.num_drafts in
	// vllm/v1/spec_decode/metrics.py).
	Drafts int64
	// DraftTokens is the number of tokens those drafts proposed, up to the
	// configured speculative tokens per draft.
	DraftTokens int64
	// AcceptedTokens is the number of draft tokens the target model
	// accepted: at most DraftTokens.
	AcceptedTokens int64
	// AcceptedPerPosition[i] is the tokens accepted at draft position i: at
	// most one per draft, summing to AcceptedTokens. Empty when the engine
	// does not count positions.
	AcceptedPerPosition []int64
}

// Validate reports negative counts and what vLLM's accounting rules out
// (vllm/v1/spec_decode/metrics.py, SpecDecodingStats.observe_draft): more
// tokens accepted than drafted, a position accepting more tokens than there
// were drafts, and positions that do not sum to AcceptedTokens.
func (s *SpecDecoding) Validate() error {
	for _, c := range [...]struct {
		name string
		v    int64
	}{{"Drafts", s.Drafts}, {"DraftTokens", s.DraftTokens}, {"AcceptedTokens", s.AcceptedTokens}} {
		if err := checkCount(c.name, c.v); err != nil {
			return err
		}
	}
	if s.AcceptedTokens > s.DraftTokens {
		return hintedErr("AcceptedTokens", s.AcceptedTokens, ErrOutOfRange, fmt.Sprintf("more than DraftTokens (%d)", s.DraftTokens))
	}
	if err := checkCounts("AcceptedPerPosition", s.AcceptedPerPosition); err != nil {
		return err
	}
	if len(s.AcceptedPerPosition) == 0 {
		return nil
	}
	var sum int64
	for i, v := range s.AcceptedPerPosition {
		if v > s.Drafts {
			return hintedErr(fmt.Sprintf("AcceptedPerPosition[%d]", i), v, ErrOutOfRange, fmt.Sprintf("more than Drafts (%d)", s.Drafts))
		}
		var err error
		if sum, err = addChecked("AcceptedPerPosition", sum, v); err != nil {
			return err
		}
	}
	if sum != s.AcceptedTokens {
		return hintedErr("AcceptedPerPosition sum", sum, ErrOutOfRange, fmt.Sprintf("want AcceptedTokens (%d)", s.AcceptedTokens))
	}
	return nil
}

// Limits of a LoRA state. vllm:lora_requests_info carries each list of
// adapter names, joined with commas, as a label value on every scrape and
// export: unbounded lists (10,000 names made a 649 KB label value) would
// make every scrape that large.
const (
	// MaxLoRAAdapters is the most adapter names in each list.
	MaxLoRAAdapters = 256
	// MaxLoRALabelBytes is the longest each list may be once joined with
	// commas, in bytes.
	MaxLoRALabelBytes = 8192
)

// LoRA is the adapter state at one step (vllm:lora_requests_info): the
// adapters with running requests and those with waiting requests (an
// adapter may be in both).
type LoRA struct {
	// MaxLoRA is the most adapters in one batch (vLLM's max_loras); 0 when
	// not known.
	MaxLoRA int64
	Running []string
	Waiting []string
}

// Validate reports a negative MaxLoRA; adapter names that are empty, not
// valid UTF-8, contain a comma (the info gauge joins the names with commas)
// or repeat in one list; a list longer than MaxLoRAAdapters names or
// MaxLoRALabelBytes joined; and, when MaxLoRA is set, more running adapters
// than MaxLoRA (vLLM's scheduler never batches more).
func (l *LoRA) Validate() error {
	if err := checkCount("MaxLoRA", l.MaxLoRA); err != nil {
		return err
	}
	for _, names := range [...]struct {
		field string
		list  []string
	}{{"Running", l.Running}, {"Waiting", l.Waiting}} {
		if err := checkLoRANames(names.field, names.list); err != nil {
			return err
		}
	}
	if l.MaxLoRA > 0 && int64(len(l.Running)) > l.MaxLoRA {
		return fieldErr("Running", fmt.Sprintf("%d adapters, MaxLoRA %d", len(l.Running), l.MaxLoRA), ErrOutOfRange)
	}
	return nil
}

// checkLoRANames reports a bad list of adapter names.
func checkLoRANames(field string, names []string) error {
	if len(names) > MaxLoRAAdapters {
		return fieldErr(field, fmt.Sprintf("%d names, at most %d", len(names), MaxLoRAAdapters), ErrOutOfRange)
	}
	joined := max(len(names)-1, 0) // the commas
	for i, n := range names {
		if checkLabel(field, n, true) != nil || strings.Contains(n, ",") || slices.Contains(names[:i], n) {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), n, ErrInvalidLabel)
		}
		joined += len(n)
	}
	if joined > MaxLoRALabelBytes {
		return fieldErr(field, fmt.Sprintf("%d bytes joined, at most %d", joined, MaxLoRALabelBytes), ErrInvalidLabel)
	}
	return nil
}

// KVEviction describes one sampled eviction of a KV cache block, in seconds.
type KVEviction struct {
	Lifetime        float64 // allocation to eviction
	IdleBeforeEvict float64 // last access to eviction
	// ReuseGaps are the times between consecutive accesses of the block.
	ReuseGaps []float64
}

// Validate reports NaN, infinite, negative or above-MaxSeconds durations,
// and an idle time or a reuse gap longer than the block's lifetime (both lie
// within it).
func (e *KVEviction) Validate() error {
	if err := checkSeconds("Lifetime", e.Lifetime); err != nil {
		return err
	}
	if err := checkSeconds("IdleBeforeEvict", e.IdleBeforeEvict); err != nil {
		return err
	}
	if e.IdleBeforeEvict > e.Lifetime {
		return hintedErr("IdleBeforeEvict", e.IdleBeforeEvict, ErrOutOfRange, fmt.Sprintf("more than Lifetime (%v)", e.Lifetime))
	}
	if err := checkSecondsList("ReuseGaps", e.ReuseGaps); err != nil {
		return err
	}
	for i, g := range e.ReuseGaps {
		if g > e.Lifetime {
			return hintedErr(fmt.Sprintf("ReuseGaps[%d]", i), g, ErrOutOfRange, fmt.Sprintf("more than Lifetime (%v)", e.Lifetime))
		}
	}
	return nil
}

// KVTransfer is what a KV connector (NIXL family names) did in one step.
type KVTransfer struct {
	XferTime            []float64 // seconds per transfer
	PostTime            []float64 // seconds to post each transfer
	BytesTransferred    []int64   // bytes per transfer
	NumDescriptors      []int64   // descriptors per transfer
	FailedTransfers     int64
	FailedNotifications int64
	ExpiredRequests     int64 // requests whose KV expired before it was read
	// NotificationsAfterExpiry are notifications (the consumer saying it read
	// a request's KV) that arrived after that KV had expired, so its blocks
	// may already have been reused.
	NotificationsAfterExpiry int64
}

// Validate reports NaN, infinite or negative values.
func (k *KVTransfer) Validate() error {
	if err := checkSecondsList("XferTime", k.XferTime); err != nil {
		return err
	}
	if err := checkSecondsList("PostTime", k.PostTime); err != nil {
		return err
	}
	if err := checkCounts("BytesTransferred", k.BytesTransferred); err != nil {
		return err
	}
	if err := checkCounts("NumDescriptors", k.NumDescriptors); err != nil {
		return err
	}
	for _, c := range [...]struct {
		name string
		v    int64
	}{{"FailedTransfers", k.FailedTransfers}, {"FailedNotifications", k.FailedNotifications}, {"ExpiredRequests", k.ExpiredRequests},
		{"NotificationsAfterExpiry", k.NotificationsAfterExpiry}} {
		if err := checkCount(c.name, c.v); err != nil {
			return err
		}
	}
	return nil
}

// Scheduler is the scheduler's state and cache activity at one step. Gauges
// are set from it; its counts are this step's increments. Optional parts are
// nil when the engine does not have the feature.
type Scheduler struct {
	Running int64
	// WaitingCapacity are waiting for room; WaitingDeferred were deferred
	// (for example waiting for remote KV). vllm:num_requests_waiting is their sum.
	WaitingCapacity int64
	WaitingDeferred int64
	// KVCacheUsage is the fraction of KV cache blocks in use, 0 to 1.
	KVCacheUsage float64
	// PrefixCache counts prompt tokens looked up in the local prefix cache by
	// requests scheduled this step (preempted requests excluded).
	PrefixCache CacheQueries
	// MultimodalCache counts multimodal items looked up in the encoder cache.
	MultimodalCache CacheQueries
	SleepState      SleepState

	// ConnectorPrefixCache counts tokens looked up through the KV connector.
	ConnectorPrefixCache *CacheQueries
	SpecDecoding         *SpecDecoding
	LoRA                 *LoRA
	KVTransfer           *KVTransfer
	// Evictions are sampled KV block eviction events of this step.
	Evictions []KVEviction
	// KVOffload is what the KV offloading tier (host memory or disk) did
	// this step.
	KVOffload *KVOffload
	// Perf is the step's work estimate per GPU (the MFU counters), nil when
	// the engine does not estimate it.
	Perf *PerfEstimate
	// KVFetch counts the waiting requests of a KV consumer by the stage of
	// their KV load, nil on an engine that does not receive KV.
	KVFetch *KVFetch
	// SimpleKVOffload is what a SimpleCPUOffloadConnector did this step,
	// nil without one.
	SimpleKVOffload *SimpleKVOffload
}

// Waiting returns every waiting request: capacity plus deferred.
func (s *Scheduler) Waiting() int64 { return s.WaitingCapacity + s.WaitingDeferred }

// Validate reports the first bad field of the step or of an optional part.
func (s *Scheduler) Validate() error {
	for _, c := range [...]struct {
		name string
		v    int64
	}{{"Running", s.Running}, {"WaitingCapacity", s.WaitingCapacity}, {"WaitingDeferred", s.WaitingDeferred}} {
		if err := checkCount(c.name, c.v); err != nil {
			return err
		}
	}
	if _, err := addChecked("WaitingDeferred", s.WaitingCapacity, s.WaitingDeferred); err != nil {
		return err
	}
	if err := checkSeconds("KVCacheUsage", s.KVCacheUsage); err != nil {
		return err
	}
	if s.KVCacheUsage > 1 {
		return hintedErr("KVCacheUsage", s.KVCacheUsage, ErrOutOfRange, "want 0 to 1")
	}
	if err := s.PrefixCache.Validate(); err != nil {
		return prefixed("PrefixCache", err)
	}
	if err := s.MultimodalCache.Validate(); err != nil {
		return prefixed("MultimodalCache", err)
	}
	if err := s.SleepState.Validate(); err != nil {
		return err
	}
	if s.ConnectorPrefixCache != nil {
		if err := s.ConnectorPrefixCache.Validate(); err != nil {
			return prefixed("ConnectorPrefixCache", err)
		}
	}
	if s.SpecDecoding != nil {
		if err := s.SpecDecoding.Validate(); err != nil {
			return prefixed("SpecDecoding", err)
		}
	}
	if s.LoRA != nil {
		if err := s.LoRA.Validate(); err != nil {
			return prefixed("LoRA", err)
		}
	}
	if s.KVTransfer != nil {
		if err := s.KVTransfer.Validate(); err != nil {
			return prefixed("KVTransfer", err)
		}
	}
	for i := range s.Evictions {
		if err := s.Evictions[i].Validate(); err != nil {
			return prefixed(fmt.Sprintf("Evictions[%d]", i), err)
		}
	}
	if s.KVOffload != nil {
		if err := s.KVOffload.Validate(); err != nil {
			return prefixed("KVOffload", err)
		}
	}
	if s.Perf != nil {
		if err := s.Perf.Validate(); err != nil {
			return prefixed("Perf", err)
		}
	}
	if s.KVFetch != nil {
		if err := s.KVFetch.Validate(); err != nil {
			return prefixed("KVFetch", err)
		}
	}
	if s.SimpleKVOffload != nil {
		if err := s.SimpleKVOffload.Validate(); err != nil {
			return prefixed("SimpleKVOffload", err)
		}
	}
	return nil
}

// CacheConfig is the KV cache configuration exported as the labels of
// vllm:cache_config_info (for example "block_size": "16",
// "num_gpu_blocks": "2048").
type CacheConfig map[string]string

// Keys returns the configuration keys in sorted order.
func (c CacheConfig) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Validate reports keys that are not Prometheus label names ([a-zA-Z_][a-zA-Z0-9_]*,
// not starting with "__", and not "engine", which the info gauge adds) and values
// that are not valid UTF-8.
func (c CacheConfig) Validate() error {
	for _, k := range c.Keys() {
		if !isLabelName(k) || k == "engine" {
			return fieldErr("CacheConfig key", k, ErrInvalidLabel)
		}
		if err := checkLabel("CacheConfig["+k+"]", c[k], false); err != nil {
			return err
		}
	}
	return nil
}

func isLabelName(s string) bool {
	if s == "" || (len(s) >= 2 && s[:2] == "__") {
		return false
	}
	for i, r := range s {
		letter := r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}
