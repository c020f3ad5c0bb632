package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/testutil"
)

const testModel = "test-model"

// deployment is an in-process prefill instance, decode instance (two
// engines) and router, with the simulation's optional features off.
type deployment struct {
	prefill, decode *instance
	router          *routerServer
}

func startDeployment(t *testing.T) *deployment { return startDeploymentCached(t, false) }

// startDeploymentCached is startDeployment with the instances' P/D usage
// of vLLM from PR #54222 (prefillCached: -cached-tokens prefill) or before.
func startDeploymentCached(t *testing.T, prefillCached bool) *deployment {
	t.Helper()
	// Whatever the instances' and the router's Recorders refuse fails the
	// test, once the engines have stopped (cleanups run last-registered
	// first).
	refused := &testutil.Errors{}
	t.Cleanup(func() {
		if errs := refused.Take(); len(errs) > 0 {
			t.Errorf("the Recorders refused %d times; the first: %v", len(errs), errs[0])
		}
	})
	return startDeploymentOf(t, faults{}, prefillCached, refused)
}

// startFaultyDeployment is startDeployment with faults injected (see
// faults.go) and every server's Setup options beside, whose Recorders
// report what they refuse to refused.
func startFaultyDeployment(t *testing.T, f faults, refused *testutil.Errors, setup ...exporters.Option) *deployment {
	t.Helper()
	return startDeploymentOf(t, f, false, refused, setup...)
}

// startDeploymentOf is startFaultyDeployment with the instances'
// prefillCached (see instanceConfig).
func startDeploymentOf(t *testing.T, f faults, prefillCached bool, refused *testutil.Errors, setup ...exporters.Option) *deployment {
	t.Helper()
	// A scrape whose connection the shutdown closes mid-write is reported to
	// otel.Handle, which logs: to the test's log, not stderr.
	testlog.StdLogger(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	d := &deployment{}
	for _, c := range []instanceConfig{
		{role: prefillRole, engines: 1, kvCapacity: 64 << 10, seed: 2},
		{role: decodeRole, engines: 2, kvCapacity: 10 << 10, seed: 1},
	} {
		c.listen, c.model, c.faults, c.setup, c.prefillCached = "127.0.0.1:0", testModel, f, setup, prefillCached
		c.recorder = []instrument.Option{refused.Option()}
		in, err := newInstance(ctx, c)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		wg.Go(func() { _ = in.serve() })
		for _, e := range in.engines {
			wg.Go(func() { e.run(ctx) })
		}
		t.Cleanup(func() { _ = in.shutdown(context.Background()) })
		if c.role == prefillRole {
			d.prefill = in
		} else {
			d.decode = in
		}
	}
	rs, err := newRouterServer(ctx, "127.0.0.1:0", testModel, setup, d.prefill, d.decode, f.handoffDelay, refused.Option())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	d.router = rs
	wg.Go(func() { _ = rs.serve() })
	t.Cleanup(func() { // first
		cancel() // the engines stop and every API handler returns
		_ = rs.shutdown(context.Background())
	})
	return d
}

// chunk is the part of a response object or SSE chunk the tests read.
type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Text    *string `json:"text"`
		Delta   *struct{ Role, Content string }
		Message *struct{ Role, Content string }
		Finish  *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
		Details          *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	KVTransferParams *kvTransferParams `json:"kv_transfer_params"`
}

// content is the chunk's text or chat content.
func (c chunk) content() string {
	var b strings.Builder
	for _, ch := range c.Choices {
		switch {
		case ch.Text != nil:
			b.WriteString(*ch.Text)
		case ch.Delta != nil:
			b.WriteString(ch.Delta.Content)
		case ch.Message != nil:
			b.WriteString(ch.Message.Content)
		}
	}
	return b.String()
}

// result is what a client saw of one request.
type result struct {
	status    int
	chunks    []chunk // the one object of a response not streamed
	done      bool    // data: [DONE] arrived
	firstText time.Duration
	text      string
	finish    string
	usage     chunk // the chunk with usage
}

// post sends body to url and reads the answer as a client would, streamed
// (SSE) or not. stop, when not nil, is called on each content chunk and
// ends the reading (and the request) when it returns true.
func post(t *testing.T, ctx context.Context, url, body string, stop func(chunk) bool) result {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	res := result{status: resp.StatusCode}
	add := func(c chunk) {
		res.chunks = append(res.chunks, c)
		if s := c.content(); s != "" && res.text == "" {
			res.firstText = time.Since(start)
		}
		res.text += c.content()
		for _, ch := range c.Choices {
			if ch.Finish != nil {
				res.finish = *ch.Finish
			}
		}
		if c.Usage != nil {
			res.usage = c
		}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var c chunk
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		add(c)
		return res
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("%s: not an SSE data line: %q", url, line)
		}
		if data == "[DONE]" {
			res.done = true
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("%s: chunk %q: %v", url, data, err)
		}
		add(c)
		if stop != nil && c.content() != "" && stop(c) {
			return res
		}
	}
	return res
}

// scrapeWhen polls an instance's or the router's /metrics until ready
// holds, and returns that scrape.
func scrapeWhen(t *testing.T, in interface{ url() string }, ready func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		text, err := get(in.url())
		if err != nil {
			t.Fatal(err)
		}
		if fams, err = parse(text); err != nil {
			t.Fatal(err)
		}
		if ready(fams) {
			return fams
		}
	}
	t.Fatalf("%s: the scrape did not reach the expected state", in.url())
	return nil
}

// finished is the requests an instance finished with reason ("" for all).
func finished(fams map[string]*dto.MetricFamily, reason string) float64 {
	var n float64
	for _, m := range fams["vllm:request_success_total"].GetMetric() {
		if reason == "" || label(m, "finished_reason") == reason {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// total is the sum of a counter family's series carrying the labels.
func total(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	var v float64
	for _, m := range fams[name].GetMetric() {
		ok := true
		for k, want := range labels {
			ok = ok && label(m, k) == want
		}
		if ok {
			v += m.GetCounter().GetValue()
		}
	}
	return v
}

// TestInstanceAPI sends each endpoint's requests, streamed and not, to the
// decode instance (no KV transfer: it prefills itself) and checks the
// answers' format and usage against the tokens the instance counted.
func TestInstanceAPI(t *testing.T) {
	d := startDeployment(t)
	tokens := `[` + strings.Repeat(`1,`, 99) + `1]` // 100 prompt tokens
	cases := []struct {
		name, path, body, finish string
		stream, usage            bool
	}{
		{"chat stream usage", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":"one two three"}],
			"max_tokens":12,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, "length", true, true},
		{"chat stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"one two three"}],
			"max_tokens":7,"ignore_eos":true,"stream":true}`, "length", true, false},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}],
			"max_completion_tokens":9,"ignore_eos":true}`, "length", false, true},
		{"completions stream usage", "/v1/completions", `{"prompt":` + tokens + `,"max_tokens":5,"ignore_eos":true,
			"stream":true,"stream_options":{"include_usage":true}}`, "length", true, true},
		{"completions stop", "/v1/completions", `{"prompt":"a b c d e f"}`, "stop", false, true},
	}
	var prompt, completion int64
	for _, c := range cases {
		res := post(t, context.Background(), d.decode.base()+c.path, c.body, nil)
		if res.status != http.StatusOK || res.finish != c.finish || res.text == "" {
			t.Fatalf("%s: status %d, finish_reason %q, text %q; want 200, %q, some text", c.name, res.status, res.finish, res.text, c.finish)
		}
		if c.stream && (!res.done || len(res.chunks) < 2) {
			t.Errorf("%s: %d chunks, [DONE] %v; want several chunks and [DONE]", c.name, len(res.chunks), res.done)
		}
		if !c.usage {
			if res.usage.Usage != nil {
				t.Errorf("%s: usage without stream_options.include_usage", c.name)
			}
			prompt += 3*4/3 + messageTokens // "one two three"
			completion += 7
			continue
		}
		u := res.usage.Usage
		if u == nil || u.Details == nil || u.TotalTokens != u.PromptTokens+u.CompletionTokens || u.CompletionTokens < 1 {
			t.Fatalf("%s: usage %+v, want prompt, completion and cached tokens adding up", c.name, u)
		}
		if c.stream && len(res.usage.Choices) != 0 {
			t.Errorf("%s: the usage chunk has choices", c.name)
		}
		if c.path == "/v1/completions" && strings.HasPrefix(c.body, `{"prompt":[`) && u.PromptTokens != 100 {
			t.Errorf("%s: prompt_tokens %d, want the 100 token ids", c.name, u.PromptTokens)
		}
		if c.finish == "length" && u.CompletionTokens != map[string]int64{"chat stream usage": 12, "chat": 9, "completions stream usage": 5}[c.name] {
			t.Errorf("%s: completion_tokens %d, want max_tokens", c.name, u.CompletionTokens)
		}
		prompt += u.PromptTokens
		completion += u.CompletionTokens
	}

	fams := scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == float64(len(cases)) })
	if got := total(fams, "vllm:prompt_tokens_total", nil); got != float64(prompt) {
		t.Errorf("vllm:prompt_tokens_total = %v, want the usage's %d", got, prompt)
	}
	if got := total(fams, "vllm:generation_tokens_total", nil); got != float64(completion) {
		t.Errorf("vllm:generation_tokens_total = %v, want the usage's %d", got, completion)
	}
	if got := finished(fams, "length"); got != 4 {
		t.Errorf("request_success_total{finished_reason=length} = %v, want 4", got)
	}
}

// TestInstanceDisconnect reads a streamed request's first chunk and goes
// away: the instance aborts it, and its scrape counts an abort.
func TestInstanceDisconnect(t *testing.T) {
	d := startDeployment(t)
	ctx, cancel := context.WithCancel(context.Background())
	res := post(t, ctx, d.decode.base()+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"go on"}],"max_tokens":4000,"ignore_eos":true,"stream":true}`,
		func(chunk) bool { return true })
	cancel()
	if res.status != http.StatusOK || res.text == "" {
		t.Fatalf("status %d, text %q; want a first chunk", res.status, res.text)
	}
	fams := scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 1 })
	if got := finished(fams, "abort"); got != 1 {
		t.Errorf("request_success_total{finished_reason=abort} = %v, want 1", got)
	}
	if got := total(fams, "vllm:generation_tokens_total", nil); got < 1 || got >= 4000 {
		t.Errorf("vllm:generation_tokens_total = %v, want the tokens before the disconnect", got)
	}
}

// TestInstanceBadRequests checks vLLM's error answers, and that a rejected
// request records nothing.
func TestInstanceBadRequests(t *testing.T) {
	d := startDeployment(t)
	for _, c := range []struct {
		body   string
		status int
	}{
		{`{"messages":`, http.StatusBadRequest},
		{`{"model":"other","messages":[{"role":"user","content":"x"}]}`, http.StatusNotFound},
		{`{"messages":[]}`, http.StatusBadRequest},
		{`{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, http.StatusBadRequest},
		{`{"messages":[{"role":"user","content":"x"}],"max_tokens":9000}`, http.StatusBadRequest},
		{`{"messages":[{"role":"user","content":"x"}],"n":2}`, http.StatusBadRequest},
		{`{"messages":[{"role":"user","content":{"not":"text"}}]}`, http.StatusBadRequest},
	} {
		resp, err := http.Post(d.decode.base()+"/v1/chat/completions", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.status || err != nil || e.Error.Code != c.status || e.Error.Message == "" {
			t.Errorf("%s: %d %+v (%v), want %d with an error object", c.body, resp.StatusCode, e, err, c.status)
		}
	}
	resp, err := http.Get(d.decode.base() + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", resp.StatusCode)
	}
	fams := scrapeWhen(t, d.decode, func(map[string]*dto.MetricFamily) bool { return true })
	if got := total(fams, "vllm:prompt_tokens_total", nil); got != 0 {
		t.Errorf("vllm:prompt_tokens_total = %v after rejected requests, want 0", got)
	}
}

// TestPrefillKVTransferParams checks the prefill leg's answer: one token,
// finish_reason length and NIXL's kv_transfer_params, which a decode
// instance takes as the prompt's KV arriving by transfer.
func TestPrefillKVTransferParams(t *testing.T) {
	d := startDeployment(t)
	body := `{"prompt":` + `[` + strings.Repeat(`7,`, 39) + `7]` + `,"max_tokens":1,` +
		`"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,` +
		`"remote_block_ids":null,"remote_host":null,"remote_port":null}}`
	res := post(t, context.Background(), d.prefill.base()+"/v1/completions", body, nil)
	p := res.chunks[0].KVTransferParams
	if res.finish != "length" || p == nil || !p.DoRemotePrefill || p.DoRemoteDecode || len(p.RemoteBlockIDs) != 3 ||
		p.RemoteEngineID == nil || p.RemoteHost == nil || p.RemotePort == nil {
		t.Fatalf("finish_reason %q, kv_transfer_params %+v; want length and NIXL's fields, 3 blocks of 40 tokens", res.finish, p)
	}
	// Without do_remote_decode there is nothing to hand over.
	res = post(t, context.Background(), d.prefill.base()+"/v1/completions", `{"prompt":"a b","max_tokens":1}`, nil)
	if res.chunks[0].KVTransferParams != nil {
		t.Errorf("kv_transfer_params %+v without do_remote_decode", res.chunks[0].KVTransferParams)
	}

	params, _ := json.Marshal(p)
	decode := `{"prompt":` + `[` + strings.Repeat(`7,`, 39) + `7]` + `,"max_tokens":3,"ignore_eos":true,"kv_transfer_params":` + string(params) + `}`
	res = post(t, context.Background(), d.decode.base()+"/v1/completions", decode, nil)
	// As in vLLM, the decode node recomputes the last prompt token for its
	// logits: 39 of the 40 are cached (remoteComputed).
	if u := res.usage.Usage; u == nil || u.Details == nil || u.Details.CachedTokens != 39 {
		t.Errorf("decode usage %+v, want 39 of the 40 transferred prompt tokens reported cached", res.usage.Usage)
	}
	fams := scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 1 })
	for source, want := range map[string]float64{"external_kv_transfer": 39, "local_compute": 1, "local_cache_hit": 0} {
		if got := total(fams, "vllm:prompt_tokens_by_source_total", map[string]string{"source": source}); got != want {
			t.Errorf("decode %s = %v, want %v", source, got, want)
		}
	}
	if !bytes.Contains(params, []byte(`"remote_request_id"`)) {
		t.Errorf("kv_transfer_params %s without remote_request_id", params)
	}
}
