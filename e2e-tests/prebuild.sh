#!/usr/bin/env bash
# Builds, at the lowest CPU priority and in the order the test steps need them, the tools that
# `make test` builds only once per version (the Go binaries and the cargo-installed tools), then
# the check build of its last step (clippy) and, for .ci/run (--with-ci-checks), cargo-hakari,
# the MSRV check and the fuzz targets, which only .ci/run uses after make test, so
# that on a fresh machine they compile in the time the Rust builds and the tests leave a core
# idle instead of one after the other on the critical path. `make test` starts it in the
# background (its own process group) and stops it when it ends.
#
# Nothing here is needed for correctness: each tool's own build script (or Makefile target)
# takes the same lock this one does and finds the cache, so a step that needs a tool before it is
# ready waits for that build instead of starting a second one, and a tool this script has not
# reached yet is built by the step itself, as without it.
#
# Usage: e2e-tests/prebuild.sh                     # what make test needs, one tool at a time
#        e2e-tests/prebuild.sh --with-ci-checks    # and what only .ci/run uses after make test:
#                                                  # cargo-hakari, the MSRV check, the fuzz
#                                                  # targets (a pinned nightly and cargo-fuzz)
# Progress (one line per tool, with its time) goes to stdout; each build's own log to stderr.
# Environment: NSB_CACHE_DIR (as the build scripts), MAKE (default make).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MAKE="${MAKE:-make}"
ci_checks=0
case "${1:-}" in
  "") ;;
  --with-ci-checks) ci_checks=1 ;;
  *) echo "usage: $0 [--with-ci-checks]" >&2; exit 2 ;;
esac

renice -n 19 -p $$ >/dev/null 2>&1 || true
# Idle I/O class too: the builds must not slow down the tests that measure latencies (soak).
ionice -c 3 -p $$ >/dev/null 2>&1 || true

step() {
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >/dev/null; then
    echo "prebuild: $name ready ($((SECONDS - t0)) s)"
  else
    # Not fatal: the step that needs the tool builds it again and fails there, loudly.
    echo "prebuild: $name failed here ($((SECONDS - t0)) s); the step that needs it will build it itself"
  fi
}

# In the order `make test` reaches them (Makefile TEST_TARGETS, then .ci/run).
step actionlint "$ROOT/e2e-tests/workflows/check.sh" --build-only
step registry "$ROOT/e2e-tests/registry/build.sh" registry
step oras "$ROOT/e2e-tests/registry/build.sh" oras
step wasm-bindgen-cli "$MAKE" -C "$ROOT" --no-print-directory wasm-bindgen-cli
step "kube-apiserver and etcd" "$ROOT/e2e-tests/control-plane/build.sh"
step "the node's binaries and images" "$ROOT/e2e-tests/node/build.sh"
step helm "$ROOT/charts/install-helm.sh"
step cosign "$ROOT/e2e-tests/kubewarden/build-cosign.sh"
step "promtool and prometheus" "$ROOT/e2e-tests/alerts/build.sh"
((ci_checks)) && step cargo-hakari "$MAKE" -C "$ROOT" --no-print-directory cargo-hakari
# Then the checks that come last and build in their own target directories (never holding
# the lock of the tests' builds): clippy (the `lint` step, last of make test), and with
# --with-ci-checks the MSRV check and the fuzz targets (.ci/run, after make test). Each step
# runs the same command again and finds it built; a failure here is reported there.
step "clippy (target/lint)" "$MAKE" -C "$ROOT" --no-print-directory lint
if ((ci_checks)); then
  step "MSRV check (target/msrv)" "$MAKE" -C "$ROOT" --no-print-directory msrv
  step "fuzz targets" "$MAKE" -C "$ROOT" --no-print-directory fuzz-build
fi
echo "prebuild: done"
