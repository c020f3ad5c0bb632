{{/* Names and labels of the chart's objects. */}}
{{- define "infermetrics.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "infermetrics.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "infermetrics.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "infermetrics.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "infermetrics.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "infermetrics.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component (engine or gateway): (list . "engine"). */}}
{{- define "infermetrics.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "infermetrics.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The job of the engines' series and of the gateway's. */}}
{{- define "infermetrics.engineJob" -}}
{{- default (include "infermetrics.fullname" .) .Values.monitoring.engineJob -}}
{{- end -}}
{{- define "infermetrics.gatewayJob" -}}
{{- default (printf "%s-gateway" (include "infermetrics.fullname" .)) .Values.monitoring.gatewayJob -}}
{{- end -}}

{{/* The engine's settings: engineDefaults[kind] under engine's own. */}}
{{- define "infermetrics.engineImage" -}}
{{- $d := required (printf "engine.kind %q: want vllm, sglang or ollama" .Values.engine.kind) (index .Values.engineDefaults .Values.engine.kind) -}}
{{- default $d.image .Values.engine.image -}}
{{- end -}}
{{- define "infermetrics.enginePort" -}}
{{- $d := required (printf "engine.kind %q: want vllm, sglang or ollama" .Values.engine.kind) (index .Values.engineDefaults .Values.engine.kind) -}}
{{- int (default $d.port .Values.engine.port) -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds of a pod with the proxy: its preStop sleep,
then -shutdown-timeout for the requests in flight, then up to 5 s for the
requests cut at the deadline to record their end and up to 10 s for the
metrics flush (cutWait and flushTimeout in cmd/infermetrics-proxy/serve.go;
deploy's TestGracePeriod reads them there), and 5 s to spare.
*/}}
{{- define "infermetrics.gracePeriod" -}}
{{- add .Values.proxy.preStopSleepSeconds .Values.proxy.shutdownTimeoutSeconds 5 10 5 -}}
{{- end -}}

{{/*
The proxy container: (dict "root" . "job" JOB "upstreams" LIST
"includeUsage" BOOL "defaultModel" NAME).
*/}}
{{- define "infermetrics.proxyContainer" -}}
{{- $root := .root -}}
{{- $p := $root.Values.proxy -}}
- name: proxy
  image: "{{ required "proxy.image.repository: the repository you pushed the proxy's image to (docs/kubernetes.md, \"The proxy's image\")" $p.image.repository }}:{{ default $root.Chart.AppVersion $p.image.tag }}"
  imagePullPolicy: {{ $p.image.pullPolicy }}
  args:
    - -listen=:{{ $p.port }}
    - -metrics-listen=:{{ $p.metricsPort }}
    {{- range .upstreams }}
    - -upstream={{ . }}
    {{- end }}
    - -shutdown-timeout={{ $p.shutdownTimeoutSeconds }}s
    - -max-models={{ $p.maxModels }}
    {{- if or $p.includeUsage .includeUsage }}
    - -include-usage
    {{- end }}
    {{- with .defaultModel }}
    - -default-model={{ . }}
    {{- end }}
    {{- include "infermetrics.usageArgs" $p }}
    - -service-name={{ .job }}
    - -instance-id=$(POD_NAME)
    - -log-format=json
    {{- range $p.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: POD_UID
      valueFrom:
        fieldRef:
          fieldPath: metadata.uid
    # The resource attributes the collector's k8sattributes associates a
    # sender by, and the dashboards' namespace and pod.
    - name: OTEL_RESOURCE_ATTRIBUTES
      value: k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.name=$(POD_NAME),k8s.pod.uid=$(POD_UID)
    {{- with include "infermetrics.otlpEndpoint" $root }}
    - name: OTEL_EXPORTER_OTLP_ENDPOINT
      value: {{ . | quote }}
    {{- end }}
    {{- with $p.attribution.saltSecret.name }}
    - name: INFERMETRICS_PROXY_ATTRIBUTE_SALT
      valueFrom:
        secretKeyRef:
          name: {{ . | quote }}
          key: {{ $p.attribution.saltSecret.key | quote }}
    {{- end }}
    {{- with $p.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: http
      containerPort: {{ $p.port }}
      protocol: TCP
    - name: metrics
      containerPort: {{ $p.metricsPort }}
      protocol: TCP
  # /health: 200 while serving, 503 while draining.
  readinessProbe:
    httpGet:
      path: /health
      port: metrics
    periodSeconds: 5
    failureThreshold: 2
  # /health answers 503 all through the drain: the liveness probe's
  # failures must not add up to a kill before the grace period ends.
  livenessProbe:
    httpGet:
      path: /health
      port: metrics
    periodSeconds: 10
    failureThreshold: {{ add1 (div (include "infermetrics.gracePeriod" $root | int) 10) }}
  lifecycle:
    preStop:
      sleep:
        seconds: {{ $p.preStopSleepSeconds }}
  resources:
    {{- toYaml $p.resources | nindent 4 }}
  {{- with $p.prices }}
  volumeMounts:
    {{- range $i, $f := . }}
    - name: prices-{{ $i }}
      mountPath: {{ include "infermetrics.pricesDir" $i }}
      readOnly: true
    {{- end }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: [ALL]
    seccompProfile:
      type: RuntimeDefault
{{- end -}}

{{/* The engine's model, and the name it serves it under (vLLM's and
SGLang's --served-model-name, the sidecar's -default-model). */}}
{{- define "infermetrics.engineModel" -}}
{{- $d := index .Values.engineDefaults .Values.engine.kind -}}
{{- required "engine.model: the model to serve" (default $d.model .Values.engine.model) -}}
{{- end -}}
{{- define "infermetrics.servedModel" -}}
{{- default (include "infermetrics.engineModel" .) .Values.engine.servedModelName -}}
{{- end -}}

{{/* The engine container's resources: engineDefaults[kind].resources under
engine.resources, with engine.gpus (default the kind's) of engine.gpuResource
as a limit (a GPU's request is its limit). */}}
{{- define "infermetrics.engineResources" -}}
{{- $d := index .Values.engineDefaults .Values.engine.kind -}}
{{- $r := mustMergeOverwrite (deepCopy (default dict $d.resources)) (deepCopy .Values.engine.resources) -}}
{{- $gpus := ternary $d.gpus .Values.engine.gpus (kindIs "invalid" .Values.engine.gpus) | default 0 | int -}}
{{- if gt $gpus 0 -}}
{{- $_ := set $r "limits" (merge (dict .Values.engine.gpuResource $gpus) (default dict $r.limits)) -}}
{{- end -}}
{{- toYaml $r -}}
{{- end -}}

{{/* The engine container's securityContext: what all three engines' images
allow (docs/kubernetes.md, "Engines") under engine.securityContext. */}}
{{- define "infermetrics.engineSecurityContext" -}}
{{- $base := dict "allowPrivilegeEscalation" false "capabilities" (dict "drop" (list "ALL")) "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- toYaml (mustMergeOverwrite $base (deepCopy .Values.engine.securityContext)) -}}
{{- end -}}

{{/* Where the proxies push OTLP: proxy.otlpEndpoint, else this release's
collector Service when collector.enabled, else nowhere. */}}
{{- define "infermetrics.otlpEndpoint" -}}
{{- if .Values.proxy.otlpEndpoint -}}
{{- .Values.proxy.otlpEndpoint -}}
{{- else if .Values.collector.enabled -}}
{{- printf "http://%s-collector.%s.svc:4318" (include "infermetrics.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/*
The usage flags of the proxy (values proxy.attribution and proxy.prices):
-attribute per dimension, -attribute-max-values with them, -prices per
table, in the directory infermetrics.proxyContainer mounts it at.
*/}}
{{- define "infermetrics.usageArgs" -}}
{{- range .attribution.dimensions }}
    - -attribute={{ .name }}={{ .source }}
{{- end }}
{{- if .attribution.dimensions }}
    - -attribute-max-values={{ .attribution.maxValues }}
{{- end }}
{{- range $i, $f := .prices }}
    - -prices={{ include "infermetrics.pricesDir" $i }}/prices.json
{{- end }}
{{- end -}}

{{/*
The directory price table i (values proxy.prices) is mounted at.
*/}}
{{- define "infermetrics.pricesDir" -}}
/etc/infermetrics/prices/{{ . }}
{{- end -}}

{{/*
The proxy's volumes: the ConfigMap key of each price table, as prices.json.
*/}}
{{- define "infermetrics.proxyVolumes" -}}
{{- range $i, $f := .Values.proxy.prices }}
- name: prices-{{ $i }}
  configMap:
    name: {{ $f.configMap | quote }}
    items:
      - key: {{ $f.key | quote }}
        path: prices.json
{{- end }}
{{- end -}}
