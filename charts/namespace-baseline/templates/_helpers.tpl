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

{{/* Whether the reconciler's NetworkPolicy door to the API server (an ipBlock per endpoint) is
rendered, with --api-door-policy and the Role that lets the reconciler check it: with
networkPolicy.enabled, unless the Cilium door stands in for it (networkPolicy.cilium.enabled
and no addresses given). "true" or empty. */}}
{{- define "nsb.ipApiDoor" -}}
{{- $np := .Values.reconciler.networkPolicy -}}
{{- if and $np.enabled (or (not $np.cilium.enabled) $np.apiServer.addresses) -}}true{{- end -}}
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

{{/* repository@digest when a digest is given (pinned), else repository:tag. */}}
{{- define "nsb.image" -}}
{{- $image := .Values.reconciler.image -}}
{{- if $image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $image.digest) -}}
{{- fail (printf "reconciler.image.digest %q is not sha256:<64 hex digits>" $image.digest) -}}
{{- end -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}
