{{/* <release>-zper, or just the release name when it already contains "zper". */}}
{{- define "zper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The recommended labels (helm.sh/chart, app.kubernetes.io/*) on every object. */}}
{{- define "zper.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: zper
{{- end -}}

{{/* The service account the pods run as. */}}
{{- define "zper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "zper.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the admin token: the user's existing one, or the chart's. */}}
{{- define "zper.adminTokenSecret" -}}
{{- default (printf "%s-admin-token" (include "zper.fullname" .)) .Values.adminToken.existingSecret -}}
{{- end -}}

{{- define "zper.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The initial voters: 1=<pod 0>.<headless>.<ns>.svc:<http>,2=... */}}
{{- define "zper.voters" -}}
{{- $full := include "zper.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $port := .Values.ports.http -}}
{{- range $i := until (int .Values.replicas) -}}
{{- if $i }},{{ end }}{{ add $i 1 }}={{ $full }}-{{ $i }}.{{ $full }}-peers.{{ $ns }}.svc:{{ $port }}
{{- end -}}
{{- end -}}
