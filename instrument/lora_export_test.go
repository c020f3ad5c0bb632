package instrument

import (
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// SetLoRAAtErr is Engine.setLoRAAt, for the tests of package instrument.
func SetLoRAAtErr(e *Engine, l *stats.LoRA, at time.Time) error { return e.setLoRAAt(l, at) }
