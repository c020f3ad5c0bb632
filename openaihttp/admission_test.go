package openaihttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// vLLM's admission refusals (openaihttp.VLLMQueueFull, VLLMBacklogFull)
// and another 503 of vLLM's.
const (
	queueFull        = openaihttp.VLLMQueueFull
	backlogFull      = openaihttp.VLLMBacklogFull
	otherUnavailable = `{"error":{"message":"The server is shutting down.","type":"Service Unavailable","param":null,"code":503}}`
)

// A proxy (NewHandler around a ReverseProxy whose transport is
// NewTransport, as infermetrics-proxy is) in front of a vLLM that sheds
// load: each admission refusal it passes on counts once, by the limit its
// message names, in vllm:admission_rejections_total (model_name and reason,
// no engine), and in no request family, as vLLM counts it; vLLM's other 503
// is a failed request, and a success a finished one.
func TestHandlerCountsAdmissionRejections(t *testing.T) {
	c := newRec(t)
	answers := []struct {
		status int
		body   string
	}{{503, queueFull}, {503, queueFull}, {503, backlogFull}, {503, otherUnavailable}, {200, nonStreamResponse}}
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[n.Add(1)-1]
		jsonHandler(a.status, a.body)(w, r)
	}))
	defer up.Close()
	proxy := reverseProxy(up.URL)
	proxy.Transport = openaihttp.NewTransport(nil, openaihttp.WithEngine(c.e))
	s := serve(t, c, proxy)
	for range answers {
		readAll(t, post(t, s.URL+"/v1/chat/completions", chatBody))
	}
	s.wait()
	r := c.r.Snapshot()
	for reason, want := range map[string]float64{"max_num_queued_reqs": 2, "max_num_queued_tokens": 1} {
		if got := r.Value("vllm:admission_rejections_total", "model_name", model, "reason", reason); got != want {
			t.Errorf("vllm:admission_rejections_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	for reason, want := range map[string]float64{"error": 1, "length": 1} {
		if got := r.Value("vllm:request_success_total", c.labels("finished_reason", reason)...); got != want {
			t.Errorf("vllm:request_success_total{finished_reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if h := r.Histogram("vllm:e2e_request_latency_seconds", c.labels()...); h.Count != 2 {
		t.Errorf("%d requests in vllm:e2e_request_latency_seconds, want the 2 not refused", h.Count)
	}
}

// A refusal a handler writes in several pieces counts as one written at
// once; its bytes reach the client unchanged.
func TestHandlerAdmissionRejectionInPieces(t *testing.T) {
	c := newRec(t)
	s := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		for _, p := range []string{backlogFull[:10], backlogFull[10:90], backlogFull[90:]} {
			_, _ = io.WriteString(w, p)
			w.(http.Flusher).Flush()
		}
	}))
	if got := readAll(t, post(t, s.URL+"/v1/completions", `{"model":"qwen-7b","prompt":"hi"}`)); got != backlogFull {
		t.Errorf("the client got %q", got)
	}
	s.wait()
	if got := c.r.Value("vllm:admission_rejections_total", "model_name", model, "reason", "max_num_queued_tokens"); got != 1 {
		t.Errorf("refusals = %v, want 1", got)
	}
}
