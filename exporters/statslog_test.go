package exporters

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// statsHarness is a MeterProvider with only a stats log reader on a fake
// clock, logging JSON into a buffer.
type statsHarness struct {
	t      *testing.T
	clock  *fakeClock
	buf    bytes.Buffer
	reader sdkmetric.Reader
	mp     *sdkmetric.MeterProvider
	lines  int // lines already returned by flush
}

func newStatsHarness(t *testing.T, vs []sdkmetric.View) *statsHarness {
	h := &statsHarness{t: t, clock: &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}}
	logger := slog.New(slog.NewJSONHandler(&h.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.reader = NewStatsLog(logger, WithStatsInterval(time.Hour), withClock(h.clock.now))
	h.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = h.mp.Shutdown(context.Background()) })
	return h
}

// flush makes the reader export and returns the new lines, parsed.
func (h *statsHarness) flush() []map[string]any {
	h.t.Helper()
	if err := h.mp.ForceFlush(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	var out []map[string]any
	all := strings.Split(strings.TrimSpace(h.buf.String()), "\n")
	for _, l := range all[h.lines:] {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			h.t.Fatalf("bad JSON line %q: %v", l, err)
		}
		out = append(out, m)
	}
	h.lines = len(all)
	return out
}

func checkLine(t *testing.T, line map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		got, ok := line[k]
		switch {
		case w == nil && ok:
			t.Errorf("%s = %v, want absent", k, got)
		case w != nil && got != w:
			t.Errorf("%s = %v (%T), want %v", k, got, got, w)
		}
	}
}

func TestStatsLogThroughput(t *testing.T) {
	vllmViews, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		views []sdkmetric.View
	}{{"vllm views", vllmViews}, {"no views", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newStatsHarness(t, tc.views)
			ctx := context.Background()
			rec, err := instrument.NewRecorder(instrument.WithMeterProvider(h.mp), instrument.WithModelName("m"),
				instrument.WithEngines(0, 1), instrument.WithKVConnector(), testutil.StrictErrors(t))
			if err != nil {
				t.Fatal(err)
			}
			// Interval 1: 10 s; 300 computed + 700 transferred prompt tokens,
			// 500 generation tokens over two engines.
			h.clock.advance(10 * time.Second)
			rec.RecordIteration(ctx, 0, &stats.Iteration{
				PromptTokens:     stats.PromptTokens{Computed: 300, ExternalKVTransfer: 700},
				GenerationTokens: 200, Preemptions: 2,
			})
			rec.RecordIteration(ctx, 1, &stats.Iteration{GenerationTokens: 300})
			rec.RecordScheduler(ctx, 0, &stats.Scheduler{Running: 3, WaitingCapacity: 1, WaitingDeferred: 1,
				KVCacheUsage: 0.25, PrefixCache: stats.CacheQueries{Queries: 400, Hits: 100},
				ConnectorPrefixCache: &stats.CacheQueries{Queries: 1000, Hits: 700}})
			rec.RecordScheduler(ctx, 1, &stats.Scheduler{Running: 2,
				KVCacheUsage: 0.6, PrefixCache: stats.CacheQueries{Queries: 600, Hits: 400}})
			lines := h.flush()
			if len(lines) != 1 {
				t.Fatalf("got %d lines, want 1: %v", len(lines), lines)
			}
			checkLine(t, lines[0], map[string]any{
				"msg":                              StatsMessage,
				"level":                            "INFO",
				StatsKeyModelName:                  "m",
				StatsKeyEngines:                    2.0,
				StatsKeyIntervalSeconds:            10.0,
				StatsKeyPromptThroughput:           30.0, // computed only: not (300+700)/10
				StatsKeyGenerationThroughput:       50.0,
				StatsKeyRunning:                    5.0,
				StatsKeyWaiting:                    2.0,
				StatsKeyPreemptions:                2.0,
				StatsKeyKVCacheUsage:               60.0, // the fullest engine
				StatsKeyPrefixCacheHitRate:         50.0, // (100+400)/(400+600)
				StatsKeyExternalPrefixCacheHitRate: 70.0,
			})

			// Interval 2: 4 s; only differences count.
			h.clock.advance(4 * time.Second)
			rec.RecordIteration(ctx, 0, &stats.Iteration{
				PromptTokens:     stats.PromptTokens{Computed: 10, LocalCacheHit: 90},
				GenerationTokens: 50,
			})
			rec.RecordScheduler(ctx, 1, &stats.Scheduler{Running: 1,
				KVCacheUsage: 0.125, PrefixCache: stats.CacheQueries{Queries: 100, Hits: 90}})
			lines = h.flush()
			if len(lines) != 1 {
				t.Fatalf("got %d lines, want 1: %v", len(lines), lines)
			}
			checkLine(t, lines[0], map[string]any{
				StatsKeyIntervalSeconds:            4.0,
				StatsKeyPromptThroughput:           2.5,  // 10/4
				StatsKeyGenerationThroughput:       12.5, // 50/4
				StatsKeyRunning:                    4.0,  // engine 0 still at 3
				StatsKeyWaiting:                    2.0,
				StatsKeyPreemptions:                0.0,
				StatsKeyKVCacheUsage:               25.0,
				StatsKeyPrefixCacheHitRate:         90.0,
				StatsKeyExternalPrefixCacheHitRate: 0.0, // no queries in the interval
			})
		})
	}
}

func TestStatsLogWithoutConnectorAndIdle(t *testing.T) {
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	h := newStatsHarness(t, vs)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(h.mp), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	h.clock.advance(10 * time.Second)
	rec.RecordIteration(context.Background(), 0, &stats.Iteration{GenerationTokens: 1})
	for i, want := range []map[string]any{
		{"level": "INFO", StatsKeyGenerationThroughput: 0.1, StatsKeyExternalPrefixCacheHitRate: nil,
			StatsKeyPrefixCacheHitRate: 0.0},
		{"level": "INFO", StatsKeyGenerationThroughput: 0.0}, // the first idle line after activity
		{"level": "DEBUG", StatsKeyGenerationThroughput: 0.0},
	} {
		lines := h.flush()
		if len(lines) != 1 {
			t.Fatalf("flush %d: got %d lines, want 1", i, len(lines))
		}
		checkLine(t, lines[0], want)
		h.clock.advance(10 * time.Second)
	}
}

func TestStatsLogModels(t *testing.T) {
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	h := newStatsHarness(t, vs)
	for _, model := range []string{"b", "a"} {
		rec, err := instrument.NewRecorder(instrument.WithMeterProvider(h.mp), instrument.WithModelName(model))
		if err != nil {
			t.Fatal(err)
		}
		n := int64(len(model) * 20)
		if model == "b" {
			n = 40
		}
		rec.RecordIteration(context.Background(), 0, &stats.Iteration{GenerationTokens: n})
	}
	h.clock.advance(2 * time.Second)
	lines := h.flush()
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want one per model", len(lines))
	}
	checkLine(t, lines[0], map[string]any{StatsKeyModelName: "a", StatsKeyGenerationThroughput: 10.0, StatsKeyEngines: 1.0})
	checkLine(t, lines[1], map[string]any{StatsKeyModelName: "b", StatsKeyGenerationThroughput: 20.0})
}
