#!/usr/bin/env bash
# Build (or reuse) kube-apiserver and etcd from the Go modules pinned in go.mod.
#
# Usage: build.sh [--print-dir] [--force]
#   --print-dir  only print the binary directory (no build, no checks)
#   --force      rebuild even if cached binaries look fine
#
# Binaries go to ${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}/control-plane/<k8s-version>/
# Progress goes to stderr; the binary directory is always the last line on stdout.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The Go module built: this directory's (v1.36), or NSB_K8S_MODULE_DIR (relative to here), e.g.
# compat/v1.30.14 for the compatibility runs (compat/module.sh writes those).
MODULE_DIR="$(cd "$HERE" && cd "${NSB_K8S_MODULE_DIR:-.}" && pwd)"

# Versions come from go.mod (the require block; replace lines have "=>" as $2).
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$MODULE_DIR/go.mod")"
ETCD_VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ { print $2; exit }' "$MODULE_DIR/go.mod")"
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" ]] || { echo "build.sh: cannot read versions from $MODULE_DIR/go.mod" >&2; exit 1; }

CACHE_ROOT="${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"
BIN_DIR="$CACHE_ROOT/control-plane/$K8S_VERSION"

force=0
for arg in "$@"; do
  case "$arg" in
    --print-dir) echo "$BIN_DIR"; exit 0 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

NSB_LOG_PREFIX=build
# shellcheck source=lib.sh
. "$HERE/lib.sh"
log() { nsb_log "$@"; }

# Cached binaries are good if both exist and report the expected versions.
cached_ok() {
  [[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/etcd" ]] || return 1
  timeout 20 "$BIN_DIR/kube-apiserver" --version 2>/dev/null | grep -x >/dev/null "Kubernetes $K8S_VERSION" || return 1
  timeout 20 "$BIN_DIR/etcd" --version 2>/dev/null | grep -x >/dev/null "etcd Version: ${ETCD_VERSION#v}" || return 1
}

mkdir -p "$CACHE_ROOT/control-plane"
# Serialize concurrent builds (parallel test runs share the cache).
exec 9>"$CACHE_ROOT/control-plane/.build.lock"
flock 9

if [[ $force == 0 ]] && cached_ok; then
  log "reusing kube-apiserver $K8S_VERSION and etcd $ETCD_VERSION from $BIN_DIR"
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null || { echo "build.sh: go not found in PATH" >&2; exit 1; }

# /version of the apiserver must report v1.36.x: set what hack/lib/version.sh would.
major="${K8S_VERSION#v}"; major="${major%%.*}"
minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
build_date="$(env -C "$MODULE_DIR" go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>/dev/null | sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' | head -1)"
build_date="${build_date:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}"
V=k8s.io/component-base/version
LDFLAGS="-s -w -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=$major -X $V.gitMinor=$minor"
LDFLAGS+=" -X $V.gitTreeState=clean -X $V.buildDate=$build_date"

tmp="$(mktemp -d "$CACHE_ROOT/control-plane/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

log "building kube-apiserver $K8S_VERSION and etcd $ETCD_VERSION with $(go env GOVERSION) (cold build takes several minutes)..."
# A compat module has no commands of its own: this directory's two are copied in beside its
# go.mod (the same source for every release).
build_dir="$MODULE_DIR"
if [[ "$MODULE_DIR" != "$HERE" ]]; then
  build_dir="$tmp/module"
  mkdir -p "$build_dir/cmd"
  cp "$MODULE_DIR/go.mod" "$MODULE_DIR/go.sum" "$build_dir/"
  cp -r "$HERE/cmd/kube-apiserver" "$HERE/cmd/etcd" "$build_dir/cmd/"
fi
nsb_run_logged "$tmp/build.log" env -C "$build_dir" CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
  go build -trimpath -ldflags "$LDFLAGS" -o "$tmp/" ./cmd/kube-apiserver ./cmd/etcd

mkdir -p "$BIN_DIR"
mv -f "$tmp/kube-apiserver" "$BIN_DIR/kube-apiserver"
mv -f "$tmp/etcd" "$BIN_DIR/etcd"
cached_ok || { log "built binaries fail the --version check"; exit 1; }
log "$("$BIN_DIR/kube-apiserver" --version), $("$BIN_DIR/etcd" --version | head -1)"
echo "$BIN_DIR"
