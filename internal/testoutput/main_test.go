package main

import (
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/internal/testlog"
)

const events = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: a t.Log line\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: got 1, want 2\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- FAIL: TestB (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}
{"Action":"fail","Package":"p"}
{"Action":"output","Package":"q","Output":"ok  \tq\t0.01s\n"}
{"Action":"pass","Package":"q"}
`

// A run without stray lines prints go test's lines and the output of the
// failed test, not the passing one's t.Log.
func TestFilter(t *testing.T) {
	var out strings.Builder
	n, err := filter(strings.NewReader(events), &out)
	if err != nil || n != 0 {
		t.Fatalf("%d stray lines, %v", n, err)
	}
	want := "=== RUN   TestB\n    b_test.go:3: got 1, want 2\n--- FAIL: TestB (0.00s)\nFAIL\nFAIL\tp\t0.01s\nok  \tq\t0.01s\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
}

// A log line on stderr during a passing test, or after the tests, is
// stray, and said with its test.
func TestFilterStray(t *testing.T) {
	in := events + `{"Action":"output","Package":"q","Test":"TestC","Output":"2026/12/02 00:54:01 http: TLS handshake error\n"}
{"Action":"output","Package":"q","Output":"exporters: an error\n"}
`
	var out strings.Builder
	n, err := filter(strings.NewReader(in), &out)
	if err != nil || n != 2 {
		t.Fatalf("%d stray lines, %v, want 2", n, err)
	}
	for _, want := range []string{"stray output of q TestC: 2026/12/02 00:54:01 http: TLS handshake error\n", "stray output of q: exporters: an error\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed\n%s\nwant it to contain %q", out.String(), want)
		}
	}
}

// A t.Log line that test2json cut into several output events is one line:
// its continuation is not stray, and a failed test prints it whole.
func TestFilterLongLine(t *testing.T) {
	in := `{"Action":"output","Package":"q","Test":"TestD","Output":"=== RUN   TestD\n"}
{"Action":"output","Package":"q","Test":"TestD","Output":"    d_test.go:5: a long line, "}
{"Action":"output","Package":"q","Test":"TestD","Output":"continued map[x:1] 2; "}
{"Action":"output","Package":"q","Test":"TestD","Output":"and ended\n"}
{"Action":"output","Package":"q","Test":"TestD","Output":"--- FAIL: TestD (0.00s)\n"}
{"Action":"fail","Package":"q","Test":"TestD"}
{"Action":"output","Package":"q","Test":"TestE","Output":"after a line's end\n"}
`
	var out strings.Builder
	n, err := filter(strings.NewReader(in), &out)
	if err != nil || n != 1 {
		t.Fatalf("%d stray lines, %v, want 1 (TestE's)", n, err)
	}
	want := "=== RUN   TestD\n    d_test.go:5: a long line, continued map[x:1] 2; and ended\n--- FAIL: TestD (0.00s)\n"
	if !strings.HasPrefix(out.String(), want) {
		t.Errorf("printed\n%s\nwant it to start with\n%s", out.String(), want)
	}
}

// A failed test whose processes' output the harness showed after its
// failure gets its own last lines repeated at the end (a CI report shows
// the end of a run's output), without the processes' lines.
func TestFilterOwnLinesAfterTails(t *testing.T) {
	tail := testlog.TailMark
	in := `{"Action":"output","Package":"e","Test":"TestF","Output":"=== RUN   TestF\n"}
{"Action":"output","Package":"e","Test":"TestF","Output":"    f_test.go:1: started prometheus\n"}
{"Action":"output","Package":"e","Test":"TestF","Output":"    f_test.go:2: listen tcp 127.0.0.1:20001: bind: address already in use\n"}
{"Action":"output","Package":"e","Test":"TestF","Output":"    harness_test.go:9: ` + tail + `prometheus (prometheus.stderr) ----\n"}
{"Action":"output","Package":"e","Test":"TestF","Output":"        ts=1 level=info msg=\"Server is ready\"\n"}
{"Action":"output","Package":"e","Test":"TestF","Output":"        ts=2 level=info msg=\"Starting rule manager\"\n"}
{"Action":"output","Package":"e","Test":"TestF","Output":"    f_test.go:3: a line after the tails\n"}
{"Action":"output","Package":"e","Test":"TestF","Output":"        and its continuation\n"}
{"Action":"output","Package":"e","Test":"TestF","Output":"--- FAIL: TestF (8.58s)\n"}
{"Action":"fail","Package":"e","Test":"TestF"}
`
	var out strings.Builder
	if n, err := filter(strings.NewReader(in), &out); err != nil || n != 0 {
		t.Fatalf("%d stray lines, %v", n, err)
	}
	want := "--- FAIL: TestF (8.58s)\n--- FAIL: TestF: its own last lines, before the output of its processes above:\n" +
		"    f_test.go:1: started prometheus\n    f_test.go:2: listen tcp 127.0.0.1:20001: bind: address already in use\n" +
		"    f_test.go:3: a line after the tails\n        and its continuation\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("printed\n%s\nwant it to end with\n%s", out.String(), want)
	}
	if got := strings.Count(out.String(), "Starting rule manager"); got != 1 {
		t.Errorf("a process's line printed %d times, want once", got)
	}
}
