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

{{/* The namespaces whose pods never wait for a wall, as a JSON list: the system ones, the
chart's, the policy-server's and admissionPolicy.pods.excludedNamespaces. The webhook's Pod
policy and the in-process bindings (pod-wall.yaml) leave out the same ones. */}}
{{- define "nsb.podGateExcludedNamespaces" -}}
{{- $p := .Values.admissionPolicy -}}
{{ toJson (concat (list "kube-system" "kube-public" "kube-node-lease" (include "nsb.namespace" .) $p.policyServerAccess.namespace) $p.pods.excludedNamespaces | uniq) }}
{{- end }}

{{/* The label requirement of an admissionPolicy.pods.inProcess entry's namespaceLabel
("key=value": In; "key": Exists), or its negation with "negate" (NotIn; DoesNotExist), as a
JSON object. Called with (dict "label" <namespaceLabel> "negate" <bool>). */}}
{{- define "nsb.inProcessRequirement" -}}
{{- $parts := splitn "=" 2 .label -}}
{{- if contains "=" .label -}}
{{ toJson (dict "key" $parts._0 "operator" (ternary "NotIn" "In" .negate) "values" (list $parts._1)) }}
{{- else -}}
{{ toJson (dict "key" $parts._0 "operator" (ternary "DoesNotExist" "Exists" .negate)) }}
{{- end -}}
{{- end }}
