package instrument

import (
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// SetLoRAAtErr is Engine.setLoRAAt, for the tests of package instrument.
func SetLoRAAtErr(e *Engine, l *stats.LoRA, at time.Time) error { return e.setLoRAAt(l, at) }

// LoRAKept returns how many LoRA states an engine keeps and the address of
// the slice that keeps them (0 before the first state), so that a test can
// see the slice reused.
func LoRAKept(e *Engine) (n int, backing *loraState) {
	e.lora.mu.Lock()
	defer e.lora.mu.Unlock()
	if cap(e.lora.kept) == 0 {
		return 0, nil
	}
	return len(e.lora.kept), &e.lora.kept[:1][0]
}
