#!/usr/bin/env bash
# Reconciler benchmarks against a real kube-apiserver: convergence, steady state, drift
# repair, new namespaces, memory and startup, and with --dns-churn (2 minutes more per size)
# the DNS namespace's churn (e2e-tests/cluster/src/bin/cluster-bench.rs).
#
#   e2e-tests/cluster-bench.sh [--large] [--image-binary] [cluster-bench args, e.g. --reps 5 -- --concurrency=32]
#
# Builds the reconciler and the bench (profile `bench`: opt-level 3, no LTO; NSB_BENCH_PROFILE
# to change it); with --image-binary the reconciler measured is the image's static musl binary
# (what users run: musl's allocator, LTO), built by e2e-tests/image/build.sh. Without it, a
# preset NSB_RECONCILER_BIN names the reconciler to run (e.g. a wrapper that execs it under
# heaptrack's preload library). Unless TEST_KUBECONFIG points at a cluster, starts a FRESH local control plane
# (e2e-tests/control-plane) for every size, so that each size starts from an empty cluster and
# its own audit log (namespaces cannot be deleted without a controller-manager), and always
# stops it on exit (KEEP_STATE=1 keeps the state directories: logs, audit logs).
#
# Sizes: 100 and 1,000 namespaces by default (about 5 minutes here); --large (or
# NSB_BENCH_LARGE=1) adds 5,000 (about 10 minutes more); NSB_BENCH_SIZES="100 1000" overrides.
# With TEST_KUBECONFIG, all sizes run in one process against that cluster; set NSB_AUDIT_LOG
# for request counts, NSB_APISERVER_PID / NSB_ETCD_PID for their CPU time.
#
# Priority: on a shared machine, other work (builds) competes for the same cores and the
# timings then measure the competition. Unless NSB_BENCH_PRIORITY=0, the script raises the
# scheduling priority of the processes it measures, best effort: nice -10 on the autogroups
# (kernel.sched_autogroup_enabled) of this script (so the bench and the reconciler) and of
# the control plane's etcd and kube-apiserver (each in its own session). Needs root or
# CAP_SYS_NICE; without them it is skipped with a note. The load average is printed per size.
#
# Environment: CARGO (default cargo), CARGO_TARGET_DIR, NSB_RECONCILER_LOG (RUST_LOG of the
# reconciler, default info), NSB_BENCH_OUT (the combined table, default a temp file),
# NSB_BENCH_PRIORITY (default 1), NSB_BENCH_OPENREPORTS=1 (apply the openreports.io Report CRD,
# reports-api v0.2.1 from the Go module proxy, to each fresh control plane before the
# reconciler starts: the same phases with the reports written), NSB_BENCH_PERF=<file> (`perf
# record` of the reconciler over the drift repairs, call graphs from DWARF: a bench-profile
# build keeps its symbols; `perf report -i <file> --no-children`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO="${CARGO:-cargo}"
PROFILE="${NSB_BENCH_PROFILE:-bench}"
# shellcheck source=control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"

# prioritize PID...: nice -10 for the autogroup (else the process) of each PID.
prioritize() {
  [[ "${NSB_BENCH_PRIORITY:-1}" == 1 ]] || return 0
  local pid
  for pid in "$@"; do
    if [[ -w /proc/$pid/autogroup ]] && echo -10 2>/dev/null >"/proc/$pid/autogroup"; then
      continue
    fi
    renice -n -10 -p "$pid" >/dev/null 2>&1 || echo "!! could not raise the priority of pid $pid" >&2
  done
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

large="${NSB_BENCH_LARGE:-0}"
image_binary=0
args=()
for arg in "$@"; do
  case "$arg" in
    --large) large=1 ;;
    --image-binary) image_binary=1 ;;
    *) args+=("$arg") ;;
  esac
done
if [[ -n "${NSB_BENCH_SIZES:-}" ]]; then
  read -r -a sizes <<<"$NSB_BENCH_SIZES"
elif [[ "$large" == 1 ]]; then
  sizes=(100 1000 5000)
else
  sizes=(100 1000)
fi

cd "$ROOT"
nsb_say "building the reconciler and cluster-bench (profile $PROFILE)"
# One invocation: the two packages share one feature resolution, so kube and tokio build once.
"$CARGO" build --profile "$PROFILE" --locked \
  -p namespace-baseline-reconciler --bin namespace-baseline-reconciler \
  -p namespace-baseline-cluster-tests --bin cluster-bench
TARGET_DIR="$(nsb_target_dir)"
case "$PROFILE" in
  dev | test) OUT_DIR="$TARGET_DIR/debug" ;;
  release | bench) OUT_DIR="$TARGET_DIR/release" ;;
  *) OUT_DIR="$TARGET_DIR/$PROFILE" ;;
esac
BENCH="$OUT_DIR/cluster-bench"
if [[ "$image_binary" == 1 ]]; then
  unset NSB_RECONCILER_BIN
  nsb_reconciler_bin
else
  # A preset NSB_RECONCILER_BIN (e.g. a wrapper that runs it under a profiler) is kept.
  export NSB_RECONCILER_BIN="${NSB_RECONCILER_BIN:-$OUT_DIR/namespace-baseline-reconciler}"
fi
nsb_say "the reconciler measured: $NSB_RECONCILER_BIN"
[[ -x "$NSB_RECONCILER_BIN" && -x "$BENCH" ]] || { echo "!! binaries not found in $OUT_DIR" >&2; exit 1; }
export NSB_RECONCILER_LOG="${NSB_RECONCILER_LOG:-info}"

# With NSB_BENCH_OPENREPORTS=1: the Report CRD applied to each fresh control plane.
openreports_crd=""
if [[ "${NSB_BENCH_OPENREPORTS:-0}" == 1 ]]; then
  reports_api="$(cd / && GOFLAGS=-mod=mod go mod download -json github.com/openreports/reports-api@v0.2.1 |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  openreports_crd="$reports_api/config/crd/openreports.io_reports.yaml"
  [[ -f "$openreports_crd" ]] || { echo "!! no OpenReports CRD at $openreports_crd" >&2; exit 1; }
fi
apply_openreports_crd() {
  [[ -n "$openreports_crd" ]] || return 0
  nsb_say "applying the OpenReports Report CRD"
  kubectl --kubeconfig "$KUBECONFIG" apply --server-side -f "$openreports_crd" >&2
  kubectl --kubeconfig "$KUBECONFIG" wait --for=condition=Established --timeout=60s crd/reports.openreports.io >&2
}

TABLE="${NSB_BENCH_OUT:-$(mktemp "${TMPDIR:-/tmp}/nsb-bench.XXXXXX.md")}"
: >"$TABLE"
LOG="$(mktemp "${TMPDIR:-/tmp}/nsb-bench.XXXXXX.log")"

cleanup() {
  local rc=$?
  nsb_stop_control_plane
  exit "$rc"
}
trap cleanup EXIT INT TERM

prioritize $$
rc=0
if [[ -n "${TEST_KUBECONFIG:-}" ]]; then
  nsb_say "using the cluster of TEST_KUBECONFIG=$TEST_KUBECONFIG (sizes ${sizes[*]})"
  [[ -n "${NSB_AUDIT_LOG:-}" ]] || echo "!! NSB_AUDIT_LOG is not set: no request counts" >&2
  for pid in ${NSB_APISERVER_PID:-} ${NSB_ETCD_PID:-}; do [[ -d /proc/$pid ]] && prioritize "$pid"; done
  set +e
  "$BENCH" --sizes "$(IFS=,; echo "${sizes[*]}")" --out "$TABLE" "${args[@]}" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  set -e
else
  for size in "${sizes[@]}"; do
    nsb_say "N = $size: starting a fresh control plane"
    nsb_start_control_plane
    export TEST_KUBECONFIG="$KUBECONFIG"
    apply_openreports_crd
    prioritize "$NSB_APISERVER_PID" "$NSB_ETCD_PID"
    nsb_say "load average $(loadavg)"
    set +e
    "$BENCH" --sizes "$size" --out "$TABLE" "${args[@]}" 2>&1 | tee -a "$LOG"
    size_rc=${PIPESTATUS[0]}
    set -e
    nsb_say "N = $size finished with exit code $size_rc; load average $(loadavg)"
    ((size_rc == 0)) || rc=$size_rc
    nsb_stop_control_plane
  done
fi

echo
echo "== results ($(nproc) vCPU, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo); table: $TABLE, full output: $LOG)"
echo "| benchmark | namespaces | median | spread | target | verdict | detail |"
echo "|---|---:|---:|---|---|---|---|"
cat "$TABLE"
nsb_say "cluster-bench finished with exit code $rc"
exit "$rc"
