package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/mixin"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// collectorConfig is the parts of a collector configuration the checks read.
type collectorConfig struct {
	Receivers  map[string]any `json:"receivers"`
	Processors map[string]any `json:"processors"`
	Exporters  map[string]any `json:"exporters"`
	Extensions map[string]any `json:"extensions"`
	Connectors map[string]any `json:"connectors"`
	Service    struct {
		Extensions []string `json:"extensions"`
		Pipelines  map[string]struct {
			Receivers  []string `json:"receivers"`
			Processors []string `json:"processors"`
			Exporters  []string `json:"exporters"`
		} `json:"pipelines"`
	} `json:"service"`
}

// renderedCollector renders the gateway shape (the one with the collector)
// and returns its collector configuration, as written and decoded.
func renderedCollector(t *testing.T) (string, collectorConfig) {
	t.Helper()
	o := renderShape(t, "gateway")
	var cm *corev1.ConfigMap
	for _, c := range o.configMaps {
		if strings.HasSuffix(c.Name, "-collector") {
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("gateway shape: no collector ConfigMap")
	}
	text, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s: no config.yaml", cm.Name)
	}
	var cfg collectorConfig
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	return text, cfg
}

// TestCollectorConfig checks the collector gateway's configuration: every
// component a pipeline names is defined; memory_limiter comes first and
// batch last; the series it exports carry every label the mixin's rules
// and dashboards name a deployment and a server by (mixin.Default's
// JobLabels and InstanceLabels): job and instance from service.name and
// service.instance.id (the remote-write exporter's translation), namespace
// and pod from the k8s.* resource attributes k8sattributes extracts and the
// proxy sets (copied by the resource processor, put on every series by the
// exporter's resource_constant_labels), cluster as an external label.
func TestCollectorConfig(t *testing.T) {
	_, cfg := renderedCollector(t)
	p, ok := cfg.Service.Pipelines["metrics"]
	if !ok {
		t.Fatal("no metrics pipeline")
	}
	for _, l := range []struct {
		kind  string
		names []string
		defs  map[string]any
	}{{"receiver", p.Receivers, cfg.Receivers}, {"processor", p.Processors, cfg.Processors}, {"exporter", p.Exporters, cfg.Exporters}, {"extension", cfg.Service.Extensions, cfg.Extensions}} {
		for _, n := range l.names {
			if _, ok := l.defs[n]; !ok {
				t.Errorf("%s %q: used, not defined", l.kind, n)
			}
		}
	}
	if len(p.Processors) < 2 || p.Processors[0] != "memory_limiter" || p.Processors[len(p.Processors)-1] != "batch" {
		t.Errorf("processors %v: want memory_limiter first and batch last", p.Processors)
	}
	if i, j := slices.Index(p.Processors, "k8sattributes"), slices.Index(p.Processors, "resource/labels"); i < 0 || j < i {
		t.Errorf("processors %v: want k8sattributes, then resource/labels", p.Processors)
	}

	k8s, _ := yaml.Marshal(cfg.Processors["k8sattributes"])
	var ka struct {
		Extract struct {
			Metadata []string `json:"metadata"`
		} `json:"extract"`
	}
	if err := yaml.Unmarshal(k8s, &ka); err != nil {
		t.Fatal(err)
	}
	ex, _ := yaml.Marshal(cfg.Exporters["prometheus_remote_write"])
	var prw struct {
		ExternalLabels         map[string]string `json:"external_labels"`
		ResourceConstantLabels struct {
			Included []string `json:"included"`
		} `json:"resource_constant_labels"`
	}
	if err := yaml.Unmarshal(ex, &prw); err != nil {
		t.Fatal(err)
	}

	// A label from a k8s.* attribute: the resource processor copies the
	// attribute into one of the label's name, which the exporter's
	// resource_constant_labels puts on every series.
	produced := map[string]string{"job": "service.name", "instance": "service.instance.id"}
	rp, _ := yaml.Marshal(cfg.Processors["resource/labels"])
	var res struct {
		Attributes []struct {
			Key           string `json:"key"`
			FromAttribute string `json:"from_attribute"`
			Action        string `json:"action"`
		} `json:"attributes"`
	}
	if err := yaml.Unmarshal(rp, &res); err != nil {
		t.Fatal(err)
	}
	proxyAttrs := proxyResourceAttributes(t)
	for _, a := range res.Attributes {
		if a.FromAttribute == "" || (a.Action != "insert" && a.Action != "upsert") {
			continue
		}
		if !slices.Contains(prw.ResourceConstantLabels.Included, a.Key) {
			t.Errorf("resource attribute %s (from %s): not in the exporter's resource_constant_labels %v, so on no series", a.Key, a.FromAttribute, prw.ResourceConstantLabels.Included)
			continue
		}
		produced[a.Key] = a.FromAttribute
		if !slices.Contains(ka.Extract.Metadata, a.FromAttribute) {
			t.Errorf("label %s from %s, which k8sattributes does not extract (%v)", a.Key, a.FromAttribute, ka.Extract.Metadata)
		}
		if !slices.Contains(proxyAttrs, a.FromAttribute) {
			t.Errorf("label %s from %s, which the proxy's OTEL_RESOURCE_ATTRIBUTES does not set (%v)", a.Key, a.FromAttribute, proxyAttrs)
		}
	}
	for k := range prw.ExternalLabels {
		produced[k] = "external_labels"
	}
	def := mixin.Default()
	for _, l := range slices.Concat(def.JobLabels, def.InstanceLabels, []string{"cluster", "namespace", "job"}) {
		if _, ok := produced[l]; !ok {
			t.Errorf("label %s (the mixin's JobLabels %v, InstanceLabels %v, the contract's cluster, namespace, job): not on the exported series (%v)", l, def.JobLabels, def.InstanceLabels, produced)
		}
	}
	t.Logf("labels from the collector: %v", produced)
}

// proxyResourceAttributes returns the keys of the proxy's
// OTEL_RESOURCE_ATTRIBUTES in the gateway shape.
func proxyResourceAttributes(t *testing.T) []string {
	t.Helper()
	o := renderShape(t, "gateway")
	var keys []string
	for _, e := range container(t, o.deployments[0], "proxy").Env {
		if e.Name != "OTEL_RESOURCE_ATTRIBUTES" {
			continue
		}
		for _, kv := range strings.Split(e.Value, ",") {
			k, _, _ := strings.Cut(kv, "=")
			keys = append(keys, k)
		}
	}
	return keys
}

// otelcol returns the collector the end-to-end suite builds
// (scripts/e2e-deps.sh), at $E2E_OTELCOL or ../e2e/bin/otelcol; absent, the
// test is skipped, or fails under E2E_REQUIRED=1 as the suite's tests do.
func otelcol(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("E2E_OTELCOL")
	if bin == "" {
		bin = filepath.Join("..", "e2e", "bin", "otelcol")
	}
	if _, err := os.Stat(bin); err != nil {
		msg := "no collector at " + bin + " (scripts/e2e-deps.sh builds it)"
		if os.Getenv("E2E_REQUIRED") == "1" {
			t.Fatal(msg + " (E2E_REQUIRED=1: a missing binary is a failure)")
		}
		t.Skip(msg)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// notInSuiteCollector are the components of the chart's configuration that
// the suite's collector (e2e/collector) lacks: k8sattributes (it needs a
// Kubernetes API server, and its modules the client-go tree).
var notInSuiteCollector = []string{"processors.k8sattributes"}

// TestCollectorValidate has the suite's collector validate the rendered
// configuration (otelcol validate). That collector has a gateway's
// processors but notInSuiteCollector, which are taken out first and named
// in the log; any other component it lacks fails the test: the rest (the
// OTLP receiver, memory_limiter, batch, the remote-write exporter,
// health_check, the pipeline) is validated by the real code.
func TestCollectorValidate(t *testing.T) {
	bin := otelcol(t)
	out, err := exec.Command(bin, "components").Output()
	if err != nil {
		t.Fatalf("otelcol components: %v", err)
	}
	type component struct {
		Name string `json:"name"`
	}
	var comps struct {
		Receivers  []component `json:"receivers"`
		Processors []component `json:"processors"`
		Exporters  []component `json:"exporters"`
		Extensions []component `json:"extensions"`
		Connectors []component `json:"connectors"`
	}
	if err := yaml.Unmarshal(out, &comps); err != nil {
		t.Fatalf("otelcol components: %v\n%s", err, out)
	}
	if len(comps.Receivers) == 0 || len(comps.Exporters) == 0 {
		t.Fatalf("otelcol components: no receivers or exporters read from\n%s", out)
	}
	byKind := map[string][]component{"receivers": comps.Receivers, "processors": comps.Processors,
		"exporters": comps.Exporters, "extensions": comps.Extensions, "connectors": comps.Connectors}
	has := func(kind, id string) bool {
		typ, _, _ := strings.Cut(id, "/")
		return slices.ContainsFunc(byKind[kind], func(c component) bool { return c.Name == typ })
	}

	text, _ := renderedCollector(t)
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, kind := range []string{"receivers", "processors", "exporters", "extensions", "connectors"} {
		defs, _ := raw[kind].(map[string]any)
		for id := range defs {
			if !has(kind, id) {
				delete(defs, id)
				removed = append(removed, kind+"."+id)
			}
		}
	}
	service := raw["service"].(map[string]any)
	service["extensions"] = kept(service["extensions"], raw["extensions"])
	for _, p := range service["pipelines"].(map[string]any) {
		p := p.(map[string]any)
		for _, kind := range []string{"receivers", "processors", "exporters"} {
			p[kind] = kept(p[kind], raw[kind])
		}
	}
	slices.Sort(removed)
	for _, r := range removed {
		if !slices.Contains(notInSuiteCollector, r) {
			t.Errorf("%s: not in %s (the suite's collector, e2e/collector), which has every gateway component but %v", r, bin, notInSuiteCollector)
		}
	}
	if len(removed) > 0 {
		t.Logf("validated without %v: not in %s (the suite's collector, e2e/collector)", removed, bin)
	}
	b, err := yaml.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "validate", "--config=file:"+file).CombinedOutput(); err != nil {
		t.Fatalf("otelcol validate: %v\n%s\n%s", err, out, b)
	}
}

// kept returns the ids of list that defs still defines.
func kept(list, defs any) []string {
	m, _ := defs.(map[string]any)
	ids := []string{}
	for _, id := range toStrings(list) {
		if _, ok := m[id]; ok {
			ids = append(ids, id)
		}
	}
	return ids
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	s := make([]string, 0, len(l))
	for _, x := range l {
		if str, ok := x.(string); ok {
			s = append(s, str)
		}
	}
	return s
}
