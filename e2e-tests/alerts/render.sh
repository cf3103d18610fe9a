#!/usr/bin/env bash
# The chart's alert rules as a Prometheus rule file: `helm template` of
# charts/namespace-baseline with prometheusRule.enabled=true, the PrometheusRule's spec (its
# `groups:`) taken out as prometheus-operator hands it to Prometheus. One rendering for every
# user of the rules: check.sh (promtool) and the node test n7 (a real Prometheus), so both
# test the rules users install, only the values they pass differ.
#
# Usage: e2e-tests/alerts/render.sh OUT [HELM-ARGS...]
#   OUT        the rule file to write
#   HELM-ARGS  more values, e.g. --set prometheusRule.for.notEnforced=10s
# Environment: HELM (default: charts/install-helm.sh's, built on first use), NSB_CACHE_DIR.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[[ $# -ge 1 ]] || { echo "usage: $0 OUT [HELM-ARGS...]" >&2; exit 2; }
out="$1"; shift
HELM="${HELM:-$("$ROOT/charts/install-helm.sh" | tail -n 1)}"

# The API door of charts/tests/api-door.yaml: the chart refuses to render without one.
rendered="$("$HELM" template namespace-baseline "$ROOT/charts/namespace-baseline" \
  -f "$ROOT/charts/tests/api-door.yaml" --set prometheusRule.enabled=true "$@" \
  --show-only templates/prometheusrule.yaml 2> >(grep -v 'found symbolic link in path' >&2))"
grep -qx 'kind: PrometheusRule' <<<"$rendered" || { echo "!! no PrometheusRule rendered:" >&2; echo "$rendered" >&2; exit 1; }
# `spec:` is the last top-level key; what it holds, one level out, is the rule file.
sed -n '/^spec:$/,$p' <<<"$rendered" | tail -n +2 | sed 's/^  //' >"$out"
grep -q '^groups:$' "$out" || { echo "!! $out has no groups:" >&2; cat "$out" >&2; exit 1; }
