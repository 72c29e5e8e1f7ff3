{{/* The app container of mode: deployment. */}}
{{- define "priority-pubsub.app.container" -}}
{{- $app := .Values.app -}}
- name: app
  image: {{ printf "%s:%s" $app.image.repository $app.image.tag | quote }}
  imagePullPolicy: {{ $app.image.pullPolicy }}
  {{- with $app.command }}
  command:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $app.args }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - name: http
      containerPort: {{ $app.port }}
      protocol: TCP
  {{- if or (and .Values.secrets.apiTokenKey $app.apiTokenEnv) $app.env }}
  env:
    {{- if and .Values.secrets.apiTokenKey $app.apiTokenEnv }}
    - name: {{ $app.apiTokenEnv }}
      valueFrom:
        secretKeyRef: {name: {{ .Values.secrets.existingSecret | quote }}, key: {{ .Values.secrets.apiTokenKey | quote }}}
    {{- end }}
    {{- with $app.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  {{- with $app.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $app.livenessProbe }}
  livenessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $app.readinessProbe }}
  readinessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- $sleep := include "priority-pubsub.app.preStopSleepSeconds" . | int }}
  {{- with include "priority-pubsub.sidecar.appLifecycle" . }}
  lifecycle:
    # SIGTERM only once the sidecar's drain is over: no task of the app's is in flight.
    {{- . | nindent 4 }}
  {{- else }}
  {{- if gt $sleep 0 }}
  lifecycle:
    # Keep serving while the sidecar, which stops receiving at once, finishes in-flight tasks.
    preStop:
      sleep: {seconds: {{ $sleep }}}
  {{- end }}
  {{- end }}
  {{- with $app.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $app.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $app.volumeMounts }}
  volumeMounts:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{- define "priority-pubsub.app.preStopSleepSeconds" -}}
{{- if .Values.sidecar.native }}0
{{- else if kindIs "invalid" .Values.app.preStopSleepSeconds }}
{{- include "priority-pubsub.graceSeconds" . }}
{{- else }}
{{- int .Values.app.preStopSleepSeconds }}
{{- end }}
{{- end }}
