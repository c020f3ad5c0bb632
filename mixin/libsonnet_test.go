package mixin

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-jsonnet"
)

// libsonnetFile is the jsonnet mixin, which reads the generated files.
const libsonnetFile = "mixin/mixin.libsonnet"

// repo is the module path jsonnet-bundler vendors the repository under.
const repo = "github.com/infermetrics/infermetrics"

// dashboards returns the dashboards among fs.
func dashboards(fs []File) []File {
	var ds []File
	for _, f := range fs {
		if path.Dir(f.Path) == "docs/grafana" {
			ds = append(ds, f)
		}
	}
	return ds
}

// configJSONOf is configJSON(c), failing the test on error.
func configJSONOf(t *testing.T, c Config) []byte {
	t.Helper()
	b, err := configJSON(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vendored copies what mixin.libsonnet may read from the repository
// (itself, config.json, dashboards.libsonnet and the committed generated
// files of fs) into a jsonnet-bundler vendor tree, as `jb install
// github.com/infermetrics/infermetrics` lays it out, and returns the
// vendor directory and the copy's root.
func vendored(t *testing.T, fs []File) (vendor, copyRoot string) {
	t.Helper()
	vendor = t.TempDir()
	copyRoot = filepath.Join(vendor, filepath.FromSlash(repo))
	paths := []string{libsonnetFile}
	for _, f := range fs {
		paths = append(paths, f.Path)
	}
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		writeFile(t, filepath.Join(copyRoot, filepath.FromSlash(p)), b)
	}
	return vendor, copyRoot
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mixinOutputs is what the mixin's importer reads: its four fields.
const mixinOutputs = `local m = import '` + repo + `/mixin/mixin.libsonnet';
{ _config: m._config, prometheusRules: m.prometheusRules, prometheusAlerts: m.prometheusAlerts, grafanaDashboards: m.grafanaDashboards }`

// evaluate evaluates snippet with vendor on the jsonnet path (jb's -J
// vendor) and returns its value, decoded from JSON.
func evaluate(vendor, snippet string) (map[string]any, error) {
	vm := jsonnet.MakeVM()
	vm.Importer(&jsonnet.FileImporter{JPaths: []string{vendor}})
	out, err := vm.EvaluateAnonymousSnippet("main.jsonnet", snippet)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	return v, json.Unmarshal([]byte(out), &v)
}

// parseYAML reads a YAML file as jsonnet's std.parseYaml does, which the
// mixin reads the rule files with.
func parseYAML(t *testing.T, b []byte) any {
	t.Helper()
	vm := jsonnet.MakeVM()
	vm.ExtVar("file", string(b))
	out, err := vm.EvaluateAnonymousSnippet("yaml.jsonnet", "std.parseYaml(std.extVar('file'))")
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// mixinDiffs evaluates the mixin of a vendor tree and says how each of its
// outputs differs, as a value, from what the generator makes of c (fs,
// Files(c)): _config from c, prometheusRules and prometheusAlerts from the
// two rule files, grafanaDashboards from the dashboards by file name.
func mixinDiffs(t *testing.T, vendor string, fs []File, c Config) []string {
	t.Helper()
	got, err := evaluate(vendor, mixinOutputs)
	if err != nil {
		return []string{fmt.Sprintf("mixin.libsonnet does not evaluate: %v", err)}
	}
	var cfg any
	if err := json.Unmarshal(configJSONOf(t, c), &cfg); err != nil {
		t.Fatal(err)
	}
	boards := map[string]any{}
	for _, d := range dashboards(fs) {
		var v any
		if err := json.Unmarshal(d.Data, &v); err != nil {
			t.Fatalf("%s: %v", d.Path, err)
		}
		boards[path.Base(d.Path)] = v
	}
	want := map[string]any{
		"_config":           cfg,
		"prometheusRules":   parseYAML(t, fileOf(t, fs, RecordingRulesFile)),
		"prometheusAlerts":  parseYAML(t, fileOf(t, fs, AlertsFile)),
		"grafanaDashboards": boards,
	}
	var diffs []string
	for _, k := range []string{"_config", "prometheusRules", "prometheusAlerts"} {
		if !reflect.DeepEqual(got[k], want[k]) {
			diffs = append(diffs, k+" differs from the generated "+map[string]string{
				"_config": "Default", "prometheusRules": RecordingRulesFile, "prometheusAlerts": AlertsFile}[k])
		}
	}
	gotBoards, _ := got["grafanaDashboards"].(map[string]any)
	for name, b := range boards {
		g, ok := gotBoards[name]
		switch {
		case !ok:
			diffs = append(diffs, "grafanaDashboards has no "+name)
		case !reflect.DeepEqual(g, b):
			diffs = append(diffs, "grafanaDashboards' "+name+" differs from the generated file")
		}
	}
	for name := range gotBoards {
		if _, ok := boards[name]; !ok {
			diffs = append(diffs, "grafanaDashboards' "+name+" is no generated dashboard")
		}
	}
	slices.Sort(diffs)
	return diffs
}

// mixin.libsonnet, imported as a jsonnet-bundler user imports it from the
// vendored repository, evaluates to exactly the generated files, compared
// as values: _config is Default, prometheusRules recording.yaml,
// prometheusAlerts alerts.yaml, and grafanaDashboards every dashboard of
// Files by file name. Its two generated parts are what Default and Files
// make (go generate writes them). A _config that sets a parameter fails to
// evaluate: the rules would not follow it.
func TestMixinLibsonnet(t *testing.T) {
	fs := files(t, Default())
	vendor, _ := vendored(t, fs)
	for _, d := range mixinDiffs(t, vendor, fs, Default()) {
		t.Error(d)
	}
	_, err := evaluate(vendor, `(import '`+repo+`/mixin/mixin.libsonnet') + { _config+:: { StuckFor: '1m' } }`)
	if err == nil || !strings.Contains(err.Error(), "_config cannot change") {
		t.Errorf("a _config that changes StuckFor evaluated (error %v), want it refused", err)
	}
	if _, err := evaluate(vendor, `(import '`+repo+`/mixin/mixin.libsonnet') + { _config+:: { otherMixin: 1 } }`); err != nil {
		t.Errorf("a _config with another mixin's key: %v", err)
	}
}

// The comparison fails when the generated files change without the
// libsonnet following (a dashboard added or renamed, a parameter changed, a
// rule file with more than its groups) and when the libsonnet breaks.
func TestMixinLibsonnetCatches(t *testing.T) {
	fs := files(t, Default())
	first := dashboards(fs)[0]
	for name, tc := range map[string]func(copyRoot string) ([]File, Config){
		"a dashboard added": func(string) ([]File, Config) {
			return append(slices.Clone(fs), File{"docs/grafana/infermetrics-new.json", []byte(`{"title":"new"}`)}), Default()
		},
		"a dashboard renamed": func(copyRoot string) ([]File, Config) {
			renamed := slices.Clone(fs)
			i := slices.IndexFunc(renamed, func(f File) bool { return f.Path == first.Path })
			renamed[i].Path = path.Join(path.Dir(first.Path), "renamed.json")
			if err := os.Remove(filepath.Join(copyRoot, filepath.FromSlash(first.Path))); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(copyRoot, filepath.FromSlash(renamed[i].Path)), first.Data)
			return renamed, Default()
		},
		"a parameter changed": func(string) ([]File, Config) {
			c := Default()
			c.StuckFor = "1m"
			return files(t, c), c
		},
		"a rule file with more than its groups": func(copyRoot string) ([]File, Config) {
			more := slices.Clone(fs)
			i := slices.IndexFunc(more, func(f File) bool { return f.Path == AlertsFile })
			more[i].Data = append(slices.Clone(more[i].Data), "extra: true\n"...)
			writeFile(t, filepath.Join(copyRoot, filepath.FromSlash(AlertsFile)), more[i].Data)
			return more, Default()
		},
		"a broken libsonnet": func(copyRoot string) ([]File, Config) {
			writeFile(t, filepath.Join(copyRoot, filepath.FromSlash(libsonnetFile)), []byte("{ prometheusAlerts+:: "))
			return fs, Default()
		},
	} {
		t.Run(name, func(t *testing.T) {
			vendor, copyRoot := vendored(t, fs)
			changed, c := tc(copyRoot)
			diffs := mixinDiffs(t, vendor, changed, c)
			if len(diffs) == 0 {
				t.Error("the comparison found no difference")
			}
			t.Log(strings.Join(diffs, "; "))
		})
	}
}
