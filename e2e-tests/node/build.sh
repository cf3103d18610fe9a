#!/usr/bin/env bash
# Build (or reuse) everything the test node runs that does not come from Debian:
#   kubelet, kube-proxy, kube-controller-manager, kube-scheduler  (k8s.io/kubernetes, the
#       control plane's Go module: one build shares its compiled packages with kube-apiserver)
#   coredns      (Go module github.com/coredns/coredns)
#   kube-router  (Go module github.com/cloudnativelabs/kube-router/v2; only its NetworkPolicy
#                 firewall runs, see README.md for why not kube-network-policies)
#   pause        (pause/, standard library only)
# and the offline images (OCI archives): pause, test-tools (Debian's busybox-static), coredns,
# and Kubewarden 1.35.0's kubewarden-controller, audit-scanner and policy-server, from the
# programs of e2e-tests/kubewarden/install.sh (nothing of them is built here), named as
# Kubewarden's charts name them, so that the charts install unchanged.
#
# Usage: build.sh [--force]
# Everything goes to ${NSB_CACHE_DIR:-~/.cache/namespace-baseline}/<tool>/<version>/; progress
# and per-step times go to stderr. Go builds run with `nice -n 10`.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NSB_LOG_PREFIX=node-build
# shellcheck source=lib.sh
. "$HERE/lib.sh"
log() { nsb_log "$@"; }

force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

command -v go >/dev/null || nsb_die "go not found in PATH (Go >= 1.26 builds the node's binaries)"
mkdir -p "$NSB_CACHE_ROOT"
exec 9>"$NSB_CACHE_ROOT/.node-build.lock"
flock 9

# go_build NAME DIR LOG CMD...: run a Go build with progress, report its time.
go_build() {
  local name=$1 log_file=$2; shift 2
  local t0=$SECONDS
  log "building $name (cold: several minutes)..."
  nsb_run_logged "$log_file" nice -n 10 "$@"
  log "$name built in $((SECONDS - t0))s"
}

# --- kubelet, kube-proxy, kube-controller-manager, kube-scheduler, kubectl -----------
K8S_CMDS=(kubelet kube-proxy kube-controller-manager kube-scheduler kubectl)
k8s_ok() {
  local c
  for c in "${K8S_CMDS[@]}"; do
    [[ -x "$NSB_K8S_NODE_BIN/$c" ]] || return 1
    if [[ $c == kubectl ]]; then set -- version --client; else set -- --version; fi
    timeout 20 "$NSB_K8S_NODE_BIN/$c" "$@" 2>/dev/null | grep >/dev/null "$NSB_K8S_VERSION" || return 1
  done
}
if [[ $force == 1 ]] || ! k8s_ok; then
  CP="$HERE/../control-plane"
  major="${NSB_K8S_VERSION#v}"; major="${major%%.*}"
  minor="${NSB_K8S_VERSION#v*.}"; minor="${minor%%.*}"
  build_date="$(env -C "$CP" go mod download -json "k8s.io/kubernetes@$NSB_K8S_VERSION" 2>/dev/null | sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' | head -1)"
  V=k8s.io/component-base/version
  LDFLAGS="-s -w -X $V.gitVersion=$NSB_K8S_VERSION -X $V.gitMajor=$major -X $V.gitMinor=$minor"
  LDFLAGS+=" -X $V.gitTreeState=clean -X $V.buildDate=${build_date:-1970-01-01T00:00:00Z}"
  tmp="$(mktemp -d "$NSB_CACHE_ROOT/.node-build.XXXXXX")"
  go_build "kubelet, kube-proxy, kube-controller-manager, kube-scheduler, kubectl $NSB_K8S_VERSION" "$tmp/build.log" \
    env -C "$CP" CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
    go build -trimpath -ldflags "$LDFLAGS" -o "$tmp/" "${K8S_CMDS[@]/#/./cmd/}"
  mkdir -p "$NSB_K8S_NODE_BIN"
  for c in "${K8S_CMDS[@]}"; do mv -f "$tmp/$c" "$NSB_K8S_NODE_BIN/$c"; done
  rm -rf "$tmp"
  k8s_ok || nsb_die "built Kubernetes node binaries fail the --version check"
else
  log "reusing kubelet, kube-proxy, kube-controller-manager, kube-scheduler, kubectl $NSB_K8S_VERSION from $NSB_K8S_NODE_BIN"
fi

# --- coredns, kube-router: `go install module@version` (their own go.mod, untouched) ----
install_tool() {   # NAME PACKAGE VERSION DIR VERSION_FLAG EXPECTED_OUTPUT [EXTRA_LDFLAGS]
  local name=$1 pkg=$2 version=$3 dir=$4 flag=$5 expect=$6 extra=${7:-} tmp
  if [[ $force == 0 && -x "$dir/$name" ]] && timeout 20 "$dir/$name" "$flag" 2>&1 | grep -F >/dev/null "$expect"; then
    log "reusing $name $version from $dir"
    return 0
  fi
  tmp="$(mktemp -d "$NSB_CACHE_ROOT/.node-build.XXXXXX")"
  go_build "$name $version" "$tmp/build.log" \
    env -C "$tmp" CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$tmp/bin" \
    go install -trimpath -ldflags "-s -w $extra" "$pkg@$version"
  mkdir -p "$dir"
  mv -f "$tmp/bin/$name" "$dir/$name"
  rm -rf "$tmp"
  timeout 20 "$dir/$name" "$flag" 2>&1 | grep -F >/dev/null "$expect" || nsb_die "$name does not report version $version"
}
install_tool coredns github.com/coredns/coredns "$NSB_COREDNS_VERSION" "$NSB_COREDNS_BIN" \
  -version "CoreDNS-${NSB_COREDNS_VERSION#v}"
install_tool kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router "$NSB_KUBE_ROUTER_VERSION" "$NSB_KUBE_ROUTER_BIN" \
  --version "version $NSB_KUBE_ROUTER_VERSION," \
  "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$NSB_KUBE_ROUTER_VERSION"

# --- pause --------------------------------------------------------------------------
if [[ $force == 1 || ! -x "$NSB_PAUSE_BIN/pause" ]]; then
  tmp="$(mktemp -d "$NSB_CACHE_ROOT/.node-build.XXXXXX")"
  go_build "pause" "$tmp/build.log" env -C "$HERE/pause" CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags "-s -w" -o "$tmp/pause" .
  mkdir -p "$NSB_PAUSE_BIN"
  mv -f "$tmp/pause" "$NSB_PAUSE_BIN/pause"
  rm -rf "$tmp"
else
  log "reusing pause from $NSB_PAUSE_BIN"
fi

# --- images ---------------------------------------------------------------------------
# An image is rebuilt when its inputs change: the key is a hash of the binaries in it.
BUSYBOX=/bin/busybox
# ldd fails on a static binary ("not a dynamic executable").
{ [[ -x "$BUSYBOX" ]] && ! ldd "$BUSYBOX" >/dev/null 2>&1; } ||
  nsb_die "no static $BUSYBOX: apt-get install busybox-static (e2e-tests/node/install-deps.sh)"
IMAGES_DIR="$NSB_CACHE_ROOT/node-images"
mkdir -p "$IMAGES_DIR"

image() {
  local name=$1 ref=$2 config=$3; shift 3   # then: SRC:DEST pairs, and LINK=>TARGET symlinks
  local key out rootfs item
  key="$( { echo "$ref $config"; for item in "$@"; do
            if [[ "$item" == *"=>"* ]]; then echo "$item"; else sha256sum "${item%%:*}"; fi; done; } |
          sha256sum | cut -c1-16)"
  out="$IMAGES_DIR/$name-$key.tar"
  if [[ $force == 0 && -s "$out" ]]; then
    log "reusing image $ref ($out)"
  else
    rootfs="$(mktemp -d "${TMPDIR:-/tmp}/nsb-rootfs.XXXXXX")"
    for item in "$@"; do
      if [[ "$item" == *"=>"* ]]; then
        mkdir -p "$rootfs/$(dirname "${item%%=>*}")"
        ln -s "${item##*=>}" "$rootfs/${item%%=>*}"
      else
        mkdir -p "$rootfs/$(dirname "${item##*:}")"
        cp "${item%%:*}" "$rootfs/${item##*:}"
        chmod 0755 "$rootfs/${item##*:}"
      fi
    done
    mkdir -p "$rootfs/tmp" "$rootfs/etc" && chmod 1777 "$rootfs/tmp"
    nsb_make_image "$rootfs" "$ref" "$out" "$config"
    rm -rf "$rootfs"
    log "image $ref: $out ($(stat -c %s "$out") bytes)"
  fi
  ln -sfn "$(basename "$out")" "$IMAGES_DIR/$name.tar"
}

image pause "$NSB_IMAGE_PAUSE" '{"Entrypoint":["/pause"],"User":"65535:65535"}' \
  "$NSB_PAUSE_BIN/pause:/pause"
TOOLS_LINKS=()
for applet in sh sleep nc nslookup cat echo ls ps kill date hostname ip ping wget env true false; do
  TOOLS_LINKS+=("bin/$applet=>busybox")
done
image test-tools "$NSB_IMAGE_TOOLS" '{"Cmd":["/bin/sh"],"Env":["PATH=/bin"]}' \
  "$BUSYBOX:/bin/busybox" "${TOOLS_LINKS[@]}"
image coredns "$NSB_IMAGE_COREDNS" '{"Entrypoint":["/coredns"],"ExposedPorts":{"53/tcp":{},"53/udp":{}}}' \
  "$NSB_COREDNS_BIN/coredns:/coredns"

# Kubewarden's images, from its own programs: the controller and the audit scanner are static;
# policy-server is linked against glibc, so its image carries the shared libraries `ldd`
# names (Debian 12's, the system it was built on) where the loader looks for them. Users and
# entrypoints are those of Kubewarden's own images (the controller's chart and the
# PolicyServer's Deployment run them with runAsNonRoot and no runAsUser).
KUBEWARDEN_STACK="$("$HERE/../kubewarden/install.sh" stack | tail -n 1)"
image kubewarden-controller "$NSB_IMAGE_KUBEWARDEN_CONTROLLER" '{"Entrypoint":["/controller"],"User":"65532:65532"}' \
  "$KUBEWARDEN_STACK/kubewarden-controller:/controller"
image audit-scanner "$NSB_IMAGE_AUDIT_SCANNER" '{"Entrypoint":["/audit-scanner"],"User":"65532:65532"}' \
  "$KUBEWARDEN_STACK/audit-scanner:/audit-scanner"
POLICY_SERVER_LIBS=()
while read -r lib; do
  POLICY_SERVER_LIBS+=("$lib:$lib")
done < <(ldd "$KUBEWARDEN_STACK/policy-server" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }')
((${#POLICY_SERVER_LIBS[@]} == 4)) ||
  nsb_die "policy-server: ldd listed ${#POLICY_SERVER_LIBS[@]} shared libraries, 4 expected: $(ldd "$KUBEWARDEN_STACK/policy-server" | tr '\n' ' ')"
# It also needs a CA bundle, as Kubewarden's own image carries one: its HTTP client loads the
# system's roots at start and panics without any ("No CA certificates were loaded from the
# system"), even when every registry it pulls from has its CA in sourceAuthorities.
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
[[ -s "$CA_BUNDLE" ]] || nsb_die "no $CA_BUNDLE: apt-get install ca-certificates"
# Its user, as Kubewarden's image names it (/etc/passwd and /etc/group).
POLICY_SERVER_ETC="$IMAGES_DIR/policy-server-etc"
mkdir -p "$POLICY_SERVER_ETC"
echo "policy-server:x:65533:65533::/tmp:/sbin/nologin" >"$POLICY_SERVER_ETC/passwd"
echo "policy-server:x:65533:policy-server" >"$POLICY_SERVER_ETC/group"
image policy-server "$NSB_IMAGE_POLICY_SERVER" '{"Entrypoint":["/policy-server"],"User":"65533:65533"}' \
  "$KUBEWARDEN_STACK/policy-server:/policy-server" "${POLICY_SERVER_LIBS[@]}" "$CA_BUNDLE:$CA_BUNDLE" \
  "$POLICY_SERVER_ETC/passwd:/etc/passwd" "$POLICY_SERVER_ETC/group:/etc/group"

log "node binaries: $NSB_K8S_NODE_BIN, $NSB_COREDNS_BIN, $NSB_KUBE_ROUTER_BIN, $NSB_PAUSE_BIN; images: $IMAGES_DIR"
echo "$IMAGES_DIR"
