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
{{- if .Values.scaleIn.deletionCost }}
{{- $kubernetes := default dict $config.kubernetes }}
{{- $_ := set $kubernetes "deletion_cost" true }}
{{- $_ := set $config "kubernetes" $kubernetes }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
What a live reload applies by itself (docs/operations/reload.md): the sidecar's own list,
priority_pubsub/settings/reload.py RELOADABLE (a key, or every key under it), and the drivers
that take a queue added at run time (drivers.base.QueueAdder); tests/helm/test_fleet.py keeps
both equal to the sidecar's.
*/}}
{{- define "priority-pubsub.reloadableKeys" -}}
{{- toJson (list "queues" "scheduling" "concurrency" "retry" "app.timeout_s" "log.level" "dapr.priorities") }}
{{- end }}

{{- define "priority-pubsub.queueAddingDrivers" -}}
{{- toJson (list "local" "sqs" "redis") }}
{{- end }}

{{/*
The config less what a live reload applies by itself: what the pods' checksum annotation
hashes, so that only a restart-only change rolls them (the others reach the running sidecars
through the mounted ConfigMap and reload.watch). With reload.watch false the whole config
(nothing else would apply it); for a driver that cannot add a queue at run time the queue
names stay in (a queue added there is restart-only).
*/}}
{{- define "priority-pubsub.restartOnlyConfig" -}}
{{- $config := include "priority-pubsub.configYaml" . | fromYaml }}
{{- $reload := default dict $config.reload }}
{{- if or (not (hasKey $reload "watch")) $reload.watch }}
{{- $driver := default dict $config.driver }}
{{- $names := list }}
{{- range $config.queues }}{{ $names = append $names .name }}{{ end }}
{{- range include "priority-pubsub.reloadableKeys" . | fromJsonArray }}
{{- $path := splitList "." . }}
{{- if eq (len $path) 1 }}
{{- $_ := unset $config (first $path) }}
{{- else if kindIs "map" (get $config (first $path)) }}
{{- $_ := unset (get $config (first $path)) (last $path) }}
{{- end }}
{{- end }}
{{- if and $names (not (has (toString (default "local" $driver.type)) (include "priority-pubsub.queueAddingDrivers" . | fromJsonArray))) }}
{{- $_ := set $config "queues" (sortAlpha $names) }}
{{- end }}
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
{{- $kubernetes := default dict $config.kubernetes }}
{{- if and $kubernetes.deletion_cost (not .Values.scaleIn.deletionCost) }}
{{- fail "config.kubernetes.deletion_cost: set scaleIn.deletionCost instead (it also gives the sidecar the Role and the token the patch needs)" }}
{{- end }}
{{- if and (eq (include "priority-pubsub.shutdownMode" .) "finish") .Values.dapr.enabled .Values.dapr.resources.existingConfigMap (kindIs "invalid" .Values.terminationGracePeriodSeconds) }}
{{- fail "config.shutdown.mode finish with dapr.resources.existingConfigMap: set terminationGracePeriodSeconds (the longest task timeout + shutdown.block_s + a margin): the chart cannot read the timeouts in that ConfigMap" }}
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

{{/* config.shutdown.mode: return (the default) or finish. */}}
{{- define "priority-pubsub.shutdownMode" -}}
{{- $shutdown := default dict .Values.config.shutdown }}
{{- default "return" $shutdown.mode }}
{{- end }}

{{/*
terminationGracePeriodSeconds for the pod, plus a margin to return what is left to the queues
and the final journal uploads' journal.upload.stop_timeout_s (10 by default) when the journal
is uploaded: mode return, the sidecar's shutdown.grace_s to finish in-flight tasks; mode
finish, the longest task timeout (every delivery may run to its own) after shutdown.block_s.
*/}}
{{- define "priority-pubsub.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- $driver := default dict .Values.config.driver }}
{{- /* SQS: a running long poll cannot be interrupted; the driver waits for it on close. */}}
{{- $poll := ternary (int (default 20 $driver.wait_time_s)) 0 (eq (toString $driver.type) "sqs") }}
{{- $drain := include "priority-pubsub.graceSeconds" . | int }}
{{- if eq (include "priority-pubsub.shutdownMode" .) "finish" }}
{{- $shutdown := default dict .Values.config.shutdown }}
{{- $block := ceil (float64 (default 0 $shutdown.block_s)) | int }}
{{- $drain = add (include "priority-pubsub.longestTimeoutSeconds" . | int) $block }}
{{- end }}
{{- add $drain (int .Values.sidecar.terminationMarginSeconds) $poll (include "priority-pubsub.uploadStopSeconds" .) }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
ceil of the longest time one delivery may run (shutdown.mode finish waits for it): each
queue's timeout_s, else config.app.timeout_s (3600 unless set). In Dapr mode the topics' come
from dapr.priorities entries and the Subscription manifests' metadata timeout_s, and an
app.timeout_s set to null leaves the Resiliency manifests' timeouts (the longest counts);
timeouts in the app's programmatic subscriptions are not seen here. Dapr mode with
dapr.resources.existingConfigMap is refused by validate (the manifests are not in the values).
*/}}
{{- define "priority-pubsub.longestTimeoutSeconds" -}}
{{- $config := .Values.config }}
{{- $app := default dict $config.app }}
{{- $appTimeout := 3600.0 }}
{{- $fromResiliency := list }}
{{- $timeouts := list }}
{{- if .Values.dapr.enabled }}
{{- range $file, $manifest := .Values.dapr.resources.manifests }}
{{- $docs := list $manifest }}
{{- if kindIs "string" $manifest }}
{{- $docs = list }}
{{- range regexSplit "(?m)^---[ \t]*$" $manifest -1 }}{{ $docs = append $docs (fromYaml .) }}{{ end }}
{{- end }}
{{- range $docs }}
{{- $spec := default dict .spec }}
{{- if eq (toString .kind) "Subscription" }}
{{- $meta := default dict $spec.metadata }}
{{- if $meta.timeout_s }}{{ $timeouts = append $timeouts (float64 $meta.timeout_s) }}{{ end }}
{{- else if eq (toString .kind) "Resiliency" }}
{{- $policies := default dict $spec.policies }}
{{- range $name, $duration := default dict $policies.timeouts }}
{{- $fromResiliency = append $fromResiliency (include "priority-pubsub.goDurationSeconds" $duration | float64) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $dapr := default dict $config.dapr }}
{{- range $dapr.priorities }}
{{- if and (kindIs "map" .) .timeout_s }}{{ $timeouts = append $timeouts (float64 .timeout_s) }}{{ end }}
{{- end }}
{{- end }}
{{- if not (kindIs "invalid" $app.timeout_s) }}
{{- $appTimeout = float64 $app.timeout_s }}
{{- else if $fromResiliency }}
{{- $appTimeout = 0.0 }}
{{- range $fromResiliency }}{{ $appTimeout = maxf $appTimeout . }}{{ end }}
{{- end }}
{{- $longest := 0.0 }}
{{- if .Values.dapr.enabled }}
{{- /* a topic without its own timeout takes the app's: some may, always counted */}}
{{- $longest = $appTimeout }}
{{- else if not $config.queues }}
{{- $longest = $appTimeout }}
{{- end }}
{{- range $config.queues }}
{{- if kindIs "invalid" .timeout_s }}{{ $longest = maxf $longest $appTimeout }}{{ else }}{{ $longest = maxf $longest (float64 .timeout_s) }}{{ end }}
{{- end }}
{{- range $timeouts }}{{ $longest = maxf $longest . }}{{ end }}
{{- ceil $longest | int }}
{{- end }}

{{/* Seconds in a Go duration ("90s", "1h30m", "250ms"): a Resiliency's timeouts. */}}
{{- define "priority-pubsub.goDurationSeconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]*\\.?[0-9]+(ns|us|µs|ms|s|m|h)" (toString .) -1 }}
{{- $number := regexFind "^[0-9]*\\.?[0-9]+" . }}
{{- $total = addf $total (mulf (float64 $number) (get $units (trimPrefix $number .))) }}
{{- end }}
{{- $total }}
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
