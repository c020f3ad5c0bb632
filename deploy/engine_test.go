package deploy

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// guideLine is what docs/proxy.md's first example runs in front of an
// engine: its -upstream port and whether it passes -include-usage and
// -default-model.
type guideLine struct {
	port                       string
	includeUsage, defaultModel bool
}

// proxyGuide reads docs/proxy.md's lines "infermetrics-proxy -upstream
// http://127.0.0.1:PORT [flags]  # Engine" for vLLM, SGLang and Ollama.
func proxyGuide(t *testing.T) map[string]guideLine {
	t.Helper()
	f, err := os.Open("../docs/proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`^infermetrics-proxy -upstream http://127\.0\.0\.1:(\d+)\s+(.*?)\s*# (\w+)`)
	kinds := map[string]string{"vLLM": "vllm", "SGLang": "sglang", "Ollama": "ollama"}
	guide := map[string]guideLine{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil || kinds[m[3]] == "" {
			continue
		}
		flags := strings.Fields(m[2])
		guide[kinds[m[3]]] = guideLine{port: m[1], includeUsage: slices.Contains(flags, "-include-usage"),
			defaultModel: slices.Contains(flags, "-default-model")}
	}
	if len(guide) != len(kinds) {
		t.Fatalf("docs/proxy.md: found the lines of %v, want vLLM, SGLang and Ollama", guide)
	}
	return guide
}

// engineArg returns the value of the engine container's --NAME=VALUE arg.
func engineArg(c *corev1.Container, name string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestSidecarFollowsProxyGuide renders each sidecar values file and checks
// that its proxy runs as docs/proxy.md runs one in front of that engine:
// -include-usage where the guide passes it, -default-model where the guide
// passes it, set to the name the engine serves its model under (its
// --served-model-name), and the guide's port as the upstream's; and that
// sidecar.includeUsage and sidecar.defaultModel false leave both out.
func TestSidecarFollowsProxyGuide(t *testing.T) {
	pf := readProxy(t)
	guide := proxyGuide(t)
	for shape, kind := range sidecarKinds() {
		t.Run(shape, func(t *testing.T) {
			g := guide[kind]
			d := renderShape(t, shape).component(t, "engine")
			engine := container(t, d, "engine")
			flags := flagValues(t, pf, container(t, d, "proxy"))
			if _, ok := flags["include-usage"]; ok != g.includeUsage {
				t.Errorf("-include-usage given: %v; docs/proxy.md gives it in front of %s: %v", ok, kind, g.includeUsage)
			}
			served, hasServed := engineArg(engine, "served-model-name")
			if g.defaultModel {
				if !hasServed || served == "" {
					t.Fatalf("engine args %q: no --served-model-name", engine.Args)
				}
				if got := one(t, flags, "default-model"); got != served {
					t.Errorf("-default-model=%s, want the engine's --served-model-name %s", got, served)
				}
			} else if _, ok := flags["default-model"]; ok {
				t.Errorf("-default-model %v, which docs/proxy.md does not give in front of %s", flags["default-model"], kind)
			}
			if p, _ := portNamed(engine, "engine"); fmt.Sprint(p) != g.port {
				t.Errorf("engine port %d, docs/proxy.md's upstream port for %s %s", p, kind, g.port)
			}

			vals := readValues(t, valuesFile(shape))
			vals["sidecar"] = map[string]any{"includeUsage": false, "defaultModel": false}
			off := flagValues(t, pf, container(t, render(t, vals).component(t, "engine"), "proxy"))
			for _, f := range []string{"include-usage", "default-model"} {
				if v, ok := off[f]; ok {
					t.Errorf("sidecar.includeUsage and defaultModel false: -%s %v still given", f, v)
				}
			}
		})
	}
	// The gateway's upstreams are unknown: neither, unless asked for.
	flags := flagValues(t, pf, container(t, renderShape(t, "gateway").component(t, "gateway"), "proxy"))
	for _, f := range []string{"include-usage", "default-model"} {
		if v, ok := flags[f]; ok {
			t.Errorf("gateway: -%s %v given", f, v)
		}
	}
}

// TestServedModelName checks that vLLM and SGLang serve under
// engine.servedModelName, default the model, and the sidecar's
// -default-model follows it.
func TestServedModelName(t *testing.T) {
	pf := readProxy(t)
	for _, kind := range []string{"vllm", "sglang"} {
		for served, want := range map[string]string{"": "org/model-x", "chat": "chat"} {
			d := render(t, withImage(map[string]any{"engine": map[string]any{"kind": kind, "model": "org/model-x", "servedModelName": served}})).component(t, "engine")
			got, _ := engineArg(container(t, d, "engine"), "served-model-name")
			dm := one(t, flagValues(t, pf, container(t, d, "proxy")), "default-model")
			if got != want || dm != want {
				t.Errorf("%s, servedModelName %q: --served-model-name=%s, -default-model=%s, want %s", kind, served, got, dm, want)
			}
		}
	}
}

// engineDefaults reads values.yaml's engineDefaults[kind].
func engineDefaults(t *testing.T, kind string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := v.Table("engineDefaults." + kind)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// quantity reads a resource quantity of values.yaml.
func quantity(t *testing.T, m map[string]any, path ...string) resource.Quantity {
	t.Helper()
	var v any = m
	for _, p := range path {
		mm, _ := v.(map[string]any)
		v = mm[p]
	}
	q, err := resource.ParseQuantity(fmt.Sprint(v))
	if err != nil {
		t.Fatalf("%v: %v", path, err)
	}
	return q
}

// TestEngineResources checks the engine container's requests and limits:
// each kind's defaults of values.yaml (CPU and memory requested, a memory
// limit), its GPUs as a limit (one for vLLM and SGLang, none for Ollama),
// engine.gpus and engine.gpuResource changing them, and engine.resources
// merged over the defaults.
func TestEngineResources(t *testing.T) {
	for _, kind := range []string{"vllm", "sglang", "ollama"} {
		t.Run(kind, func(t *testing.T) {
			def := engineDefaults(t, kind)
			engineOf := func(engine map[string]any) *corev1.Container {
				engine["kind"] = kind
				return container(t, render(t, withImage(map[string]any{"engine": engine})).component(t, "engine"), "engine")
			}
			r := engineOf(map[string]any{}).Resources
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				want := quantity(t, def, "resources", "requests", string(res))
				if got, ok := r.Requests[res]; !ok || got.Cmp(want) != 0 {
					t.Errorf("request %s %v, want %v (engineDefaults.%s)", res, got.String(), want.String(), kind)
				}
			}
			if got, want := r.Limits[corev1.ResourceMemory], quantity(t, def, "resources", "limits", "memory"); got.Cmp(want) != 0 {
				t.Errorf("memory limit %v, want %v", got.String(), want.String())
			}
			gpus := int64(def["gpus"].(float64))
			if got := r.Limits["nvidia.com/gpu"]; got.Value() != gpus {
				t.Errorf("nvidia.com/gpu limit %v, want engineDefaults.%s.gpus %d", got.String(), kind, gpus)
			}

			r = engineOf(map[string]any{"gpus": 2, "gpuResource": "amd.com/gpu"}).Resources
			if got := r.Limits["amd.com/gpu"]; got.Value() != 2 {
				t.Errorf("gpus 2 of amd.com/gpu: limits %v", r.Limits)
			}
			if _, ok := r.Limits["nvidia.com/gpu"]; ok {
				t.Errorf("gpuResource amd.com/gpu: limits %v still name nvidia.com/gpu", r.Limits)
			}
			if r = engineOf(map[string]any{"gpus": 0}).Resources; slices.ContainsFunc(slices.Collect(maps.Keys(r.Limits)), func(n corev1.ResourceName) bool { return strings.HasSuffix(string(n), "/gpu") }) {
				t.Errorf("gpus 0: limits %v name a GPU", r.Limits)
			}

			r = engineOf(map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "40Gi"}}}).Resources
			if got := r.Limits[corev1.ResourceMemory]; got.String() != "40Gi" {
				t.Errorf("resources.limits.memory 40Gi: limit %v", got.String())
			}
			if got, want := r.Requests[corev1.ResourceCPU], quantity(t, def, "resources", "requests", "cpu"); got.Cmp(want) != 0 {
				t.Errorf("resources.limits.memory given: CPU request %v, want the default %v kept", got.String(), want.String())
			}
		})
	}
}

// engineContainers returns the engine container and, for Ollama, the
// init container that pulls its model.
func engineContainers(t *testing.T, d *appsv1.Deployment) []*corev1.Container {
	t.Helper()
	cs := []*corev1.Container{container(t, d, "engine")}
	for i := range d.Spec.Template.Spec.InitContainers {
		cs = append(cs, &d.Spec.Template.Spec.InitContainers[i])
	}
	return cs
}

// TestEngineSecurityContext checks what every engine container (and the
// Ollama pull) gets: no privilege escalation, all capabilities dropped,
// the RuntimeDefault seccomp profile; and that engine.securityContext is
// merged over it.
func TestEngineSecurityContext(t *testing.T) {
	for shape := range sidecarKinds() {
		for _, c := range engineContainers(t, renderShape(t, shape).component(t, "engine")) {
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("%s %s: no securityContext", shape, c.Name)
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Errorf("%s %s: privilege escalation allowed", shape, c.Name)
			case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
				t.Errorf("%s %s: capabilities %+v, want drop ALL", shape, c.Name, sc.Capabilities)
			case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
				t.Errorf("%s %s: seccomp %+v, want RuntimeDefault", shape, c.Name, sc.SeccompProfile)
			}
		}
	}
	vals := withImage(map[string]any{"engine": map[string]any{"securityContext": map[string]any{"runAsUser": 1000, "runAsNonRoot": true}}})
	sc := container(t, render(t, vals).component(t, "engine"), "engine").SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 1000 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("engine.securityContext runAsUser 1000: %+v, want it merged over the chart's", sc)
	}
}

// volumeOf returns the pod's volume mounted at path in c.
func volumeOf(t *testing.T, d *appsv1.Deployment, c *corev1.Container, path string) *corev1.Volume {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for i := range d.Spec.Template.Spec.Volumes {
			if v := &d.Spec.Template.Spec.Volumes[i]; v.Name == m.Name {
				return v
			}
		}
		t.Fatalf("%s: mount %s of volume %s, which the pod lacks", c.Name, path, m.Name)
	}
	t.Fatalf("%s: nothing mounted at %s (mounts %+v)", c.Name, path, c.VolumeMounts)
	return nil
}

// TestEngineOllama checks the Ollama sidecar of its values file: an init
// container pulls the model into the volume the engine serves its models
// from, talking to a server of its own on the engine's port; the engine is
// Ready only once the model is there (ollama show MODEL, which fails until
// Ollama has it); the models are on the claim the chart renders, of the
// size asked, and the Deployment is replaced rather than rolled (the claim
// attaches to one node). Without persistence the models are on an emptyDir
// and no claim is made; with pull false there is no init container;
// existingClaim is mounted as it is.
func TestEngineOllama(t *testing.T) {
	vals := readValues(t, valuesFile("sidecar-ollama"))
	model := vals["engine"].(map[string]any)["model"].(string)
	modelsPath := engineDefaults(t, "ollama")["modelsPath"].(string)
	o := renderShape(t, "sidecar-ollama")
	d := o.component(t, "engine")
	engine := container(t, d, "engine")
	if pr := engine.ReadinessProbe; pr == nil || pr.Exec == nil || !slices.Equal(pr.Exec.Command, []string{"ollama", "show", model}) {
		t.Errorf("readiness probe %+v: want exec ollama show %s", pr, model)
	}
	inits := d.Spec.Template.Spec.InitContainers
	if len(inits) != 1 || inits[0].Name != "pull" {
		t.Fatalf("init containers %+v: want pull", inits)
	}
	pull := &inits[0]
	env := map[string]string{}
	for _, e := range pull.Env {
		env[e.Name] = e.Value
	}
	port, _ := portNamed(engine, "engine")
	if env["MODEL"] != model || env["OLLAMA_HOST"] != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Errorf("pull env %v: want MODEL=%s and OLLAMA_HOST on the engine's port %d", env, model, port)
	}
	if script := strings.Join(pull.Args, " "); !strings.Contains(script, `ollama pull "$MODEL"`) {
		t.Errorf("pull script %q: no ollama pull", script)
	}
	if pull.Image != engine.Image {
		t.Errorf("pull image %s, engine image %s", pull.Image, engine.Image)
	}
	if a, b := volumeOf(t, d, pull, modelsPath), volumeOf(t, d, engine, modelsPath); a != b {
		t.Errorf("pull writes to volume %s, the engine reads %s", a.Name, b.Name)
	}
	v := volumeOf(t, d, engine, modelsPath)
	if v.PersistentVolumeClaim == nil || len(o.claims) != 1 || v.PersistentVolumeClaim.ClaimName != o.claims[0].Name {
		t.Fatalf("models volume %+v, claims %d: want the chart's claim", v.VolumeSource, len(o.claims))
	}
	size := vals["engine"].(map[string]any)["persistence"].(map[string]any)["size"].(string)
	if got := o.claims[0].Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != size {
		t.Errorf("claim of %s, want %s", got.String(), size)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q with a ReadWriteOnce claim, want Recreate", d.Spec.Strategy.Type)
	}

	eng := func(m map[string]any) map[string]any {
		m["kind"] = "ollama"
		return withImage(map[string]any{"engine": m})
	}
	o = render(t, eng(map[string]any{"model": model, "pull": false}))
	d = o.component(t, "engine")
	if len(d.Spec.Template.Spec.InitContainers) != 0 || len(o.claims) != 0 {
		t.Errorf("pull false, no persistence: init containers %v, claims %d", d.Spec.Template.Spec.InitContainers, len(o.claims))
	}
	if v := volumeOf(t, d, container(t, d, "engine"), modelsPath); v.EmptyDir == nil {
		t.Errorf("no persistence: models volume %+v, want an emptyDir", v.VolumeSource)
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		t.Error("no persistence: strategy Recreate")
	}
	o = render(t, eng(map[string]any{"persistence": map[string]any{"enabled": true, "existingClaim": "my-models"}}))
	d = o.component(t, "engine")
	if v := volumeOf(t, d, container(t, d, "engine"), modelsPath); len(o.claims) != 0 || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "my-models" {
		t.Errorf("existingClaim my-models: volume %+v, %d claims rendered", v.VolumeSource, len(o.claims))
	}
	o = render(t, eng(map[string]any{"persistence": map[string]any{"enabled": true, "storageClass": "fast"}}))
	if sc := o.claims[0].Spec.StorageClassName; sc == nil || *sc != "fast" {
		t.Errorf("storageClass fast: claim's %v", sc)
	}
}
