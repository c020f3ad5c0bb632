package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The long tests that set no global (the environment, the standard
// logger's) and look for no absence in a proxy's log (every live Setup's
// handler gets an OpenTelemetry error that names no Setup) call t.Parallel:
// Go runs them together once the package's other tests are done.

// testProxy is a proxy run by run() in the test's process.
type testProxy struct {
	addrs
	cancel context.CancelFunc
	done   chan int
	logs   *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for the proxy's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProxy runs the proxy with args (listening on free loopback ports)
// and the environment env, and stops it at the end of the test.
func startProxy(t *testing.T, env map[string]string, args ...string) *testProxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &testProxy{cancel: cancel, done: make(chan int, 1), logs: &syncBuffer{}}
	ready := make(chan addrs, 1)
	args = append([]string{"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-log-level", "debug"}, args...)
	go func() { p.done <- run(ctx, args, func(k string) string { return env[k] }, p.logs, p.logs, ready) }()
	select {
	case p.addrs = <-ready:
	case code := <-p.done:
		t.Fatalf("proxy exited with %d:\n%s", code, p.logs)
	}
	t.Cleanup(func() {
		if code := p.stop(t); code != 0 {
			t.Errorf("proxy exit code %d:\n%s", code, p.logs)
		}
	})
	return p
}

// stop cancels the proxy's context (as SIGTERM does) and returns its exit
// code; later calls return the same code.
func (p *testProxy) stop(t *testing.T) int {
	t.Helper()
	p.cancel()
	select {
	case code := <-p.done:
		p.done <- code
		return code
	case <-time.After(60 * time.Second):
		t.Fatalf("proxy did not stop:\n%s", p.logs)
		return -1
	}
}

func (p *testProxy) url(path string) string { return "http://" + p.proxy + path }

// running reports a proxy not stopped yet.
func (p *testProxy) running() bool {
	select {
	case code := <-p.done:
		p.done <- code
		return false
	default:
		return true
	}
}

// scrape returns the proxy's /metrics.
func (p *testProxy) scrape(t *testing.T) string {
	t.Helper()
	return p.scrapeAs(t, "")
}

// openMetricsAccept is the Accept header of a Prometheus server that
// prefers OpenMetrics.
const openMetricsAccept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

// scrapeAs returns the proxy's /metrics asked for with the Accept header
// accept ("" for none).
func (p *testProxy) scrapeAs(t *testing.T, accept string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// value sums the samples of a scrape named name whose labels include every
// name="value" pair of labels; found reports whether any matched.
func value(scrape, name string, labels ...string) (sum float64, found bool) {
	sc := bufio.NewScanner(strings.NewReader(scrape))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		ls, val := "", rest
		if rest[0] == '{' {
			end := strings.LastIndex(rest, "}")
			ls, val = rest[1:end], rest[end+1:]
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(","+ls+",", ","+labels[i]+"="+strconv.Quote(labels[i+1])+",") {
				match = false
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
		if err == nil {
			sum += f
			found = true
		}
	}
	return sum, found
}

// mustValue is value that fails the test when no sample matches.
func mustValue(t *testing.T, scrape, name string, labels ...string) float64 {
	t.Helper()
	v, ok := value(scrape, name, labels...)
	if !ok {
		t.Fatalf("no %s%v in the scrape", name, labels)
	}
	return v
}

// fixture is one entry of openaihttp's testdata/manifest.json.
type fixture struct {
	File       string          `json:"file"`
	Server     string          `json:"server"`
	Endpoint   string          `json:"endpoint"`
	Path       string          `json:"path"` // the endpoint's path, as the server serves it
	Stream     bool            `json:"stream"`
	Status     int             `json:"status"`
	Request    json.RawMessage `json:"request"`
	Prompt     *int64          `json:"prompt_tokens"`
	Completion *int64          `json:"completion_tokens"`
	Cached     *int64          `json:"cached_tokens"`
	Outcome    string          `json:"outcome"`
	Prefill    *float64        `json:"prefill_seconds"` // reported by the server (Ollama, llama.cpp)
	Decode     *float64        `json:"decode_seconds"`
}

const fixtureDir = "../../openaihttp/testdata"

func loadFixtures(t *testing.T) []fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fs []fixture
	if err := json.Unmarshal(b, &fs); err != nil || len(fs) == 0 {
		t.Fatalf("manifest: %v", err)
	}
	return fs
}

func (f fixture) body(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, f.File))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f fixture) contentType() string {
	switch filepath.Ext(f.File) {
	case ".sse":
		return "text/event-stream"
	case ".json":
		return "application/json"
	case ".ndjson":
		return "application/x-ndjson"
	}
	return "text/plain; charset=utf-8"
}

func (f fixture) model(t *testing.T) string {
	t.Helper()
	var r struct{ Model string }
	if err := json.Unmarshal(f.Request, &r); err != nil {
		t.Fatal(err)
	}
	return r.Model
}

// writeSplit writes body in pieces of size bytes, flushing after each, as a
// server streams it.
func writeSplit(w http.ResponseWriter, body []byte, size int) {
	for len(body) > 0 {
		n := min(size, len(body))
		if _, err := w.Write(body[:n]); err != nil {
			return
		}
		http.NewResponseController(w).Flush()
		body = body[n:]
	}
}

// post sends body to the proxy and returns the status and the body received.
func post(t *testing.T, u string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(u, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
