#!/usr/bin/env bash
# Build (or reuse) the tools of the registry tests from the Go modules pinned in go.mod:
#   registry  the CNCF distribution registry (cmd/registry: filesystem driver only)
#   oras      the ORAS CLI (pushes policy.wasm as an OCI artifact)
#
# Usage: build.sh TOOL [--print-path] [--force]
#   --print-path  only print where the binary is (no build, no checks)
#   --force       rebuild even if the cached binary looks fine
#
# Binaries go to ${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}/<tool>/<version>/<tool>.
# Progress goes to stderr; the binary's path is always the last line on stdout.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NSB_LOG_PREFIX=registry-build
# shellcheck source=../control-plane/lib.sh
. "$HERE/../control-plane/lib.sh"
log() { nsb_log "$@"; }

tool="" force=0 print_path=0
for arg in "$@"; do
  case "$arg" in
    registry|oras) tool=$arg ;;
    --print-path) print_path=1 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done
[[ -n "$tool" ]] || { echo "usage: $0 registry|oras [--print-path] [--force]" >&2; exit 2; }

# Versions come from go.mod (the require lines).
module_version() {
  awk -v m="$1" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' "$HERE/go.mod"
}
case "$tool" in
  registry)
    VERSION="$(module_version github.com/distribution/distribution/v3)"
    PACKAGE=./cmd/registry
    LDFLAGS="-s -w -X github.com/distribution/distribution/v3/version.version=$VERSION"
    expected_version() { [[ "$("$1" --version 2>/dev/null)" == *" github.com/distribution/distribution/v3 $VERSION" ]]; }
    ;;
  oras)
    VERSION="$(module_version oras.land/oras)"
    PACKAGE=oras.land/oras/cmd/oras
    LDFLAGS="-s -w"
    expected_version() { "$1" version 2>/dev/null | grep -x >/dev/null "Version: *${VERSION#v}"; }
    ;;
esac
[[ -n "$VERSION" ]] || { echo "build.sh: cannot read the $tool version from $HERE/go.mod" >&2; exit 1; }

CACHE_ROOT="${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"
BIN="$CACHE_ROOT/$tool/$VERSION/$tool"
if [[ $print_path == 1 ]]; then echo "$BIN"; exit 0; fi

cached_ok() { [[ -x "$BIN" ]] && expected_version "$BIN"; }

mkdir -p "$CACHE_ROOT/$tool"
# Serialize concurrent builds (parallel test runs share the cache).
exec 9>"$CACHE_ROOT/$tool/.build.lock"
flock 9

if [[ $force == 0 ]] && cached_ok; then
  log "reusing $tool $VERSION from $BIN"
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "build.sh: go not found in PATH (Go >= 1.26 builds $tool)" >&2; exit 1; }

tmp="$(mktemp -d "$CACHE_ROOT/$tool/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

log "building $tool $VERSION with $(go env GOVERSION) (the first build takes a few minutes)..."
nsb_run_logged "$tmp/build.log" env -C "$HERE" CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
  nice -n 10 go build -trimpath -ldflags "$LDFLAGS" -o "$tmp/$tool" "$PACKAGE"

mkdir -p "$(dirname "$BIN")"
mv -f "$tmp/$tool" "$BIN"
cached_ok || { log "the built $tool fails its version check"; exit 1; }
log "$tool $VERSION in $BIN ($(stat -c %s "$BIN") bytes)"
echo "$BIN"
