#!/usr/bin/env bash
# `make demo`: from a fresh clone to "I saw it hold the wall", one command.
#
# Builds what it needs (the reconciler and the demo binary, debug; the local kube-apiserver +
# etcd from Go modules, at the same time), starts the control plane, runs demo/src/main.rs
# against it, and stops everything it started, whatever happens (trap). The policy module is not
# built: the demo asks the core it is compiled from (make e2e-tests runs the module itself).
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
cp_build=""
ok=0
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$cp_build" ]] && kill -0 "$cp_build" 2>/dev/null; then
    nsb_say "stopping the control plane's build"
    kill -TERM -- "-$cp_build" 2>/dev/null || true
  fi
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
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { s = b - a; if (s < 90) printf "%.0f s", s; else printf "%d min %02d s", s / 60, s % 60 }'; }

# The Go control plane and the Rust programs build at the same time: on a fresh machine each
# spends part of its build on one core (downloads, linking, the serial tail of a big crate),
# and the other takes up the slack. Cached, both are a few seconds.
CP_LOG="$(mktemp "${TMPDIR:-/tmp}/nsb-demo-control-plane.XXXXXX")"
built_started=$EPOCHREALTIME
cp_dir="$("$CP/build.sh" --print-dir)"
if [[ -x "$cp_dir/kube-apiserver" && -x "$cp_dir/etcd" ]]; then cp_cached=1; else cp_cached=0; fi
setsid "$CP/build.sh" >"$CP_LOG" 2>&1 &
cp_build=$!
if [[ $cp_cached == 1 ]]; then
  nsb_say "1/2 the local control plane (kube-apiserver + etcd): cached in ${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"
else
  nsb_say "1/2 building the local control plane (kube-apiserver + etcd from Go modules) in the background:"
  nsb_say "    first time only, about 4-12 minutes on 2 cores (module downloads included), cached in ${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"
fi

nsb_say "2/2 building the reconciler and the demo (debug; a first build compiles ~250 crates: about 5-8 minutes on 2 cores, seconds afterwards)"
rust_started=$EPOCHREALTIME
"$CARGO" build --locked -p namespace-baseline-reconciler -p namespace-baseline-demo \
  --bin namespace-baseline-reconciler --bin namespace-baseline-demo
RECONCILER_BIN="$TARGET_DIR/debug/namespace-baseline-reconciler"
DEMO_BIN="$TARGET_DIR/debug/namespace-baseline-demo"
[[ -x "$RECONCILER_BIN" && -x "$DEMO_BIN" ]] || die "binaries not found in $TARGET_DIR/debug"
nsb_say "    the reconciler and the demo built in $(since "$rust_started")"

if kill -0 "$cp_build" 2>/dev/null; then
  nsb_say "    waiting for the control plane's build ($(since "$built_started") so far; progress: $CP_LOG)"
fi
if ! wait "$cp_build"; then
  cat "$CP_LOG" >&2
  die "the control plane did not build (log above)"
fi
rm -f "$CP_LOG"
nsb_say "    ready to start after $(since "$built_started") of building"
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
NSB_RECONCILER_BIN="$RECONCILER_BIN" NSB_DEMO_DIR="$DEMO_DIR" \
  KUBECONFIG="$KUBECONFIG" "$DEMO_BIN"
echo
ok=1
nsb_say "the demo itself took $(awk -v a="$demo_started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
