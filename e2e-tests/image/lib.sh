# shellcheck shell=bash
# Shared by the image scripts (build.sh, push.sh, test.sh) and the registry tests. Source it
# after `set -euo pipefail`; ROOT must be the repository root. It defines:
#   NSB_VERSION               the workspace version of Cargo.toml ([workspace.package])
#   nsb_revision              the git commit of the work tree ("<sha>-dirty" with local changes)
#   nsb_container_tool        podman, buildah or docker: $CONTAINER_TOOL, else the first that works
#   nsb_arch PLATFORM         linux/amd64 -> amd64 (and checks the platform is one we build)
#   nsb_rust_target ARCH      amd64 -> x86_64-unknown-linux-musl, arm64 -> aarch64-unknown-linux-musl
#   NSB_IMAGE_DIR             target/image/ of the repository (the staged binaries, the archives)
#   nsb_podman ARGS...        podman with the settings this machine kind needs to run containers

NSB_VERSION="$(sed -n '/^\[workspace\.package\]/,/^\[/ s/^version *= *"\([^"]*\)".*/\1/p' "$ROOT/Cargo.toml")"
[[ -n "$NSB_VERSION" ]] || { echo "!! cannot read [workspace.package] version from $ROOT/Cargo.toml" >&2; exit 1; }
# shellcheck disable=SC2034 # used by the scripts that source this file
NSB_IMAGE_DIR="$ROOT/target/image"

nsb_revision() {
  local rev
  rev="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null)" || { echo unknown; return 0; }
  if [[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
    rev+="-dirty"
  fi
  echo "$rev"
}

# docker counts only when its daemon answers (a client alone cannot build).
nsb_container_tool() {
  local tool
  if [[ -n "${CONTAINER_TOOL:-}" ]]; then
    command -v "$CONTAINER_TOOL" >/dev/null ||
      { echo "!! CONTAINER_TOOL=$CONTAINER_TOOL is not installed" >&2; return 1; }
    echo "$CONTAINER_TOOL"
    return 0
  fi
  for tool in podman buildah; do
    command -v "$tool" >/dev/null && { echo "$tool"; return 0; }
  done
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    echo docker
    return 0
  fi
  echo "!! no container build tool: install podman or buildah (e2e-tests/install-deps.sh image), or run a docker daemon" >&2
  return 1
}

nsb_arch() {
  case "$1" in
    linux/amd64) echo amd64 ;;
    linux/arm64) echo arm64 ;;
    *) echo "!! unsupported platform $1 (linux/amd64, linux/arm64)" >&2; return 1 ;;
  esac
}

nsb_rust_target() {
  case "$1" in
    amd64) echo x86_64-unknown-linux-musl ;;
    arm64) echo aarch64-unknown-linux-musl ;;
    *) echo "!! no Rust target for $1" >&2; return 1 ;;
  esac
}

# Running containers here needs runc (crun, podman's default when installed, fails with
# "cgroups in hybrid mode not supported") and a nofile/nproc limit the sandbox allows (podman
# raises RLIMIT_NOFILE by default, which is refused: "error setting rlimit type 7"). Both are
# per-command flags, so no containers.conf is needed. NSB_PODMAN_ROOT (if set) holds a private
# image store (vfs: works on any filesystem, including inside another container).
nsb_podman() {
  local global=()
  if [[ -n "${NSB_PODMAN_ROOT:-}" ]]; then
    global=(--root "$NSB_PODMAN_ROOT/storage" --runroot "$NSB_PODMAN_ROOT/run" --storage-driver vfs
      --tmpdir "$NSB_PODMAN_ROOT/tmp")
  fi
  podman --runtime runc --cgroup-manager cgroupfs --events-backend file "${global[@]}" "$@"
}
