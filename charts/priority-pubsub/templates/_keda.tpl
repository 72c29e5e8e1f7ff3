{{/*
One KEDA trigger for one queue, derived from config.driver; keda.metadata is merged over it.
KEDA wants every metadata value as a string.
*/}}
{{- define "priority-pubsub.keda.trigger" -}}
{{- $root := .root }}
{{- $driver := $root.Values.config.driver }}
{{- $target := toString $root.Values.keda.targetPerReplica }}
{{- $type := "" }}
{{- $meta := dict }}
{{- if eq $driver.type "sqs" }}
{{- $type = "aws-sqs-queue" }}
{{- $urls := default dict $driver.queue_urls }}
{{- $_ := set $meta "queueURL" (get $urls .queue | default .queue) }}
{{- with $driver.endpoint_url }}{{ $_ := set $meta "awsEndpoint" . }}{{ end }}
{{- $_ := set $meta "queueLength" $target }}
{{- with $driver.region }}{{ $_ := set $meta "awsRegion" . }}{{ end }}
{{- if not $root.Values.keda.authenticationRef }}{{ $_ := set $meta "identityOwner" "operator" }}{{ end }}
{{- else if eq $driver.type "gcp_pubsub" }}
{{- $type = "gcp-pubsub" }}
{{- $sub := .queue }}
{{- if and $driver.project (not (hasPrefix "projects/" $sub)) }}
{{- $sub = printf "projects/%s/subscriptions/%s" $driver.project $sub }}
{{- end }}
{{- $_ := set $meta "subscriptionName" $sub }}
{{- $_ := set $meta "mode" "SubscriptionSize" }}
{{- $_ := set $meta "value" $target }}
{{- else if eq $driver.type "azure_servicebus" }}
{{- $type = "azure-servicebus" }}
{{- if contains "/" .queue }}
{{- $parts := splitList "/" .queue }}
{{- $_ := set $meta "topicName" (index $parts 0) }}
{{- $_ := set $meta "subscriptionName" (index $parts 1) }}
{{- else }}
{{- $_ := set $meta "queueName" .queue }}
{{- end }}
{{- $_ := set $meta "messageCount" $target }}
{{- with $driver.namespace }}{{ $_ := set $meta "namespace" (splitList "." . | first) }}{{ end }}
{{- if .fromEnv }}{{ $_ := set $meta "connectionFromEnv" "PRIORITY_PUBSUB_DRIVER__CONNECTION_STRING" }}{{ end }}
{{- else if eq $driver.type "redis" }}
{{- $type = "redis-streams" }}
{{- $url := urlParse (toString (default "redis://127.0.0.1:6379/0" $driver.url)) }}
{{- $_ := set $meta "address" $url.host }}
{{- $_ := set $meta "stream" .queue }}
{{- $_ := set $meta "consumerGroup" (default "priority-pubsub" $driver.group) }}
{{- $_ := set $meta "lagCount" $target }}
{{- with trimPrefix "/" $url.path }}{{ $_ := set $meta "databaseIndex" . }}{{ end }}
{{- if eq $url.scheme "rediss" }}{{ $_ := set $meta "enableTLS" "true" }}{{ end }}
{{- if .fromEnv }}{{ $_ := set $meta "passwordFromEnv" "PRIORITY_PUBSUB_DRIVER__PASSWORD" }}{{ end }}
{{- else if eq $driver.type "rabbitmq" }}
{{- $type = "rabbitmq" }}
{{- /* the queue the sidecar reads: Dapr layout {consumer_id}-{topic}, native: one queue */}}
{{- $queue := .queue }}
{{- if $driver.native_priority }}{{ $queue = default .queue $driver.native_queue }}{{ end }}
{{- if eq (toString $driver.layout) "dapr" }}{{ $queue = printf "%s-%s" $driver.consumer_id $queue }}{{ end }}
{{- $_ := set $meta "queueName" $queue }}
{{- $_ := set $meta "mode" "QueueLength" }}
{{- $_ := set $meta "value" $target }}
{{- if .fromEnv }}{{ $_ := set $meta "hostFromEnv" "PRIORITY_PUBSUB_DRIVER__URL" }}{{ end }}
{{- else }}
{{- fail (printf "keda.enabled: no KEDA scaler for driver %q (sqs, gcp_pubsub, azure_servicebus, redis, rabbitmq)" $driver.type) }}
{{- end }}
{{- $meta = mergeOverwrite $meta $root.Values.keda.metadata }}
{{- if and (eq $type "aws-sqs-queue") (not $meta.awsRegion) }}
{{- fail "keda: set config.driver.region or keda.metadata.awsRegion for the SQS scaler" }}
{{- end }}
{{- if and (eq $type "rabbitmq") (not $root.Values.keda.authenticationRef) (not $meta.hostFromEnv) (not $meta.host) }}
{{- fail "keda: the rabbitmq scaler needs secrets.urlKey (read from the sidecar's environment) or keda.authenticationRef (a TriggerAuthentication with host)" }}
{{- end }}
{{- if and (eq $type "gcp-pubsub") (not $root.Values.keda.authenticationRef) (not $meta.credentialsFromEnv) }}
{{- fail "keda: the gcp-pubsub scaler needs keda.authenticationRef (e.g. podIdentity gcp) or keda.metadata.credentialsFromEnv" }}
{{- end }}
- type: {{ $type }}
  metadata:
    {{- range $key, $value := $meta }}
    {{ $key }}: {{ toString $value | quote }}
    {{- end }}
  {{- with $root.Values.keda.authenticationRef }}
  authenticationRef:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
