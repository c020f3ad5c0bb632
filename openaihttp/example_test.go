package openaihttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/views"
)

// A Go service serving an OpenAI-compatible API records vLLM's request
// families from what it sends its clients.
func ExampleNewHandler() {
	vllm, _ := views.VLLM()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vllm...))
	rec, _ := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("qwen-7b"))
	engine, _ := rec.Engine(0)

	// The service's own handler, streaming a completion.
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"Hello", " world"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
		io.WriteString(w, `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}`+"\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	})
	srv := httptest.NewServer(openaihttp.NewHandler(api, openaihttp.WithEngine(engine)))
	resp, _ := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"qwen-7b","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	srv.Close() // waits for the handler, which records at its end

	fmt.Println("vllm:request_success_total{finished_reason=stop}", sum(reader, "vllm:request_success", "stop"))
	fmt.Println("vllm:prompt_tokens_total", sum(reader, "vllm:prompt_tokens", ""))
	fmt.Println("vllm:generation_tokens_total", sum(reader, "vllm:generation_tokens", ""))
	// Output:
	// vllm:request_success_total{finished_reason=stop} 1
	// vllm:prompt_tokens_total 9
	// vllm:generation_tokens_total 2
}

// A P/D router sends each request to a prefill backend, then to a decode
// backend, through one transport; the GenAI client metrics carry each
// leg's backend and role, and the Trace of the request's context ties the
// legs together.
func ExampleNewTransport() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec, _ := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("qwen-7b"))
	engine, _ := rec.Engine(0)

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":40,"completion_tokens":1}}`)
	}))
	defer backend.Close()
	client := &http.Client{Transport: openaihttp.NewTransport(http.DefaultTransport, openaihttp.WithEngine(engine))}

	ctx, trace := openaihttp.NewTrace(context.Background()) // NewHandler gives each request one
	for _, role := range []string{instrument.RolePrefill, instrument.RoleDecode} {
		leg := openaihttp.ContextWithBackend(ctx, openaihttp.Backend{Name: role + "-0", Role: role})
		req, _ := http.NewRequestWithContext(leg, http.MethodPost, backend.URL+"/v1/completions",
			strings.NewReader(`{"model":"qwen-7b","prompt":"hi","max_tokens":1}`))
		resp, _ := client.Do(req)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, l := range trace.Legs() {
		fmt.Println(l.Backend.Role, l.Observed.Reason, l.Observed.PromptTokens)
	}
	fmt.Println("KV transferred:", trace.KVTransferred())
	fmt.Println("gen_ai.client.operation.duration count", count(reader, instrument.NameGenAIClientOperationDuration))
	// Output:
	// prefill length 40
	// decode length 40
	// KV transferred: true
	// gen_ai.client.operation.duration count 2
}

// A gateway records each client request and its upstream leg with a
// ReverseProxy between NewHandler and NewTransport; ForwardBody in its
// Rewrite sends upstream the request body the handler read, which the
// transport then does not read again.
func ExampleForwardBody() {
	vllm, _ := views.VLLM()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vllm...))
	rec, _ := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("qwen-7b"))
	engine, _ := rec.Engine(0)

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("upstream got %s\n", body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2}}`)
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			openaihttp.ForwardBody(pr)
			pr.SetURL(target)
		},
		Transport: openaihttp.NewTransport(nil, openaihttp.WithEngine(engine)),
	}
	srv := httptest.NewServer(openaihttp.NewHandler(proxy, openaihttp.WithEngine(engine)))
	resp, _ := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"qwen-7b","messages":[{"role":"user","content":"hi"}]}`))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	srv.Close()

	fmt.Println("vllm:prompt_tokens_total", sum(reader, "vllm:prompt_tokens", ""))
	fmt.Println("gen_ai.client.operation.duration count", count(reader, instrument.NameGenAIClientOperationDuration))
	// Output:
	// upstream got {"model":"qwen-7b","messages":[{"role":"user","content":"hi"}]}
	// vllm:prompt_tokens_total 9
	// gen_ai.client.operation.duration count 1
}

// A proxy that rewrites requests itself asks for usage on the ones the
// handler's WithIncludeUsage would rewrite: streams, "stream" read as vLLM
// reads it, that did not ask for usage.
func ExampleStreamsWithoutUsage() {
	for _, body := range []string{
		`{"model":"m","stream":true}`,
		`{"model":"m","stream":"yes"}`,
		`{"model":"m","stream":1,"stream_options":{"include_usage":true}}`,
		`{"model":"m","stream":false}`,
	} {
		if openaihttp.StreamsWithoutUsage([]byte(body)) {
			out, _ := openaihttp.AskUsage([]byte(body))
			fmt.Printf("%s\n", out)
			continue
		}
		fmt.Println("unchanged", body)
	}
	// Output:
	// {"model":"m","stream":true,"stream_options":{"include_usage":true}}
	// {"model":"m","stream":"yes","stream_options":{"include_usage":true}}
	// unchanged {"model":"m","stream":1,"stream_options":{"include_usage":true}}
	// unchanged {"model":"m","stream":false}
}

// sum returns a counter's value summed over series, those with the reason
// given only.
func sum(r *sdkmetric.ManualReader, name, reason string) int64 {
	var rm metricdata.ResourceMetrics
	_ = r.Collect(context.Background(), &rm)
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range s.DataPoints {
					if v, _ := dp.Attributes.Value(instrument.KeyFinishedReason); reason == "" || v.AsString() == reason {
						total += dp.Value
					}
				}
			}
		}
	}
	return total
}

// count returns a histogram's count over series.
func count(r *sdkmetric.ManualReader, name string) uint64 {
	var rm metricdata.ResourceMetrics
	_ = r.Collect(context.Background(), &rm)
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	return n
}
