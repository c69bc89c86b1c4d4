{{/* The pod labels the generated Services (webhook) and the metrics Service select. */}}
{{- define "bosun.selectorLabels" -}}
app.kubernetes.io/name: bosun
control-plane: controller-manager
{{- end }}

{{- define "bosun.labels" -}}
{{ include "bosun.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "bosun.certManager" -}}
{{- and .Values.webhook.enabled (eq .Values.webhook.certificates "cert-manager") -}}
{{- end }}
