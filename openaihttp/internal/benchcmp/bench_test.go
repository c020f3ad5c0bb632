package benchcmp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/stats"
)

// chunks is the length of the streamed response: 256 content chunks, then
// a finish chunk, a usage chunk and [DONE].
const chunks = 256

// frame is one content chunk as vLLM streams it (its shape is the one of
// openaihttp/testdata/vllm_chat_stream_usage_cached.sse).
const frame = `data: {"id":"chatcmpl-3f9a1c2e7b5d4e8f9a0b1c2d3e4f5a6b","object":"chat.completion.chunk","created":1764489600,"model":"Qwen/Qwen2.5-1.5B-Instruct","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null,"token_ids":null}]}` + "\n\n"

const tail = `data: {"id":"chatcmpl-3f9a1c2e7b5d4e8f9a0b1c2d3e4f5a6b","object":"chat.completion.chunk","created":1764489600,"model":"Qwen/Qwen2.5-1.5B-Instruct","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]}` + "\n\n" +
	`data: {"id":"chatcmpl-3f9a1c2e7b5d4e8f9a0b1c2d3e4f5a6b","object":"chat.completion.chunk","created":1764489600,"model":"Qwen/Qwen2.5-1.5B-Instruct","choices":[],"usage":{"prompt_tokens":38,"total_tokens":294,"completion_tokens":256}}` + "\n\n" +
	"data: [DONE]\n\n"

var frameBytes, tailBytes = []byte(frame), []byte(tail)

const request = `{"model":"Qwen/Qwen2.5-1.5B-Instruct","messages":[{"role":"user","content":"Say something."}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":256}`

// provider is a MeterProvider with a manual reader, shared by otelhttp
// and openaihttp: both record on the SDK, neither exports during the run.
func provider(b *testing.B) *sdkmetric.MeterProvider {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp
}

func engine(b *testing.B, mp *sdkmetric.MeterProvider) *instrument.Engine {
	r, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("Qwen/Qwen2.5-1.5B-Instruct"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	e, err := r.Engine(0)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

type body struct{ *strings.Reader }

func (body) Close() error { return nil }

// cpuNanos is the process's user and system CPU time: on a shared machine
// it moves less than the wall clock with other work.
func cpuNanos() int64 {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0
	}
	return u.Utime.Nano() + u.Stime.Nano()
}

// report adds the per-chunk figures: ns/chunk (wall) and cpu-ns/chunk over
// the loop, and allocs/chunk, the allocations a chunk adds (those of a
// 512-chunk response less those of a 256-chunk one, over 256).
func report(b *testing.B, cpu0 int64, run func(n int)) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/chunks, "ns/chunk")
	b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N)/chunks, "cpu-ns/chunk")
	a1 := testing.AllocsPerRun(20, func() { run(chunks) })
	a2 := testing.AllocsPerRun(20, func() { run(2 * chunks) })
	b.ReportMetric((a2-a1)/chunks, "allocs/chunk")
	b.ReportMetric(a1, "allocs/response")
}

// BenchmarkHandlerStream serves a 256-chunk SSE stream through a plain
// handler, otelhttp.NewHandler and openaihttp.NewHandler, in the same run.
func BenchmarkHandlerStream(b *testing.B) {
	mp := provider(b)
	e := engine(b, mp)
	stream := func(n int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			f := w.(http.Flusher)
			for range n {
				_, _ = w.Write(frameBytes)
				f.Flush()
			}
			_, _ = w.Write(tailBytes)
		})
	}
	for _, v := range []struct {
		name string
		wrap func(http.Handler) http.Handler
	}{
		{"plain", func(h http.Handler) http.Handler { return h }},
		{"otelhttp", func(h http.Handler) http.Handler {
			return otelhttp.NewHandler(h, "chat", otelhttp.WithMeterProvider(mp), otelhttp.WithTracerProvider(noop.NewTracerProvider()))
		}},
		{"infermetrics", func(h http.Handler) http.Handler { return openaihttp.NewHandler(h, openaihttp.WithEngine(e)) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			hs := map[int]http.Handler{chunks: v.wrap(stream(chunks)), 2 * chunks: v.wrap(stream(2 * chunks))}
			w := &discard{h: http.Header{}}
			req, _ := http.NewRequest(http.MethodPost, "http://gw/v1/chat/completions", nil)
			run := func(n int) {
				req.Body = body{strings.NewReader(request)}
				hs[n].ServeHTTP(w, req)
			}
			b.ReportAllocs()
			cpu0 := cpuNanos()
			for b.Loop() {
				run(chunks)
			}
			report(b, cpu0, run)
		})
	}
}

// longHost is the host fixed answers with a 512-chunk body.
const longHost = "decode-L"

// fixed answers every request with the same streamed body.
type fixed map[int][]byte

func (f fixed) RoundTrip(r *http.Request) (*http.Response, error) {
	n := chunks
	if r.URL.Host == longHost {
		n = 2 * chunks
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(f[n])), Request: r}, nil
}

// BenchmarkTransportStream reads a 256-chunk SSE stream, one chunk per
// Read as a streaming client reads, through a plain RoundTripper,
// otelhttp.NewTransport and openaihttp.NewTransport, in the same run.
func BenchmarkTransportStream(b *testing.B) {
	mp := provider(b)
	bodies := fixed{}
	for _, n := range []int{chunks, 2 * chunks} {
		bodies[n] = []byte(strings.Repeat(frame, n) + tail)
	}
	for _, v := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"plain", bodies},
		{"otelhttp", otelhttp.NewTransport(bodies, otelhttp.WithMeterProvider(mp), otelhttp.WithTracerProvider(noop.NewTracerProvider()))},
		{"infermetrics", openaihttp.NewTransport(bodies, openaihttp.WithEngine(engine(b, mp)), openaihttp.WithBackend("decode-0", instrument.RoleDecode))},
	} {
		b.Run(v.name, func(b *testing.B) {
			buf := make([]byte, len(frame))
			ctx := context.Background()
			run := func(n int) {
				url := "http://decode-0/v1/chat/completions"
				if n != chunks {
					url = "http://" + longHost + "/v1/chat/completions"
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, body{strings.NewReader(request)})
				resp, err := v.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := resp.Body.Read(buf); err != nil {
						break
					}
				}
				_ = resp.Body.Close()
			}
			b.ReportAllocs()
			cpu0 := cpuNanos()
			for b.Loop() {
				run(chunks)
			}
			report(b, cpu0, run)
		})
	}
}

// BenchmarkChunkGapRecord is the OpenTelemetry record of one inter-chunk
// gap alone, on the SDK the stream benchmarks record on: what each side
// pays per content chunk before any scanning (handler: Engine.RecordChunkGap,
// vllm:inter_token_latency_seconds with 2 attributes; transport:
// Backend.RecordChunkGap, gen_ai.client.operation.time_per_output_chunk
// with 7).
func BenchmarkChunkGapRecord(b *testing.B) {
	mp := provider(b)
	e := engine(b, mp)
	backend, err := e.Backend("decode-0", instrument.RoleDecode)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, v := range []struct {
		name   string
		record func()
	}{
		{"handler", func() { e.RecordChunkGap(ctx, 0.02) }},
		{"transport", func() { backend.RecordChunkGap(ctx, stats.OperationChat, 0.02) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuNanos()
			for b.Loop() {
				v.record()
			}
			b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
