{{- define "dsan.fullname" -}}{{ .Release.Name }}-dsan{{- end -}}
{{- define "dsan.labels" -}}
app.kubernetes.io/name: dsan-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/*
A container's resources in the scheduler pod: as given, or, with sidecar.exclusiveCpus > 0,
with its requests copied into its limits (every container, so the pod is Guaranteed) and the
sidecar's CPU request set to exclusiveCpus, a whole number: what the kubelet's static CPU
manager needs to give the sidecar CPUs of its own. Call with (dict "root" $ "name" NAME
"resources" RESOURCES "cpus" CPUS-OR-0).
*/}}
{{- define "dsan.resources" -}}
{{- $res := deepCopy (.resources | default dict) -}}
{{- $n := .root.Values.sidecar.exclusiveCpus | default 0 -}}
{{- if ne (float64 $n) (float64 (int $n)) -}}
{{- fail (printf "sidecar.exclusiveCpus must be a whole number of CPUs, got %v" $n) -}}
{{- end -}}
{{- if gt (int $n) 0 -}}
{{- $req := deepCopy ($res.requests | default dict) -}}
{{- if gt (int .cpus) 0 }}{{ $_ := set $req "cpu" (toString (int .cpus)) }}{{ end -}}
{{- if not (and (hasKey $req "cpu") (hasKey $req "memory")) -}}
{{- fail (printf "sidecar.exclusiveCpus needs cpu and memory requests on every container of the scheduler pod; %s has %v" .name $req) -}}
{{- end -}}
{{- $_ := set $res "requests" $req -}}
{{- $_ := set $res "limits" (deepCopy $req) -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}
