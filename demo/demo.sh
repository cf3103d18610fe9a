#!/usr/bin/env bash
# `make demo`: from a fresh clone to "I saw it hold the wall", one command.
#
# Builds what it needs (the wasm32-wasip1 target and the policy module, the reconciler and the demo
# binary, the local kube-apiserver + etcd from Go modules), starts the control plane, runs
# demo/src/main.rs against it, and stops everything it started, whatever happens (trap).
#
# Needs: rustup/cargo, Go (>= 1.26, or a Go that may fetch it), openssl, curl, make.
# Environment: CARGO (default cargo), CARGO_TARGET_DIR, NSB_CACHE_DIR (control plane binaries;
# default ~/.cache/namespace-baseline), KEEP_STATE=1 (keep the control plane's directory).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CP="$ROOT/e2e-tests/control-plane"
CARGO="${CARGO:-cargo}"
NSB_SAY_PREFIX=demo
# shellcheck source=../e2e-tests/control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
die() { echo "demo: $*" >&2; exit 1; }

cd "$ROOT"

missing=()
for tool in "$CARGO" rustup go openssl curl make awk flock; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "demo: missing: ${missing[*]}" >&2
  echo "  Rust: https://rustup.rs   Go (builds the local kube-apiserver): https://go.dev/dl/" >&2
  echo "  openssl, curl, make, flock (util-linux): your distribution's packages" >&2
  exit 1
fi

STATE_DIR=""
DEMO_DIR=""
ok=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$DEMO_DIR" && -f "$DEMO_DIR/reconciler.pid" ]]; then
    local pid; pid="$(cat "$DEMO_DIR/reconciler.pid")"
    if [[ "$(cat "/proc/$pid/cmdline" 2>/dev/null | tr '\0' ' ')" == *namespace-baseline-reconciler* ]]; then
      nsb_say "stopping the reconciler (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  if [[ -n "$STATE_DIR" ]]; then
    nsb_say "stopping the control plane"
    "$CP/stop.sh" "$STATE_DIR" >/dev/null 2>&1 || echo "demo: stop.sh failed for $STATE_DIR" >&2
  fi
  if [[ -n "$DEMO_DIR" ]]; then
    if [[ $ok == 1 ]]; then rm -rf "$DEMO_DIR"; else echo "demo: logs kept in $DEMO_DIR" >&2; fi
  fi
  if [[ $ok == 1 ]]; then
    nsb_say "done: nothing left running"
  else
    echo "demo: FAILED (exit $rc)" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

TARGET_DIR="$(nsb_target_dir)"

# The policy module as `make policy.wasm` builds it (without wasm-opt, which the demo does not
# need), from cargo's actual target directory (CARGO_TARGET_DIR).
nsb_say "1/3 building the policy for wasm32-wasip1"
if ! rustup target list --installed | grep -x >/dev/null wasm32-wasip1; then
  nsb_say "    installing the Rust wasm32-wasip1 target (rustup target add)"
  rustup target add wasm32-wasip1
fi
"$CARGO" build --locked -p namespace-baseline-policy --target wasm32-wasip1 --profile policy
# The demo runs it from there rather than writing policy.wasm at the root, so that a later
# `make unit-tests` never finds an unoptimised policy.wasm there (its size test expects
# `make policy.wasm`'s).
DEMO_POLICY="$TARGET_DIR/wasm32-wasip1/policy/namespace_baseline_policy.wasm"

nsb_say "2/3 building the reconciler and the demo (the first build compiles ~350 crates: 10-25 minutes on 2 cores)"
"$CARGO" build --locked -p namespace-baseline-reconciler -p namespace-baseline-demo
RECONCILER_BIN="$TARGET_DIR/debug/namespace-baseline-reconciler"
DEMO_BIN="$TARGET_DIR/debug/namespace-baseline-demo"
[[ -x "$RECONCILER_BIN" && -x "$DEMO_BIN" ]] || die "binaries not found in $TARGET_DIR/debug"

nsb_say "3/3 the local control plane: kube-apiserver + etcd built from Go modules"
nsb_say "    (first use only: downloads the modules and compiles, 3-6 minutes; cached in ${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline})"
"$CP/build.sh" >/dev/null
STATE_DIR="$("$CP/start.sh" 2>"${TMPDIR:-/tmp}/nsb-demo-start.$$.log" | tail -n 1)" || {
  cat "${TMPDIR:-/tmp}/nsb-demo-start.$$.log" >&2; die "the control plane did not start"; }
rm -f "${TMPDIR:-/tmp}/nsb-demo-start.$$.log"
set -a
# shellcheck disable=SC1091
. "$STATE_DIR/env"
set +a
nsb_say "control plane $NSB_K8S_VERSION at $NSB_APISERVER_URL (state $STATE_DIR)"
DEMO_DIR="$(mktemp -d "${TMPDIR:-/tmp}/nsb-demo.XXXXXX")"

echo
demo_started=$EPOCHREALTIME
NSB_RECONCILER_BIN="$RECONCILER_BIN" NSB_POLICY_WASM="$DEMO_POLICY" NSB_DEMO_DIR="$DEMO_DIR" \
  KUBECONFIG="$KUBECONFIG" "$DEMO_BIN"
echo
ok=1
nsb_say "the demo itself took $(awk -v a="$demo_started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
