#!/usr/bin/env bash
# The alert rules' check (`make alerts-check`), as users' tools check rules: the chart's
# PrometheusRule rendered at its default values with the admission alerts switched on
# (prometheusRule.admission.enabled and .kubewardenTelemetry; render.sh), then
#   1. `promtool check rules --lint=all --lint-fatal`: the rule file and its PromQL (also as
#      charts/tests/everything.yaml renders it: other thresholds, labels and runbook page; and
#      minimal.yaml: no system baseline, so the hole alert without the chart's own door);
#   2. `promtool test rules tests.yaml`: each alert fired (pending first where it has a
#      `for:`) with its labels and annotations, and quiet on a healthy install;
#   3. every metric the rules and their tests name is one the reconciler exports
#      (reconciler/tests/alert_metrics.rs, against the registry /metrics serves), or, on the
#      admission side, one of the API server's or Kubewarden's in that test's declared list.
# promtool comes from build.sh (built from the Go module proxy on first use, cached).
#
# Usage: e2e-tests/alerts/check.sh [--keep DIR]   (DIR: keep the rendered rules there)
# Environment: CARGO (default cargo), NSB_CACHE_DIR, HELM.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CARGO="${CARGO:-cargo}"
NSB_LOG_PREFIX=alerts
# shellcheck source=../control-plane/lib.sh
. "$ROOT/e2e-tests/control-plane/lib.sh"
log() { nsb_log "$@"; }

WORK=""
case "${1:-}" in
  "") WORK="$(mktemp -d "${TMPDIR:-/tmp}/nsb-alerts.XXXXXX")"; trap 'rm -rf "$WORK"' EXIT ;;
  --keep) WORK="$2"; mkdir -p "$WORK" ;;
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--keep DIR]" >&2; exit 2 ;;
esac

PROMTOOL="$("$HERE/build.sh" | tail -n 1)/promtool"
ADMISSION=(--set prometheusRule.admission.enabled=true --set prometheusRule.admission.kubewardenTelemetry=true)
"$HERE/render.sh" "$WORK/rules.yaml" "${ADMISSION[@]}"
cp "$HERE/tests.yaml" "$WORK/tests.yaml"

log "promtool check rules (the chart's PrometheusRule: default values and the admission alerts, charts/tests/everything.yaml's and minimal.yaml's)"
"$PROMTOOL" check rules --lint=all --lint-fatal "$WORK/rules.yaml" | sed 's/^/   /'
for variant in everything minimal; do
  "$HERE/render.sh" "$WORK/$variant-rules.yaml" -f "$ROOT/charts/tests/$variant.yaml"
  "$PROMTOOL" check rules --lint=all --lint-fatal "$WORK/$variant-rules.yaml" | sed 's/^/   /'
done
log "promtool test rules e2e-tests/alerts/tests.yaml"
"$PROMTOOL" test rules "$WORK/tests.yaml" | sed 's/^/   /'
alerts="$(grep -c '^ *- alert: ' "$WORK/rules.yaml")"
tested="$(grep -oE 'alertname: [A-Za-z]+' "$HERE/tests.yaml" | sort -u | wc -l)"
[[ $alerts == "$tested" ]] ||
  { echo "!! $alerts alerts in the rules, $tested of them in tests.yaml: every alert needs its tests" >&2; exit 1; }
log "every metric the rules and their tests name is exported (reconciler/tests/alert_metrics.rs)"
"$CARGO" test --locked -q -p namespace-baseline-reconciler --test alert_metrics 2>&1 | sed 's/^/   /'
log "alerts check passed: $alerts alerts, each fired and quiet in promtool's tests"
