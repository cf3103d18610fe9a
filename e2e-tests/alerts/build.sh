#!/usr/bin/env bash
# Build (or reuse) promtool and the Prometheus server that test the chart's alert rules
# (e2e-tests/alerts/check.sh: `promtool check rules` and `promtool test rules`; the node test n7:
# a real Prometheus scraping the reconciler and evaluating the rules), from the Go module
# proxy, as the project builds its other tools: no release tarball, no container.
#
# Usage: e2e-tests/alerts/build.sh [--print-dir] [--force]
#   --print-dir  only print the binary directory (no build, no checks)
#   --force      rebuild even if the cached binaries report the right version
#
# Both come from one `go install github.com/prometheus/prometheus/cmd/{promtool,prometheus}@$PROMETHEUS_MODULE`
# (the module's own go.mod, untouched) into
# ${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}/prometheus/<version>/, under a lock, so the
# background prebuild (e2e-tests/prebuild.sh) and a test needing them never build twice.
# Service discovery is left out except for files, HTTP and Kubernetes (the build tags
# remove_all_sd,enable_kubernetes_sd): Kubernetes SD is what a PodMonitor becomes, and
# promtool links client-go anyway. Progress goes to stderr; the binary directory is the last
# line on stdout.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The Go module's version and the Prometheus release it is (VERSION in the module: v0.316.0 is
# Prometheus 3.16.0).
PROMETHEUS_MODULE="${PROMETHEUS_MODULE:-v0.316.0}"
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-3.16.0}"
CACHE_ROOT="${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"
BIN_DIR="$CACHE_ROOT/prometheus/$PROMETHEUS_VERSION"

force=0
for arg in "$@"; do
  case "$arg" in
    --print-dir) echo "$BIN_DIR"; exit 0 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

NSB_LOG_PREFIX=prometheus
# shellcheck source=../control-plane/lib.sh
. "$HERE/../control-plane/lib.sh"
log() { nsb_log "$@"; }

reports_version() { timeout 20 "$BIN_DIR/$1" --version 2>&1 | grep -q "^$1, version $PROMETHEUS_VERSION "; }
cached_ok() { reports_version promtool && reports_version prometheus; }

mkdir -p "$CACHE_ROOT/prometheus"
exec 9>"$CACHE_ROOT/prometheus/.build.lock"
flock 9
if [[ $force == 0 ]] && cached_ok; then
  log "reusing promtool and prometheus $PROMETHEUS_VERSION from $BIN_DIR"
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null || nsb_die "go not found in PATH (Go >= 1.26.7 builds Prometheus $PROMETHEUS_VERSION)"
tmp="$(mktemp -d "$CACHE_ROOT/prometheus/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
V=github.com/prometheus/common/version
LDFLAGS="-s -w -X $V.Version=$PROMETHEUS_VERSION -X $V.Revision=$PROMETHEUS_MODULE -X $V.Branch=module"
LDFLAGS+=" -X $V.BuildUser=namespace-baseline -X $V.BuildDate=module-proxy"
log "building promtool and prometheus $PROMETHEUS_VERSION (module $PROMETHEUS_MODULE) with $(go env GOVERSION) from the Go module proxy (first time only: several minutes)..."
t0=$SECONDS
nsb_run_logged "$tmp/build.log" env -C "$tmp" CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$tmp/bin" \
  nice -n 10 go install -trimpath -tags remove_all_sd,enable_kubernetes_sd -ldflags "$LDFLAGS" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE" \
  "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_MODULE"
mkdir -p "$BIN_DIR"
mv -f "$tmp/bin/promtool" "$tmp/bin/prometheus" "$BIN_DIR/"
cached_ok || nsb_die "the built binaries do not report version $PROMETHEUS_VERSION: $("$BIN_DIR/promtool" --version 2>&1 | head -n 1)"
log "promtool and prometheus $PROMETHEUS_VERSION built in $((SECONDS - t0)) s: $BIN_DIR"
echo "$BIN_DIR"
