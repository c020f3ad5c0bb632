package stats

import "math"

// MaxPerfEstimate bounds each value of a PerfEstimate (1e30, a million
// times more than an exaFLOP machine does in a year): the counters fed from
// it sum float64 values, and a bound keeps every sum finite.
const MaxPerfEstimate = 1e30

// PerfEstimate is the engine's estimate of one step's work on each GPU, the
// increments of vLLM's MFU counters (vllm:estimated_flops_per_gpu_total and
// the read and write bytes; vLLM computes them with --enable-mfu-metrics).
// For a dense model a rough estimate is FLOPs = 2 x parameters x tokens
// processed, ReadBytes = the weights plus the KV read, WriteBytes = the KV
// written, each divided by the GPUs sharing the step.
type PerfEstimate struct {
	FLOPs      float64
	ReadBytes  float64
	WriteBytes float64
}

// Validate reports a NaN or infinite value (ErrNotFinite), a negative one
// (ErrNegative) or one above MaxPerfEstimate (ErrOutOfRange).
func (p *PerfEstimate) Validate() error {
	for _, v := range [...]struct {
		name string
		v    float64
	}{{"FLOPs", p.FLOPs}, {"ReadBytes", p.ReadBytes}, {"WriteBytes", p.WriteBytes}} {
		if math.IsNaN(v.v) || math.IsInf(v.v, 0) {
			return fieldErr(v.name, v.v, ErrNotFinite)
		}
		if v.v < 0 {
			return fieldErr(v.name, v.v, ErrNegative)
		}
		if v.v > MaxPerfEstimate {
			return hintedErr(v.name, v.v, ErrOutOfRange, "want at most MaxPerfEstimate")
		}
	}
	return nil
}
