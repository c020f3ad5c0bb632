package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestModelsAndUnknownPaths checks GET /v1/models on an instance and on
// the router (vLLM's ModelList: the served model, then the LoRA adapters
// with it as parent), and vLLM's 404 and 405 answers for the rest.
func TestModelsAndUnknownPaths(t *testing.T) {
	d := startDeployment(t)
	for _, base := range []string{d.decode.base(), d.router.base()} {
		resp, err := http.Get(base + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		var list modelList
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || list.Object != "list" || len(list.Data) != 1+len(loraAdapters) {
			t.Fatalf("%s/v1/models: %d %+v (%v); want 200 and a list of the model and its adapters", base, resp.StatusCode, list, err)
		}
		if m := list.Data[0]; m.ID != testModel || m.Object != "model" || m.OwnedBy != "vllm" || m.MaxModelLen == nil ||
			*m.MaxModelLen != maxModelLen || m.Parent != nil || len(m.Permission) != 1 {
			t.Errorf("%s: model card %+v", base, m)
		}
		for i, a := range loraAdapters {
			if m := list.Data[1+i]; m.ID != a || m.Parent == nil || *m.Parent != testModel {
				t.Errorf("%s: adapter card %+v, want %s with parent %s", base, m, a, testModel)
			}
		}
		for _, c := range []struct {
			method, path string
			status       int
			detail       string
		}{
			{http.MethodGet, "/v1/embeddings", 404, "Not Found"},
			{http.MethodGet, "/health/nope", 404, "Not Found"},
			{http.MethodPost, "/v1/models", 405, "Method Not Allowed"},
			{http.MethodGet, "/v1/messages", 405, "Method Not Allowed"},
		} {
			req, _ := http.NewRequest(c.method, base+c.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body struct{ Detail string }
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != c.status || err != nil || body.Detail != c.detail {
				t.Errorf("%s %s%s: %d %+v (%v), want %d {detail: %q}", c.method, base, c.path, resp.StatusCode, body, err, c.status, c.detail)
			}
		}
	}
}

// anthropicResult is what a client saw of one Messages API request.
type anthropicResult struct {
	status     int
	events     []string // event types, in order
	text       string
	stopReason string
	start      anthropicUsage // message_start's usage (streamed)
	usage      anthropicUsage // the final usage
	done       bool           // data: [DONE] arrived after message_stop
}

// postMessages sends a Messages API request with X-Request-Id id to url and
// reads the answer. The id fixes the request's drawn stop token.
func postMessages(t *testing.T, url, id, body string) anthropicResult {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	res := anthropicResult{status: resp.StatusCode}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		var m anthropicMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %q: %v", url, b, err)
		}
		for _, c := range m.Content {
			res.text += c.Text
		}
		if m.StopReason != nil {
			res.stopReason = *m.StopReason
		}
		res.usage = m.Usage
		return res
	}
	lines := bufio.NewScanner(resp.Body)
	event := ""
	for lines.Scan() {
		line := lines.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			res.done = len(res.events) > 0 && res.events[len(res.events)-1] == "message_stop"
			continue
		}
		var ev struct {
			Type    string
			Message *anthropicMessage
			Delta   struct {
				Text       *string `json:"text"`
				StopReason *string `json:"stop_reason"`
			} `json:"delta"`
			Usage *anthropicUsage
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != event {
			t.Fatalf("%s: event %q, data %q (%v): want JSON of the event's type", url, event, data, err)
		}
		res.events = append(res.events, ev.Type)
		if ev.Message != nil {
			res.start = ev.Message.Usage
		}
		if ev.Delta.Text != nil {
			res.text += *ev.Delta.Text
		}
		if ev.Delta.StopReason != nil {
			res.stopReason = *ev.Delta.StopReason
		}
		if ev.Usage != nil {
			res.usage = *ev.Usage
		}
	}
	return res
}

// TestMessagesAPI sends Anthropic Messages API requests, streamed and not,
// to the decode instance and through the router: the events come in vLLM's
// order, and the usage adds up to the prompt the instances counted, its
// cached part in cache_read_input_tokens (vLLM PR #40912).
func TestMessagesAPI(t *testing.T) {
	d := startDeployment(t)
	system := strings.Repeat("rules ", 90)
	body := func(stream bool) string {
		return `{"model":"` + testModel + `","max_tokens":6,"system":"` + system + `","stream":` + map[bool]string{true: "true", false: "false"}[stream] +
			`,"messages":[{"role":"user","content":[{"type":"text","text":"what is new"}]}]}`
	}
	wantEvents := "message_start content_block_start content_block_delta+ content_block_stop message_delta message_stop"
	var prompt, output int64
	for _, c := range []struct {
		name, url string
		stream    bool
	}{
		{"instance", d.decode.base(), false},
		{"instance stream", d.decode.base(), true},
		{"router", d.router.base(), false},
		{"router stream", d.router.base(), true},
	} {
		res := postMessages(t, c.url+"/v1/messages", "messages-api-"+c.name, body(c.stream))
		if res.status != http.StatusOK || res.stopReason != "max_tokens" || res.text == "" || res.usage.OutputTokens != 6 {
			t.Fatalf("%s: status %d, stop_reason %q, text %q, usage %+v; want 200, max_tokens, 6 tokens of text", c.name,
				res.status, res.stopReason, res.text, res.usage)
		}
		whole := res.usage.InputTokens + res.usage.CacheReadInputTokens + res.usage.CacheCreationInputTokens
		if c.stream {
			if got := eventPattern(res.events); got != wantEvents || !res.done {
				t.Errorf("%s: events %v, [DONE] after message_stop %v; want %s, then [DONE]", c.name, res.events, res.done, wantEvents)
			}
			if res.start.InputTokens+res.start.CacheReadInputTokens != whole || res.start.OutputTokens != 0 {
				t.Errorf("%s: message_start usage %+v, message_delta usage %+v: want the same prompt, no output yet", c.name, res.start, res.usage)
			}
		}
		// The router's requests reach the decode instance with their KV:
		// all of the prompt but its last token is cached.
		if strings.HasPrefix(c.name, "router") && (res.usage.CacheReadInputTokens != whole-1 || res.usage.InputTokens != 1) {
			t.Errorf("%s: usage %+v, want all but one prompt token read from the cache", c.name, res.usage)
		}
		prompt += whole
		output += res.usage.OutputTokens
	}
	fams := scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 4 })
	if got := total(fams, "vllm:prompt_tokens_total", nil); got != float64(prompt) {
		t.Errorf("decode vllm:prompt_tokens_total = %v, want the usage's %d", got, prompt)
	}
	if got := total(fams, "vllm:generation_tokens_total", nil); got != float64(output) {
		t.Errorf("decode vllm:generation_tokens_total = %v, want the usage's %d", got, output)
	}

	// A request vLLM's model rejects (max_tokens is required), answered in
	// the Messages API's error shape by the instance and the router.
	for _, base := range []string{d.decode.base(), d.router.base()} {
		resp, err := http.Post(base+"/v1/messages", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || err != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Errorf("%s: no max_tokens: %d %+v (%v), want 400 with an invalid_request_error", base, resp.StatusCode, e, err)
		}
	}
}

// eventPattern is the event types in order, a run of content_block_delta
// written content_block_delta+.
func eventPattern(events []string) string {
	var out []string
	for i, e := range events {
		switch {
		case e == "content_block_delta" && i > 0 && events[i-1] == e:
		case e == "content_block_delta":
			out = append(out, e+"+")
		default:
			out = append(out, e)
		}
	}
	return strings.Join(out, " ")
}

// TestStopDrawFollowsRequestID: a request's stop token is drawn from its
// X-Request-Id alone (accept), and the answer is what the draw decides: the
// Messages API's max_tokens after max_tokens tokens when the draw reaches the
// limit, end_turn after the drawn tokens when it stops before, through the
// router streamed or not, counted by the decode instance and the router as
// length and stop. Over many ids both happen at max_tokens 26 (a few in a
// hundred stop before it): a test that requires max_tokens of a request
// without a fixed id, as e2e's TestRouterSDKClients did, fails at random.
func TestStopDrawFollowsRequestID(t *testing.T) {
	const limit, ids = 26, 10000
	in := &instance{model: testModel}
	drawn := func(id string) int64 {
		max := int64(limit)
		c, err := in.accept(&apiRequest{MaxTokens: &max, Messages: []chatMessage{{Role: "user", Content: json.RawMessage(`"a question"`)}}},
			true, id, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return min(c.job.output, limit)
	}
	var early, reached []string
	for i := range ids {
		id := fmt.Sprintf("draw-%d", i)
		n := drawn(id)
		if again := drawn(id); again != n {
			t.Fatalf("%s: drew %d tokens, then %d", id, n, again)
		}
		if n < limit {
			early = append(early, id)
		} else {
			reached = append(reached, id)
		}
	}
	t.Logf("%d of %d ids stop before max_tokens %d", len(early), ids, limit)
	if len(early) == 0 || len(reached) == 0 {
		t.Fatalf("%d of %d ids stop before max_tokens %d: want some, not all", len(early), ids, limit)
	}

	d := startDeployment(t)
	body := func(stream bool) string {
		return fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":%t,"messages":[{"role":"user","content":"a question"}]}`, testModel, limit, stream)
	}
	// Two ids of each kind, one streamed and one not, each id once.
	want := map[string]float64{}
	for i, id := range []string{early[0], early[1], reached[0], reached[1]} {
		stream := i%2 == 1
		n := drawn(id)
		reason, label := "max_tokens", "length"
		if n < limit {
			reason, label = "end_turn", "stop"
		}
		res := postMessages(t, d.router.base()+"/v1/messages", id, body(stream))
		if res.status != http.StatusOK || res.stopReason != reason || res.usage.OutputTokens != n {
			t.Errorf("%s (stream %t): status %d, stop_reason %q after %d tokens; want 200, %s after the %d the draw gives",
				id, stream, res.status, res.stopReason, res.usage.OutputTokens, reason, n)
		}
		want[label]++
	}
	requests := want["stop"] + want["length"]
	for name, srv := range map[string]interface{ url() string }{"decode": d.decode, "router": d.router} {
		fams := scrapeWhen(t, srv, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == requests })
		for label, n := range want {
			if got := finished(fams, label); got != n {
				t.Errorf("%s: request_success_total{finished_reason=%q} = %v, want %v", name, label, got, n)
			}
		}
	}
}
