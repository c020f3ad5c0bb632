package deploy

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// usageValues are the proxy values of attribution and prices: two
// dimensions, a cap, a salt from a Secret and two price tables.
func usageValues() map[string]any {
	return map[string]any{
		"attribution": map[string]any{
			"dimensions": []any{
				map[string]any{"name": "tenant", "source": "header:X-Tenant"},
				map[string]any{"name": "key", "source": "apikey"},
			},
			"maxValues":  50,
			"saltSecret": map[string]any{"name": "proxy-salt", "key": "salt"},
		},
		"prices": []any{
			map[string]any{"configMap": "litellm-prices", "key": "model_prices_and_context_window.json"},
			map[string]any{"configMap": "our-prices", "key": "contract.json"},
		},
	}
}

// TestProxyUsage checks, in both shapes, that the attribution and price
// values become the proxy's flags (-attribute per dimension, in order,
// -attribute-max-values, -prices per table, in order), that each -prices
// file is the key of its ConfigMap mounted read-only where the flag reads
// it, beside the engine's own volumes, and that the salt comes from its
// Secret into the variable of -attribute-salt, never onto the command line;
// without them, none of it.
func TestProxyUsage(t *testing.T) {
	pf := readProxy(t)
	for _, name := range []string{"attribute", "attribute-max-values", "attribute-salt", "prices"} {
		if !pf.flags[name] {
			t.Fatalf("infermetrics-proxy has no flag -%s", name)
		}
	}
	engineVolume := map[string]any{"name": "scratch", "emptyDir": map[string]any{}}
	for _, shape := range []string{"sidecar", "gateway"} {
		t.Run(shape, func(t *testing.T) {
			vals := map[string]any{"proxy": usageValues(), "engine": map[string]any{"volumes": []any{engineVolume}}}
			if shape == "gateway" {
				vals["sidecar"] = map[string]any{"enabled": false}
				vals["gateway"] = map[string]any{"enabled": true, "upstreams": []any{"http://vllm:8000"}}
			}
			component := "engine"
			if shape == "gateway" {
				component = "gateway"
			}
			d := render(t, withImage(vals)).component(t, component)
			c := container(t, d, "proxy")
			flags := flagValues(t, pf, c)
			if got := flags["attribute"]; !slices.Equal(got, []string{"tenant=header:X-Tenant", "key=apikey"}) {
				t.Errorf("-attribute %q", got)
			}
			if got := one(t, flags, "attribute-max-values"); got != "50" {
				t.Errorf("-attribute-max-values %s, want 50", got)
			}
			if len(flags["attribute-salt"]) > 0 {
				t.Errorf("the salt is on the command line: %q", flags["attribute-salt"])
			}
			salt := "INFERMETRICS_PROXY_" + strings.ToUpper(strings.ReplaceAll("attribute-salt", "-", "_"))
			var found bool
			for _, e := range c.Env {
				if e.Name == salt {
					found = e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
						e.ValueFrom.SecretKeyRef.Name == "proxy-salt" && e.ValueFrom.SecretKeyRef.Key == "salt" && e.Value == ""
				}
			}
			if !found {
				t.Errorf("no %s from Secret proxy-salt's key salt in %+v", salt, c.Env)
			}
			volumes := map[string]corev1.Volume{}
			for _, v := range d.Spec.Template.Spec.Volumes {
				volumes[v.Name] = v
			}
			if shape == "sidecar" && volumes["scratch"].EmptyDir == nil {
				t.Errorf("the engine's volume is lost: %+v", d.Spec.Template.Spec.Volumes)
			}
			want := [][2]string{{"litellm-prices", "model_prices_and_context_window.json"}, {"our-prices", "contract.json"}}
			if len(flags["prices"]) != len(want) {
				t.Fatalf("-prices %q, want %d files", flags["prices"], len(want))
			}
			for i, file := range flags["prices"] {
				cm, key := mountedConfigMap(t, c, volumes, file)
				if cm != want[i][0] || key != want[i][1] {
					t.Errorf("-prices %s is ConfigMap %s's key %s, want %s's %s", file, cm, key, want[i][0], want[i][1])
				}
			}
		})
	}
	for _, shape := range shapes {
		t.Run(shape+" without them", func(t *testing.T) {
			for _, d := range renderShape(t, shape).proxies() {
				c := container(t, d, "proxy")
				flags := flagValues(t, pf, c)
				for _, name := range []string{"attribute", "attribute-max-values", "attribute-salt", "prices"} {
					if len(flags[name]) > 0 {
						t.Errorf("-%s %q without its values", name, flags[name])
					}
				}
				if len(c.VolumeMounts) > 0 {
					t.Errorf("proxy volume mounts %+v without prices", c.VolumeMounts)
				}
			}
		})
	}
}

// mountedConfigMap returns the ConfigMap and key a file of the container
// reads, failing the test unless a read-only mount of a ConfigMap volume
// item holds it.
func mountedConfigMap(t *testing.T, c *corev1.Container, volumes map[string]corev1.Volume, file string) (configMap, key string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, m.MountPath+"/")
		if !ok {
			continue
		}
		v, ok := volumes[m.Name]
		if !ok || v.ConfigMap == nil || !m.ReadOnly {
			t.Fatalf("%s: mount %+v of volume %+v: want a read-only ConfigMap volume", file, m, v)
		}
		for _, item := range v.ConfigMap.Items {
			if path.Clean(item.Path) == rel {
				return v.ConfigMap.Name, item.Key
			}
		}
		t.Fatalf("%s: volume %s has no item at %s: %+v", file, m.Name, rel, v.ConfigMap.Items)
	}
	t.Fatalf("%s is under no mount of the proxy container: %+v", file, c.VolumeMounts)
	return "", ""
}

// TestUsageValuesRefused checks that the schema refuses attribution and
// price values the proxy would refuse at start.
func TestUsageValuesRefused(t *testing.T) {
	with := func(key string, v any) map[string]any {
		p := usageValues()
		switch key {
		case "prices":
			p["prices"] = v
		default:
			p["attribution"].(map[string]any)[key] = v
		}
		return withImage(map[string]any{"proxy": p})
	}
	dim := func(name, source string) []any {
		return []any{map[string]any{"name": name, "source": source}}
	}
	for name, c := range map[string]struct {
		vals map[string]any
		want string // in the error
	}{
		"unknown source":      {with("dimensions", dim("t", "cookie")), "source"},
		"header without name": {with("dimensions", dim("t", "header:")), "source"},
		"header with a space": {with("dimensions", dim("t", "header:X Tenant")), "source"},
		"name with _":         {with("dimensions", dim("_t", "user")), "name"},
		"five dimensions": {with("dimensions", []any{dim("a", "user")[0], dim("b", "user")[0], dim("c", "user")[0],
			dim("d", "user")[0], dim("e", "user")[0]}), "dimensions"},
		"cap 0":             {with("maxValues", 0), "maxValues"},
		"cap above 10000":   {with("maxValues", 10001), "maxValues"},
		"price without key": {with("prices", []any{map[string]any{"configMap": "x"}}), "key"},
		"misspelt":          {with("dimension", []any{}), "dimension"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := install(t, c.vals)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("values %v: error %v, want one naming %s", fmt.Sprint(c.vals), err, c.want)
			}
		})
	}
	if _, err := install(t, withImage(map[string]any{"proxy": usageValues()})); err != nil {
		t.Errorf("the values without a mistake: %v", err)
	}
}
