package main

import (
	"slices"

	"github.com/infermetrics/infermetrics/stats"
)

// LoRA adapters the simulated model serves. There are fewer than maxLoRA,
// so every adapter fits in one batch and the scheduler never holds a
// request back for its adapter.
const (
	maxLoRA     = 4    // vLLM's max_loras
	loraShare   = 0.4  // requests that name an adapter instead of the base model
	loraSalt    = 0x10 // draw salt of the adapter choice
	loraChoices = 3
)

var loraAdapters = [loraChoices]string{"sql-lora", "chat-lora", "code-lora"}

// requestAdapter is the LoRA adapter request id names, or "" for the base
// model: the same on the prefill and decode instances, as a P/D proxy
// passes the model name on.
func requestAdapter(id int) string {
	x := draw(id, loraSalt)
	if x >= loraShare {
		return ""
	}
	return loraAdapters[int(x/loraShare*loraChoices)]
}

// loraState is the engine's adapter state after a step, as vLLM's scheduler
// reports it (vllm:lora_requests_info): the adapters of running requests
// and those of waiting ones, deferred included; nil without LoRA.
func (e *engine) loraState() *stats.LoRA {
	if !e.lora {
		return nil
	}
	return &stats.LoRA{MaxLoRA: maxLoRA, Running: adapters(e.running), Waiting: adapters(e.waiting, e.deferred)}
}

// adapters returns the distinct adapters of the jobs, sorted.
func adapters(queues ...[]*job) []string {
	var names []string
	for _, q := range queues {
		for _, j := range q {
			if a := requestAdapter(j.id); a != "" && !slices.Contains(names, a) {
				names = append(names, a)
			}
		}
	}
	slices.Sort(names)
	return names
}
