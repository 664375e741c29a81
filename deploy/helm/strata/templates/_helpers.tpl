{{- define "strata.fullname" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "strata.headless" -}}
{{- printf "%s-headless" (include "strata.fullname" .) -}}
{{- end -}}

{{- define "strata.scheme" -}}
{{- if .Values.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{- define "strata.labels" -}}
app.kubernetes.io/name: strata
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The member at ordinal i: its stable DNS name under the headless service. */}}
{{- define "strata.memberHost" -}}
{{- printf "%s-%d.%s.%s.svc" (include "strata.fullname" .root) .i (include "strata.headless" .root) .root.Release.Namespace -}}
{{- end -}}

{{/* --initial-cluster, built from the replica count. */}}
{{- define "strata.initialCluster" -}}
{{- $root := . -}}
{{- $members := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $members = append $members (printf "%s-%d=%s://%s:2380" (include "strata.fullname" $root) $i (include "strata.scheme" $root) (include "strata.memberHost" (dict "root" $root "i" $i))) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}
