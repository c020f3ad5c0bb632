package views_test

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// loraValue matches the value of vllm:lora_requests_info: the current Unix time.
var loraValue = regexp.MustCompile(`(?m)^(vllm:lora_requests_info\{[^}]*\}) (\S+)$`)

// normalise replaces the LoRA info gauge's time value, after checking that it
// lies between two Unix times.
func normalise(t *testing.T, text string, from, to time.Time) string {
	t.Helper()
	matches := loraValue.FindAllStringSubmatch(text, -1)
	if len(matches) == 0 {
		t.Errorf("no vllm:lora_requests_info sample in the scrape")
	}
	for _, m := range matches {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil || v < float64(from.Unix()) || v > float64(to.Unix()+1) {
			t.Errorf("%s = %s, want the Unix time of the update, in [%d, %d]", m[1], m[2], from.Unix(), to.Unix()+1)
		}
	}
	return loraValue.ReplaceAllString(text, "$1 <unix time>")
}

// checkGolden records the scenario through views, scrapes it and compares the
// text with testdata/<name>, which -update rewrites.
func checkGolden(t *testing.T, name string, vs []sdkmetric.View) {
	checkGoldenWith(t, name, vs, scenarioOptions)
}

// checkGoldenWith is checkGolden with the given Recorder options.
func checkGoldenWith(t *testing.T, name string, vs []sdkmetric.View, opts []instrument.Option) {
	x := newExported(t, vs, opts...)
	from := time.Now()
	recordScenario(t, x.rec)
	got := normalise(t, x.scrape(), from, time.Now())
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("scrape differs from %s (run go test -update and review the diff):\n%s", path, got)
	}
}

func TestGoldenVLLM(t *testing.T) {
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "vllm.golden.prom", vs)
}

// The GenAI semantic-convention views beside the vLLM ones: both sets of
// families in one scrape.
func TestGoldenSemconv(t *testing.T) {
	checkGoldenWith(t, "semconv.golden.prom", vllmAndSemconv(t),
		append([]instrument.Option{instrument.WithGenAISemconv()}, scenarioOptions...))
}
