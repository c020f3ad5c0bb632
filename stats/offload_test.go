package stats_test

import (
	"errors"
	"math"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

func validOffload() *stats.KVOffload {
	return &stats.KVOffload{
		Loads:              []stats.KVOffloadTransfer{{Bytes: 8 << 20, Seconds: 0.004}},
		Stores:             []stats.KVOffloadTransfer{{Bytes: 16 << 20, Seconds: 0.01}, {}},
		LookupSyncDelay:    []float64{0.0002},
		LookupAsyncDelay:   []float64{0.03},
		AllocationFailures: 1,
		CPU:                &stats.KVOffloadCPU{CacheUsage: 0.5, WriteUsage: 0.3, ReadUsage: 0.2, AllocationChunks: []int64{4, 16}},
	}
}

func TestKVOffloadValidate(t *testing.T) {
	s := stats.Scheduler{KVOffload: validOffload()}
	if err := s.Validate(); err != nil {
		t.Fatalf("a valid step: %v", err)
	}
	for _, c := range []struct {
		field string
		bad   func(k *stats.KVOffload)
		want  error
	}{
		{"KVOffload.Loads[0].Bytes", func(k *stats.KVOffload) { k.Loads[0].Bytes = -1 }, stats.ErrNegative},
		{"KVOffload.Stores[1].Seconds", func(k *stats.KVOffload) { k.Stores[1].Seconds = math.NaN() }, stats.ErrNotFinite},
		{"KVOffload.LookupSyncDelay[0]", func(k *stats.KVOffload) { k.LookupSyncDelay[0] = -0.1 }, stats.ErrNegative},
		{"KVOffload.LookupAsyncDelay[0]", func(k *stats.KVOffload) { k.LookupAsyncDelay[0] = math.Inf(1) }, stats.ErrNotFinite},
		{"KVOffload.AllocationFailures", func(k *stats.KVOffload) { k.AllocationFailures = -2 }, stats.ErrNegative},
		{"KVOffload.CPU.CacheUsage", func(k *stats.KVOffload) { k.CPU.CacheUsage = 1.5 }, stats.ErrOutOfRange},
		{"KVOffload.CPU.ReadUsage", func(k *stats.KVOffload) { k.CPU.ReadUsage = -0.5 }, stats.ErrNegative},
		{"KVOffload.CPU.AllocationChunks[1]", func(k *stats.KVOffload) { k.CPU.AllocationChunks[1] = -4 }, stats.ErrNegative},
	} {
		k := validOffload()
		c.bad(k)
		err := (&stats.Scheduler{KVOffload: k}).Validate()
		var fe *stats.FieldError
		if !errors.Is(err, c.want) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: Validate() = %v, want an error naming %s and matching %v", c.field, err, c.field, c.want)
		}
	}
}
