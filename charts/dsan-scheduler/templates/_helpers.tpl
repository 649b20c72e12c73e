{{- define "dsan.fullname" -}}{{ .Release.Name }}-dsan{{- end -}}
{{- define "dsan.labels" -}}
app.kubernetes.io/name: dsan-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The labels a component's selector matches on. Call with (list $ "scheduler"). */}}
{{- define "dsan.selectorLabels" -}}
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end -}}

{{/*
An image reference: registry / repository : tag, where the registry is the image's own or else
global.imageRegistry (either may be empty: no registry part) and an empty tag is the chart's
appVersion. Call with (list $ .Values.sidecar.image).
*/}}
{{- define "dsan.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $reg := $img.registry | default $root.Values.global.imageRegistry | default "" -}}
{{- $tag := $img.tag | default $root.Chart.AppVersion -}}
{{- if $reg }}{{ printf "%s/%s:%s" $reg $img.repository $tag }}{{ else }}{{ printf "%s:%s" $img.repository $tag }}{{ end -}}
{{- end -}}

{{/*
Pod and container security contexts. Every container runs as the images' non-root user 65532
(set by number, so an image without that user, such as the stock kube-scheduler, runs as it
too), on a read-only root filesystem, with no capabilities and no privilege escalation, under
the runtime's default seccomp profile. The device plugin's DaemonSet is the one exception
(root, for the kubelet's sockets): see its template and docs/helm.md.
*/}}
{{- define "dsan.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}
{{- define "dsan.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
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
