{{/* Labels of every object the chart renders. */}}
{{- define "nsb.labels" -}}
app.kubernetes.io/name: {{ .Values.reconciler.name }}
app.kubernetes.io/part-of: namespace-baseline
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels selecting the reconciler's pods. */}}
{{- define "nsb.selectorLabels" -}}
app.kubernetes.io/name: {{ .Values.reconciler.name }}
{{- end }}

{{- define "nsb.namespace" -}}
{{ .Values.namespace.name }}
{{- end }}

{{/* The Lease's namespace: --lease-namespace, else the reconciler's namespace. */}}
{{- define "nsb.leaseNamespace" -}}
{{ .Values.reconciler.leaseNamespace | default .Values.namespace.name }}
{{- end }}

{{/* The username the API server gives the reconciler's ServiceAccount. */}}
{{- define "nsb.reconcilerUsername" -}}
{{ .Values.admissionPolicy.settings.reconcilerUsername | default (printf "system:serviceaccount:%s:%s" .Values.namespace.name .Values.reconciler.name) }}
{{- end }}

{{- define "nsb.image" -}}
{{ .Values.reconciler.image.repository }}:{{ .Values.reconciler.image.tag | default .Chart.AppVersion }}
{{- end }}
