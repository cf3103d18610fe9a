#!/usr/bin/env bash
# Lint the GitHub Actions workflows (.github/workflows/*.yml) with actionlint, which also
# checks every `run:` script with ShellCheck. A broken workflow (bad syntax, an unknown action input,
# a wrong expression or context, a shell mistake) fails this check, and so CI.
#
# Usage: e2e-tests/workflows/check.sh [--build-only]
#
# actionlint is built from the Go module pinned in go.mod on first use and cached in
# ${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}/actionlint/<version>/actionlint.
# ShellCheck must be installed (apt-get install shellcheck): without it actionlint would
# silently skip the scripts, so its absence is an error.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NSB_LOG_PREFIX=workflows
# shellcheck source=../control-plane/lib.sh
. "$ROOT/e2e-tests/control-plane/lib.sh"
log() { nsb_log "$@"; }

build_only=0
case "${1:-}" in
  "") ;;
  --build-only) build_only=1 ;;
  -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--build-only]" >&2; exit 2 ;;
esac

VERSION="$(awk '$1 == "github.com/rhysd/actionlint" && $2 ~ /^v/ { print $2; exit }' "$HERE/go.mod")"
[[ -n "$VERSION" ]] || { echo "check.sh: cannot read the actionlint version from $HERE/go.mod" >&2; exit 1; }
CACHE_ROOT="${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"
ACTIONLINT="$CACHE_ROOT/actionlint/$VERSION/actionlint"

cached_ok() { [[ -x "$ACTIONLINT" && "$("$ACTIONLINT" -version 2>/dev/null | head -n 1)" == "$VERSION" ]]; }

mkdir -p "$CACHE_ROOT/actionlint"
(
  exec 9>"$CACHE_ROOT/actionlint/.build.lock"
  flock 9
  if cached_ok; then
    log "reusing actionlint $VERSION from $ACTIONLINT"
    exit 0
  fi
  command -v go >/dev/null || { echo "check.sh: go not found in PATH (Go >= 1.26 builds actionlint)" >&2; exit 1; }
  tmp="$(mktemp -d "$CACHE_ROOT/actionlint/.build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  log "building actionlint $VERSION with $(go env GOVERSION)..."
  nsb_run_logged "$tmp/build.log" env -C "$HERE" CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
    nice -n 10 go build -trimpath -ldflags "-s -w -X github.com/rhysd/actionlint.version=$VERSION" \
    -o "$tmp/actionlint" github.com/rhysd/actionlint/cmd/actionlint
  mkdir -p "$(dirname "$ACTIONLINT")"
  mv -f "$tmp/actionlint" "$ACTIONLINT"
  cached_ok || { log "the built actionlint fails its version check"; exit 1; }
)
[[ $build_only == 1 ]] && { echo "$ACTIONLINT"; exit 0; }

SHELLCHECK="$(command -v shellcheck || true)"
[[ -n "$SHELLCHECK" ]] || { echo "!! shellcheck not found: actionlint would not check the run: scripts (apt-get install shellcheck)" >&2; exit 1; }

cd "$ROOT"
shopt -s nullglob
workflows=(.github/workflows/*.yml .github/workflows/*.yaml)
((${#workflows[@]})) || { echo "!! no workflow in .github/workflows/" >&2; exit 1; }
log "actionlint $VERSION (with $("$SHELLCHECK" --version | sed -n 's/^version: /shellcheck /p')) on ${workflows[*]}"
"$ACTIONLINT" -shellcheck "$SHELLCHECK" -pyflakes= -no-color "${workflows[@]}"
log "${#workflows[@]} workflows pass actionlint"
