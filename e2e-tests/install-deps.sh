#!/usr/bin/env bash
# One-time installs (Debian packages, so as root) of what the image, registry and workflow
# checks need on a fresh Debian machine. Each step checks first and installs only what is
# missing, so running it again is cheap; e2e-tests/setup.sh (`make test`'s set-up) calls it.
# The Rust targets are not installed here (rustup is per user): e2e-tests/image/build.sh adds
# x86_64-unknown-linux-musl (and aarch64-unknown-linux-musl for arm64) when it needs them.
#
# Usage: e2e-tests/install-deps.sh GROUP...
#   image      musl-tools (static musl link of the reconciler), podman and runc (build and run
#              the image; runc explicitly: crun, podman's default, fails under cgroup v1
#              "hybrid" mode), python3-yaml (the image test reads deploy/*.yaml)
#   workflows  shellcheck (actionlint checks the workflows' run: scripts with it)
#   all        every group
set -euo pipefail

say() { echo ">> install-deps: $*" >&2; }

apt_updated=0
# apt_install PACKAGE...: apt-get install those that dpkg does not know as installed.
apt_install() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null || { echo "!! install-deps: ${missing[*]} missing and no apt-get to install them" >&2; exit 1; }
  if [[ $apt_updated == 0 ]]; then
    apt-get update -qq || { echo "!! install-deps: apt-get update failed" >&2; exit 1; }
    apt_updated=1
  fi
  say "apt-get install ${missing[*]}"
  # With Debian's recommended packages (for podman: netavark, containernetworking-plugins,
  # catatonit, uidmap, ...), as tested.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
    { echo "!! install-deps: could not install ${missing[*]}" >&2; exit 1; }
}

group_image() {
  apt_install musl-tools podman runc python3-yaml
}

group_workflows() {
  apt_install shellcheck
}

(($#)) || { sed -n '2,14p' "$0" >&2; exit 2; }
for group in "$@"; do
  case "$group" in
    image) group_image ;;
    workflows) group_workflows ;;
    all) group_image; group_workflows ;;
    *) echo "install-deps: unknown group: $group (image, workflows, all)" >&2; exit 2 ;;
  esac
done
