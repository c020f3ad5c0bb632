package main

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// request is one client request as the workload generator makes it.
type request struct {
	id      int
	arrival time.Time
	prompt  int64
	// prefix is the index of the shared system prompt it starts with, or -1;
	// prefixLen is that prompt's length in tokens.
	prefix    int
	prefixLen int64
	output    int64 // tokens the model would generate before a stop token
	maxTokens int64 // 0: not set
	// abortAfter is the number of generated tokens after which the client
	// disconnects, or 0 for a client that waits to the end.
	abortAfter int64
	// ctx carries the request's span when the example traces requests
	// (-trace), else it is nil.
	ctx context.Context
	// images are the ids of the images it carries (see multimodal.go).
	images []int
}

// The log-normal shape of the tokens a request generates before its stop
// token, for generated and API requests alike.
const (
	outputMedian = 120
	outputSigma  = 0.8
)

// workload draws requests with realistic shapes: log-normal prompt and output
// lengths, a mix of shared system prompts (so prefix caches hit), max_tokens
// on some requests and a few clients that disconnect.
type workload struct {
	rng         *rand.Rand
	maxModelLen int64
	prefixes    []int64
	next        int
	multimodal  float64    // share of requests with images
	imageRng    *rand.Rand // draws the images, apart from the other draws
}

func newWorkload(seed uint64, maxModelLen int64) *workload {
	w := &workload{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), maxModelLen: maxModelLen,
		imageRng: rand.New(rand.NewPCG(seed, 0x1a6e))}
	for range 6 {
		w.prefixes = append(w.prefixes, w.logNormal(400, 0.6, 64, 1500))
	}
	return w
}

// logNormal draws a value with the given median and spread, clamped to [lo, hi].
func (w *workload) logNormal(median, sigma float64, lo, hi int64) int64 {
	return logNormal(w.rng, median, sigma, lo, hi)
}

// logNormal draws from rng a value with the given median and spread,
// clamped to [lo, hi].
func logNormal(rng *rand.Rand, median, sigma float64, lo, hi int64) int64 {
	v := int64(math.Round(median * math.Exp(sigma*rng.NormFloat64())))
	return min(max(v, lo), hi)
}

// interarrival draws the wait before the next request of a Poisson process.
func (w *workload) interarrival(rate float64) time.Duration {
	return time.Duration(w.rng.ExpFloat64() / rate * float64(time.Second))
}

func (w *workload) request(now time.Time) request {
	w.next++
	r := request{id: w.next, arrival: now, prefix: -1}
	user := w.logNormal(350, 0.9, 8, w.maxModelLen/2)
	if w.rng.Float64() < 0.7 {
		r.prefix = w.rng.IntN(len(w.prefixes))
		r.prefixLen = w.prefixes[r.prefix]
	}
	r.prompt = min(r.prefixLen+user, w.maxModelLen/2)
	r.output = w.logNormal(outputMedian, outputSigma, 1, w.maxModelLen-r.prompt)
	if w.rng.Float64() < 0.5 {
		r.maxTokens = w.logNormal(200, 0.5, 16, w.maxModelLen-r.prompt)
	}
	if w.rng.Float64() < 0.03 {
		r.abortAfter = 1 + w.rng.Int64N(max(r.output, 1))
	}
	r.images = w.images()
	return r
}
