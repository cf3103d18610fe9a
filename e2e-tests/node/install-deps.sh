#!/usr/bin/env bash
# Install (once, idempotent) the Debian packages the test node needs: containerd, runc, the
# CNI plugins (bridge, host-local, loopback, portmap), busybox-static (the test-tools image),
# nftables (kube-proxy), iptables + ipset (kube-router's firewall), conntrack, iproute2,
# util-linux (nsenter, unshare). Checks first; runs apt-get only for what is missing.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NSB_LOG_PREFIX=node-deps
# shellcheck source=lib.sh
. "$HERE/lib.sh"

missing=()
for pkg in "${NSB_NODE_APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
  nsb_log "all present: ${NSB_NODE_APT_PACKAGES[*]}"
  exit 0
fi
[[ $(id -u) == 0 ]] || nsb_die "installing ${missing[*]} needs root"
nsb_log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts containerd through systemd where there is one; the node runs its own.
nsb_log "installed ${missing[*]}"
