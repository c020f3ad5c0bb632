package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/internal/testlog"
)

// required reports whether E2E_REQUIRED=1: then a missing tool fails the
// run instead of skipping it.
func required() bool { return os.Getenv("E2E_REQUIRED") == "1" }

// tools are the external binaries the suite runs.
type tools struct {
	prometheus, promtool, otelcol string
}

// findTools looks the binaries up: prometheus and promtool on PATH, the
// collector at $E2E_OTELCOL or bin/otelcol (built by scripts/e2e-deps.sh).
func findTools() (tools, []string) {
	var tl tools
	var missing []string
	for _, b := range []struct {
		name string
		dst  *string
	}{{"prometheus", &tl.prometheus}, {"promtool", &tl.promtool}} {
		p, err := exec.LookPath(b.name)
		if err != nil {
			missing = append(missing, b.name)
			continue
		}
		*b.dst = p
	}
	col, ok := builtBinary("E2E_OTELCOL", "otelcol")
	if !ok {
		missing = append(missing, "collector binary "+col)
	} else {
		tl.otelcol = col
	}
	return tl, missing
}

// builtBinary returns the absolute path of a binary scripts/e2e-deps.sh
// builds, $envVar or bin/<name>, and whether it is an executable file.
func builtBinary(envVar, name string) (string, bool) {
	bin := os.Getenv(envVar)
	if bin == "" {
		bin = filepath.Join("bin", name)
	}
	if abs, err := filepath.Abs(bin); err == nil {
		bin = abs
	}
	st, err := os.Stat(bin)
	return bin, err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// needTools returns the tools, or skips the test (fails it under
// E2E_REQUIRED=1) saying what is missing.
func needTools(t *testing.T) tools {
	t.Helper()
	tl, missing := findTools()
	if len(missing) > 0 {
		msg := fmt.Sprintf("e2e: %s missing; run scripts/e2e-deps.sh", strings.Join(missing, ", "))
		if required() {
			t.Fatal(msg + " (E2E_REQUIRED=1: a missing binary is a failure)")
		}
		t.Skip(msg)
	}
	return tl
}

// proc is a child process in its own process group, with stdout and stderr
// in files.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr string
	done           chan struct{}
	err            error // cmd.Wait's result, set before done is closed
}

// startProc starts a process with its output in dir/<name>.stdout/.stderr.
// A cleanup prints the tail of its output when the test failed, then stops
// it (SIGTERM to its process group, SIGKILL after a grace period) by its
// process id, whatever the outcome of the test.
func startProc(t *testing.T, dir, name string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{
		name:   name,
		stdout: filepath.Join(dir, name+".stdout"),
		stderr: filepath.Join(dir, name+".stderr"),
		done:   make(chan struct{}),
	}
	outF, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	errF, err := os.Create(p.stderr)
	if err != nil {
		outF.Close()
		t.Fatal(err)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = outF, errF
	p.cmd.Env = env
	// Own process group, so the group can be killed by id; and SIGKILL if
	// the test binary itself dies (panic, -timeout) before its cleanups run.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = p.cmd.Start()
	outF.Close()
	errF.Close()
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Logf("started %s (pid %d): %s", name, p.cmd.Process.Pid, strings.Join(argv, " "))
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			p.dumpTail(t, 40)
		}
		p.stop(5 * time.Second)
	})
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process (not its group).
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return errors.New(p.name + " already exited")
	}
	return syscall.Kill(p.cmd.Process.Pid, sig)
}

// wait waits up to timeout for the process to end and returns its error.
func (p *proc) wait(timeout time.Duration) (error, bool) {
	select {
	case <-p.done:
		return p.err, true
	case <-time.After(timeout):
		return nil, false
	}
}

// stop ends the process group: SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	pgid := p.cmd.Process.Pid // Setpgid: the group id is the leader's pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if _, ok := p.wait(grace); ok {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	p.wait(grace)
}

// stopTogether stops every process of ps at once, each as stop does, and
// waits for them all: a test of many processes registers it after starting
// them (cleanups run last-registered first), so that their own cleanups,
// run after it, find them ended instead of waiting for each in turn.
func stopTogether(grace time.Duration, ps ...*proc) {
	var wg sync.WaitGroup
	for _, p := range ps {
		if p != nil {
			wg.Go(func() { p.stop(grace) })
		}
	}
	wg.Wait()
}

// dumpTail logs the last lines of the process's output.
func (p *proc) dumpTail(t *testing.T, n int) {
	for _, f := range []string{p.stdout, p.stderr} {
		b, err := os.ReadFile(f)
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		t.Logf("%s%s (%s) ----\n%s", testlog.TailMark, p.name, filepath.Base(f), strings.Join(lines, "\n"))
	}
}

// alive fails the test when the process has ended early.
func (p *proc) alive(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("%s exited early: %v (its output follows)", p.name, p.err)
	}
}

// pollInterval is the pause between two attempts of poll.
const pollInterval = 250 * time.Millisecond

// poll calls check until it reports done or timeout passes; the test then
// fails with what and check's last detail. Never a fixed sleep: every wait
// of the suite is one of these.
func poll(t *testing.T, timeout time.Duration, what string, check func() (done bool, detail string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var detail string
	for {
		var done bool
		done, detail = check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s: %s", what, timeout, detail)
		}
		time.Sleep(pollInterval)
	}
}

// waitValue polls e's Prometheus for up to a minute until expr, queried
// now, is one series whose value satisfies ok.
func (e *env) waitValue(t *testing.T, what, expr string, ok func(float64) bool) {
	t.Helper()
	poll(t, time.Minute, what, func() (bool, string) {
		v, err := e.prom.query(expr, time.Now())
		if err != nil {
			return false, err.Error()
		}
		return len(v) == 1 && ok(v[0].value), fmt.Sprintf("%s = %v", expr, v)
	})
}

// httpClient is the suite's client for Prometheus, the collector and the
// examples, and its timeout the only bound of a request: it bounds one that
// never ends; an answer that is slow on a loaded machine must still arrive:
// with 5 s, TestFleet's query of the pushed store's 23,000 vllm: series
// timed out on every attempt for 2 minutes at a load of 17 to 24 (each
// attempt starting the query again), and the test failed; with 10 s (a
// bound of the query's own, since removed) it did again at a load of 40.
var httpClient = &http.Client{Timeout: 2 * time.Minute}

func httpGet(u string) ([]byte, error) {
	resp, err := httpClient.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s: %s", u, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// ---- Prometheus text exposition (just enough of it) ----

// series is one sample of a scrape or of a PromQL vector.
type series struct {
	name   string
	labels map[string]string
	value  float64
	native bool // _count or _sum of a native histogram sample (nativeSeries)
}

// scrape is a parsed /metrics body.
type scrape struct {
	body   []byte
	types  map[string]string // family -> counter, gauge, histogram, ...
	series []series
}

func fetchScrape(u string) (*scrape, error) {
	b, err := httpGet(u)
	if err != nil {
		return nil, err
	}
	return parseScrape(b)
}

func parseScrape(b []byte) (*scrape, error) {
	s := &scrape{body: b, types: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
				s.types[f[2]] = f[3]
			}
			continue
		}
		se, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		s.series = append(s.series, se)
	}
	return s, sc.Err()
}

func parseSample(line string) (series, error) {
	se := series{labels: map[string]string{}}
	var rest string
	if i := strings.IndexByte(line, '{'); i >= 0 {
		se.name = line[:i]
		j := i + 1
		for {
			for j < len(line) && (line[j] == ' ' || line[j] == ',') {
				j++
			}
			if j >= len(line) {
				return se, errors.New("unterminated labels")
			}
			if line[j] == '}' {
				rest = line[j+1:]
				break
			}
			eq := strings.IndexByte(line[j:], '=')
			if eq < 0 || j+eq+1 >= len(line) || line[j+eq+1] != '"' {
				return se, errors.New("bad label")
			}
			key := line[j : j+eq]
			k := j + eq + 2
			var val strings.Builder
			for ; k < len(line) && line[k] != '"'; k++ {
				if line[k] == '\\' && k+1 < len(line) {
					k++
					switch line[k] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[k])
					}
					continue
				}
				val.WriteByte(line[k])
			}
			if k >= len(line) {
				return se, errors.New("unterminated label value")
			}
			se.labels[key] = val.String()
			j = k + 1
		}
	} else {
		f := strings.Fields(line)
		se.name, rest = f[0], strings.Join(f[1:], " ")
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return se, errors.New("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return se, err
	}
	se.value = v
	return se, nil
}

// family is the metric family a sample belongs to, per the scrape's TYPE
// lines (a histogram's _bucket/_sum/_count samples belong to it).
func (s *scrape) family(name string) (string, string) {
	if typ, ok := s.types[name]; ok {
		return name, typ
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if typ, ok := s.types[base]; ok {
				return base, typ
			}
		}
	}
	return name, ""
}

// cumulative returns the samples of vLLM's counter and histogram families:
// the ones that only grow, and only with the engines' work (unlike
// process_cpu_seconds_total), keyed by identity.
func (s *scrape) cumulative() map[string]float64 {
	m := map[string]float64{}
	for _, se := range s.series {
		if _, typ := s.family(se.name); strings.HasPrefix(se.name, "vllm:") && (typ == "counter" || typ == "histogram") {
			m[identity(se)] = se.value
		}
	}
	return m
}

// sum adds the values of the samples named name.
func (s *scrape) sum(name string) (float64, int) {
	var v float64
	var n int
	for _, se := range s.series {
		if se.name == name {
			v += se.value
			n++
		}
	}
	return v, n
}

// transportLabels are the labels that say how a sample reached Prometheus,
// not what it measures: the direct scrape's job/instance (and the namespace
// its relabelling may add, wvaRelabel), the collector path's job/instance
// (from service.name/service.instance.id), the external label path, and the
// OTel scope labels the collector adds.
func transportLabel(k string) bool {
	switch k {
	case "__name__", "job", "instance", "path", "namespace":
		return true
	}
	return strings.HasPrefix(k, "otel_scope_")
}

// identity is a sample's name and its labels less the transport ones, in a
// canonical order; le is normalised so "1" and "1.0" match.
func identity(se series) string {
	keys := make([]string, 0, len(se.labels))
	for k := range se.labels {
		if !transportLabel(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(se.name)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		v := se.labels[k]
		if k == "le" {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				v = strconv.FormatFloat(f, 'g', -1, 64)
			}
		}
		fmt.Fprintf(&b, "%s=%q", k, v)
	}
	b.WriteByte('}')
	return b.String()
}

// ---- Prometheus HTTP API ----

type promAPI struct{ base string }

type apiResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
			// Histogram is a native histogram sample: [time, {count, sum, buckets}].
			Histogram *[2]json.RawMessage `json:"histogram"`
		} `json:"result"`
	} `json:"data"`
}

// query runs an instant query at time at and returns its vector.
func (p promAPI) query(expr string, at time.Time) ([]series, error) {
	form := url.Values{"query": {expr}, "time": {promTime(at)}}
	var r apiResponse
	if err := p.post("/api/v1/query", form, &r); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", expr, r.ErrorType, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %s, want vector", expr, r.Data.ResultType)
	}
	out := make([]series, 0, len(r.Data.Result))
	for _, res := range r.Data.Result {
		if res.Histogram != nil {
			nat, err := nativeSeries(res.Metric, res.Histogram[1])
			if err != nil {
				return nil, fmt.Errorf("query %q: %w", expr, err)
			}
			out = append(out, nat...)
			continue
		}
		s, _ := res.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %q: %w", expr, s, err)
		}
		out = append(out, series{name: res.Metric["__name__"], labels: res.Metric, value: v})
	}
	return out, nil
}

// nativeSeries returns a native histogram sample as the two samples a
// classic histogram has beside its buckets, name_count and name_sum (what
// histogram_count and histogram_sum give), marked native.
func nativeSeries(metric map[string]string, raw json.RawMessage) ([]series, error) {
	var h struct {
		Count string `json:"count"`
		Sum   string `json:"sum"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("native histogram %s: %w", raw, err)
	}
	var out []series
	for suffix, v := range map[string]string{"_count": h.Count, "_sum": h.Sum} {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("native histogram %s: %w", raw, err)
		}
		labels := maps.Clone(metric)
		labels["__name__"] = metric["__name__"] + suffix
		out = append(out, series{name: labels["__name__"], labels: labels, value: f, native: true})
	}
	return out, nil
}

// post sends form to an API endpoint and decodes the JSON answer into v.
func (p promAPI) post(path string, form url.Values, v any) error {
	req, err := http.NewRequest(http.MethodPost, p.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", resp.Status, err)
	}
	return nil
}

// promTime is t as the API's time parameters take it.
func promTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// mustQuery is query that fails the test on error.
func (p promAPI) mustQuery(t *testing.T, expr string, at time.Time) []series {
	t.Helper()
	v, err := p.query(expr, at)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// scalar runs expr, which must give exactly one sample, and returns it.
func (p promAPI) scalar(t *testing.T, expr string, at time.Time) float64 {
	t.Helper()
	v := p.mustQuery(t, expr, at)
	if len(v) != 1 {
		t.Fatalf("query %q: %d samples, want 1: %v", expr, len(v), v)
	}
	return v[0].value
}

// byLabel runs expr and maps each sample by the value of label.
func (p promAPI) byLabel(t *testing.T, expr, label string, at time.Time) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, s := range p.mustQuery(t, expr, at) {
		m[s.labels[label]] = s.value
	}
	return m
}

// sameValue compares two sample values: exactly for integers (counts,
// tokens), within a relative 1e-9 for float sums (seconds), whose additions
// two readers may have made in a different order.
func sameValue(a, b float64) bool {
	if a == b {
		return true
	}
	if a == math.Trunc(a) && b == math.Trunc(b) {
		return false
	}
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
