package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Requests and responses on every path pass through unchanged: method,
// path and query, headers (X-Forwarded-For as the client sent it, none
// added), body, status and response headers.
func TestPassThrough(t *testing.T) {
	type seen struct {
		method, uri, xff string
		hasXFF           bool
		body             []byte
	}
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, has := r.Header["X-Forwarded-For"]
		got <- seen{r.Method, r.RequestURI, r.Header.Get("X-Forwarded-For"), has, b}
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write(append([]byte("echo:"), b...))
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)
	body := []byte{0, 1, 2, 0xff, '{', '"'}
	for _, c := range []struct {
		method, path string
		xff          string
	}{
		{http.MethodGet, "/v1/models", ""},
		{http.MethodGet, "/health", ""},
		{http.MethodPost, "/api/chat?x=1&y=%20", "10.0.0.1"},
		// A query net/url does not parse (a ';', a bad escape), a
		// credential in it, passes on as it came too.
		{http.MethodPost, "/v1/chat/completions?api-version=1&api-key=k;ey&z=%zz", ""},
		{http.MethodPost, "/v1/chat/completions", ""}, // not JSON: passed on, recorded as an error
		{http.MethodDelete, "/anything/at/all", ""},
	} {
		req, err := http.NewRequest(c.method, p.url(c.path), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if c.xff != "" {
			req.Header.Set("X-Forwarded-For", c.xff)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s := <-got
		if s.method != c.method || s.uri != c.path || !bytes.Equal(s.body, body) {
			t.Errorf("%s %s: upstream saw %s %s %q", c.method, c.path, s.method, s.uri, s.body)
		}
		if s.hasXFF != (c.xff != "") || s.xff != c.xff {
			t.Errorf("%s: upstream saw X-Forwarded-For %q (present %v), client sent %q", c.path, s.xff, s.hasXFF, c.xff)
		}
		if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Upstream") != "yes" || !bytes.Equal(rb, append([]byte("echo:"), body...)) {
			t.Errorf("%s: client got %d %v %q", c.path, resp.StatusCode, resp.Header, rb)
		}
	}
}

// Every fixture of openaihttp replays through the proxy on its own path
// (vLLM, SGLang, Ollama and llama.cpp chat and completions; vLLM's
// Responses, Anthropic Messages, embeddings and pooling; Ollama's native
// /api/chat and /api/generate NDJSON, /api/embed and /api/embeddings): the
// client receives the upstream's bytes exactly, and the proxy records the
// manifest's finish reason and usage.
func TestFixturesThroughProxy(t *testing.T) {
	t.Parallel()
	fs := loadFixtures(t)
	var mu sync.Mutex
	current := map[string]fixture{} // by model: each fixture gets its own model name
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		model := r.Header.Get("X-Test-Model")
		mu.Lock()
		f := current[model]
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", f.contentType())
		w.WriteHeader(f.Status)
		writeSplit(w, f.body(t), 7)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL, "-max-models", "100")
	for i, f := range fs {
		// One model name per fixture, so that its series stand apart.
		model := fmt.Sprintf("fixture-%02d", i)
		req := bytes.Replace(f.Request, []byte(`"model": "`+f.model(t)+`"`), []byte(`"model":"`+model+`"`), 1)
		req = bytes.Replace(req, []byte(`"model":"`+f.model(t)+`"`), []byte(`"model":"`+model+`"`), 1)
		if !bytes.Contains(req, []byte(model)) {
			t.Fatalf("%s: no model in %s", f.File, f.Request)
		}
		mu.Lock()
		current[model] = f
		mu.Unlock()
		hr, _ := http.NewRequest(http.MethodPost, p.url(f.Path), bytes.NewReader(req))
		hr.Header.Set("X-Test-Model", model)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != f.Status || !bytes.Equal(got, f.body(t)) {
			t.Errorf("%s: client got %d and %d bytes, upstream sent %d and %d bytes", f.File, resp.StatusCode, len(got), f.Status, len(f.body(t)))
		}
	}
	all := p.scrape(t)
	models := byModel(all) // the scrape holds 50 models' series
	for i, f := range fs {
		model := fmt.Sprintf("fixture-%02d", i)
		s := models[model]
		reason := f.Outcome
		if reason == "abort" {
			reason = "error" // cut by the server while the client was reading (openaihttp's rule)
		}
		if v := mustValue(t, s, "vllm:request_success_total", "model_name", model, "finished_reason", reason); v != 1 {
			t.Errorf("%s: request_success_total{finished_reason=%q} = %v, want 1", f.File, reason, v)
		}
		var wantGen, wantPrompt float64
		if f.Completion != nil && f.Outcome != "error" {
			wantGen, wantPrompt = float64(*f.Completion), float64(*f.Prompt)
		}
		if f.Completion != nil && f.Outcome == "error" {
			wantGen, wantPrompt = -1, -1 // openaihttp's choice for usage after an error: not asserted here
		}
		if wantGen >= 0 {
			if v := mustValue(t, s, "vllm:generation_tokens_total", "model_name", model); v != wantGen {
				t.Errorf("%s: generation_tokens_total = %v, want %v", f.File, v, wantGen)
			}
			if v := mustValue(t, s, "vllm:prompt_tokens_total", "model_name", model); v != wantPrompt {
				t.Errorf("%s: prompt_tokens_total = %v, want %v", f.File, v, wantPrompt)
			}
		}
		if f.Cached != nil && f.Outcome != "error" {
			if v := mustValue(t, s, "vllm:prompt_tokens_cached_total", "model_name", model); v != float64(*f.Cached) {
				t.Errorf("%s: prompt_tokens_cached_total = %v, want %d", f.File, v, *f.Cached)
			}
		}
		if f.Stream && f.Status < 400 {
			if v := mustValue(t, s, "vllm:time_to_first_token_seconds_count", "model_name", model); v != 1 {
				t.Errorf("%s: TTFT count %v, want 1", f.File, v)
			}
		}
		// The prefill and decode times the server reported (Ollama's
		// native API, llama.cpp's timings), and none from the others.
		for _, w := range []struct {
			family string
			want   *float64
		}{{"vllm:request_prefill_time_seconds", f.Prefill}, {"vllm:request_decode_time_seconds", f.Decode}} {
			n, _ := value(s, w.family+"_count", "model_name", model)
			sum, _ := value(s, w.family+"_sum", "model_name", model)
			if w.want == nil && n != 0 || w.want != nil && (n != 1 || math.Abs(sum-*w.want) > 1e-9) {
				t.Errorf("%s: %s count %v sum %v, want the server's %v", f.File, w.family, n, sum, w.want)
			}
		}
		// Each is an HTTP request of its path.
		if v, _ := value(all, "http_requests_total", "handler", f.Path, "method", "POST"); v < 1 {
			t.Errorf("%s: http_requests_total{handler=%q} %v", f.File, f.Path, v)
		}
	}
}

// A slow stream reaches the client chunk by chunk: the upstream sends its
// second chunk only after the client has read the first through the proxy.
func TestSlowStreamFlushesEachChunk(t *testing.T) {
	next := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"},\"finish_reason\":null}]}\n\n", i)
			http.NewResponseController(w).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)
	resp, err := http.Post(p.url("/v1/chat/completions"), "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	for i := range 3 {
		want := fmt.Sprintf(`"t%d"`, i)
		var got []byte
		for !bytes.Contains(got, []byte(want)) {
			n, err := resp.Body.Read(buf)
			if err != nil {
				t.Fatalf("chunk %d: %v after %q", i, err, got)
			}
			got = append(got, buf[:n]...)
		}
		next <- struct{}{}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	s := p.scrape(t)
	if v := mustValue(t, s, "vllm:inter_token_latency_seconds_count", "model_name", "m"); v != 2 {
		t.Errorf("inter-chunk latencies %v, want 2", v)
	}
	if v := mustValue(t, s, "vllm:request_success_total", "model_name", "m", "finished_reason", "stop"); v != 1 {
		t.Errorf("stop %v, want 1", v)
	}
}

// A client that hangs up mid-stream is an abort, and the upstream's
// request is canceled; an upstream that hangs up mid-stream is an error
// (openaihttp's handler records the ReverseProxy's
// panic(http.ErrAbortHandler) as the response stood and raises it again).
func TestHangUp(t *testing.T) {
	upCanceled := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n")
		http.NewResponseController(w).Flush()
		if strings.HasSuffix(r.URL.Path, "/v1/completions") { // the upstream hangs up
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		<-r.Context().Done()
		close(upCanceled)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(`{"model":"client","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Body.Read(make([]byte, 512))
	cancel()
	resp.Body.Close()
	select {
	case <-upCanceled:
	case <-time.After(waitLimit):
		t.Fatal("the upstream's request was not canceled")
	}

	resp, err = http.Post(p.url("/v1/completions"), "application/json", strings.NewReader(`{"model":"server","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	// The client sees the stream cut, not a clean end.
	if _, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Error("the upstream hung up, but the client's stream ended cleanly")
	}
	resp.Body.Close()

	waitFor(t, func() (bool, string) {
		s := p.scrape(t)
		a, _ := value(s, "vllm:request_success_total", "model_name", "client", "finished_reason", "abort")
		e, _ := value(s, "vllm:request_success_total", "model_name", "server", "finished_reason", "error")
		// Both are served requests of the HTTP families, with the status sent.
		hc, _ := value(s, "http_requests_total", "handler", "/v1/chat/completions", "status", "2xx")
		hs, _ := value(s, "http_requests_total", "handler", "/v1/completions", "status", "2xx")
		return a == 1 && e == 1 && hc == 1 && hs == 1, fmt.Sprintf("abort %v, error %v, http %v %v\n%s", a, e, hc, hs, grep(s, "request"))
	})
}

// waitLimit bounds a wait for what the proxy does after the client saw
// the end of its response: far beyond its time on a loaded machine, and
// within the time a test may take.
const waitLimit = 5 * time.Second

// waitFor polls check until it holds (the proxy records a request when
// its handler returns, which may be after the client saw the end).
func waitFor(t *testing.T, check func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		ok, detail := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Requests go to the upstreams in turn; each leg is recorded by backend and
// role; a decode upstream's cached tokens are external_kv_transfer.
func TestRoundRobinAndRoles(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	newUp := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[name]++
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":8}}}`)
		}))
	}
	a, b := newUp("a"), newUp("b")
	defer a.Close()
	defer b.Close()
	p := startProxy(t, nil, "-upstream", "aggregated="+a.URL, "-upstream", "decode="+b.URL)
	for range 4 {
		if code, _ := post(t, p.url("/v1/chat/completions"), []byte(`{"model":"m","messages":[]}`)); code != 200 {
			t.Fatal(code)
		}
	}
	if hits["a"] != 2 || hits["b"] != 2 {
		t.Errorf("hits %v, want 2 each", hits)
	}
	s := p.scrape(t)
	for _, c := range []struct{ up, role string }{{a.URL, "aggregated"}, {b.URL, "decode"}} {
		host := strings.TrimPrefix(c.up, "http://")
		if v := mustValue(t, s, "gen_ai_client_operation_duration_seconds_count", "backend", host, "backend_role", c.role); v != 2 {
			t.Errorf("%s legs %v, want 2", c.role, v)
		}
	}
	// 2 requests through each: cached 8 of 10 is local_cache_hit on the
	// aggregated upstream, external_kv_transfer on the decode one.
	for src, want := range map[string]float64{"local_compute": 8, "local_cache_hit": 16, "external_kv_transfer": 16} {
		if v := mustValue(t, s, "vllm:prompt_tokens_by_source_total", "model_name", "m", "source", src); v != want {
			t.Errorf("source %s: %v, want %v", src, v, want)
		}
	}
}

// At most -max-models model names get series of their own; the others
// share model_name="_overflow", and a request without a model (none, or
// one openaihttp does not read: longer than 256 bytes, or in a body that
// is not JSON) is -default-model's (names that are not UTF-8:
// TestModelNames).
func TestModelCap(t *testing.T) {
	p := startProxy(t, nil, "-upstream", stopUpstream(t).URL, "-max-models", "3")
	bodies := []string{`{"messages":[]}`, `{"model":"a"}`, `{"model":"b"}`, `{"model":"c"}`, `{"model":"d"}`, `{"model":"a"}`,
		`{"model":"\xff"}`, // an invalid JSON escape: no model read
		`{"model":"` + strings.Repeat("x", 300) + `"}`} // longer than a model name: no model
	for _, b := range bodies {
		post(t, p.url("/v1/chat/completions"), []byte(b))
	}
	s := p.scrape(t)
	for model, want := range map[string]float64{"default": 3, "a": 2, "b": 1, OverflowModel: 2} {
		if v := mustValue(t, s, "vllm:request_success_total", "model_name", model, "finished_reason", "stop"); v != want {
			t.Errorf("model %s: %v, want %v", model, v, want)
		}
	}
	for _, model := range []string{"c", "d"} {
		if _, ok := value(s, "vllm:request_success_total", "model_name", model); ok {
			t.Errorf("model %s has series beyond -max-models", model)
		}
	}
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A response the client asked to be compressed passes through compressed,
// byte for byte, and is recorded with its finish reason and usage:
// openaihttp observes a gzip body decoded.
func TestCompressedPassesThrough(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	fmt.Fprint(zw, `{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	zw.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			t.Errorf("upstream got Accept-Encoding %q", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz.Bytes())
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)
	req, _ := http.NewRequest(http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(`{"model":"gz"}`))
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, gz.Bytes()) || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("client got %d bytes (%q), upstream sent %d gzipped", len(got), resp.Header.Get("Content-Encoding"), gz.Len())
	}
	waitFor(t, func() (bool, string) {
		s := p.scrape(t)
		stop, _ := value(s, "vllm:request_success_total", "model_name", "gz", "finished_reason", "stop")
		g, _ := value(s, "vllm:generation_tokens_total", "model_name", "gz")
		p, _ := value(s, "vllm:prompt_tokens_total", "model_name", "gz")
		return stop == 1 && g == 2 && p == 3, fmt.Sprintf("stop %v, generation tokens %v, prompt tokens %v", stop, g, p)
	})
}

// A response whose cached tokens exceed its prompt (xAI's grok through
// Azure AI Foundry) is counted once in
// infermetrics_invalid_events_total{kind="value_dropped"}, plain or
// gzipped, though the proxy's handler and its transport both record it
// (the warnings are rate-limited: their count is not checked). Before,
// each response counted 2.
func TestValueDroppedOncePerResponse(t *testing.T) {
	t.Parallel()
	const resp = `{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":213,"total_tokens":223,"prompt_tokens_details":{"cached_tokens":161}}}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	fmt.Fprint(zw, resp)
	zw.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Accept-Encoding") == "gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(gz.Bytes())
			return
		}
		_, _ = io.WriteString(w, resp)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)
	for _, coding := range []string{"", "gzip"} {
		req, _ := http.NewRequest(http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(`{"model":"xai"}`))
		req.Header.Set("Accept-Encoding", coding)
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	waitFor(t, func() (bool, string) {
		s := p.scrape(t)
		stop, _ := value(s, "vllm:request_success_total", "model_name", "xai", "finished_reason", "stop")
		legs, _ := value(s, "gen_ai_client_operation_duration_seconds_count", "gen_ai_request_model", "xai")
		return stop == 2 && legs == 2, fmt.Sprintf("stop %v, legs %v", stop, legs)
	})
	s := p.scrape(t)
	if got := mustValue(t, s, "infermetrics_invalid_events_total", "model_name", "xai", "kind", "value_dropped"); got != 2 {
		t.Errorf("value_dropped = %v for 2 responses, want 2:\n%s", got, grep(s, "invalid_events"))
	}
}

// Every request the proxy serves, on every path, is counted in vLLM's API
// server HTTP families (openaihttp.WithHTTPMetrics): http_requests_total by
// handler (the route's pattern, none for a path no route matches:
// TestHandlerLabels), method and status class, and both duration
// histograms (a hang-up counts too: TestHangUp).
func TestHTTPMetrics(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
		case "/v1/models":
			fmt.Fprint(w, `{"data":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)
	for range 3 {
		post(t, p.url("/v1/chat/completions"), []byte(`{"model":"m","messages":[]}`))
	}
	for _, path := range []string{"/v1/models", "/v1/models", "/no/such/path"} {
		resp, err := http.Get(p.url(path))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	want := []struct {
		handler, method, status string
		n, durations            float64 // durations: of the handler and method, any status
	}{
		{"/v1/chat/completions", "POST", "2xx", 3, 3},
		{"none", "GET", "2xx", 2, 3},
		{"none", "GET", "4xx", 1, 3},
	}
	waitFor(t, func() (bool, string) {
		s := p.scrape(t)
		for _, w := range want {
			if v, _ := value(s, "http_requests_total", "handler", w.handler, "method", w.method, "status", w.status); v != w.n {
				return false, fmt.Sprintf("%+v: %v\n%s", w, v, grep(s, "http_request"))
			}
			if v, _ := value(s, "http_request_duration_seconds_count", "handler", w.handler, "method", w.method); v != w.durations {
				return false, fmt.Sprintf("%+v: duration count %v\n%s", w, v, grep(s, "http_request_duration_seconds_count"))
			}
		}
		v, _ := value(s, "http_request_duration_highr_seconds_count")
		return v == 6, fmt.Sprintf("highr count %v, want 6", v)
	})
	// They are recorded on -default-model's Engine, which exists from the
	// start (one of -max-models) though no request came without a model.
	if _, ok := value(p.scrape(t), "vllm:num_requests_running", "model_name", "default"); !ok {
		t.Error("no series of -default-model")
	}
}
