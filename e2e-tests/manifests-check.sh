#!/usr/bin/env bash
# The manifests check: every manifest of deploy/ and every rendering of the Helm chart is
# applied to a real kube-apiserver and accepted.
#
#   e2e-tests/manifests-check.sh
#
# 1. charts/check.sh: helm lint, the default rendering equals deploy/*.yaml as objects, the
#    variants of charts/tests/ render.
# 2. On the local control plane (e2e-tests/control-plane: built or reused, started, always
#    stopped) or the cluster of TEST_KUBECONFIG (a disposable one: objects are created):
#    server-side apply with strict field validation (unknown or duplicate fields refused) of
#    - a minimal copy of Kubewarden's ClusterAdmissionPolicy CRD (e2e-tests/manifests/), since
#      the control plane has no Kubewarden: admission-policy.yaml is validated against the
#      schema of policies.kubewarden.io/v1;
#    - the chart with `helm install` (default values and the API door of
#      charts/tests/api-door.yaml, as README.md says);
#    - deploy/crd.yaml, reconciler.yaml, rbac.yaml, system-baseline.yaml, policy-server-rbac.yaml,
#      admission-policy.yaml and deploy/examples/*.yaml, for real (a Deployment is accepted
#      even though no pod will run: there is no kubelet) over the Helm release: the same
#      objects, so the API server finds them unchanged;
#    - the chart's default rendering with dryRun=All (the same objects, now as updates), and
#      the renderings of charts/tests/*.yaml for real (their names do not collide);
#    - manifests that must be refused (a misspelt policy field, a `!=` namespaceLabel), with
#      dryRun=All: proof that the validation bites;
#    - `helm upgrade` of the release; an upgrade to `admissionPolicy.mode=monitor` and one to
#      another `admissionPolicy.policyServer`, both refused by the chart before anything
#      changes (Kubewarden refuses both on an existing policy); `helm uninstall`.
#
# Environment: CARGO, CARGO_TARGET_DIR, TEST_KUBECONFIG, KEEP_STATE=1 (keep the control
# plane's directory), NSB_CACHE_DIR, HELM_VERSION.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO="${CARGO:-cargo}"
# shellcheck source=control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
cd "$ROOT"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nsb-manifests.XXXXXX")"
cleanup() {
  local rc=$?
  nsb_stop_control_plane
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$ROOT/charts/check.sh" --out "$WORK/chart"
MANIFESTS="$(nsb_target_dir)/debug/nsb-manifests"

if [[ -n "${TEST_KUBECONFIG:-}" ]]; then
  nsb_say "using the cluster of TEST_KUBECONFIG=$TEST_KUBECONFIG"
  export KUBECONFIG="$TEST_KUBECONFIG"
else
  nsb_say "building (or reusing) and starting the control plane"
  nsb_start_control_plane
fi

apply() { "$MANIFESTS" apply --field-manager nsb-manifests-check "$@"; }

nsb_say "Kubewarden's ClusterAdmissionPolicy CRD (v1.35.0's schema, e2e-tests/manifests/)"
apply e2e-tests/manifests/kubewarden-clusteradmissionpolicy-crd.yaml
# The chart's optional PodMonitor (charts/tests/everything.yaml) against prometheus-operator's
# own CRD, from its Go module (the newest version the module proxy serves here).
PROMETHEUS_OPERATOR=github.com/prometheus-operator/prometheus-operator@v0.85.0
nsb_say "prometheus-operator's PodMonitor and PrometheusRule CRDs ($PROMETHEUS_OPERATOR, from the Go module proxy)"
po_dir="$(cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "$PROMETHEUS_OPERATOR" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[[ -f "$po_dir/example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml" ]] ||
  { echo "!! could not download $PROMETHEUS_OPERATOR (its PodMonitor CRD validates the chart's PodMonitor)" >&2; exit 1; }
apply "$po_dir/example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml"
# And its PrometheusRule CRD, for the chart's alert rules (prometheusRule.enabled).
apply "$po_dir/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"
HELM="$("$ROOT/charts/install-helm.sh" --print-path)"
helm() { "$HELM" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }
nsb_say "helm install of the chart, default values and an API door (as README.md says; release record in default)"
helm install namespace-baseline charts/namespace-baseline --namespace default --wait=false \
  -f charts/tests/api-door.yaml \
  --set admissionPolicy.module=registry://registry.example.com/policies/namespace-baseline:v0.1.0 |
  sed -n 's/^\(STATUS\|REVISION\): /   helm: \1 /p'
nsb_say "deploy/ and deploy/examples/, in install order (over the Helm release: the same objects, so unchanged)"
apply deploy/crd.yaml deploy/reconciler.yaml deploy/rbac.yaml charts/tests/api-door-policy.yaml \
  deploy/system-baseline.yaml deploy/admission-policy.yaml deploy/policy-server-rbac.yaml deploy/examples/*.yaml
nsb_say "the chart, default values (dryRun=All: the objects above, as updates)"
apply --dry-run "$WORK/chart/default.yaml"
for rendering in "$WORK"/chart/*.yaml; do
  name="$(basename "$rendering" .yaml)"
  [[ $name == default ]] && continue
  if [[ $name == minimal ]]; then
    # namespace.create=false: the namespace must exist already.
    printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: nsb-minimal\n' >"$WORK/nsb-minimal-ns.yaml"
    apply "$WORK/nsb-minimal-ns.yaml" >/dev/null
  fi
  nsb_say "the chart, charts/tests/$name.yaml"
  apply "$rendering"
done

nsb_say "manifests that must be refused (dryRun=All)"
cat >"$WORK/bad-policy.yaml" <<'YAML'
apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata: {name: misspelt}
spec:
  module: registry://ghcr.io/hedronite/policies/namespace-baseline:v0.1.0
  mutating: false
  backgroundAudits: false
  rules: []
YAML
cat >"$WORK/bad-baseline.yaml" <<'YAML'
apiVersion: hedronite.io/v1alpha1
kind: NamespaceBaseline
metadata: {name: not-equal}
spec: {namespaceLabel: "baseline!=guarded"}
YAML
cat >"$WORK/bad-timeout.yaml" <<'YAML'
apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata: {name: timeout-too-long}
spec:
  module: registry://ghcr.io/hedronite/policies/namespace-baseline:v0.1.0
  mutating: false
  timeoutSeconds: 60
  rules: []
YAML
nsb_say "v1.35.0's fields are known (dryRun=All): message, timeoutEvalSeconds, allowInsideAdmissionControllerNamespace"
cat >"$WORK/current-fields.yaml" <<'YAML'
apiVersion: policies.kubewarden.io/v1
kind: ClusterAdmissionPolicy
metadata: {name: current-fields}
spec:
  module: registry://ghcr.io/hedronite/policies/namespace-baseline:v0.1.0
  mutating: false
  message: the network wall refused this request
  timeoutEvalSeconds: 5
  allowInsideAdmissionControllerNamespace: false
  rules: []
YAML
apply --dry-run "$WORK/current-fields.yaml" >/dev/null
for bad in bad-policy bad-timeout bad-baseline; do
  if out="$(apply --dry-run "$WORK/$bad.yaml" 2>&1)"; then
    echo "$out"
    echo "!! $bad.yaml was accepted: the validation does not bite" >&2
    exit 1
  fi
  echo "   refused as expected: $(grep -m1 -A1 REFUSED <<<"$out" | tail -n 1 | sed 's/^ *//' | cut -c1-160)"
done
nsb_say "helm upgrade (--set reconciler.concurrency=8) and helm uninstall"
helm upgrade namespace-baseline charts/namespace-baseline --namespace default --reuse-values \
  --set reconciler.concurrency=8 | sed -n 's/^\(STATUS\|REVISION\): /   helm: \1 /p'
# What Kubewarden refuses on an existing ClusterAdmissionPolicy (protect -> monitor; another
# PolicyServer), the chart refuses first, reading the live policy (Helm's lookup), naming the
# way that works (docs/upgrade.md).
for change in "admissionPolicy.mode=monitor|Kubewarden refuses protect -> monitor" \
  "admissionPolicy.policyServer=reserved|Kubewarden refuses to move an existing policy"; do
  set_value="${change%%|*}" fragment="${change#*|}"
  nsb_say "helm upgrade --set $set_value is refused by the chart, nothing changed"
  if out="$("$HELM" upgrade namespace-baseline charts/namespace-baseline --namespace default --reuse-values \
    --set "$set_value" 2>&1)"; then
    echo "$out" >&2; echo "!! helm upgrade --set $set_value passed: the chart should refuse it" >&2; exit 1
  fi
  grep -qF -- "$fragment" <<<"$out" ||
    { echo "!! helm upgrade --set $set_value failed, but not by the chart's guard: $out" >&2; exit 1; }
  echo "   refused: $(grep -oF -- "$fragment" <<<"$out" | head -n 1)"
done
helm uninstall namespace-baseline --namespace default | sed 's/^/   helm: /'
nsb_say "manifests check passed"
