{{- define "dsan.fullname" -}}{{ .Release.Name }}-dsan{{- end -}}
{{- define "dsan.labels" -}}
app.kubernetes.io/name: dsan-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
