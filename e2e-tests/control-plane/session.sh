# shellcheck shell=bash
# Sourced by the scripts that build things with cargo and run them on the local control plane
# (cluster-tests.sh, cluster-bench.sh, manifests-check.sh, charts/check.sh, demo/demo.sh).
# Source it after `set -euo pipefail`; it defines:
#   nsb_say MESSAGE...        a timestamped progress line (to stderr), prefix $NSB_SAY_PREFIX
#   nsb_target_dir            cargo's target directory (honours CARGO_TARGET_DIR)
#   nsb_start_control_plane   builds (or reuses) and starts kube-apiserver + etcd, exports the
#                             variables of its env file (KUBECONFIG, NSB_AUDIT_LOG, ...) and
#                             sets NSB_STATE_DIR
#   nsb_stop_control_plane    stops it again (safe to call twice, or when none was started)
#   nsb_reconciler_bin        exports NSB_RECONCILER_BIN: the reconciler under test, the
#                             image's static release binary (built once per run, a no-op
#                             when up to date), unless NSB_RECONCILER_BIN is set already
#   nsb_policy_server         exports POLICY_SERVER: Kubewarden's policy-server 1.35.0 (the
#                             admission chain of the cluster and node tests), found or
#                             installed by e2e-tests/kubewarden/install.sh (POLICY_SERVER
#                             names your own); and ANNOTATED_WASM, the module it serves:
#                             policy.wasm built from the current source and annotated by kwctl
#                             (make annotated-policy.wasm), unless already set
#   nsb_keep_or_remove DIR RC WHAT
#                             removes a test's work directory, or keeps it (KEEP_STATE=1, or
#                             RC != 0) and says where WHAT (its logs) can be read

NSB_CONTROL_PLANE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NSB_STARTED_AT="${NSB_STARTED_AT:-$EPOCHREALTIME}"
NSB_SAY_PREFIX="${NSB_SAY_PREFIX:->>}"
NSB_STATE_DIR=""

nsb_say() {
  awk -v a="$NSB_STARTED_AT" -v b="$EPOCHREALTIME" -v p="$NSB_SAY_PREFIX" -v m="$*" \
    'BEGIN { printf "%s [%6.1fs] %s\n", p, b - a, m }' >&2
}

nsb_target_dir() {
  "${CARGO:-cargo}" metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p'
}

nsb_start_control_plane() {
  "$NSB_CONTROL_PLANE/build.sh" >&2
  NSB_STATE_DIR="$("$NSB_CONTROL_PLANE/start.sh" | tail -n 1)"
  set -a
  # shellcheck disable=SC1091
  . "$NSB_STATE_DIR/env"
  set +a
  nsb_say "control plane $NSB_K8S_VERSION at $NSB_APISERVER_URL (state $NSB_STATE_DIR)"
}

nsb_stop_control_plane() {
  if [[ -n "$NSB_STATE_DIR" ]]; then
    nsb_say "stopping the control plane ($NSB_STATE_DIR)"
    "$NSB_CONTROL_PLANE/stop.sh" "$NSB_STATE_DIR" >&2 || echo "!! stop.sh failed for $NSB_STATE_DIR" >&2
    NSB_STATE_DIR=""
  fi
}

nsb_reconciler_bin() {
  if [[ -z "${NSB_RECONCILER_BIN:-}" ]]; then
    nsb_say "building the reconciler (the image's static binary)"
    "$NSB_CONTROL_PLANE/../image/build.sh" binaries >&2
    NSB_RECONCILER_BIN="$(cd "$NSB_CONTROL_PLANE/../.." && pwd)/target/image/linux/amd64/namespace-baseline-reconciler"
  fi
  [[ -x "$NSB_RECONCILER_BIN" ]] || { echo "!! reconciler binary not found at $NSB_RECONCILER_BIN" >&2; return 1; }
  export NSB_RECONCILER_BIN
}

nsb_policy_server() {
  local root install
  root="$(cd "$NSB_CONTROL_PLANE/../.." && pwd)"
  install="$root/e2e-tests/kubewarden/install.sh"
  POLICY_SERVER="$("$install" policy-server | tail -n 1)"
  [[ -x "$POLICY_SERVER" ]] || { echo "!! policy-server not found at '$POLICY_SERVER'" >&2; return 1; }
  export POLICY_SERVER
  nsb_say "admission chain: $("$POLICY_SERVER" --version | head -n 1) ($POLICY_SERVER)"
  if [[ -z "${ANNOTATED_WASM:-}" ]]; then
    nsb_say "building the policy module and annotating it with kwctl (make annotated-policy.wasm)"
    make -s -C "$root" annotated-policy.wasm KWCTL="$("$install" kwctl | tail -n 1)" >&2
    ANNOTATED_WASM="$root/annotated-policy.wasm"
  fi
  [[ -f "$ANNOTATED_WASM" ]] || { echo "!! annotated policy module not found at $ANNOTATED_WASM" >&2; return 1; }
  export ANNOTATED_WASM
}

nsb_keep_or_remove() {
  local dir=$1 rc=$2 what=$3
  if [[ "${KEEP_STATE:-0}" == 1 || $rc != 0 ]]; then
    nsb_say "state kept in $dir ($what)"
  else
    rm -rf "$dir"
  fi
}

# Runs a test command ("$@"), its output both shown and kept in a log, then lists the
# FIGURE lines it printed; returns the command's exit code. $1 names the suite.
nsb_run_tests() {
  local suite="$1" log rc
  shift
  log="$(mktemp "${TMPDIR:-/tmp}/nsb-${suite// /-}.XXXXXX.log")"
  set +e
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  echo
  echo "== key figures (full output: $log)"
  grep -E '^FIGURE ' "$log" || echo "(none)"
  nsb_say "$suite finished with exit code $rc"
  return "$rc"
}
