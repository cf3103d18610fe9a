#!/usr/bin/env bash
# `kwctl bench` of the policy's request classes (make bench-kwctl): the figures a policy author
# gets from Kubewarden's own tool, beside the waPC bench's (make bench-policy), which measures
# the module alone in a bare waPC host. kwctl evaluates through policy-evaluator, the
# policy-server's evaluator: the request and response handling around each `validate`, and for
# the classes that read the cluster, policy-evaluator's own answers (the NamespaceBaselines
# from a reflector kept in memory, a Namespace or NetworkPolicy found from its 5-second cache,
# one not found from the API server every time).
#
# The classes are the waPC bench's, each an admission fixture: its settings and request, and
# for the classes that read the cluster its baselines, Namespaces and NetworkPolicies applied
# to the local control plane (e2e-tests/control-plane/, started and stopped here), which kwctl
# reads as admin (--allow-context-aware, the annotated module's contextAwareResources). Each
# class is first run once with `kwctl run`, and must give the fixture's verdict, so that the
# bench measures the path the fixture names. Then `kwctl bench` of annotated-policy.wasm and of
# the no-op policy (e2e-tests/noop-policy, the floor of the same SDK), one after the other.
#
# Usage: e2e-tests/kwctl-bench.sh [--measurement-time SECONDS] [--filter SUBSTRING]
# Environment: POLICY_WASM (default annotated-policy.wasm), NOOP_POLICY_WASM (default
# target/noop-policy.wasm; make bench-kwctl builds both), KWCTL (else
# e2e-tests/kubewarden/install.sh), KEEP_STATE=1.
# Prints one table row per class: kwctl's median per validate call for ours and the no-op, the
# ratio of the two medians, and the mean of ours.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
# shellcheck source=kwctl.bash
. "$ROOT/e2e-tests/kwctl.bash"
cd "$ROOT"

measurement_time=5 filter=""
while (($#)); do
  case "$1" in
    --measurement-time) measurement_time="$2"; shift 2 ;;
    --filter) filter="$2"; shift 2 ;;
    *) sed -n '/^# Usage/,/^# ratio/p' "$0" >&2; exit 2 ;;
  esac
done

# class, fixture: as in e2e-tests/runner/benches/policy.rs.
CLASSES=(
  "np-delete-managed policy-delete-managed-deny-all"
  "ns-update-remove-guard namespace-remove-guard-label"
  "np-update-managed policy-update-pod-selector-narrowed"
  "np-create-unmanaged policy-create-unmanaged"
  "ns-update-ca-1-baseline ca-namespace-leaves-live-baseline"
  "np-create-hole-warn holes-warn-ingress-from-anywhere"
  "pod-create-unguarded pods-unguarded-namespace"
  "pod-create-guarded-walled pods-guarded-walled"
  "pod-create-guarded-no-wall pods-guarded-no-deny-all"
)

POLICY_WASM="${POLICY_WASM:-annotated-policy.wasm}"
NOOP_POLICY_WASM="${NOOP_POLICY_WASM:-$(nsb_target_dir)/noop-policy.wasm}"
for module in "$POLICY_WASM" "$NOOP_POLICY_WASM"; do
  [[ -s "$module" ]] || { echo "!! $module not found: make bench-kwctl builds it" >&2; exit 1; }
done
KWCTL="$("$ROOT/e2e-tests/kubewarden/install.sh" kwctl)"
command -v jq >/dev/null || { echo "!! jq not found (apt-get install jq)" >&2; exit 1; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nsb-kwctl-bench.XXXXXX")"
cleanup() {
  local rc=$?
  nsb_stop_control_plane
  nsb_keep_or_remove "$WORK" "$rc" "kwctl's output: $WORK/<class>.*"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export KWCTL_TRUST_CONFIG="$WORK/sigstore-trust-config.json"
echo '{}' >"$KWCTL_TRUST_CONFIG"

nsb_say "building nsb-manifests (applies each class's objects)"
"${CARGO:-cargo}" build --locked -q -p namespace-baseline-testkit --bin nsb-manifests
MANIFESTS="$(nsb_target_dir)/debug/nsb-manifests"
nsb_start_control_plane
"$MANIFESTS" apply --field-manager kwctl-bench deploy/crd.yaml >/dev/null

api() { curl -fsS --cacert "$NSB_STATE_DIR/ca.crt" -H "Authorization: Bearer $NSB_ADMIN_TOKEN" "$@"; }

# The cluster a fixture describes: its baselines, Namespaces and NetworkPolicies as a user
# would apply them (name, namespace, labels, spec), after removing the previous class's
# baselines and NetworkPolicies. A Namespace is never deleted (no namespace controller here to
# finish it): applied again by the same field manager, it keeps only this class's labels.
touched_namespaces=()
set_cluster() {
  local fixture="$1" namespace
  api -X DELETE "$NSB_APISERVER_URL/apis/hedronite.io/v1alpha1/namespacebaselines" >/dev/null
  for namespace in "${touched_namespaces[@]}"; do
    api -X DELETE "$NSB_APISERVER_URL/apis/networking.k8s.io/v1/namespaces/$namespace/networkpolicies" >/dev/null
  done
  jq -c '(.baselines // []) + (.namespaces // []) + (.networkPolicies // []) | .[]
    | {apiVersion, kind, metadata: (.metadata | {name, namespace, labels} | with_entries(select(.value != null))), spec}
    | with_entries(select(.value != null))' "$fixture" |
    awk 'NR > 1 { print "---" } { print }' >"$WORK/objects.yaml"
  # In order: baselines, then Namespaces, then the NetworkPolicies that go into them.
  [[ ! -s "$WORK/objects.yaml" ]] || "$MANIFESTS" apply --field-manager kwctl-bench "$WORK/objects.yaml" >/dev/null
  mapfile -t -O "${#touched_namespaces[@]}" touched_namespaces < <(jq -r '(.namespaces // [])[].metadata.name' "$fixture")
}

# kwctl's median and mean of `validate`, in µs: "med = 38.43µs" on the line after the header.
validate_figures() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '
    function us(text,   value, unit) {
      value = text + 0; unit = text; sub(/^[0-9.]+/, "", unit)
      if (unit == "ns") return value / 1000
      if (unit == "ms") return value * 1000
      if (unit == "s") return value * 1000000
      return value
    }
    /^validate \[/ { found = 1; next }
    found && /med = / {
      match($0, /med = [0-9.]+[a-zµ]+/); med = substr($0, RSTART + 6, RLENGTH - 6)
      split($0, parts, "]:"); split(parts[2], values, " ")
      mean = values[2]; gsub(/[^0-9.a-zµ]/, "", mean)
      printf "%.2f %.2f\n", us(med), us(mean); exit
    }'
}

rows=()
for entry in "${CLASSES[@]}"; do
  read -r class name <<<"$entry"
  [[ -z "$filter" || "$class" == *"$filter"* ]] || continue
  fixture="e2e-tests/fixtures/$name.json"
  fixture_jq 'settings' "$fixture" >"$WORK/$class.settings.json"
  fixture_jq '{apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview", request: .request}' "$fixture" >"$WORK/$class.request.json"
  set_cluster "$fixture"
  args=(--settings-path "$WORK/$class.settings.json" --request-path "$WORK/$class.request.json" --allow-context-aware)

  kwctl_offline run "${args[@]}" "$POLICY_WASM" >"$WORK/$class.run" 2>"$WORK/$class.run.err" ||
    { echo "!! kwctl run of $class failed: $(tail -n 3 "$WORK/$class.run.err")" >&2; exit 1; }
  allowed="$(grep '^{' "$WORK/$class.run" | tail -n 1 | jq -r '(.response // .) | .allowed')"
  [[ "$allowed" == "$(fixture_jq -r 'allowed' "$fixture")" ]] ||
    { echo "!! $class: kwctl run says allowed=$allowed, the fixture $name expects $(fixture_jq -r 'allowed' "$fixture"): $(grep '^{' "$WORK/$class.run" | tail -n 1)" >&2; exit 1; }

  nsb_say "$class ($name, allowed=$allowed): kwctl bench, ours then the no-op"
  for variant in ours noop; do
    module="$POLICY_WASM"
    [[ $variant == noop ]] && module="$NOOP_POLICY_WASM"
    kwctl_offline bench "${args[@]}" --measurement-time "$measurement_time" "$module" \
      >"$WORK/$class.$variant" 2>"$WORK/$class.$variant.err" ||
      { echo "!! kwctl bench of $class ($variant) failed: $(tail -n 3 "$WORK/$class.$variant.err")" >&2; exit 1; }
  done
  read -r ours_med ours_mean < <(validate_figures "$WORK/$class.ours")
  read -r noop_med _ < <(validate_figures "$WORK/$class.noop")
  row="$(awk -v c="$class" -v f="$name" -v o="$ours_med" -v m="$ours_mean" -v n="$noop_med" \
    'BEGIN { printf "| %s (`%s`) | %.2f | %.2f | %.2fx | %.2f |", c, f, o, n, o / n, m }')"
  echo "$row"
  rows+=("$row")
done

echo
echo "kwctl bench ($("$KWCTL" --version | head -n 1)), --measurement-time $measurement_time, $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| class (fixture) | ours: median µs per validate | no-op: median µs | ours / no-op | ours: mean µs |"
echo "| --- | ---: | ---: | ---: | ---: |"
printf '%s\n' "${rows[@]}"
