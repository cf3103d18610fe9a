#!/usr/bin/env bash
# Node tests: the wall on real packets. Starts the one-node Kubernetes of e2e-tests/node/
# (kubelet, containerd, CNI bridge, kube-proxy, kube-router's NetworkPolicy firewall, CoreDNS)
# and runs e2e-tests/cluster/tests/node/ against it, inside the node's network namespace.
#
#   e2e-tests/node-tests.sh [extra libtest args, e.g. a test name filter]
#
# Needs root and the Debian packages of e2e-tests/node/install-deps.sh (a missing one fails
# the start loudly). The node is always stopped on exit (KEEP_STATE=1 keeps its directory:
# logs of every component). Exit code: the tests'.
#
# The reconciler runs as a local process (its ServiceAccount's token) for the wire tests;
# the chart test (n4) installs the Helm chart with the reconciler image built by `make image`
# (its archive imported into containerd), and fails loudly when there is no such target.
#
# Kubewarden 1.35 is installed on the node from its own charts (node/kubewarden.sh), the policy
# pushed to the node's registry; the admission chain tests (n8, n9, n10, n11) apply the
# ClusterAdmissionPolicies and the controller runs them in its PolicyServer's pods; n8 runs
# netprobe inside its pods (a static (musl) build, mounted read-only), n9 takes the
# policy-server's pods away and brings them back (the outage of issue 36).
#
# Environment: CARGO, CARGO_TARGET_DIR, NSB_RECONCILER_LOG, NSB_DRIFT_REPEATS (default 25),
# POLICY_SERVER, KWCTL and ANNOTATED_WASM (session.sh), NSB_N8_ROUNDS (default 10),
# NSB_N12_PHASES (`all`: n12 also deletes the pod of a single replica).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO="${CARGO:-cargo}"
NSB_SAY_PREFIX=">> node-tests"
# shellcheck source=control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
cd "$ROOT"
[[ $(id -u) == 0 ]] || { echo "!! the node tests need root (network namespaces, containerd, kubelet)" >&2; exit 1; }

# The reconciler under test: the image's static release binary (session.sh).
nsb_reconciler_bin
# Kubewarden's policy-server and the annotated module (session.sh), for n8's admission chain.
nsb_policy_server
nsb_say "building netprobe and the node tests"
"$CARGO" build -p namespace-baseline-cluster-tests --bin netprobe --locked
"$CARGO" test -p namespace-baseline-cluster-tests --features node --test node --locked --no-run
TARGET="$(nsb_target_dir)"
export NSB_NETPROBE_BIN="$TARGET/debug/netprobe"
# netprobe is standard library only: rustc alone builds it static, to run in a pod (n8).
export NSB_NETPROBE_STATIC_BIN="$TARGET/netprobe-static/netprobe"
mkdir -p "$(dirname "$NSB_NETPROBE_STATIC_BIN")"
rustc --edition 2024 --target x86_64-unknown-linux-musl -C opt-level=1 \
  -o "$NSB_NETPROBE_STATIC_BIN" e2e-tests/cluster/src/bin/netprobe.rs
for bin in "$NSB_RECONCILER_BIN" "$NSB_NETPROBE_BIN" "$NSB_NETPROBE_STATIC_BIN"; do
  [[ -x "$bin" ]] || { echo "!! not found: $bin" >&2; exit 1; }
done

# The reconciler image for the chart test (n4): `make image` (the Containerfile, a static
# musl binary FROM scratch) leaves target/image/reconciler.docker.tar and image.env; the
# archive is imported into the node's containerd. Without that target the test fails loudly.
extra_images=""
if make -n image >/dev/null 2>&1; then
  nsb_say "building the reconciler image (make image)"
  make image
  # shellcheck disable=SC1091
  IMAGE="$(. "$ROOT/target/image/image.env" && echo "$IMAGE")"
  extra_images="$ROOT/target/image/reconciler.docker.tar"
  [[ -n "$IMAGE" && -f "$extra_images" ]] || { echo "!! make image left no target/image/reconciler.docker.tar + image.env" >&2; exit 1; }
  export NSB_RECONCILER_IMAGE="$IMAGE"
else
  echo "!! no \`make image\` target: the chart test (n4) will fail for want of the reconciler image" >&2
fi
export NSB_HELM_BIN
NSB_HELM_BIN="$("$ROOT/charts/install-helm.sh" | tail -n 1)"
# cosign (from its Go module, cached) and kwctl sign and verify the module (n11).
export NSB_COSIGN_BIN KWCTL
NSB_COSIGN_BIN="$("$ROOT/e2e-tests/kubewarden/build-cosign.sh" | tail -n 1)"
KWCTL="$("$ROOT/e2e-tests/kubewarden/install.sh" kwctl | tail -n 1)"
# Prometheus for n7's live alert check (e2e-tests/alerts/build.sh: from its Go module, cached).
export NSB_PROMETHEUS_DIR
NSB_PROMETHEUS_DIR="$("$ROOT/e2e-tests/alerts/build.sh" | tail -n 1)"

NODE_STATE=""
cleanup() {
  local rc=$?
  if [[ -n "$NODE_STATE" ]]; then
    nsb_say "stopping the node ($NODE_STATE)"
    "$ROOT/e2e-tests/node/stop.sh" "$NODE_STATE" >&2 || echo "!! node stop.sh failed for $NODE_STATE" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT INT TERM

nsb_say "building (or reusing) and starting the node"
t0=$EPOCHREALTIME
NODE_STATE="$(NSB_NODE_EXTRA_IMAGES="$extra_images" "$ROOT/e2e-tests/node/start.sh" | tail -n 1)"
nsb_say "node up in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s (state $NODE_STATE)"
# Kubewarden as users install it (its three charts, the policy pushed to the node's registry):
# every admission chain of the node tests runs through its controller and PolicyServer.
# NSB_NODE_KUBEWARDEN=0 skips it (a hand run of tests that need no admission chain; those that
# do then fail, saying so).
if [[ "${NSB_NODE_KUBEWARDEN:-1}" != 0 ]]; then
  nsb_say "installing Kubewarden from its charts (e2e-tests/node/kubewarden.sh)"
  t0=$EPOCHREALTIME
  # shellcheck disable=SC1091
  nsenter --target "$(. "$NODE_STATE/env" && echo "$NSB_NODE_HOLDER_PID")" --net -- \
    "$ROOT/e2e-tests/node/kubewarden.sh" "$NODE_STATE"
  nsb_say "Kubewarden installed in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
fi
set -a
# shellcheck disable=SC1091
. "$NODE_STATE/env"
set +a
export TEST_KUBECONFIG="$KUBECONFIG"

rc=0
# The operator's manual followed as written (docs/install.md and docs/upgrade.md's marked
# blocks: install, upgrade from the previous round, rollback, removal), before the other tests,
# which start from a cluster without Namespace Baseline as it leaves it. It runs on a whole run
# (no test filter) or with NSB_NODE_MANUAL=1; NSB_NODE_MANUAL=0 leaves it out, saying so.
if [[ "${NSB_NODE_MANUAL:-$(( $# == 0 ))}" == 1 && "${NSB_NODE_KUBEWARDEN:-1}" != 0 ]]; then
  nsb_say "following the operator's manual (e2e-tests/node/manual.sh)"
  t0=$EPOCHREALTIME
  nsb_run_tests "operator manual" nsenter --target "$NSB_NODE_HOLDER_PID" --net -- \
    "$ROOT/e2e-tests/node/manual.sh" "$NODE_STATE" || rc=$?
  nsb_say "the operator's manual: $( ((rc == 0)) && echo passed || echo FAILED) in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
else
  echo "!! NOT RUN: the operator's manual (e2e-tests/node/manual.sh): a test filter was given or NSB_NODE_MANUAL=0" >&2
fi

nsb_say "running the node tests (serially, inside the node's network namespace)"
nsb_run_tests "node tests" nsenter --target "$NSB_NODE_HOLDER_PID" --net -- \
  "$CARGO" test -p namespace-baseline-cluster-tests --features node --test node --locked --offline \
  -- --test-threads=1 --nocapture "$@" || rc=$?
exit "$rc"
