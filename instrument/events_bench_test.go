package instrument_test

// The cost of one event of an event-driven engine (Events) against the step
// API in the same run, per output event of a decode batch of 64 requests:
// step, the step API's events and its RecordIteration every 64 events (the
// baseline); events, the same through Events, a window ended by Flush every
// 64 events; then many goroutines at once: events-parallel, each goroutine
// its requests, the windows ended by Events' timer, against
// step-parallel-mutex, what an engine without Events wrote (one Iteration
// behind a mutex, recorded every 64 events).

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/stats"
)

// batch is the number of requests of the benchmarks' decode batch.
const batch = 64

func benchEventsEngine(b *testing.B, window time.Duration) *instrument.Engine {
	b.Helper()
	mp, _ := benchProvider(b)
	rec, err := instrument.NewRecorder(append(benchvariants.RecorderOptions(mp, benchRank), benchErrors(b),
		instrument.WithEventWindow(window))...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rec.Close() })
	e, err := rec.Engine(benchRank)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// decodeBatch returns n running requests past their first output at start.
func decodeBatch(n int, start time.Time) []*stats.Timeline {
	tls := make([]*stats.Timeline, n)
	var step stats.Iteration
	for i := range tls {
		tls[i] = stats.NewTimeline(stats.Request{Arrival: start, PromptTokens: 512})
		tls[i].Scheduled(start, 256, 0)
		step.Output(tls[i], start, 1)
	}
	return tls
}

func BenchmarkEvents(b *testing.B) {
	start := time.Now()
	b.Run("step", func(b *testing.B) {
		e := benchEventsEngine(b, instrument.MaxEventWindow)
		tls := decodeBatch(batch, start)
		var step stats.Iteration
		now := start
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if i%batch == 0 {
				e.RecordIteration(b.Context(), &step)
				step.Reset()
				now = now.Add(time.Millisecond)
			}
			step.Output(tls[i%batch], now, 1)
		}
	})
	b.Run("events", func(b *testing.B) {
		ev := benchEventsEngine(b, instrument.MaxEventWindow).Events()
		tls := decodeBatch(batch, start)
		now := start
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if i%batch == 0 {
				ev.Flush()
				now = now.Add(time.Millisecond)
			}
			ev.Output(tls[i%batch], now, 1)
		}
	})
	b.Run("events-parallel", func(b *testing.B) {
		ev := benchEventsEngine(b, instrument.DefaultEventWindow).Events()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			tls := decodeBatch(batch, start)
			for i := 0; pb.Next(); i++ {
				ev.Output(tls[i%batch], time.Now(), 1)
			}
		})
	})
	b.Run("step-parallel-mutex", func(b *testing.B) {
		e := benchEventsEngine(b, instrument.MaxEventWindow)
		var mu sync.Mutex
		var step stats.Iteration
		var events atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			tls := decodeBatch(batch, start)
			for i := 0; pb.Next(); i++ {
				at := time.Now()
				mu.Lock()
				step.Output(tls[i%batch], at, 1)
				if events.Add(1)%batch == 0 {
					e.RecordIteration(b.Context(), &step)
					step.Reset()
				}
				mu.Unlock()
			}
		})
	})
}
