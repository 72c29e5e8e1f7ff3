{{/*
Names and labels. Every helper takes the chart's own context (`.` here, or
`index .Subcharts "priority-pubsub"` from a parent chart), so a parent renders the same names
as this chart does.
*/}}

{{- define "priority-pubsub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "priority-pubsub.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "priority-pubsub.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "priority-pubsub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "priority-pubsub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "priority-pubsub.labels" -}}
helm.sh/chart: {{ include "priority-pubsub.chart" . }}
{{ include "priority-pubsub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: priority-pubsub
{{- end }}

{{- define "priority-pubsub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "priority-pubsub.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "priority-pubsub.configMapName" -}}
{{- printf "%s-config" (include "priority-pubsub.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The config file exactly as the ConfigMap carries it; also hashed into a pod annotation.
Helm deep-merges user values over values.yaml, so a driver key in the defaults would leak into
every other driver's section (and be refused there): the local driver's path on the data
volume is therefore added here, only for the local driver.
*/}}
{{- define "priority-pubsub.configYaml" -}}
{{- include "priority-pubsub.validate" . }}
{{- $config := deepCopy .Values.config }}
{{- $driver := default dict $config.driver }}
{{- if .Values.dapr.enabled }}
{{- /* Dapr mode: the queues and the driver come from the Dapr resources. */}}
{{- $_ := unset $config "queues" }}
{{- $_ := unset $driver "type" }}
{{- if $driver }}{{ $_ := set $config "driver" $driver }}{{ else }}{{ $_ := unset $config "driver" }}{{ end }}
{{- else if and (eq (default "local" $driver.type) "local") (not (hasKey $driver "path")) }}
{{- $_ := set $driver "path" "/data/queues.db" }}
{{- $_ := set $config "driver" $driver }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* The ConfigMap mounted as the Dapr resources directory: the user's, or the chart's own
rendered from dapr.resources.manifests. */}}
{{- define "priority-pubsub.daprResourcesName" -}}
{{- default (printf "%s-dapr-resources" (include "priority-pubsub.fullname" .)) .Values.dapr.resources.existingConfigMap }}
{{- end }}

{{- define "priority-pubsub.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Checks Helm can make before anything reaches the cluster. The sidecar validates the rest of
the config at start-up; these are the mistakes that only show in Kubernetes.
*/}}
{{- define "priority-pubsub.validate" -}}
{{- $config := .Values.config }}
{{- with .Values.dapr }}
{{- if .enabled }}
{{- if not .appId }}
{{- fail "dapr.appId is required with dapr.enabled (daprd's --app-id)" }}
{{- end }}
{{- if and .resources.existingConfigMap .resources.manifests }}
{{- fail "dapr.resources: give existingConfigMap or manifests, not both" }}
{{- end }}
{{- if not (or .resources.existingConfigMap .resources.manifests) }}
{{- fail "dapr.resources: existingConfigMap or manifests is required with dapr.enabled" }}
{{- end }}
{{- end }}
{{- end }}
{{- $server := default dict $config.server }}
{{- $host := toString (default "127.0.0.1" $server.host) }}
{{- if has $host (list "127.0.0.1" "localhost" "::1") }}
{{- fail (printf "config.server.host is %s: the kubelet probes the pod IP, use 0.0.0.0" $host) }}
{{- end }}
{{- $app := default dict $config.app }}
{{- if $app.api_token }}
{{- fail "config.app.api_token: keep secrets out of values; set secrets.existingSecret and secrets.apiTokenKey" }}
{{- end }}
{{- $driver := default dict $config.driver }}
{{- if $driver.connection_string }}
{{- fail "config.driver.connection_string: keep secrets out of values; set secrets.existingSecret and secrets.connectionStringKey" }}
{{- end }}
{{- if $driver.password }}
{{- fail "config.driver.password: keep secrets out of values; set secrets.existingSecret and secrets.passwordKey" }}
{{- end }}
{{- if and $driver.url (contains ":" (urlParse (toString $driver.url)).userinfo) }}
{{- fail "config.driver.url: keep secrets out of values (the URL has a password); set secrets.existingSecret and secrets.urlKey (the whole URL) or, for redis, secrets.passwordKey" }}
{{- end }}
{{- if and (or .Values.secrets.connectionStringKey .Values.secrets.urlKey .Values.secrets.apiTokenKey .Values.secrets.passwordKey) (not .Values.secrets.existingSecret) }}
{{- fail "secrets.existingSecret is required when secrets.connectionStringKey, secrets.urlKey, secrets.passwordKey or secrets.apiTokenKey is set" }}
{{- end }}
{{- end }}

{{/* ceil(journal.upload.stop_timeout_s) when the journal is uploaded (default 10), else 0. */}}
{{- define "priority-pubsub.uploadStopSeconds" -}}
{{- $journal := .Values.config.journal }}
{{- $upload := and (kindIs "map" $journal) (get $journal "upload") }}
{{- if kindIs "map" $upload }}
{{- $timeout := 10.0 }}
{{- if hasKey $upload "stop_timeout_s" }}{{ $timeout = float64 $upload.stop_timeout_s }}{{ end }}
{{- ceil $timeout | int }}
{{- else }}0{{- end }}
{{- end }}

{{/* ceil(shutdown.grace_s): the app's preStop sleep unless app.preStopSleepSeconds is set. */}}
{{- define "priority-pubsub.graceSeconds" -}}
{{- $shutdown := default dict .Values.config.shutdown }}
{{- $grace := 30.0 }}
{{- if hasKey $shutdown "grace_s" }}{{ $grace = float64 $shutdown.grace_s }}{{ end }}
{{- ceil $grace | int }}
{{- end }}

{{/*
terminationGracePeriodSeconds for the pod: the sidecar's shutdown.grace_s to finish in-flight
tasks, plus a margin to return what is left to the queues, plus the final journal uploads'
journal.upload.stop_timeout_s (10 by default) when the journal is uploaded.
*/}}
{{- define "priority-pubsub.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- $driver := default dict .Values.config.driver }}
{{- /* SQS: a running long poll cannot be interrupted; the driver waits for it on close. */}}
{{- $poll := ternary (int (default 20 $driver.wait_time_s)) 0 (eq (toString $driver.type) "sqs") }}
{{- add (include "priority-pubsub.graceSeconds" . | int) (int .Values.sidecar.terminationMarginSeconds) $poll (include "priority-pubsub.uploadStopSeconds" .) }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* daprd's publish API ports when config.publish_api is set (3500 / 50001 by default, as
the SDKs expect); grpc_port: null serves HTTP only. */}}
{{- define "priority-pubsub.publishApiPorts" -}}
{{- with .Values.config.publish_api }}
- name: dapr-http
  containerPort: {{ int (default 3500 .http_port) }}
  protocol: TCP
{{- if or (not (hasKey . "grpc_port")) .grpc_port }}
- name: dapr-grpc
  containerPort: {{ int (default 50001 .grpc_port) }}
  protocol: TCP
{{- end }}
{{- end }}
{{- end }}

{{- define "priority-pubsub.metricsPort" -}}
{{- $server := default dict .Values.config.server }}
{{- int (default 9464 $server.port) }}
{{- end }}

{{/* The queues KEDA scales on: keda.queues, else the highest-priority queue. */}}
{{- define "priority-pubsub.kedaQueues" -}}
{{- if .Values.keda.queues }}
{{- toJson .Values.keda.queues }}
{{- else }}
{{- toJson (list (first .Values.config.queues).name) }}
{{- end }}
{{- end }}

{{/*
PromQL label matchers selecting this release's sidecars in the alert rules:
metrics.prometheusRule.selector, else the job and namespace the chart's ServiceMonitor gives
them (job = the metrics Service's name).
*/}}
{{- define "priority-pubsub.ruleSelector" -}}
{{- if .Values.metrics.prometheusRule.selector }}
{{- .Values.metrics.prometheusRule.selector }}
{{- else }}
{{- printf "job=%q, namespace=%q" (include "priority-pubsub.metricsServiceName" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/* The high-priority queues as a quoted PromQL regex: highPriorityWait.queues, else the
first queue of config.queues. */}}
{{- define "priority-pubsub.ruleQueues" -}}
{{- $queues := .Values.metrics.prometheusRule.highPriorityWait.queues }}
{{- if not $queues }}{{ $queues = list (first .Values.config.queues).name }}{{ end }}
{{- $quoted := list }}
{{- range $queues }}{{ $quoted = append $quoted (regexQuoteMeta .) }}{{ end }}
{{- join "|" $quoted | quote }}
{{- end }}

{{- define "priority-pubsub.metricsServiceName" -}}
{{- printf "%s-metrics" (include "priority-pubsub.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
