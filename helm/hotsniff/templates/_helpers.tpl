{{/*
Chart name, truncated to the 63 characters a label value may hold.
*/}}
{{- define "hotsniff.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or the release name when it already holds the
chart name.
*/}}
{{- define "hotsniff.fullname" -}}
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

{{- define "hotsniff.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hotsniff.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hotsniff.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hotsniff.labels" -}}
helm.sh/chart: {{ include "hotsniff.chart" . }}
{{ include "hotsniff.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: sniffer
{{- end }}

{{- define "hotsniff.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hotsniff.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hotsniff.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Linux capabilities of the capture mode, as a JSON list (capability names
without the CAP_ prefix, sorted):
  xdp, tc,  BPF (load programs, create maps), NET_ADMIN (attach XDP/TC to
  cgroup    host interfaces, or cgroup_skb programs, a networking program
            type), PERFMON (pointer arithmetic and helpers the verifier
            allows only to perfmon-capable loaders)
  afpacket  NET_RAW (open AF_PACKET sockets)
  auto      both sets: it tries eBPF and falls back to AF_PACKET.
*/}}
{{- define "hotsniff.capabilities" -}}
{{- $mode := .Values.capture.mode -}}
{{- $caps := list -}}
{{- if has $mode (list "auto" "xdp" "tc" "cgroup") -}}
{{- $caps = concat $caps (list "BPF" "NET_ADMIN" "PERFMON") -}}
{{- end -}}
{{- if has $mode (list "auto" "afpacket") -}}
{{- $caps = append $caps "NET_RAW" -}}
{{- end -}}
{{- if not $caps -}}
{{- fail (printf "capture.mode %q: want auto, cgroup, xdp, tc or afpacket" $mode) -}}
{{- end -}}
{{- $caps = concat $caps .Values.securityContext.extraCapabilities | uniq | sortAlpha -}}
{{- toJson $caps -}}
{{- end }}

{{/*
The hotsniff config file. Keys are the CLI flag names, plus rules and ignore.
Keys rendered here win over extraConfig.
*/}}
{{- define "hotsniff.config" -}}
{{- $cfg := dict
  "capture" .Values.capture.mode
  "port" .Values.ports
  "hot-qps" .Values.detection.hotQPS
  "detector" .Values.detection.detector
  "channel" .Values.redis.channel
  "listen" (printf ":%d" (int .Values.metrics.port))
-}}
{{- with .Values.capture.interfaces }}{{ $_ := set $cfg "iface" . }}{{ end -}}
{{- if include "hotsniff.cgroupMount" . }}{{ $_ := set $cfg "cgroup-path" "/host/sys/fs/cgroup" }}{{ end -}}
{{- if gt (int64 .Values.capture.ringBufferSize) 0 }}{{ $_ := set $cfg "ring-size" (int64 .Values.capture.ringBufferSize) }}{{ end -}}
{{- if gt (float64 (default 0 .Values.capture.maxCPU)) 0.0 }}{{ $_ := set $cfg "max-cpu" (float64 .Values.capture.maxCPU) }}{{ end -}}
{{- /* 0 is a setting here (copy no reply payload): only null is left out */ -}}
{{- if not (kindIs "invalid" .Values.capture.replyCopy) }}{{ $_ := set $cfg "reply-copy" (int64 .Values.capture.replyCopy) }}{{ end -}}
{{- with .Values.detection.rules }}{{ $_ := set $cfg "rules" . }}{{ end -}}
{{- with .Values.detection.ignore }}{{ $_ := set $cfg "ignore" . }}{{ end -}}
{{- if .Values.webConfig.existingSecret }}
{{- $_ := set $cfg "web-config" (printf "/etc/hotsniff-web/%s" .Values.webConfig.key) }}
{{- $_ := set $cfg "health-listen" (printf "127.0.0.1:%d" (int .Values.webConfig.healthPort)) }}
{{- end -}}
{{- $d := .Values.detection -}}
{{- range $key, $val := dict "ttl" $d.ttl "refresh-every" $d.refreshEvery "window" $d.window "cold-ratio" $d.coldRatio "buckets" $d.buckets "max-hot" $d.maxHot "invalidate-gap" $d.invalidateGap "local-ttl" $d.localTTL "uncacheable-writes" $d.uncacheableWrites "absorbed-cap" $d.absorbedCap "hot-bytes" $d.hotBytes }}{{ if $val }}{{ $_ := set $cfg $key $val }}{{ end }}{{ end -}}
{{- with $d.tair }}{{ range $key, $val := dict "tair-buckets" .buckets "tair-sample-max" .sampleMax "tair-sigma-n" .sigmaN "tair-reap-max" .reapMax }}{{ if $val }}{{ $_ := set $cfg $key $val }}{{ end }}{{ end }}{{ end -}}
{{- $cfg = merge $cfg (deepCopy .Values.extraConfig) -}}
{{- toYaml $cfg }}
{{- end }}

{{/*
Name of the Secret holding the Redis URL, and its key; empty when none.
*/}}
{{- define "hotsniff.redisSecretName" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else if .Values.redis.url }}
{{- printf "%s-redis" (include "hotsniff.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "hotsniff.redisSecretKey" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecretKey }}
{{- else }}
{{- print "redis-url" }}
{{- end }}
{{- end }}

{{/*
Non-empty when the pod mounts the host's cgroup hierarchy: modes that may
capture at the cgroup v2 root (cgroup, and auto without interfaces). The
container's own /sys/fs/cgroup is its cgroup namespace's, which holds only
the container itself.
*/}}
{{- define "hotsniff.cgroupMount" -}}
{{- if and .Values.capture.cgroupHostPath (or (eq .Values.capture.mode "cgroup") (and (eq .Values.capture.mode "auto") (not .Values.capture.interfaces))) -}}
true
{{- end -}}
{{- end }}
