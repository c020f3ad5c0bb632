package main

import (
	"encoding/json"
	"os"
	"sync"

	"github.com/infermetrics/infermetrics/stats"
)

// Families whose raw values -observations writes.
const (
	familyTTFT = "vllm:time_to_first_token_seconds"
	familyE2E  = "vllm:e2e_request_latency_seconds"
)

// observations keeps every TTFT and e2e latency the engines recorded, by
// role and family, for -observations: the end-to-end suite compares
// histogram_quantile over the classic and the native series with the true
// quantiles of these values.
type observations struct {
	mu     sync.Mutex
	values map[role]map[string][]float64
}

// add keeps what RecordIteration recorded of it: the TTFTs, observed at
// the finish under priority scheduling (of requests with output) and from
// the step otherwise, as the Recorder does, and every e2e latency.
func (o *observations) add(r role, priority bool, it *stats.Iteration) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.values == nil {
		o.values = map[role]map[string][]float64{}
	}
	m := o.values[r]
	if m == nil {
		m = map[string][]float64{}
		o.values[r] = m
	}
	if !priority {
		m[familyTTFT] = append(m[familyTTFT], it.TTFT...)
	}
	for _, f := range it.Finished {
		if priority && f.GenerationTokens > 0 {
			m[familyTTFT] = append(m[familyTTFT], f.TimeToFirstToken)
		}
		m[familyE2E] = append(m[familyE2E], f.E2ELatency)
	}
}

// write writes the values as JSON: {"decode": {"vllm:...": [seconds, ...]}}.
func (o *observations) write(path string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, err := json.Marshal(o.values)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
