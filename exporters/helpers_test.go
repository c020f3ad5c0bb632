package exporters

import (
	"context"
	"maps"
	"math"
	"net"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	collpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	grpcstats "google.golang.org/grpc/stats"

	"github.com/infermetrics/infermetrics/exporters/internal/exportertest"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/stats"
)

// receiver is an in-process OTLP/gRPC metrics receiver.
type receiver struct {
	collpb.UnimplementedMetricsServiceServer
	addr string
	// hang, when not nil, makes Export block until it is closed or the
	// client gives up: a collector that accepts connections and never answers.
	hang chan struct{}

	mu        sync.Mutex
	reqs      []*collpb.ExportMetricsServiceRequest
	headers   []metadata.MD
	encodings []string // grpc-encoding of every RPC
}

// TagRPC, HandleRPC, TagConn and HandleConn make the receiver a gRPC stats
// handler, which sees the compression of each request (grpc-encoding is not
// in the metadata a service sees).
func (r *receiver) TagRPC(ctx context.Context, _ *grpcstats.RPCTagInfo) context.Context { return ctx }

func (r *receiver) HandleRPC(_ context.Context, s grpcstats.RPCStats) {
	if h, ok := s.(*grpcstats.InHeader); ok {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.encodings = append(r.encodings, h.Compression)
	}
}

func (r *receiver) TagConn(ctx context.Context, _ *grpcstats.ConnTagInfo) context.Context { return ctx }

func (r *receiver) HandleConn(context.Context, grpcstats.ConnStats) {}

func (r *receiver) lastEncoding() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.encodings) == 0 {
		return "<no request>"
	}
	return r.encodings[len(r.encodings)-1]
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{}
	r.serve(t, "127.0.0.1:0")
	return r
}

// serve makes r listen on addr (a port of 0 picks one; r.addr is set to the
// address) and returns the function that stops it, closing its connections.
// A stopped receiver can serve again on the same address: what it received
// is kept.
func (r *receiver) serve(t testing.TB, addr string) (stop func()) {
	t.Helper()
	var lis net.Listener
	var err error
	for range 50 { // the port of a stopped receiver may take a moment to free
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.addr = lis.Addr().String()
	srv := grpc.NewServer(grpc.StatsHandler(r))
	collpb.RegisterMetricsServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv.Stop
}

func (r *receiver) Export(ctx context.Context, req *collpb.ExportMetricsServiceRequest) (*collpb.ExportMetricsServiceResponse, error) {
	if r.hang != nil {
		select {
		case <-r.hang:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	r.headers = append(r.headers, md)
	return &collpb.ExportMetricsServiceResponse{}, nil
}

// requests returns a copy of what the receiver holds. Never call it while a
// shutdown or flush runs against the receiver with the lock held: it only
// takes the lock for the copy.
func (r *receiver) requests() []*collpb.ExportMetricsServiceRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

func (r *receiver) lastHeaders() metadata.MD {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.headers) == 0 {
		return nil
	}
	return r.headers[len(r.headers)-1]
}

// waitFor polls cond until it holds or the (generous) deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closedAddr returns a 127.0.0.1 address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// The scrape helpers shared with package exporters/prometheus's tests.
var (
	scrape      = exportertest.Scrape
	parseScrape = exportertest.ParseScrape
)

type (
	sample    = exportertest.Sample
	errorSink = exportertest.Errors // collects the errors given to an error handler
)

// compareSamples reports every series that is not the same in the scrape
// and at the OTLP receiver, and counts the non-zero counters and non-empty
// histograms compared (to show the comparison is not vacuous). Histograms at
// zero only in the scrape are the handler's start-up series, which OTLP does
// not carry (see completeStartup).
func compareSamples(t *testing.T, fromProm, fromOTLP map[string]sample) (counters, histograms int) {
	t.Helper()
	// The process_* families come from client_golang's process collector on
	// the registry, not from the MeterProvider: OTLP does not carry them.
	fromProm = maps.Clone(fromProm)
	maps.DeleteFunc(fromProm, func(k string, _ sample) bool { return strings.HasPrefix(k, "process_") })
	keys := slices.Collect(maps.Keys(fromProm))
	for k := range fromOTLP {
		if _, ok := fromProm[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		pv, inProm := fromProm[k]
		ov, inOTLP := fromOTLP[k]
		switch {
		case !inProm:
			t.Errorf("%s only in OTLP: %+v", k, ov)
		case !inOTLP && pv.Buckets != nil && pv.Count == 0 && pv.Sum == 0:
		case !inOTLP:
			t.Errorf("%s only in the scrape: %+v", k, pv)
		case !sameSample(pv, ov):
			t.Errorf("%s differs:\nscrape %+v\nOTLP   %+v", k, pv, ov)
		}
		if strings.Contains(k, "_total{") && pv.Value > 0 {
			counters++
		}
		if pv.Count > 0 {
			histograms++
		}
	}
	return counters, histograms
}

// sameSample compares two samples exactly but for float sums, which each
// reader adds up on its own: with concurrent recording the additions come
// in another order and may round differently in the last bits.
func sameSample(a, b sample) bool {
	sums := a.Sum == b.Sum || math.Abs(a.Sum-b.Sum) <= 1e-12*math.Max(math.Abs(a.Sum), math.Abs(b.Sum))
	a.Sum, b.Sum = 0, 0
	return sums && reflect.DeepEqual(a, b)
}

func otlpLabels(attrs []*commonpb.KeyValue) map[string]string {
	labels := map[string]string{}
	for _, kv := range attrs {
		labels[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return labels
}

func numberValue(dp *metricpb.NumberDataPoint) float64 {
	if _, ok := dp.GetValue().(*metricpb.NumberDataPoint_AsInt); ok {
		return float64(dp.GetAsInt())
	}
	return dp.GetAsDouble()
}

// otlpSamples maps the series of the given requests to their latest value,
// named as the Prometheus exposition names them (counters get _total).
func otlpSamples(reqs []*collpb.ExportMetricsServiceRequest) map[string]sample {
	out := map[string]sample{}
	for _, req := range reqs {
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					switch d := m.GetData().(type) {
					case *metricpb.Metric_Sum:
						name := m.GetName()
						if d.Sum.GetIsMonotonic() {
							name += "_total"
						}
						for _, dp := range d.Sum.GetDataPoints() {
							out[benchvariants.Key(name, otlpLabels(dp.GetAttributes()))] = sample{Value: numberValue(dp)}
						}
					case *metricpb.Metric_Gauge:
						for _, dp := range d.Gauge.GetDataPoints() {
							out[benchvariants.Key(m.GetName(), otlpLabels(dp.GetAttributes()))] = sample{Value: numberValue(dp)}
						}
					case *metricpb.Metric_Histogram:
						for _, dp := range d.Histogram.GetDataPoints() {
							s := sample{Count: dp.GetCount(), Sum: dp.GetSum(), Buckets: map[float64]uint64{}}
							var cum uint64
							for i, bound := range dp.GetExplicitBounds() {
								cum += dp.GetBucketCounts()[i]
								s.Buckets[bound] = cum
							}
							out[benchvariants.Key(m.GetName(), otlpLabels(dp.GetAttributes()))] = s
						}
					}
				}
			}
		}
	}
	return out
}

// driveScenario records a small deployment on rec: requests on engines 0 and
// 1 followed with stats.Timeline, a preemption, prefix cache and KV connector
// lookups.
func driveScenario(t *testing.T, rec *instrument.Recorder) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for i := range 6 {
		rank := i % 2
		arrival := base.Add(time.Duration(i) * time.Second)
		prompt := int64(100 + 37*i)
		tl := stats.NewTimeline(stats.Request{Arrival: arrival, PromptTokens: prompt, MaxTokens: 64})
		err := tl.Err()
		must(err)
		tl.Queued(arrival.Add(ms(5)))
		local, external := int64(16*(i%3)), int64(0)
		if i == 3 {
			external = prompt - local - 10
		}
		tl.Scheduled(arrival.Add(ms(20+10*i)), local, external)
		var it stats.Iteration
		now := arrival.Add(ms(150 + 40*i))
		o, err := tl.Output(now, 1)
		must(err)
		must(it.AddOutput(o))
		rec.RecordIteration(ctx, rank, &it)
		for k := 1; k <= 4+i; k++ {
			it.Reset()
			now = now.Add(ms(20 + 7*k))
			if i == 4 && k == 2 {
				must(tl.Preempted(now))
				it.Preemptions = 1
				now = now.Add(ms(300))
				tl.Scheduled(now, prompt, 0)
				now = now.Add(ms(30))
			}
			o, err := tl.Output(now, 1)
			must(err)
			must(it.AddOutput(o))
			if k == 4+i {
				reason := stats.FinishLength
				if i%3 == 0 {
					reason = stats.FinishStop
				}
				f, err := tl.Finish(now, reason)
				must(err)
				must(it.AddFinished(f))
			}
			rec.RecordIteration(ctx, rank, &it)
		}
		rec.RecordScheduler(ctx, rank, &stats.Scheduler{
			Running:         int64(1 + i),
			WaitingCapacity: int64(i % 2),
			KVCacheUsage:    0.1 * float64(i),
			PrefixCache:     stats.CacheQueries{Queries: prompt, Hits: local},
			ConnectorPrefixCache: &stats.CacheQueries{
				Queries: prompt - local, Hits: external,
			},
		})
	}
}
