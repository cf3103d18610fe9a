#!/usr/bin/env bash
# `make demo NODE=1`: the wall on real packets. Builds (or reuses) and starts the one-node
# Kubernetes of e2e-tests/node/ (root; the packages of e2e-tests/node/install-deps.sh), runs
# the `node-demo` program inside the node's network namespace (a connection from a walled pod
# refused, a DNS answer through the door, a deleted wall back on the wire N ms later), and
# stops everything it started, whatever happens. The plain `make demo` is demo/demo.sh.
#
# Environment: CARGO, CARGO_TARGET_DIR, NSB_CACHE_DIR, KEEP_STATE=1 (keep the node's logs).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO="${CARGO:-cargo}"
NSB_SAY_PREFIX=demo
# shellcheck source=../e2e-tests/control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
cd "$ROOT"
[[ $(id -u) == 0 ]] || { echo "demo: the node needs root (network namespaces, containerd, kubelet)" >&2; exit 1; }

nsb_say "building the reconciler, netprobe and node-demo"
"$CARGO" build -q -p namespace-baseline-reconciler --bin namespace-baseline-reconciler --locked
"$CARGO" build -q -p namespace-baseline-cluster-tests --bin netprobe --bin node-demo --locked
TARGET="$(nsb_target_dir)"
export NSB_RECONCILER_BIN="$TARGET/debug/namespace-baseline-reconciler"
export NSB_NETPROBE_BIN="$TARGET/debug/netprobe"

NODE_STATE=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$NODE_STATE" ]]; then
    nsb_say "stopping the node"
    "$ROOT/e2e-tests/node/stop.sh" "$NODE_STATE" >/dev/null 2>&1 || echo "demo: node stop.sh failed for $NODE_STATE" >&2
  fi
  if [[ $rc == 0 ]]; then nsb_say "done: nothing left running"; else echo "demo: FAILED (exit $rc)" >&2; fi
  exit "$rc"
}
trap cleanup EXIT INT TERM

nsb_say "starting the node (first time: about 8 minutes of Go builds)"
NODE_STATE="$("$ROOT/e2e-tests/node/start.sh" 2>"$(mktemp "${TMPDIR:-/tmp}/nsb-node-demo.XXXXXX.log")" | tail -n 1)"
set -a
# shellcheck disable=SC1091
. "$NODE_STATE/env"
set +a
export TEST_KUBECONFIG="$KUBECONFIG"
nsb_say "node up: kubelet, containerd, kube-proxy, kube-router, CoreDNS (state $NODE_STATE)"
nsenter --target "$NSB_NODE_HOLDER_PID" --net -- "$TARGET/debug/node-demo"
