{{/* <release>-zper, or just the release name when it already contains "zper". */}}
{{- define "zper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "zper.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
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
