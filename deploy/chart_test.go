package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart; its ci/ holds one values file per shape.
const chartDir = "helm/infermetrics"

// Release name and namespace of the test renders.
const (
	releaseName = "demo"
	namespace   = "inference"
)

// shapes are the values files of the shapes a user deploys.
var shapes = []string{"sidecar-vllm", "sidecar-sglang", "sidecar-ollama", "gateway"}

// sidecarKinds maps each sidecar shape to its engine kind.
func sidecarKinds() map[string]string {
	m := map[string]string{}
	for _, shape := range shapes {
		if kind, ok := strings.CutPrefix(shape, "sidecar-"); ok {
			m[shape] = kind
		}
	}
	return m
}

func valuesFile(shape string) string {
	return filepath.Join(chartDir, "ci", shape+"-values.yaml")
}

// objects are the rendered objects of one release, each decoded strictly
// into its type.
type objects struct {
	deployments         []*appsv1.Deployment
	services            []*corev1.Service
	configMaps          []*corev1.ConfigMap
	claims              []*corev1.PersistentVolumeClaim
	serviceAccounts     []*corev1.ServiceAccount
	clusterRoles        []*rbacv1.ClusterRole
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
	podMonitors         []*monitoringv1.PodMonitor
	prometheusRules     []*monitoringv1.PrometheusRule
}

// counts are how many objects of each kind a render made.
type counts struct {
	deployments, services, configMaps, claims, serviceAccounts, clusterRoles, clusterRoleBindings, podMonitors, prometheusRules int
}

func (o objects) counts() counts {
	return counts{len(o.deployments), len(o.services), len(o.configMaps), len(o.claims), len(o.serviceAccounts),
		len(o.clusterRoles), len(o.clusterRoleBindings), len(o.podMonitors), len(o.prometheusRules)}
}

// proxies are the Deployments with the proxy: the engines' and the
// gateway's (not the collector's).
func (o objects) proxies() []*appsv1.Deployment {
	var ds []*appsv1.Deployment
	for _, d := range o.deployments {
		if c := d.Labels["app.kubernetes.io/component"]; c == "engine" || c == "gateway" {
			ds = append(ds, d)
		}
	}
	return ds
}

// component returns the one Deployment of a component (engine, gateway,
// collector).
func (o objects) component(t *testing.T, component string) *appsv1.Deployment {
	t.Helper()
	var found *appsv1.Deployment
	for _, d := range o.deployments {
		if d.Labels["app.kubernetes.io/component"] == component {
			if found != nil {
				t.Fatalf("two Deployments of component %s", component)
			}
			found = d
		}
	}
	if found == nil {
		t.Fatalf("no Deployment of component %s", component)
	}
	return found
}

// render installs the chart (install) and decodes each object it renders.
func render(t *testing.T, vals map[string]any) objects {
	t.Helper()
	rel, err := install(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	docs := releaseutil.SplitManifests(rel.Manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var o objects
	for _, k := range keys {
		if err := o.add(docs[k]); err != nil {
			t.Fatalf("%v\n%s", err, docs[k])
		}
	}
	return o
}

// install runs Helm's install action on the chart, client only and as a
// dry run (what helm template runs), with the values of vals.
func install(t *testing.T, vals map[string]any) (*release.Release, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{Log: t.Logf})
	inst.DryRun = true
	inst.ClientOnly = true
	inst.ReleaseName = releaseName
	inst.Namespace = namespace
	inst.KubeVersion = kubeVersion(t)
	return inst.Run(chrt, vals)
}

// kubeVersion is the Kubernetes version the chart is rendered and linted
// for: the oldest its kubeVersion allows (Chart.yaml), not Helm's default
// (v1.20 in a test binary, which the chart refuses).
func kubeVersion(t *testing.T) *chartutil.KubeVersion {
	t.Helper()
	kv, err := chartutil.ParseKubeVersion("v1.30.0")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// renderShape renders the chart with a shape's values file.
func renderShape(t *testing.T, shape string) objects {
	t.Helper()
	return render(t, readValues(t, valuesFile(shape)))
}

// testImage is the proxy's image repository of the tests' own values (the
// chart requires one: proxy.image.repository).
const testImage = "registry.example/infermetrics-proxy"

// withImage adds proxy.image.repository to vals.
func withImage(vals map[string]any) map[string]any {
	p, _ := vals["proxy"].(map[string]any)
	if p == nil {
		p = map[string]any{}
		vals["proxy"] = p
	}
	p["image"] = map[string]any{"repository": testImage}
	return vals
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// add decodes one rendered document by its kind.
func (o *objects) add(doc string) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return err
	}
	var err error
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		o.deployments, err = decodeAppend(doc, o.deployments)
	case "v1 Service":
		o.services, err = decodeAppend(doc, o.services)
	case "v1 ConfigMap":
		o.configMaps, err = decodeAppend(doc, o.configMaps)
	case "v1 PersistentVolumeClaim":
		o.claims, err = decodeAppend(doc, o.claims)
	case "v1 ServiceAccount":
		o.serviceAccounts, err = decodeAppend(doc, o.serviceAccounts)
	case "rbac.authorization.k8s.io/v1 ClusterRole":
		o.clusterRoles, err = decodeAppend(doc, o.clusterRoles)
	case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
		o.clusterRoleBindings, err = decodeAppend(doc, o.clusterRoleBindings)
	case "monitoring.coreos.com/v1 PodMonitor":
		o.podMonitors, err = decodeAppend(doc, o.podMonitors)
	case "monitoring.coreos.com/v1 PrometheusRule":
		o.prometheusRules, err = decodeAppend(doc, o.prometheusRules)
	default:
		err = fmt.Errorf("rendered %s %s: a kind the tests do not decode", tm.APIVersion, tm.Kind)
	}
	return err
}

// decodeAppend decodes doc strictly into a new T and appends it.
func decodeAppend[T any](doc string, to []*T) ([]*T, error) {
	v := new(T)
	if err := decodeStrict([]byte(doc), v); err != nil {
		return to, err
	}
	return append(to, v), nil
}

// decodeStrict decodes YAML into v, refusing a field v's type lacks, a
// value of the wrong type and a key given twice.
func decodeStrict(doc []byte, v any) error {
	return yaml.UnmarshalStrict(doc, v)
}

// TestRender renders every shape and checks the objects it makes.
func TestRender(t *testing.T) {
	engine := counts{deployments: 1, services: 1, podMonitors: 1, prometheusRules: 1}
	withClaim := engine
	withClaim.claims = 1
	want := map[string]counts{
		"sidecar-vllm":   engine,
		"sidecar-sglang": engine,
		"sidecar-ollama": withClaim, // its models on a claim
		// the gateway and the collector, each with a Service; pushed, not scraped
		"gateway": {deployments: 2, services: 2, configMaps: 1, serviceAccounts: 1, clusterRoles: 1, clusterRoleBindings: 1, prometheusRules: 1},
	}
	for _, shape := range shapes {
		t.Run(shape, func(t *testing.T) {
			o := renderShape(t, shape)
			if got := o.counts(); got != want[shape] {
				t.Errorf("rendered %+v, want %+v", got, want[shape])
			}
		})
	}
}

// TestLint runs Helm's linter (helm lint's) on the chart with each shape's
// values; a warning fails as an error does.
func TestLint(t *testing.T) {
	for _, shape := range append([]string{"defaults"}, shapes...) {
		t.Run(shape, func(t *testing.T) {
			vals := withImage(map[string]any{}) // the defaults but the required repository
			if shape != "defaults" {
				vals = readValues(t, valuesFile(shape))
			}
			l := lint.AllWithKubeVersion(chartDir, vals, namespace, kubeVersion(t))
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Error(m)
				} else {
					t.Log(m)
				}
			}
		})
	}
}

// TestStrictDecodeRefuses shows that the decoding the tests rely on fails
// an object with a misspelt field or a value of the wrong type.
func TestStrictDecodeRefuses(t *testing.T) {
	o := renderShape(t, "sidecar-vllm")
	good, err := yaml.Marshal(o.component(t, "engine"))
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(good, new(appsv1.Deployment)); err != nil {
		t.Fatalf("the rendered Deployment re-encoded: %v", err)
	}
	for name, edit := range map[string]func(string) string{
		"misspelt field": func(s string) string {
			return strings.Replace(s, "terminationGracePeriodSeconds:", "terminationGracePeriodSecond:", 1)
		},
		"wrong type": func(s string) string {
			return strings.Replace(s, "replicas: 1", "replicas: one", 1)
		},
		"key given twice": func(s string) string {
			return strings.Replace(s, "replicas: 1", "replicas: 1\n  replicas: 2", 1)
		},
		"field at the wrong level": func(s string) string {
			return strings.Replace(s, "\nspec:\n", "\nspec:\n  containers: []\n", 1)
		},
	} {
		bad := edit(string(good))
		if bad == string(good) {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		if err := decodeStrict([]byte(bad), new(appsv1.Deployment)); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	var pm monitoringv1.PodMonitor
	if err := decodeStrict([]byte("apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nspec:\n  podMetricsEndpoint:\n    - port: metrics\n"), &pm); err == nil {
		t.Error("a PodMonitor with podMetricsEndpoint (for podMetricsEndpoints) decoded without error")
	}
}

// TestValuesRefused checks that values.schema.json and the templates
// refuse what a user may get wrong: a misspelt key, an engine the chart
// does not know, a value of the wrong type, no image repository for the
// proxy, a ReadWriteOnce models' volume for several replicas, a proxy both
// pushed and scraped; Helm's install fails on it with the key named.
func TestValuesRefused(t *testing.T) {
	for name, c := range map[string]struct {
		vals map[string]any
		want string // in the error
	}{
		"misspelt key":        {withImage(map[string]any{"engine": map[string]any{"knd": "sglang"}}), "knd"},
		"unknown kind":        {withImage(map[string]any{"engine": map[string]any{"kind": "tgi"}}), "kind"},
		"port a string":       {withImage(map[string]any{"proxy": map[string]any{"port": "8787"}}), "port"},
		"top-level key":       {withImage(map[string]any{"gateways": map[string]any{"enabled": true}}), "gateways"},
		"negative GPUs":       {withImage(map[string]any{"engine": map[string]any{"gpus": -1}}), "gpus"},
		"no image repository": {map[string]any{}, "proxy.image.repository"},
		"one RWO volume, two replicas": {withImage(map[string]any{"sidecar": map[string]any{"replicas": 2},
			"engine": map[string]any{"persistence": map[string]any{"enabled": true}}}), "ReadWriteOnce"},
		"pushed to the collector and scraped": {withImage(map[string]any{"collector": map[string]any{"enabled": true}}), "twice"},
		"pushed and scraped":                  {withImage(map[string]any{"proxy": map[string]any{"otlpEndpoint": "http://otel:4318"}}), "twice"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := install(t, c.vals)
			switch {
			case err == nil:
				t.Errorf("values %v: installed without error", c.vals)
			case !strings.Contains(err.Error(), c.want):
				t.Errorf("values %v: %v, want an error naming %q", c.vals, err, c.want)
			default:
				t.Log(err)
			}
		})
	}
}

// container returns the named container of a Deployment's pod.
func container(t *testing.T, d *appsv1.Deployment, name string) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s: no container %q", d.Name, name)
	return nil
}

// portNamed returns the container port called name.
func portNamed(c *corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// flagValues returns the proxy's flags as given in its args: name to the
// values given (a repeated flag has several).
func flagValues(t *testing.T, pf proxyFacts, c *corev1.Container) map[string][]string {
	t.Helper()
	if len(c.Command) > 0 {
		t.Errorf("proxy container: command %q overrides the image's entrypoint", c.Command)
	}
	got := map[string][]string{}
	for _, a := range c.Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || strings.HasPrefix(a, "--") || !pf.flags[name] {
			t.Errorf("proxy arg %q: not a flag of infermetrics-proxy (%s)", a, proxyDir)
			continue
		}
		got[name] = append(got[name], value)
	}
	return got
}

// one returns the single value of a flag.
func one(t *testing.T, flags map[string][]string, name string) string {
	t.Helper()
	if len(flags[name]) != 1 {
		t.Fatalf("proxy flag -%s given %d times, want once", name, len(flags[name]))
	}
	return flags[name][0]
}

// portOf returns the port of a listen address (":9464").
func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, ok := strings.Cut(addr, ":")
	var n int32
	if _, err := fmt.Sscan(p, &n); !ok || err != nil {
		t.Fatalf("address %q: no port", addr)
	}
	return n
}

// TestProxyContainer checks, for the proxy of every shape, what a schema
// does not: its args are the proxy's flags; its probes ask /health on the
// port of -metrics-listen, which serves it; the grace period outlasts the
// preStop sleep, the drain and what follows it, and the liveness probe
// cannot kill the proxy while it drains (its /health answers 503 then);
// it runs as non-root on a read-only root file system without
// capabilities.
func TestProxyContainer(t *testing.T) {
	pf := readProxy(t)
	for _, shape := range shapes {
		t.Run(shape, func(t *testing.T) {
			o := renderShape(t, shape)
			for _, d := range o.proxies() {
				c := container(t, d, "proxy")
				flags := flagValues(t, pf, c)
				metricsPort := portOf(t, one(t, flags, "metrics-listen"))
				if p, ok := portNamed(c, "metrics"); !ok || p != metricsPort {
					t.Errorf("container port metrics %d (found %v), -metrics-listen's %d", p, ok, metricsPort)
				}
				if p, ok := portNamed(c, "http"); !ok || p != portOf(t, one(t, flags, "listen")) {
					t.Errorf("container port http %d (found %v), -listen %s", p, ok, one(t, flags, "listen"))
				}
				for name, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
					if pr == nil || pr.HTTPGet == nil {
						t.Errorf("%s probe: want an HTTP GET", name)
						continue
					}
					if !pf.metrics[pr.HTTPGet.Path] || pr.HTTPGet.Path != "/health" {
						t.Errorf("%s probe path %q: want /health, which the proxy serves on -metrics-listen (%v)", name, pr.HTTPGet.Path, pf.metrics)
					}
					if pr.HTTPGet.Port.String() != "metrics" && pr.HTTPGet.Port.IntValue() != int(metricsPort) {
						t.Errorf("%s probe port %s: want metrics (%d)", name, pr.HTTPGet.Port.String(), metricsPort)
					}
				}

				shutdown, err := time.ParseDuration(one(t, flags, "shutdown-timeout"))
				if err != nil {
					t.Fatal(err)
				}
				var preStop int64
				if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
					t.Error("proxy: no preStop sleep (the pod would leave its Services only after the proxy stopped accepting)")
				} else {
					preStop = c.Lifecycle.PreStop.Sleep.Seconds
				}
				need := preStop + int64((shutdown + pf.drainAfterDeadline(t)).Seconds())
				grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
				if grace == nil {
					t.Errorf("terminationGracePeriodSeconds not set: want above %d s", need)
				} else if *grace <= need {
					t.Errorf("terminationGracePeriodSeconds %d: want above %d s (preStop %d s, -shutdown-timeout %v, then %v)", grace, need, preStop, shutdown, pf.drainAfterDeadline(t))
				} else if lp := c.LivenessProbe; lp != nil && int64(lp.PeriodSeconds)*int64(lp.FailureThreshold) <= *grace {
					t.Errorf("liveness probe: %d failures %d s apart kill the proxy within the %d s it may drain (/health answers 503 while draining)", lp.FailureThreshold, lp.PeriodSeconds, *grace)
				}

				sc := c.SecurityContext
				switch {
				case sc == nil:
					t.Error("proxy: no securityContext")
				case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0:
					t.Errorf("proxy: runAsNonRoot %v, runAsUser %v: want non-root", sc.RunAsNonRoot, sc.RunAsUser)
				case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
					t.Error("proxy: root file system writable")
				case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
					t.Error("proxy: privilege escalation allowed")
				case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
					t.Errorf("proxy: capabilities %+v, want drop ALL", sc.Capabilities)
				}
				if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
					t.Error("proxy: no memory request")
				}
				if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
					t.Error("proxy: no memory limit")
				}
			}
		})
	}
}

// TestSidecarUpstream checks that the sidecar's -upstream is the engine
// container's port on the pod's loopback, that the engine listens there,
// and that the engine serves until the proxy has drained.
func TestSidecarUpstream(t *testing.T) {
	pf := readProxy(t)
	for shape, kind := range sidecarKinds() {
		t.Run(shape, func(t *testing.T) {
			o := renderShape(t, shape)
			d := o.component(t, "engine")
			proxy, engine := container(t, d, "proxy"), container(t, d, "engine")
			port, ok := portNamed(engine, "engine")
			if !ok {
				t.Fatal("engine container: no port named engine")
			}
			if up, want := one(t, flagValues(t, pf, proxy), "upstream"), fmt.Sprintf("http://127.0.0.1:%d", port); up != want {
				t.Errorf("-upstream=%s, want %s (the engine container's port)", up, want)
			}
			listen := ""
			switch kind {
			case "vllm", "sglang":
				for _, a := range engine.Args {
					if p, ok := strings.CutPrefix(a, "--port="); ok {
						listen = p
					}
				}
			case "ollama":
				for _, e := range engine.Env {
					if e.Name == "OLLAMA_HOST" {
						_, listen, _ = strings.Cut(e.Value, ":")
					}
				}
			}
			if listen != fmt.Sprint(port) {
				t.Errorf("%s listens on port %q (args %q, env %v), want the container port %d", kind, listen, engine.Args, engine.Env, port)
			}
			probes := []*corev1.Probe{engine.StartupProbe}
			if kind != "ollama" { // Ollama's readiness waits for its model (TestEngineOllama)
				probes = append(probes, engine.ReadinessProbe)
			}
			for _, pr := range probes {
				if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Port.String() != "engine" {
					t.Errorf("engine probe %+v: want an HTTP GET on port engine", pr)
				}
			}
			proxyStop := proxy.Lifecycle.PreStop.Sleep.Seconds
			shutdown, err := time.ParseDuration(one(t, flagValues(t, pf, proxy), "shutdown-timeout"))
			if err != nil {
				t.Fatal(err)
			}
			if engine.Lifecycle == nil || engine.Lifecycle.PreStop == nil || engine.Lifecycle.PreStop.Sleep == nil ||
				engine.Lifecycle.PreStop.Sleep.Seconds < proxyStop+int64(shutdown.Seconds()) {
				t.Errorf("engine preStop %+v: want a sleep of at least %d s, so that the engine serves the proxy's drain", engine.Lifecycle, proxyStop+int64(shutdown.Seconds()))
			}
		})
	}
}

// TestPodMonitor checks that each PodMonitor selects a Deployment's pods,
// scrapes a port the pod has, and takes its job from a pod label whose
// value is the proxy's -service-name (OTLP's service.name, which becomes
// job too); and that engines and gateways are in different jobs.
func TestPodMonitor(t *testing.T) {
	pf := readProxy(t)
	both := withImage(map[string]any{"gateway": map[string]any{"enabled": true}}) // in front of the sidecars
	jobs := map[string]string{}                                                   // job -> component
	for _, shape := range append(slices.Clone(shapes), "sidecar and gateway") {
		t.Run(shape, func(t *testing.T) {
			var o objects
			if shape == "sidecar and gateway" {
				o = render(t, both)
			} else {
				o = renderShape(t, shape)
			}
			scraped := 0
			for _, d := range o.proxies() {
				if !pushes(t, d) {
					scraped++
				}
			}
			if len(o.podMonitors) != scraped {
				t.Fatalf("%d PodMonitors for %d Deployments that do not push", len(o.podMonitors), scraped)
			}
			for _, pm := range o.podMonitors {
				sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				var matched []*appsv1.Deployment
				for _, d := range o.proxies() {
					if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
						matched = append(matched, d)
					}
				}
				if len(matched) != 1 {
					t.Fatalf("PodMonitor %s selects the pods of %d Deployments, want 1", pm.Name, len(matched))
				}
				d := matched[0]
				for _, ep := range pm.Spec.PodMetricsEndpoints {
					if ep.Port == nil {
						t.Errorf("PodMonitor %s: an endpoint without a port name", pm.Name)
						continue
					}
					found := false
					for _, c := range d.Spec.Template.Spec.Containers {
						if _, ok := portNamed(&c, *ep.Port); ok {
							found = true
						}
					}
					if !found {
						t.Errorf("PodMonitor %s: port %q is not a container port of Deployment %s", pm.Name, *ep.Port, d.Name)
					}
					if ep.Path != "/metrics" || !pf.metrics[ep.Path] {
						t.Errorf("PodMonitor %s: path %q, want /metrics", pm.Name, ep.Path)
					}
				}
				job, ok := d.Spec.Template.Labels[pm.Spec.JobLabel]
				if pm.Spec.JobLabel == "" || !ok || job == "" {
					t.Fatalf("PodMonitor %s: jobLabel %q is not a label of the pods (%v)", pm.Name, pm.Spec.JobLabel, d.Spec.Template.Labels)
				}
				if sn := one(t, flagValues(t, pf, container(t, d, "proxy")), "service-name"); sn != job {
					t.Errorf("Deployment %s: -service-name=%s, job %s: pushed and scraped series in different jobs", d.Name, sn, job)
				}
				component := d.Labels["app.kubernetes.io/component"]
				if other, ok := jobs[job]; ok && other != component {
					t.Errorf("job %q is both %s's and %s's", job, other, component)
				}
				jobs[job] = component
			}
		})
	}
}

// pushes reports whether a Deployment's proxy pushes OTLP.
func pushes(t *testing.T, d *appsv1.Deployment) bool {
	t.Helper()
	return slices.ContainsFunc(container(t, d, "proxy").Env, func(e corev1.EnvVar) bool { return e.Name == "OTEL_EXPORTER_OTLP_ENDPOINT" })
}

// TestScrapeOrPush checks that no shape both scrapes a proxy (PodMonitor)
// and has it push OTLP: into one Prometheus, each series would come twice
// (under two instances) and every sum would double.
func TestScrapeOrPush(t *testing.T) {
	for _, shape := range shapes {
		o := renderShape(t, shape)
		for _, d := range o.proxies() {
			if !pushes(t, d) {
				continue
			}
			for _, pm := range o.podMonitors {
				sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("%s: Deployment %s pushes OTLP and PodMonitor %s scrapes it", shape, d.Name, pm.Name)
				}
			}
		}
	}
}

// TestPrometheusRuleInSync checks that the chart's copy of the
// PrometheusRule is the one the mixin generates, and that the rendered
// rule holds its groups as they are.
func TestPrometheusRuleInSync(t *testing.T) {
	generated, err := os.ReadFile("../mixin/rules/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile(filepath.Join(chartDir, "files", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(generated) != string(copied) {
		t.Errorf("%s/files/prometheusrule.yaml differs from mixin/rules/prometheusrule.yaml: run go generate ./... in deploy/", chartDir)
	}
	var want monitoringv1.PrometheusRule
	if err := decodeStrict(generated, &want); err != nil {
		t.Fatalf("mixin/rules/prometheusrule.yaml: %v", err)
	}
	if len(want.Spec.Groups) == 0 {
		t.Fatal("mixin/rules/prometheusrule.yaml: no groups")
	}
	for _, shape := range shapes {
		o := renderShape(t, shape)
		if len(o.prometheusRules) != 1 {
			t.Fatalf("%s: %d PrometheusRules", shape, len(o.prometheusRules))
		}
		got := o.prometheusRules[0]
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("%s: the rendered PrometheusRule's spec differs from the generated one", shape)
		}
		if got.Namespace != "" && got.Namespace != namespace {
			t.Errorf("%s: PrometheusRule in namespace %q", shape, got.Namespace)
		}
	}
}
