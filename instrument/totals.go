package instrument

import (
	"fmt"
	"math/bits"

	"github.com/infermetrics/infermetrics/stats"
)

// MaxTotal is the most an engine's total since start may reach (see
// total): 2^53, the largest integer below which float64 holds every integer.
// The SDK at sdk/metric 1.44 to 1.46 reads an int64 counter's value and an
// integer histogram's sum through a float64 (open-telemetry/opentelemetry-go
// #8981, fixed in 1.47): above 2^53 they are served rounded, and from
// 2^63 - 512 as math.MinInt64. The Prometheus exposition is float64 at any
// SDK, exact up to 2^53 too. 2^53 tokens are 285 years at a million a
// second.
const MaxTotal int64 = 1 << 53

// total is one of an engine's running totals: the sum, since construction,
// of what the engine added to an integer counter or observed into an integer
// histogram. The SDK aggregates int64 measurements in int64 sums (a
// counter's value, a histogram's sum) that wrap around past math.MaxInt64,
// which would make a counter go negative, and that the SDK before 1.47
// serves exactly only up to 2^53. With the totals a Record method refuses,
// before recording anything, a step that would take one past MaxTotal.
//
// One total may bound several streams: hits never exceed queries in a step,
// so the queries' total bounds both; prompt tokens by source, their sum and
// the cached tokens are bounded by the total over sources.
type total uint8

const (
	totPromptTokens total = iota
	totGenerationTokens
	totPreemptions
	totCorrupted
	totIterationTokens
	totRequests
	totRequestPrompt // bounds prefill KV computed tokens too
	totRequestGeneration
	totParamsMaxTokens
	totParamsN
	totMaxGeneration
	totPrefixQueries
	totMMQueries
	totExtPrefixQueries
	totSpecDrafts
	totSpecDraftTokens
	totSpecAccepted
	totSpecAcceptedPerPos
	totNIXLBytes
	totNIXLDescriptors
	totNIXLFailedTransfers
	totNIXLFailedNotifs
	totNIXLKVExpired
	totKVOffloadLoadBytes // bounds the load size histogram's sum too
	totKVOffloadStoreBytes
	totKVOffloadAllocFailures
	totKVOffloadCPUChunks
	totRequestPreemptions
	totNIXLNotifsAfterExpiry
	totClientTokens // gen_ai.client.token.usage (Backend.RecordRequest)
	totKVOffloadStoresSkipped
	totSimpleKVOffloadSaves      // over every outcome
	totSimpleKVOffloadLoadBlocks // issued and completed

	numTotals
)

// totalInstruments names each total's instrument, for errors.
var totalInstruments = [numTotals]string{
	NamePromptTokens, NameGenerationTokens, NameNumPreemptions, NameCorruptedRequests, NameIterationTokens,
	NameRequestSuccess, NameRequestPromptTokens, NameRequestGenerationTokens, NameRequestParamsMaxTokens,
	NameRequestParamsN, NameRequestMaxNumGenerationTokens, NamePrefixCacheQueries, NameMMCacheQueries,
	NameExternalPrefixCacheQueries, NameSpecDecodeNumDrafts, NameSpecDecodeNumDraftTokens,
	NameSpecDecodeNumAcceptedTokens, NameSpecDecodeNumAcceptedTokensPerPos, NameNIXLBytesTransferred,
	NameNIXLNumDescriptors, NameNIXLNumFailedTransfers, NameNIXLNumFailedNotifs, NameNIXLNumKVExpiredReqs,
	NameKVOffloadLoadBytes, NameKVOffloadStoreBytes, NameKVOffloadAllocFail, NameKVOffloadCPUAlloc,
	NameRequestNumPreemptions, NameNIXLNumNotifsAfterExp, NameGenAIClientTokenUsage,
	NameKVOffloadStoresSkipped, NameSimpleKVOffloadSaveOutcomes, NameSimpleKVOffloadLoadBlocks,
}

// increments are what one Record call adds to each total. Values added are
// validated, so non-negative.
type increments struct {
	v    [numTotals]int64
	set  uint64 // a bit per total added to: reserve reads only those
	over int    // 1 + the first total whose increment overflowed; 0 if none
}

// The totals fit increments.set.
var _ [64 - numTotals]struct{}

func (in *increments) add(t total, v int64) {
	in.set |= 1 << t
	if s := in.v[t] + v; s >= in.v[t] {
		in.v[t] = s
	} else if in.over == 0 {
		in.over = int(t) + 1
	}
}

func (in *increments) iteration(it *stats.Iteration) {
	in.add(totPromptTokens, it.PromptTokens.Total())
	in.add(totGenerationTokens, it.GenerationTokens)
	in.add(totPreemptions, it.Preemptions)
	in.add(totCorrupted, it.CorruptedRequests)
	in.add(totIterationTokens, it.TokensDone())
	for i := range it.Finished {
		in.finished(&it.Finished[i])
	}
}

func (in *increments) finished(f *stats.FinishedRequest) {
	in.add(totRequests, 1)
	in.add(totRequestPrompt, f.PromptTokens)
	in.add(totRequestGeneration, f.GenerationTokens)
	in.add(totParamsMaxTokens, f.MaxTokens)
	if n, maxGen, observe := f.Parent(); observe {
		in.add(totParamsN, n)
		in.add(totMaxGeneration, maxGen)
	}
	in.add(totRequestPreemptions, f.Preemptions)
}

func (in *increments) scheduler(s *stats.Scheduler) {
	in.add(totPrefixQueries, s.PrefixCache.Queries)
	in.add(totMMQueries, s.MultimodalCache.Queries)
	if c := s.ConnectorPrefixCache; c != nil {
		in.add(totExtPrefixQueries, c.Queries)
	}
	if sd := s.SpecDecoding; sd != nil {
		in.add(totSpecDrafts, sd.Drafts)
		in.add(totSpecDraftTokens, sd.DraftTokens)
		in.add(totSpecAccepted, sd.AcceptedTokens)
		for _, v := range sd.AcceptedPerPosition {
			in.add(totSpecAcceptedPerPos, v)
		}
	}
	if k := s.KVTransfer; k != nil {
		for _, v := range k.BytesTransferred {
			in.add(totNIXLBytes, v)
		}
		for _, v := range k.NumDescriptors {
			in.add(totNIXLDescriptors, v)
		}
		in.add(totNIXLFailedTransfers, k.FailedTransfers)
		in.add(totNIXLFailedNotifs, k.FailedNotifications)
		in.add(totNIXLKVExpired, k.ExpiredRequests)
		in.add(totNIXLNotifsAfterExpiry, k.NotificationsAfterExpiry)
	}
	in.offload(s.KVOffload)
	in.simpleOffload(s.SimpleKVOffload)
}

// reserve adds in to the engine's totals, or returns an error matching
// stats.ErrOverflow and changes nothing when a total would pass
// MaxTotal.
func (e *Engine) reserve(in *increments) error {
	if in.over != 0 {
		return e.overflow(total(in.over - 1))
	}
	e.totalsMu.Lock()
	defer e.totalsMu.Unlock()
	for set := in.set; set != 0; set &= set - 1 {
		if t := bits.TrailingZeros64(set); in.v[t] > MaxTotal-e.totals[t] {
			return e.overflow(total(t))
		}
	}
	for set := in.set; set != 0; set &= set - 1 {
		t := bits.TrailingZeros64(set)
		e.totals[t] += in.v[t]
	}
	return nil
}

func (e *Engine) overflow(t total) error {
	return fmt.Errorf("instrument: engine %d: the total of %s since start would pass MaxTotal (2^53): %w",
		e.rank, totalInstruments[t], stats.ErrOverflow)
}
