#!/usr/bin/env bash
# The chaos soak (e2e-tests/cluster/src/bin/soak.rs): leader election under faults, kills and
# control-plane restarts, checked from the API server's audit log.
#
#   e2e-tests/soak.sh            the short run CI makes: 300 namespaces, 3.5 minutes, 8 kills
#   FULL=1 e2e-tests/soak.sh     the long one: 1,000 namespaces, 10 minutes, 20 kills
#   e2e-tests/soak.sh --seed 7   extra arguments go to the soak (they override the above)
#
# Builds the reconciler and the soak, starts a fresh local control plane (e2e-tests/
# control-plane: the soak restarts its API server and etcd), runs the soak and always stops
# the control plane (KEEP_STATE=1 keeps its directory: logs, audit log). NSB_SOAK_OUT names a
# file for the result table (default: a temp file). Exit code: the soak's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO="${CARGO:-cargo}"
# shellcheck source=control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
cd "$ROOT"

if [[ "${FULL:-0}" == 1 ]]; then
  preset=(--namespaces 1000 --duration 600 --kills 20 --apiserver-restarts 4 --etcd-restarts 1 --proxy-restarts 2)
else
  preset=(--namespaces 300 --duration 210 --kills 8 --apiserver-restarts 1 --etcd-restarts 1 --proxy-restarts 1)
fi

TARGET_DIR="$(nsb_target_dir)"
# The reconciler under test: the image's static release binary (session.sh).
nsb_reconciler_bin
nsb_say "building the soak"
"$CARGO" build --locked -p namespace-baseline-cluster-tests --bin soak
SOAK="$TARGET_DIR/debug/soak"
[[ -x "$SOAK" ]] || { echo "!! the soak was not built: $SOAK" >&2; exit 1; }
export NSB_RECONCILER_LOG="${NSB_RECONCILER_LOG:-info}"

cleanup() {
  local rc=$?
  nsb_stop_control_plane
  exit "$rc"
}
trap cleanup EXIT INT TERM

nsb_say "starting a fresh control plane"
nsb_start_control_plane
export TEST_KUBECONFIG="$KUBECONFIG"
OUT="${NSB_SOAK_OUT:-$(mktemp "${TMPDIR:-/tmp}/nsb-soak.XXXXXX.md")}"
set +e
"$SOAK" "${preset[@]}" --out "$OUT" "$@"
rc=$?
set -e
nsb_say "soak finished with exit code $rc (table: $OUT)"
exit "$rc"
