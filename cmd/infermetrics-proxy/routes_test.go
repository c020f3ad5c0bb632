package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// chatJSON answers every request with a chat completion and its usage.
func chatJSON(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
}

// sendTo makes one request to the proxy and reads its answer.
func sendTo(t *testing.T, p *testProxy, method, path, body string) {
	t.Helper()
	req, err := http.NewRequest(method, p.url(path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// wantHandlers waits until the HTTP families counted each handler's
// requests, and checks that no label carries what clients put in paths.
func wantHandlers(t *testing.T, p *testProxy, want map[[2]string]float64, secrets ...string) string {
	t.Helper()
	var s string
	waitFor(t, func() (bool, string) {
		s = p.scrape(t)
		for k, n := range want {
			if v, _ := value(s, "http_requests_total", "handler", k[0], "method", k[1]); v != n {
				return false, fmt.Sprintf("handler %q %s: %v requests, want %v\n%s", k[0], k[1], v, n, grep(s, "http_requests_total"))
			}
		}
		return true, ""
	})
	for _, secret := range secrets {
		if strings.Contains(s, secret) {
			t.Errorf("the scrape carries %q:\n%s", secret, grep(s, secret))
		}
	}
	return s
}

// The handler label of the HTTP families is the pattern of the route a
// request's path matches, none for a path that matches no route: an ID, a
// key or a deployment a client put in a path is no label (issue 27, item 5).
func TestHandlerLabels(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(chatJSON))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)
	sendTo(t, p, http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[]}`)
	sendTo(t, p, http.MethodPost, "/sk-secret-key/v1/chat/completions", `{"model":"m","messages":[]}`)
	sendTo(t, p, http.MethodPost, "/openai/deployments/private-deploy/chat/completions?api-version=2024-10-21", `{"messages":[]}`)
	sendTo(t, p, http.MethodGet, "/v1/files/file-secret", "")
	sendTo(t, p, http.MethodGet, "/v1/models", "")
	s := wantHandlers(t, p, map[[2]string]float64{
		{"/v1/chat/completions", "POST"}:                              1,
		{"/{prefix...}/v1/chat/completions", "POST"}:                  1,
		{"/openai/deployments/{deployment}/chat/completions", "POST"}: 1,
		{"none", "GET"}: 2,
	}, "sk-secret-key", "file-secret", `handler="/openai/deployments/private-deploy`)
	// The deployment is the model of a request whose body names none.
	if v, _ := value(s, "vllm:request_success_total", "model_name", "private-deploy", "finished_reason", "stop"); v != 1 {
		t.Errorf("requests of the deployment's model: %v, want 1\n%s", v, grep(s, "vllm:request_success_total"))
	}
}

// -route (here INFERMETRICS_PROXY_ROUTE, a comma-separated list) maps
// other paths to an API, tried before the built-in rules: recorded, the
// model from a {model} segment, -include-usage asking for usage on a chat
// route, and none keeping a path that ends like an API from being recorded.
func TestRouteFlag(t *testing.T) {
	asked := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		asked <- string(b)
		chatJSON(w, r)
	}))
	defer up.Close()
	env := map[string]string{"INFERMETRICS_PROXY_ROUTE": "/serving/{model}/generate=chat, /survey/responses=none"}
	p := startProxy(t, env, "-upstream", up.URL, "-include-usage")
	sendTo(t, p, http.MethodPost, "/serving/llama-3/generate", `{"messages":[],"stream":true}`)
	if b := <-asked; !strings.Contains(b, `"include_usage":true`) {
		t.Errorf("-include-usage did not rewrite a chat route's stream: %s", b)
	}
	sendTo(t, p, http.MethodPost, "/survey/responses", `{"model":"m"}`)
	<-asked
	s := wantHandlers(t, p, map[[2]string]float64{
		{"/serving/{model}/generate", "POST"}: 1,
		{"/survey/responses", "POST"}:         1,
	}, "llama-3/generate")
	if v, _ := value(s, "vllm:request_success_total", "model_name", "llama-3"); v != 1 {
		t.Errorf("requests of the model the path names: %v, want 1\n%s", v, grep(s, "vllm:request_success_total"))
	}
	if v, _ := value(s, "vllm:request_success_total", "model_name", "m"); v != 0 {
		t.Errorf("a route of API none was recorded")
	}
	if !strings.Contains(p.logs.String(), "/serving/{model}/generate=chat,/survey/responses=none") {
		t.Errorf("the routes are not in the start log:\n%s", p.logs)
	}
}
