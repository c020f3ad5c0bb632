package instrument_test

import (
	"fmt"

	"github.com/infermetrics/infermetrics/instrument"
)

// The instruments of families older vLLM versions removed without a
// successor: the Recorder records them, and views.VLLM exports them only
// for those versions (views.WithVersion).
func ExampleLegacyDescriptors() {
	for _, d := range instrument.LegacyDescriptors() {
		fmt.Println(d.Name, d.Kind, d.Unit)
	}
	// Output:
	// vllm.prompt_tokens_recomputed counter {token}
}
