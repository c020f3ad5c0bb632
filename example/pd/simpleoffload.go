package main

import (
	"math/rand/v2"

	"github.com/infermetrics/infermetrics/stats"
)

// simpleCapacity is the blocks of the decode engines' offload pool.
const simpleCapacity = 2048

// simpleOffload simulates vLLM's SimpleCPUOffloadConnector on a decode
// engine: when a request finishes, its KV blocks are handed to a CPU pool
// (stored, or skipped or dropped, as the connector decides), and a shared
// prompt the pool holds but the prefix cache has evicted is loaded back
// when a request needing it arrives. Transfers complete in the next step.
type simpleOffload struct {
	rng  *rand.Rand
	held map[int]bool // shared prompts in the pool
	step stats.SimpleKVOffload
	// Blocks of the loads and stores issued in the previous step, which
	// complete in this one.
	loading, storing int64
}

func newSimpleOffload(seed uint64) *simpleOffload {
	return &simpleOffload{rng: rand.New(rand.NewPCG(seed, 0x5173)), held: map[int]bool{}}
}

// simpleLoad loads a request's shared prompt back from the pool when the
// prefix cache has lost it.
func (e *engine) simpleLoad(j *job) {
	s := e.simple
	if s == nil || j.prefix < 0 || !s.held[j.prefix] || e.cache.has(j.prefix) {
		return
	}
	s.step.LoadBlocksIssued += min(j.prefixLen, j.prompt) / blockSize
}

// simpleStore hands a finished request's blocks to the pool.
func (e *engine) simpleStore(j *job, reason stats.FinishReason) {
	s := e.simple
	if s == nil {
		return
	}
	blocks := (j.prompt + j.tl.Generated()) / blockSize
	switch {
	case reason == stats.FinishAbort:
		s.step.DroppedRequestGone++
	case blocks == 0:
		s.step.DroppedNullBlock++
	case j.prefix >= 0 && s.held[j.prefix] && s.rng.Float64() < 0.5:
		s.step.SkippedAlreadyCached++
	case s.rng.Float64() < 0.05:
		s.step.SkippedInFlight++
	case s.storing+s.step.PendingStoreBlocks+blocks > simpleCapacity:
		s.step.DroppedCPUFull++
	default:
		s.step.Stored++
		s.step.PendingStoreBlocks += blocks
		if j.prefix >= 0 {
			s.held[j.prefix] = true
		}
	}
}

// take returns the step's connector stats, nil without a connector.
func (s *simpleOffload) take() *stats.SimpleKVOffload {
	if s == nil {
		return nil
	}
	st := s.step
	st.LoadBlocksCompleted = s.loading
	s.loading, s.storing = st.LoadBlocksIssued, st.PendingStoreBlocks
	st.UsedBlocks = st.LoadBlocksIssued + st.PendingStoreBlocks
	s.step = stats.SimpleKVOffload{}
	return &st
}
