#!/usr/bin/env bash
# Cluster end-to-end tests: the generated CRD, deploy/rbac.yaml and the reconciler binary
# (run as its ServiceAccount, with a TokenRequest token) against a real kube-apiserver, and
# the admission policy in that API server's admission chain (s12, s13, s15, s16: the annotated
# module in Kubewarden's policy-server 1.35, configured and registered as Kubewarden's
# controller would from deploy/admission-policy.yaml).
#
#   e2e-tests/cluster-tests.sh [extra libtest args, e.g. a test name filter]
#
# Starts the local control plane (e2e-tests/control-plane, binaries built or reused) unless
# TEST_KUBECONFIG points at a cluster already; then NSB_AUDIT_LOG must name its audit log, or
# NSB_SKIP_AUDIT=1 skips (loudly) the request-count assertions. The control plane is always
# stopped on exit (KEEP_STATE=1 keeps its directory: logs, audit log). Exit code: the tests'.
#
# Environment: CARGO (default cargo), CARGO_TARGET_DIR (default: cargo's), NSB_RECONCILER_LOG
# (RUST_LOG of the reconcilers), TEST_KUBECONFIG / NSB_AUDIT_LOG / NSB_SKIP_AUDIT as above,
# NSB_RECONCILER_BIN (built already), POLICY_SERVER / KWCTL (your own Kubewarden programs;
# default: e2e-tests/kubewarden/install.sh finds or installs 1.35.0), ANNOTATED_WASM
# (the module policy-server serves; default: policy.wasm built from the current source and
# annotated, make annotated-policy.wasm).
# NSB_OPENREPORTS_CRD (the openreports.io Report CRD of scenario s14; default: downloaded with
# `go mod download` from the Go module proxy).
# The s9 scenarios restart the local control plane's API server through NSB_STATE_DIR
# (exported from its env file); against a TEST_KUBECONFIG cluster that step fails unless
# NSB_SKIP_APISERVER_RESTART=1 skips it (loudly).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO="${CARGO:-cargo}"
# shellcheck source=control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
cd "$ROOT"

# The reconciler under test: the image's static release binary (session.sh).
nsb_reconciler_bin
# Kubewarden's policy-server and the annotated module it serves (session.sh).
nsb_policy_server
nsb_say "building the tests"
"$CARGO" test -p namespace-baseline-cluster-tests --locked --no-run

# The OpenReports CRDs of s14, from the Go module proxy (downloaded, never committed).
if [[ -z "${NSB_OPENREPORTS_CRD:-}" ]]; then
  nsb_say "downloading the OpenReports CRDs (Go module github.com/openreports/reports-api@v0.2.1)"
  reports_api="$(cd / && GOFLAGS=-mod=mod go mod download -json github.com/openreports/reports-api@v0.2.1 |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  export NSB_OPENREPORTS_CRD="$reports_api/config/crd/openreports.io_reports.yaml"
fi
[[ -f "$NSB_OPENREPORTS_CRD" ]] || { echo "!! no OpenReports CRD at $NSB_OPENREPORTS_CRD" >&2; exit 1; }

cleanup() {
  local rc=$?
  nsb_stop_control_plane
  exit "$rc"
}
trap cleanup EXIT INT TERM

if [[ -n "${TEST_KUBECONFIG:-}" ]]; then
  nsb_say "using the cluster of TEST_KUBECONFIG=$TEST_KUBECONFIG"
  if [[ -z "${NSB_AUDIT_LOG:-}" && "${NSB_SKIP_AUDIT:-0}" != 1 ]]; then
    echo "!! NSB_AUDIT_LOG is not set: the request-count assertions will fail (set NSB_SKIP_AUDIT=1 to skip them)" >&2
  fi
else
  nsb_say "building (or reusing) and starting the control plane"
  nsb_start_control_plane
  export TEST_KUBECONFIG="$KUBECONFIG"
fi

nsb_say "running the cluster tests (serially: every reconciler acts on every baseline)"
rc=0
nsb_run_tests "cluster tests" \
  "$CARGO" test -p namespace-baseline-cluster-tests --locked -- --test-threads=1 --nocapture "$@" || rc=$?
exit "$rc"
