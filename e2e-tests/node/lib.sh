# shellcheck shell=bash disable=SC2034  # the settings are used by the scripts that source this
# Shared settings and helpers of the test node (build.sh, start.sh, stop.sh). Source, don't run.
# Reuses the control plane's helpers (logging, PID-checked stop, launch scripts).

NSB_NODE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NSB_LOG_PREFIX="${NSB_LOG_PREFIX:-node}"
# shellcheck source=../control-plane/lib.sh
. "$NSB_NODE_DIR/../control-plane/lib.sh"

NSB_NODE_MARKER=".nsb-node"          # marks a state dir created by node/start.sh
NSB_CACHE_ROOT="${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"

# Versions. Kubernetes comes from the control plane's go.mod (one module, shared packages).
NSB_K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$NSB_NODE_DIR/../control-plane/go.mod")"
NSB_COREDNS_VERSION=v1.15.0
NSB_KUBE_ROUTER_VERSION=v2.1.0
NSB_PAUSE_VERSION=1   # bump when pause/main.go changes

NSB_K8S_NODE_BIN="$NSB_CACHE_ROOT/kubernetes-node/$NSB_K8S_VERSION"
NSB_COREDNS_BIN="$NSB_CACHE_ROOT/coredns/$NSB_COREDNS_VERSION"
NSB_KUBE_ROUTER_BIN="$NSB_CACHE_ROOT/kube-router/$NSB_KUBE_ROUTER_VERSION"
NSB_PAUSE_BIN="$NSB_CACHE_ROOT/pause/$NSB_PAUSE_VERSION"

# Images: OCI archives built offline from the binaries above (never pulled), imported into
# containerd's k8s.io namespace by start.sh.
NSB_IMAGE_PAUSE="registry.local/nsb/pause:$NSB_PAUSE_VERSION"
NSB_IMAGE_TOOLS="registry.local/nsb/test-tools:busybox-1.35"
NSB_IMAGE_COREDNS="registry.local/nsb/coredns:$NSB_COREDNS_VERSION"
# Kubewarden's, under the names its charts give them (ghcr.io is their default registry).
NSB_KUBEWARDEN_VERSION=v1.35.0
NSB_IMAGE_KUBEWARDEN_CONTROLLER="ghcr.io/kubewarden/kubewarden-controller:$NSB_KUBEWARDEN_VERSION"
NSB_IMAGE_AUDIT_SCANNER="ghcr.io/kubewarden/audit-scanner:$NSB_KUBEWARDEN_VERSION"
NSB_IMAGE_POLICY_SERVER="ghcr.io/kubewarden/policy-server:$NSB_KUBEWARDEN_VERSION"
NSB_NODE_IMAGES=(pause test-tools coredns kubewarden-controller audit-scanner policy-server)

# The node's network, all inside the node's own network namespace (start.sh): the bridge
# carries the node's address (the API server's advertise address, the kubelet's node IP) and
# is the pods' gateway. Service range and the API server's certificate come from the control
# plane (10.0.0.0/24, 10.0.0.1 in its serving certificate).
NSB_NODE_NAME=nsb-node
NSB_BRIDGE=nsb0
NSB_POD_CIDR=10.213.0.0/24
NSB_NODE_IP=10.213.0.1
NSB_SERVICE_CIDR=10.0.0.0/24
NSB_CLUSTER_DNS=10.0.0.10
NSB_APISERVER_NODE_PORT=6443

# Debian packages the node needs (install-deps.sh installs them).
NSB_NODE_APT_PACKAGES=(containerd runc containernetworking-plugins busybox-static ca-certificates nftables iptables ipset conntrack iproute2 util-linux)
NSB_CNI_BIN_DIR=/usr/lib/cni

# The cgroup v1 controllers the kubelet's cgroup root is created in (and removed from).
nsb_cgroup_controllers() {
  local d
  for d in /sys/fs/cgroup/*/; do
    d="${d%/}"
    [[ -f "$d/cgroup.procs" ]] && echo "${d##*/}"
  done
}

# nsb_in_node HOLDER_PID CMD...: run CMD in the node's network and mount namespaces.
nsb_in_node() {
  local holder=$1; shift
  nsenter --target "$holder" --mount --net -- "$@"
}

# nsb_make_image ROOTFS REF OUT CONFIG_JSON: write an OCI image archive (one uncompressed
# layer holding ROOTFS, owned by root, mtime 0) named REF to OUT. CONFIG_JSON is the image's
# "config" object (Entrypoint, Cmd, Env, User...).
nsb_make_image() {
  local rootfs=$1 ref=$2 out=$3 config=$4 work layer_sum layer_size cfg_sum cfg_size man_sum man_size
  work="$(mktemp -d "${TMPDIR:-/tmp}/nsb-image.XXXXXX")"
  mkdir -p "$work/blobs/sha256"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .
  layer_sum="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
  layer_size="$(stat -c %s "$work/layer.tar")"
  mv "$work/layer.tar" "$work/blobs/sha256/$layer_sum"
  printf '{"architecture":"amd64","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"e2e-tests/node/build.sh"}]}' \
    "$config" "$layer_sum" >"$work/config.json"
  cfg_sum="$(sha256sum "$work/config.json" | cut -d' ' -f1)"
  cfg_size="$(stat -c %s "$work/config.json")"
  mv "$work/config.json" "$work/blobs/sha256/$cfg_sum"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$cfg_sum" "$cfg_size" "$layer_sum" "$layer_size" >"$work/manifest.json"
  man_sum="$(sha256sum "$work/manifest.json" | cut -d' ' -f1)"
  man_size="$(stat -c %s "$work/manifest.json")"
  mv "$work/manifest.json" "$work/blobs/sha256/$man_sum"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$man_sum" "$man_size" "$ref" "${ref##*:}" >"$work/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci-layout"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf "$out.tmp" oci-layout index.json blobs
  mv -f "$out.tmp" "$out"
  rm -rf "$work"
}
