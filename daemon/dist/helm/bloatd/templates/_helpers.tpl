{{- define "bloatd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "bloatd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "bloatd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bloatd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bloatd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "bloatd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
The capabilities `bloatd start` needs with this configuration, and no more
(daemon/src/caps.rs, measured; README "Fleet"):
- BPF, PERFMON: loading the probes, iterators and struct_ops programs;
- NET_ADMIN: the cgroup sock_ops program (policy, DRWA, senders that
  closed their end);
- SYS_ADMIN, SYS_PTRACE: setns into every network namespace, found through
  /proc/PID/ns/net of the host's processes (PTRACE for those with more
  capabilities than bloatd), when registering congestion controls (cc) and
  at their stop, when DRWA gives windows back in every namespace; and
  BPF_ENABLE_STATS (bpf_stats). bloatd's default cc is both algorithms, so
  a config without the key needs them too;
- CHOWN: giving the API socket its group.
After start bloatd keeps only SYS_ADMIN and SYS_PTRACE, permitted and not
effective, for the stop.
*/}}
{{- define "bloatd.capabilities" -}}
{{- $c := .Values.config -}}
{{- $caps := list "BPF" "PERFMON" "NET_ADMIN" -}}
{{- $registers := or (not (hasKey $c "cc")) (gt (len (default (list) $c.cc)) 0) -}}
{{- $drwa := and (hasKey $c "drwa") (ne (toString $c.drwa) "disabled") -}}
{{- if or $registers $c.bpf_stats $drwa -}}
{{- $caps = concat $caps (list "SYS_ADMIN" "SYS_PTRACE") -}}
{{- end -}}
{{- if .Values.api.group -}}
{{- $caps = append $caps "CHOWN" -}}
{{- end -}}
{{- toJson $caps -}}
{{- end -}}

{{/* bloatd.toml from .Values.config: TOML takes JSON's scalars and arrays as they are. */}}
{{- define "bloatd.toml" -}}
# bloatd.toml, rendered by the chart from .Values.config
# (keys: daemon/dist/bloatd.toml).
run_dir = "/run/bloatd"
state_dir = "/var/lib/bloatd"
{{- if .Values.api.group }}
api_group = {{ .Values.api.group | toJson }}
{{- end }}
{{- range $k, $v := omit .Values.config "policy" }}
{{ $k }} = {{ toJson $v }}
{{- end }}
{{- range .Values.config.policy }}

[[policy]]
{{- range $k, $v := . }}
{{ $k }} = {{ toJson $v }}
{{- end }}
{{- end }}
{{- end -}}
