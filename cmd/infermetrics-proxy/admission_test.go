package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// In front of a vLLM that sheds load, the proxy passes each admission
// refusal on unchanged and counts it in vllm:admission_rejections_total by
// its reason, not as a request, as vLLM counts it; a 503 of a load balancer
// is a failed request only.
func TestAdmissionRejectionsThroughProxy(t *testing.T) {
	t.Parallel()
	const refusal = `{"error":{"message":"The engine has reached its prefill token backlog limit. ` +
		`Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Balancer") != "" {
			http.Error(w, "no healthy upstream", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, refusal)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)
	for _, balancer := range []string{"", "", "yes"} {
		req, _ := http.NewRequest(http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(`{"model":"m"}`))
		req.Header.Set("X-Balancer", balancer)
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || balancer == "" && string(body) != refusal {
			t.Errorf("the client got %d %q", resp.StatusCode, body)
		}
	}
	waitFor(t, func() (bool, string) {
		s := p.scrape(t)
		failed, _ := value(s, "vllm:request_success_total", "model_name", "m", "finished_reason", "error")
		refused, _ := value(s, "vllm:admission_rejections_total", "model_name", "m")
		return failed == 1 && refused == 2, fmt.Sprintf("failed %v, refused %v", failed, refused)
	})
	s := p.scrape(t)
	if got := mustValue(t, s, "vllm:admission_rejections_total", "model_name", "m", "reason", "max_num_queued_tokens"); got != 2 {
		t.Errorf("admission rejections (prefill backlog) = %v, want 2:\n%s", got, grep(s, "admission"))
	}
	if got := mustValue(t, s, "vllm:admission_rejections_total", "model_name", "m", "reason", "max_num_queued_reqs"); got != 0 {
		t.Errorf("admission rejections (requests) = %v, want 0", got)
	}
}
