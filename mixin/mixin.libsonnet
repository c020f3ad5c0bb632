// The infermetrics monitoring mixin: the Prometheus recording rules and
// alerts and the Grafana dashboards that mixin/ generates from its Go code
// (go generate ./... in mixin/), for jsonnet users (kube-prometheus, mixtool,
// Tanka). It reads the generated files, so it is exactly them: the rules of
// rules/recording.yaml, the alerts of rules/alerts.yaml, the dashboards of
// docs/grafana/ by file name. Install the whole repository, whose
// docs/grafana/ it reads (a subdirectory install leaves it out):
//
//   jb install github.com/infermetrics/infermetrics@main
//
// and import github.com/infermetrics/infermetrics/mixin/mixin.libsonnet.
// docs/monitoring.md ("Loading the rules") has the details.
local config = import 'config.json';
local recording = std.parseYaml(importstr 'rules/recording.yaml');
local alerts = std.parseYaml(importstr 'rules/alerts.yaml');

{
  // The parameters the files were generated with (mixin.Config's fields,
  // the JSON the generator's -config reads). The files are generated in
  // Go, so _config changes none of them: a mixin that sets one of these
  // fields fails to evaluate rather than ship rules it did not ask for.
  // Generate the files with your parameters (docs/monitoring.md,
  // "Parameters") and use those instead.
  _config+:: config,
  assert std.all([std.objectHasAll(self._config, k) && self._config[k] == config[k] for k in std.objectFields(config)]) :
         'infermetrics mixin: _config cannot change the generated rules and dashboards; generate them with your parameters (mixin/cmd/generate -config, docs/monitoring.md)',

  prometheusRules+:: { groups+: recording.groups },
  prometheusAlerts+:: { groups+: alerts.groups },
  grafanaDashboards+:: import 'dashboards.libsonnet',
}
