package deploy

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/mixin"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	for _, e := range container(t, o.component(t, "gateway"), "proxy").Env {
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

// serviceOf returns the rendered Service an http://NAME.NAMESPACE.svc:PORT
// URL reaches, and the port.
func serviceOf(t *testing.T, o objects, rawURL string) (*corev1.Service, corev1.ServicePort) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	host, ns, _ := strings.Cut(u.Hostname(), ".")
	if ns != namespace+".svc" && ns != namespace+".svc.cluster.local" {
		t.Fatalf("%s: not a Service of the release's namespace %s", rawURL, namespace)
	}
	for _, s := range o.services {
		if s.Name != host {
			continue
		}
		for _, p := range s.Spec.Ports {
			if fmt.Sprint(p.Port) == u.Port() {
				return s, p
			}
		}
		t.Fatalf("%s: Service %s has no port %s", rawURL, s.Name, u.Port())
	}
	t.Fatalf("%s: no Service %s rendered (%d Services)", rawURL, host, len(o.services))
	return nil, corev1.ServicePort{}
}

// otlpEndpoint returns a proxy's OTEL_EXPORTER_OTLP_ENDPOINT, or "".
func otlpEndpoint(t *testing.T, d *appsv1.Deployment) string {
	t.Helper()
	for _, e := range container(t, d, "proxy").Env {
		if e.Name == "OTEL_EXPORTER_OTLP_ENDPOINT" {
			return e.Value
		}
	}
	return ""
}

// TestCollectorDeployment checks, in the gateway shape, that the proxies
// push to a collector the release runs: their OTLP endpoint is its
// Service, whose port reaches the container port the configuration's OTLP
// HTTP receiver listens on, in pods of a Deployment that runs the contrib
// image of the suite collector's release with the rendered configuration
// (the ConfigMap mounted where --config reads it), probes health_check's
// port, keeps its memory limit above memory_limiter's, and runs as a
// ServiceAccount bound to the RBAC k8sattributes needs.
func TestCollectorDeployment(t *testing.T) {
	o := renderShape(t, "gateway")
	gw, col := o.component(t, "gateway"), o.component(t, "collector")
	endpoint := otlpEndpoint(t, gw)
	if endpoint == "" {
		t.Fatal("the gateway's proxy pushes nowhere")
	}
	svc, port := serviceOf(t, o, endpoint)
	sel, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(col.Spec.Template.Labels)) || sel.Matches(labels.Set(gw.Spec.Template.Labels)) {
		t.Fatalf("Service %s selects %v: not the collector's pods alone", svc.Name, svc.Spec.Selector)
	}
	c := container(t, col, "collector")
	target, ok := portNamed(c, port.TargetPort.String())
	_, cfg := renderedCollector(t)
	otlp, _ := yaml.Marshal(cfg.Receivers["otlp"])
	var rcv struct {
		Protocols struct {
			HTTP struct {
				Endpoint string `json:"endpoint"`
			} `json:"http"`
		} `json:"protocols"`
	}
	if err := yaml.Unmarshal(otlp, &rcv); err != nil {
		t.Fatal(err)
	}
	if !ok || rcv.Protocols.HTTP.Endpoint == "" || portOf(t, rcv.Protocols.HTTP.Endpoint) != target {
		t.Errorf("Service port %d -> container port %s (%d, found %v); the OTLP HTTP receiver listens on %q", port.Port, port.TargetPort.String(), target, ok, rcv.Protocols.HTTP.Endpoint)
	}

	var configPath string
	for _, a := range c.Args {
		if p, ok := strings.CutPrefix(a, "--config="); ok {
			configPath = p
		}
	}
	cm := o.configMaps[0]
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range col.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && m.MountPath+"/config.yaml" == configPath {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("--config=%s: not the ConfigMap %s's config.yaml as mounted (%+v)", configPath, cm.Name, c.VolumeMounts)
	}

	hc, _ := yaml.Marshal(cfg.Extensions["health_check"])
	var health struct {
		Endpoint string `json:"endpoint"`
	}
	if err := yaml.Unmarshal(hc, &health); err != nil {
		t.Fatal(err)
	}
	for name, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET of health_check", name)
			continue
		}
		if p, _ := portNamed(c, pr.HTTPGet.Port.String()); p != portOf(t, health.Endpoint) {
			t.Errorf("%s probe on port %s (%d), health_check listens on %s", name, pr.HTTPGet.Port.String(), p, health.Endpoint)
		}
	}

	ml, _ := yaml.Marshal(cfg.Processors["memory_limiter"])
	var limiter struct {
		LimitMiB int64 `json:"limit_mib"`
	}
	if err := yaml.Unmarshal(ml, &limiter); err != nil {
		t.Fatal(err)
	}
	if limit, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || limit.Value() <= limiter.LimitMiB<<20 {
		t.Errorf("memory limit %v: want above memory_limiter's %d MiB", limit.String(), limiter.LimitMiB)
	}

	want := "otel/opentelemetry-collector-contrib:" + strings.TrimPrefix(suiteCollectorVersion(t), "v")
	if c.Image != want {
		t.Errorf("collector image %s, want %s (the release of e2e/collector's go.opentelemetry.io/collector/otelcol)", c.Image, want)
	}

	sa := col.Spec.Template.Spec.ServiceAccountName
	if len(o.serviceAccounts) != 1 || o.serviceAccounts[0].Name != sa {
		t.Fatalf("serviceAccountName %q, ServiceAccounts rendered %d", sa, len(o.serviceAccounts))
	}
	if len(o.clusterRoleBindings) != 1 || len(o.clusterRoles) != 1 {
		t.Fatalf("%d ClusterRoleBindings, %d ClusterRoles", len(o.clusterRoleBindings), len(o.clusterRoles))
	}
	b, role := o.clusterRoleBindings[0], o.clusterRoles[0]
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != role.Name ||
		!slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == namespace
		}) {
		t.Errorf("ClusterRoleBinding %+v: does not bind ClusterRole %s to ServiceAccount %s/%s", b, role.Name, namespace, sa)
	}
	for _, need := range []struct{ group, resource string }{{"", "pods"}, {"", "namespaces"}, {"apps", "replicasets"}} {
		if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, need.group) && slices.Contains(r.Resources, need.resource) &&
				slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch")
		}) {
			t.Errorf("ClusterRole %s: no get, list, watch of %s %q (k8sattributes reads them)", role.Name, need.resource, need.group)
		}
	}
}

// TestOTLPEndpointRendered checks that no shape's proxy pushes to a
// Service the release does not render (an empty endpoint: it is scraped).
func TestOTLPEndpointRendered(t *testing.T) {
	for _, shape := range shapes {
		o := renderShape(t, shape)
		for _, d := range o.proxies() {
			if e := otlpEndpoint(t, d); e != "" {
				serviceOf(t, o, e)
			}
		}
	}
}

// suiteCollectorVersion is the version of go.opentelemetry.io/collector/otelcol
// in e2e/collector/go.mod: the release the suite's collector is built from.
func suiteCollectorVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../e2e/collector/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*go\.opentelemetry\.io/collector/otelcol (v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("e2e/collector/go.mod: no go.opentelemetry.io/collector/otelcol")
	}
	return string(m[1])
}
