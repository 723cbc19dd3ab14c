{{/* Labels every object carries: the two kustomize adds, then Helm's own. */}}
{{- define "gangscale.labels" -}}
app.kubernetes.io/name: gangscale
app.kubernetes.io/part-of: gangscale
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The controller config file: `config` with the chart's cloud values and the release namespace. */}}
{{- define "gangscale.config" -}}
{{- $cloud := dict "provider" .Values.provider "clusterName" .Values.clusterName "region" .Values.region "stateNamespace" .Release.Namespace -}}
{{- toYaml (merge $cloud (deepCopy .Values.config)) -}}
{{- end -}}
