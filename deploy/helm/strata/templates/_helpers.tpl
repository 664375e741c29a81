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

{{/* The member's flags (etcd's spelling), for the start and for the preStop hook. */}}
{{- define "strata.memberArgs" -}}
- --name=$(POD_NAME)
- --data-dir=/var/lib/strata/data
- --listen-client-urls={{ include "strata.scheme" . }}://0.0.0.0:2379
- --advertise-client-urls={{ include "strata.scheme" . }}://$(POD_NAME).{{ include "strata.headless" . }}.{{ .Release.Namespace }}.svc:2379
- --listen-peer-urls={{ include "strata.scheme" . }}://0.0.0.0:2380
- --initial-advertise-peer-urls={{ include "strata.scheme" . }}://$(POD_NAME).{{ include "strata.headless" . }}.{{ .Release.Namespace }}.svc:2380
- --initial-cluster={{ include "strata.initialCluster" . }}
- --initial-cluster-token={{ .Values.clusterToken | default (include "strata.fullname" .) }}
- --initial-cluster-state=new
- --listen-metrics-urls=http://0.0.0.0:2381
{{- if .Values.tls.enabled }}
- --cert-file=/etc/strata/tls/tls.crt
- --key-file=/etc/strata/tls/tls.key
- --trusted-ca-file=/etc/strata/tls/ca.crt
- --client-cert-auth
- --peer-cert-file=/etc/strata/tls/tls.crt
- --peer-key-file=/etc/strata/tls/tls.key
- --peer-trusted-ca-file=/etc/strata/tls/ca.crt
- --peer-client-cert-auth
{{- end }}
{{- range .Values.extraArgs }}
- {{ . }}
{{- end }}
{{- end -}}
