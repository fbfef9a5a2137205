{{- define "gpuwaste.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpuwaste.fullname" -}}
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

{{- define "gpuwaste.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuwaste.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: serve
{{- end }}

{{- define "gpuwaste.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpuwaste.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gpuwaste.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpuwaste.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpuwaste.image" -}}
{{- $repo := .Values.image.repository }}
{{- if .Values.image.registry }}{{ $repo = printf "%s/%s" .Values.image.registry .Values.image.repository }}{{ end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "gpuwaste.configMapName" -}}
{{- default (printf "%s-config" (include "gpuwaste.fullname" .)) .Values.config.existingConfigMap }}
{{- end }}

{{/* The gpuwaste configuration (deploy/config.schema.json) built from the values; config.extra is merged over it. */}}
{{- define "gpuwaste.config" -}}
{{- $p := .Values.prometheus }}
{{- /* bearer/basic: the kind is set by serve when the token or password arrives from the Secret (commands/serve.py with_env_secrets) */}}
{{- $auth := dict "kind" (ternary "sigv4" "none" (eq $p.auth.kind "sigv4")) }}
{{- if $p.auth.username }}{{ $_ := set $auth "username" $p.auth.username }}{{ end }}
{{- if eq $p.auth.kind "sigv4" }}{{ $_ := set $auth "sigv4_region" (required "prometheus.auth.sigv4Region is required for sigv4" $p.auth.sigv4Region) }}{{ end }}
{{- $prom := dict "url" (printf "%s%s" (trimSuffix "/" $p.url) $p.pathPrefix) "auth" $auth }}
{{- $cluster := dict "name" .Values.cluster.name "prometheus" $prom "kubernetes" (dict "mode" "in-cluster") }}
{{- $serve := dict "host" "0.0.0.0" "port" (int .Values.service.port) "interval_s" (int .Values.serve.intervalSeconds) "state" "/var/lib/gpuwaste/state.db" "top_workloads" (int .Values.serve.topWorkloads) }}
{{- $cfg := mergeOverwrite (dict "clusters" (list $cluster) "serve" $serve) (deepCopy (default (dict) .Values.config.extra)) }}
{{- toYaml $cfg }}
{{- end }}
