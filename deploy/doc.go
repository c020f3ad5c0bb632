// Package deploy holds what a Kubernetes user deploys: the Helm chart in
// helm/infermetrics (infermetrics-proxy as a sidecar beside vLLM, SGLang or
// Ollama and as a gateway, its PodMonitors, the mixin's PrometheusRule and
// a collector gateway's configuration). Its tests render the chart with
// Helm's own packages, lint it as helm lint does and decode every object
// strictly into its Kubernetes or Prometheus Operator type
// (docs/kubernetes.md). Package proxyimage builds the proxy's container
// image without a container daemon. It is a module of its own, so that the library's
// go.mod takes none of Helm's and Kubernetes's dependencies.
package deploy

// The chart's copy of the generated PrometheusRule (TestPrometheusRuleInSync).
//go:generate cp ../mixin/rules/prometheusrule.yaml helm/infermetrics/files/prometheusrule.yaml
