#!/usr/bin/env bash
# Build (or reuse) cosign, which the node tests sign the policy with (as users and Kubewarden's
# own release sign policies), from the Go module proxy: no cosign binary can be downloaded here.
#
# Usage: e2e-tests/kubewarden/build-cosign.sh [--print-path]
#   --print-path  only print where the binary is (or would be); build nothing
#
# Built with `go install github.com/sigstore/cosign/v3/cmd/cosign@$COSIGN_VERSION` into
# ${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}/cosign/$COSIGN_VERSION/cosign and reused from
# there. Progress goes to stderr; the path of the binary is the last line on stdout.
set -euo pipefail

COSIGN_VERSION="${COSIGN_VERSION:-v3.1.3}"
CACHE_ROOT="${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"
DIR="$CACHE_ROOT/cosign/$COSIGN_VERSION"
BIN="$DIR/cosign"

NSB_LOG_PREFIX=cosign
# shellcheck source=../control-plane/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../control-plane/lib.sh"
log() { nsb_log "$@"; }

if [[ "${1:-}" == --print-path ]]; then echo "$BIN"; exit 0; fi
[[ $# -eq 0 ]] || { echo "usage: $0 [--print-path]" >&2; exit 2; }

cached_ok() { [[ -x "$BIN" ]] && "$BIN" version 2>/dev/null | grep >/dev/null "GitVersion: *${COSIGN_VERSION}$"; }

mkdir -p "$DIR"
exec 9>"$DIR/.build.lock"
flock 9
if cached_ok; then
  log "reusing cosign $COSIGN_VERSION from $BIN"
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { log "go not found: install Go >= 1.26 to build cosign $COSIGN_VERSION"; exit 1; }

log "building cosign $COSIGN_VERSION with $(go env GOVERSION) from the Go module proxy (first time only)..."
tmp="$(mktemp -d "$DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
nsb_run_logged "$tmp/build.log" nice -n 10 env CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="-buildvcs=false" \
  go install -trimpath -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
  "github.com/sigstore/cosign/v3/cmd/cosign@$COSIGN_VERSION"
mv "$tmp/cosign" "$BIN"
cached_ok || { log "the built binary does not report $COSIGN_VERSION: $("$BIN" version 2>&1 | head -5)"; exit 1; }
log "cosign $COSIGN_VERSION: $BIN"
echo "$BIN"
