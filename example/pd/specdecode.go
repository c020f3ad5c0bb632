package main

import (
	"math/rand/v2"

	"github.com/infermetrics/infermetrics/stats"
)

// Acceptance of draft tokens: the target model accepts the draft at
// position 0 with probability specFirstAccept, and each later position, given
// the ones before it were accepted, with specDecay times the previous
// position's probability (0.8, 0.7, 0.61, ... for an EAGLE-like drafter:
// about 57% of 3 draft tokens accepted, 2.7 tokens per step).
const (
	specFirstAccept = 0.8
	specDecay       = 0.875
)

// specDecoder simulates speculative decoding on an engine: each decoding
// request gets k draft tokens per step; the target model verifies them and
// keeps the accepted prefix plus one token of its own.
type specDecoder struct {
	rng    *rand.Rand
	accept []float64 // probability of position i, given 0..i-1 were accepted
	step   stats.SpecDecoding
}

func newSpecDecoder(k int, seed uint64) *specDecoder {
	s := &specDecoder{rng: rand.New(rand.NewPCG(seed, 0x5bec)), accept: make([]float64, k)}
	p := specFirstAccept
	for i := range s.accept {
		s.accept[i] = p
		p *= specDecay
	}
	return s
}

// tokens returns the tokens j outputs this step: 1 without speculative
// decoding or before j's first token (drafts are proposed from the last
// token), else 1 plus the accepted draft tokens, never more than j still
// generates. The draft is counted in the step's stats.
func (s *specDecoder) tokens(j *job) int64 {
	if s == nil || j.tl.Generated() == 0 {
		return 1
	}
	var accepted int64
	for _, p := range s.accept {
		if s.rng.Float64() >= p {
			break
		}
		accepted++
	}
	// Tokens past a stop or the length limit are dropped; so they are not
	// counted as accepted (generation tokens = drafts + accepted tokens).
	accepted = max(min(accepted, j.remaining()-1), 0)
	k := len(s.accept)
	if len(s.step.AcceptedPerPosition) != k {
		s.step.AcceptedPerPosition = make([]int64, k)
	}
	s.step.Drafts++
	s.step.DraftTokens += int64(k)
	s.step.AcceptedTokens += accepted
	for i := range accepted {
		s.step.AcceptedPerPosition[i]++
	}
	return 1 + accepted
}

// take returns the step's speculative decoding stats and starts the next
// step; nil without speculative decoding or when the step had no draft.
func (s *specDecoder) take() *stats.SpecDecoding {
	if s == nil || s.step.Drafts == 0 {
		return nil
	}
	sd := s.step
	s.step = stats.SpecDecoding{}
	return &sd
}

// rejected is the draft tokens the target model computed and rejected in a
// step: work done without output.
func rejected(sd *stats.SpecDecoding) int64 {
	if sd == nil {
		return 0
	}
	return sd.DraftTokens - sd.AcceptedTokens
}

// remaining is the tokens j generates before it finishes: the first of its
// stop, max_tokens and client disconnect (see engine.finishReason).
func (j *job) remaining() int64 {
	gen := j.tl.Generated()
	left := j.output - gen
	if j.limit > 0 {
		left = min(left, j.limit-gen)
	}
	if j.abortAfter > 0 {
		left = min(left, j.abortAfter-gen)
	}
	return left
}
