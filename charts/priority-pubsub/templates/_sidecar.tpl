{{/*
The sidecar as a library: named templates to add priority-pubsub to any pod spec.

This chart's own Deployment uses them, and so can a parent chart that lists this chart as a
dependency (with `mode: sidecar` in its values for it). Pass the subchart's context:

  {{- $pp := index .Subcharts "priority-pubsub" }}
  spec:
    serviceAccountName: {{ include "priority-pubsub.serviceAccountName" $pp }}
    terminationGracePeriodSeconds: {{ include "priority-pubsub.terminationGracePeriodSeconds" $pp }}
    {{- with include "priority-pubsub.sidecar.initContainers" $pp }}
    initContainers:
      {{- . | nindent 6 }}
    {{- end }}
    containers:
      - name: my-app
        ...
      {{- include "priority-pubsub.sidecar.containers" $pp | nindent 6 }}
    volumes:
      {{- include "priority-pubsub.sidecar.volumes" $pp | nindent 6 }}

`sidecar.containers` renders the sidecar only when sidecar.native is false and
`sidecar.initContainers` only when it is true, so include both. Add
`include "priority-pubsub.sidecar.podAnnotations" $pp` to the pod template's annotations to
roll the pods when the config changes in a key a live reload cannot apply. With config.shutdown.mode finish, give the app
container the sidecar's drain as its preStop hook:

      - name: my-app
        {{- with include "priority-pubsub.sidecar.appLifecycle" $pp }}
        lifecycle:
          {{- . | nindent 10 }}
        {{- end }}
*/}}

{{/* The sidecar container, one list item. */}}
{{- define "priority-pubsub.sidecar.container" -}}
- name: priority-pubsub
  image: {{ include "priority-pubsub.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if .Values.sidecar.native }}
  # A native sidecar: started before the app containers, stopped after them.
  restartPolicy: Always
  {{- end }}
  {{- with .Values.dapr }}
  {{- if .enabled }}
  # daprd's flags: the Dapr resources directory and the app id (docs/dapr/migration.md).
  args: ["--resources-path", {{ .resources.mountPath | quote }}, "--app-id", {{ .appId | quote }}]
  {{- end }}
  {{- end }}
  # The image's ENTRYPOINT is `priority-pubsub run`; it finds its config through this variable.
  env:
    - name: PRIORITY_PUBSUB_CONFIG
      value: /etc/priority-pubsub/config.yaml
    # The pod's name and namespace where daprd reads them (the downward API): Dapr's
    # metadata templates {podName} and {namespace}, and the journal's replica name.
    - name: POD_NAME
      valueFrom:
        fieldRef: {fieldPath: metadata.name}
    - name: NAMESPACE
      valueFrom:
        fieldRef: {fieldPath: metadata.namespace}
    {{- with .Values.secrets }}
    {{- if .connectionStringKey }}
    - name: PRIORITY_PUBSUB_DRIVER__CONNECTION_STRING
      valueFrom:
        secretKeyRef: {name: {{ .existingSecret | quote }}, key: {{ .connectionStringKey | quote }}}
    {{- end }}
    {{- if .passwordKey }}
    - name: PRIORITY_PUBSUB_DRIVER__PASSWORD
      valueFrom:
        secretKeyRef: {name: {{ .existingSecret | quote }}, key: {{ .passwordKey | quote }}}
    {{- end }}
    {{- if .urlKey }}
    - name: PRIORITY_PUBSUB_DRIVER__URL
      valueFrom:
        secretKeyRef: {name: {{ .existingSecret | quote }}, key: {{ .urlKey | quote }}}
    {{- end }}
    {{- if .apiTokenKey }}
    - name: PRIORITY_PUBSUB_APP__API_TOKEN
      valueFrom:
        secretKeyRef: {name: {{ .existingSecret | quote }}, key: {{ .apiTokenKey | quote }}}
    {{- end }}
    {{- if .publishApiTokenKey }}
    - name: PRIORITY_PUBSUB_PUBLISH_API__API_TOKEN
      valueFrom:
        secretKeyRef: {name: {{ .existingSecret | quote }}, key: {{ .publishApiTokenKey | quote }}}
    {{- end }}
    {{- if .monitorReadTokenKey }}
    - name: PRIORITY_PUBSUB_MONITOR__READ_TOKEN
      valueFrom:
        secretKeyRef: {name: {{ .existingSecret | quote }}, key: {{ .monitorReadTokenKey | quote }}}
    {{- end }}
    {{- if .monitorAdminTokenKey }}
    - name: PRIORITY_PUBSUB_MONITOR__ADMIN_TOKEN
      valueFrom:
        secretKeyRef: {name: {{ .existingSecret | quote }}, key: {{ .monitorAdminTokenKey | quote }}}
    {{- end }}
    {{- $secret := .existingSecret }}
    {{- range $key, $secretKey := .uploadKeys }}
    - name: PRIORITY_PUBSUB_JOURNAL__UPLOAD__{{ upper $key }}
      valueFrom:
        secretKeyRef: {name: {{ $secret | quote }}, key: {{ $secretKey | quote }}}
    {{- end }}
    {{- end }}
    {{- with .Values.sidecar.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.sidecar.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - name: metrics
      containerPort: {{ include "priority-pubsub.metricsPort" . }}
      protocol: TCP
    {{- include "priority-pubsub.publishApiPorts" . | nindent 4 }}
  {{- with .Values.sidecar.startupProbe }}
  startupProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.sidecar.livenessProbe }}
  livenessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.sidecar.readinessProbe }}
  readinessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.sidecar.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.sidecar.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: priority-pubsub-config
      mountPath: /etc/priority-pubsub
      readOnly: true
    - name: priority-pubsub-data
      mountPath: /data
    # readOnlyRootFilesystem: SDKs and tempfile still want a writable /tmp.
    - name: priority-pubsub-tmp
      mountPath: /tmp
    {{- if .Values.dapr.enabled }}
    - name: priority-pubsub-dapr-resources
      mountPath: {{ .Values.dapr.resources.mountPath }}
      readOnly: true
    {{- if .Values.dapr.secretFile.existingSecret }}
    - name: priority-pubsub-dapr-secrets
      mountPath: {{ .Values.dapr.secretFile.mountPath }}
      readOnly: true
    {{- end }}
    {{- end }}
    {{- if .Values.scaleIn.deletionCost }}
    # The Kubernetes API credentials (scaleIn.deletionCost), in this container only.
    - name: priority-pubsub-kube-api
      mountPath: {{ include "priority-pubsub.serviceAccountDir" . }}
      readOnly: true
    {{- end }}
    {{- with .Values.sidecar.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* Where the sidecar reads the service-account files: config.kubernetes.service_account_dir,
by default the standard path. */}}
{{- define "priority-pubsub.serviceAccountDir" -}}
{{- $kubernetes := default dict .Values.config.kubernetes }}
{{- default "/var/run/secrets/kubernetes.io/serviceaccount" $kubernetes.service_account_dir }}
{{- end }}

{{/*
The app container's lifecycle with config.shutdown.mode finish: its preStop hook is the
sidecar's drain, which answers once no task is in flight, so the app gets its SIGTERM only
after its tasks are done (both layouts: a native sidecar is stopped after the app, an ordinary
one gets its SIGTERM beside the hook and starts the same drain). By port number: a hook
resolves a named port only among its own container's ports. Empty in mode return.
*/}}
{{- define "priority-pubsub.sidecar.appLifecycle" -}}
{{- if eq (include "priority-pubsub.shutdownMode" .) "finish" -}}
preStop:
  httpGet:
    path: /drain?wait=true
    port: {{ include "priority-pubsub.metricsPort" . }}
{{- end }}
{{- end }}

{{/* The sidecar for `containers:`; empty when sidecar.native is true. */}}
{{- define "priority-pubsub.sidecar.containers" -}}
{{- if not .Values.sidecar.native }}
{{- include "priority-pubsub.sidecar.container" . }}
{{- end }}
{{- end }}

{{/* The sidecar for `initContainers:`; empty unless sidecar.native is true. */}}
{{- define "priority-pubsub.sidecar.initContainers" -}}
{{- if .Values.sidecar.native }}
{{- include "priority-pubsub.sidecar.container" . }}
{{- end }}
{{- end }}

{{/* The sidecar's volumes: the ConfigMap, /data, /tmp, with scaleIn.deletionCost the API
credentials and, in Dapr mode, the resources directory and the local.file secret store's
Secret. */}}
{{- define "priority-pubsub.sidecar.volumes" -}}
- name: priority-pubsub-config
  configMap:
    name: {{ include "priority-pubsub.configMapName" . }}
- name: priority-pubsub-data
  {{- if .Values.sidecar.data.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.sidecar.data.existingClaim }}
  {{- else if .Values.sidecar.data.sizeLimit }}
  emptyDir:
    sizeLimit: {{ .Values.sidecar.data.sizeLimit }}
  {{- else }}
  emptyDir: {}
  {{- end }}
- name: priority-pubsub-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if .Values.scaleIn.deletionCost }}
# What the kubelet mounts for automountServiceAccountToken, for the sidecar alone (the pod's
# automountServiceAccountToken stays false: the app gets no token that may patch pods).
- name: priority-pubsub-kube-api
  projected:
    defaultMode: 420  # 0644, as the kubelet mounts it
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - {key: ca.crt, path: ca.crt}
      - downwardAPI:
          items:
            - path: namespace
              fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}
{{- end }}
{{- if .Values.dapr.enabled }}
- name: priority-pubsub-dapr-resources
  configMap:
    name: {{ include "priority-pubsub.daprResourcesName" . }}
{{- with .Values.dapr.secretFile.existingSecret }}
- name: priority-pubsub-dapr-secrets
  secret:
    secretName: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod annotations that roll the pods when the config changes in a key a live reload does
not apply (restartOnlyConfig). */}}
{{- define "priority-pubsub.sidecar.podAnnotations" -}}
checksum/priority-pubsub-config: {{ include "priority-pubsub.restartOnlyConfig" . | sha256sum }}
{{- if .Values.dapr.enabled }}
checksum/priority-pubsub-dapr-resources: {{ toYaml .Values.dapr.resources.manifests | sha256sum }}
{{- end }}
{{- end }}
