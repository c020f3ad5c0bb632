package openaihttp_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// RecordedPaths lists exactly the path ends the handler records, under any
// base path and with a trailing slash, and its result is the caller's to
// change.
func TestRecordedPaths(t *testing.T) {
	t.Parallel()
	paths := openaihttp.RecordedPaths()
	if len(paths) < 11 || paths[0] != "/chat/completions" || !slices.Contains(paths, "/api/generate") {
		t.Fatalf("RecordedPaths() = %q", paths)
	}
	for _, p := range append(slices.Clone(paths), "/v1/models", "/v1/audio/speech", "/tokenize") {
		for _, path := range []string{p, "/v1" + p, "/gateway" + p, p + "/"} {
			c := newRec(t)
			h := openaihttp.NewHandler(jsonHandler(200, nonStreamResponse), openaihttp.WithEngine(c.e))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, path, strings.NewReader(chatBody)))
			if got, want := c.count("vllm:e2e_request_latency_seconds") == 1, slices.Contains(paths, p); got != want {
				t.Errorf("POST %s recorded %v, listed %v", path, got, want)
			}
		}
	}
	paths[0] = "/changed"
	if openaihttp.RecordedPaths()[0] != "/chat/completions" {
		t.Error("changing the result changed the package's list")
	}
}
