#!/usr/bin/env bash
# Build (or reuse) the helm binary the chart check uses, from the Go module proxy.
#
# Usage: charts/install-helm.sh [--print-path]
#   --print-path  only print where the binary is (or would be); build nothing
#
# helm is built with `go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION` into
# ${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}/helm/$HELM_VERSION/helm and reused from
# there. A helm already on PATH is not used: the check pins one version. Progress goes to
# stderr; the path of the binary is the last line on stdout. Needs Go >= 1.25 (tested with
# go1.26.8); a cold build takes about 2-3 minutes on 2 cores, module downloads included.
#
# Built as Helm's own release binaries are (its Makefile): the Kubernetes version `helm
# template` and `helm lint` assume without a cluster is the one of the k8s.io/client-go that
# helm is built with (v0.37 -> 1.37 for v3.22.0), not the v1.20.0 a plain `go install` leaves,
# which the chart's kubeVersion (>= 1.30) refuses. A stamp beside the binary records it, so a
# binary built without it is rebuilt once.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"
DIR="$CACHE_ROOT/helm/$HELM_VERSION"
BIN="$DIR/helm"

NSB_LOG_PREFIX=helm
# shellcheck source=../e2e-tests/control-plane/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../e2e-tests/control-plane/lib.sh"
log() { nsb_log "$@"; }

if [[ "${1:-}" == --print-path ]]; then echo "$BIN"; exit 0; fi
[[ $# -eq 0 ]] || { echo "usage: $0 [--print-path]" >&2; exit 2; }

STAMP="$DIR/.k8s-version"
cached_ok() {
  [[ -x "$BIN" && -s "$STAMP" ]] && "$BIN" version --short 2>/dev/null | grep >/dev/null "^${HELM_VERSION}"
}

mkdir -p "$DIR"
exec 9>"$DIR/.build.lock"
flock 9
if cached_ok; then
  log "reusing helm $HELM_VERSION from $BIN"
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || {
  log "go not found: install Go >= 1.25 (https://go.dev/dl/) to build helm $HELM_VERSION"; exit 1; }

log "building helm $HELM_VERSION with $(go env GOVERSION) from the Go module proxy (first time only: ~2-3 minutes)..."
tmp="$(mktemp -d "$DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# Helm's Makefile: K8S_MODULES_MAJOR_VER is client-go's major + 1, the minor is client-go's.
gomod="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')"
client_go="$(sed -n 's/^\tk8s\.io\/client-go v\([0-9]*\)\.\([0-9]*\)\..*/\1 \2/p' "$gomod" | head -n 1)"
[[ $client_go =~ ^[0-9]+\ [0-9]+$ ]] || { log "no k8s.io/client-go version in $gomod"; exit 1; }
k8s_major=$(( ${client_go% *} + 1 )) k8s_minor=${client_go#* }
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for package in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  ldflags+=" -X $package.k8sVersionMajor=$k8s_major -X $package.k8sVersionMinor=$k8s_minor"
done
nsb_run_logged "$tmp/build.log" env CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="-buildvcs=false" \
  go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv "$tmp/helm" "$BIN"
echo "v$k8s_major.$k8s_minor.0" >"$STAMP"
cached_ok || { log "the built binary does not report $HELM_VERSION: $("$BIN" version --short 2>&1)"; exit 1; }
log "helm $HELM_VERSION (Kubernetes v$k8s_major.$k8s_minor.0 without a cluster): $BIN"
echo "$BIN"
