package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// TestHTTPFamilies sends the router a few requests (its model list, a chat
// completion, a path it does not serve, a served path with another method)
// and checks the HTTP families of vLLM's API server on the router and on
// both instances, which get the router's legs: one series per route
// template, method and status class with the requests it served, "none"
// for the 404 and 405 answers, nothing for /metrics however often it was
// scraped, and each histogram counting every request.
func TestHTTPFamilies(t *testing.T) {
	d := startDeployment(t)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/models"},
		{http.MethodGet, "/no/such/path"},
		{http.MethodPost, "/v1/models"},
		{http.MethodGet, "/metrics"},
	} {
		req, _ := http.NewRequest(c.method, d.router.base()+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	body := `{"model":"test-model","messages":[{"role":"user","content":"Hi"}],"max_tokens":3}`
	if res := post(t, context.Background(), d.router.base()+"/v1/chat/completions", body, nil); res.status != http.StatusOK {
		t.Fatalf("router chat completion: status %d", res.status)
	}
	// Each server's requests: "handler method status" -> count.
	want := map[string]map[string]float64{
		"router": {
			"/v1/models GET 2xx":            1,
			"none GET 4xx":                  1, // 404
			"none POST 4xx":                 1, // 405
			"/v1/chat/completions POST 2xx": 1,
		},
		// The router passes GET /v1/models on to the decode instance.
		"decode":  {"/v1/models GET 2xx": 1, "/v1/chat/completions POST 2xx": 1},
		"prefill": {"/v1/chat/completions POST 2xx": 1},
	}
	servers := map[string]interface{ url() string }{"router": d.router, "decode": d.decode, "prefill": d.prefill}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		var requests float64
		for _, n := range want[name] {
			requests += n
		}
		fams := scrapeWhen(t, servers[name], func(f map[string]*dto.MetricFamily) bool {
			return total(f, "http_requests_total", nil) >= requests
		})
		got := map[string]float64{}
		for _, m := range fams["http_requests_total"].GetMetric() {
			got[fmt.Sprintf("%s %s %s", label(m, "handler"), label(m, "method"), label(m, "status"))] += m.GetCounter().GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(want[name]) {
			t.Errorf("%s: http_requests_total %v, want %v", name, got, want[name])
		}
		byHandler := map[string]float64{}
		for k, n := range want[name] {
			var handler, method, status string
			fmt.Sscan(k, &handler, &method, &status)
			byHandler[handler+" "+method] += n
		}
		gotDuration := map[string]float64{}
		for _, m := range fams["http_request_duration_seconds"].GetMetric() {
			gotDuration[label(m, "handler")+" "+label(m, "method")] += float64(m.GetHistogram().GetSampleCount())
		}
		if fmt.Sprint(gotDuration) != fmt.Sprint(byHandler) {
			t.Errorf("%s: http_request_duration_seconds counts %v, want %v", name, gotDuration, byHandler)
		}
		highr := fams["http_request_duration_highr_seconds"].GetMetric()
		if len(highr) != 1 || len(highr[0].GetLabel()) != 0 || float64(highr[0].GetHistogram().GetSampleCount()) != requests {
			t.Errorf("%s: http_request_duration_highr_seconds %v, want one unlabelled series counting %v requests", name, highr, requests)
		}
	}
}
