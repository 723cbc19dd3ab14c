{{/* Labels every object carries: the two config/deploy/kustomization.yaml adds (to its components' objects too),
then Helm's own. */}}
{{- define "gangscale.labels" -}}
app.kubernetes.io/name: gangscale
app.kubernetes.io/part-of: gangscale
{{ include "gangscale.helmLabels" . }}
{{- end -}}

{{/* Helm's own labels. */}}
{{- define "gangscale.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The controller config file: `config` with the chart's cloud values and the release namespace,
and webhook.failurePolicy / webhook.timeoutSeconds when set (the config is the one place the
webhook reads them from, e.g. for the --self-signed bootstrap). */}}
{{- define "gangscale.config" -}}
{{- $cloud := dict "provider" .Values.provider "clusterName" .Values.clusterName "region" .Values.region "stateNamespace" .Release.Namespace -}}
{{- $config := deepCopy .Values.config -}}
{{- $admission := get $config "admission" | default dict -}}
{{- with .Values.webhook.failurePolicy }}{{ $_ := set $admission "failurePolicy" . }}{{ end -}}
{{- with .Values.webhook.timeoutSeconds }}{{ $_ := set $admission "timeoutSeconds" . }}{{ end -}}
{{- if $admission }}{{ $_ := set $config "admission" $admission }}{{ end -}}
{{- toYaml (merge $cloud $config) -}}
{{- end -}}

{{/* The validating hook's failurePolicy and both hooks' timeoutSeconds: webhook.* else config.admission.*. */}}
{{- define "gangscale.webhookFailurePolicy" -}}
{{- .Values.webhook.failurePolicy | default (dig "admission" "failurePolicy" "Ignore" .Values.config) -}}
{{- end -}}
{{- define "gangscale.webhookTimeoutSeconds" -}}
{{- $t := .Values.webhook.timeoutSeconds | default (dig "admission" "timeoutSeconds" 5 .Values.config) | int -}}
{{- if or (lt $t 1) (gt $t 5) }}{{ fail (printf "webhook.timeoutSeconds must be 1-5, not %d" $t) }}{{ end -}}
{{- $t -}}
{{- end -}}

{{/* The image: repository:tag, pinned to image.digest when one is set. */}}
{{- define "gangscale.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with .Values.image.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end -}}
{{- $ref -}}
{{- end -}}

{{/* Pod-level fields every pod of the chart shares: pull secrets, priority, security context, placement. */}}
{{- define "gangscale.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
