#!/usr/bin/env bash
# Build the reconciler image (Containerfile) and what goes into it.
#
#   e2e-tests/image/build.sh binaries [--platforms LIST]          (make reconciler-static)
#   e2e-tests/image/build.sh image [--platforms LIST] [--image REF] (make image)
#
# binaries: the statically linked reconciler for each platform (LIST: comma- or
#   space-separated, default linux/amd64; linux/arm64 too), built with
#   `cargo build --release --locked --target <arch>-unknown-linux-musl` (musl-gcc for amd64;
#   cargo-zigbuild with zig from PyPI's ziglang for arm64, both installed on first use into
#   ~/.cache/namespace-baseline/), with the release profile of Cargo.toml (no debuginfo,
#   symbols kept, so a backtrace still names functions) and paths remapped (no checkout or home directory in the binary, so the same commit gives the
#   same binary in any checkout), then staged in target/image/linux/<arch>/.
# image: builds Containerfile for LIST with podman, buildah or docker (CONTAINER_TOOL to
#   choose), `--timestamp 0` (podman, buildah) so that the same binaries give the same
#   digest, tagged REF (default ghcr.io/hedronite/namespace-baseline-reconciler:<version>),
#   and writes
#     target/image/reconciler.oci.tar     OCI archive, every platform (podman/buildah)
#     target/image/reconciler.docker.tar  docker-archive, single platform only: `docker load`,
#                                         `podman load`, `ctr -n k8s.io images import`
#     target/image/image.env              IMAGE, IMAGE_ID, VERSION, REVISION, PLATFORMS, TOOL
#
# Environment: CARGO, CARGO_TARGET_DIR, CONTAINER_TOOL, NSB_CACHE_DIR.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CARGO="${CARGO:-cargo}"
# shellcheck source=../control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
# shellcheck source=lib.sh
. "$ROOT/e2e-tests/image/lib.sh"
cd "$ROOT"

ZIGLANG_VERSION=0.17.0
CARGO_ZIGBUILD_VERSION=0.24.1
CACHE_ROOT="${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}"

mode="${1:-}"
[[ $mode == binaries || $mode == image ]] || { sed -n '2,27p' "$0" >&2; exit 2; }
shift
platforms="linux/amd64"
image="ghcr.io/hedronite/namespace-baseline-reconciler:$NSB_VERSION"
while (($#)); do
  case "$1" in
    --platforms) platforms="$2"; shift 2 ;;
    --image) image="$2"; shift 2 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
read -r -a platform_list <<<"${platforms//,/ }"
((${#platform_list[@]})) || { echo "!! no platform given" >&2; exit 2; }
for p in "${platform_list[@]}"; do nsb_arch "$p" >/dev/null; done

# --- cargo-zigbuild and zig, for arm64 ----------------------------------------------------
zig_path() {
  local venv="$CACHE_ROOT/zig/$ZIGLANG_VERSION/venv" bin="$CACHE_ROOT/cargo-zigbuild/$CARGO_ZIGBUILD_VERSION/bin"
  (
    exec 9>"$CACHE_ROOT/.zig.lock"
    flock 9
    if [[ "$("$venv/bin/python3" -m ziglang version 2>/dev/null)" != "$ZIGLANG_VERSION" ]]; then
      nsb_say "installing zig $ZIGLANG_VERSION (PyPI: ziglang) into $venv"
      rm -rf "$venv"
      python3 -m venv "$venv" >&2
      "$venv/bin/pip" install -q --disable-pip-version-check "ziglang==$ZIGLANG_VERSION" >&2
    fi
    if [[ "$("$bin/cargo-zigbuild" --version 2>/dev/null)" != "cargo-zigbuild $CARGO_ZIGBUILD_VERSION" ]]; then
      nsb_say "installing cargo-zigbuild $CARGO_ZIGBUILD_VERSION into $(dirname "$bin") (about 2 minutes)"
      nice -n 10 "$CARGO" install -q cargo-zigbuild --version "$CARGO_ZIGBUILD_VERSION" --locked \
        --root "$(dirname "$bin")" >&2
    fi
  )
  # cargo-zigbuild finds zig as `python3 -m ziglang` with the venv's python3 first in PATH.
  echo "$venv/bin:$bin"
}

# --- binaries ------------------------------------------------------------------------------
build_binary() {
  local arch=$1 triple env_triple out staged t0 cargo_home tool_path=""
  triple="$(nsb_rust_target "$arch")"
  env_triple="$(tr 'a-z-' 'A-Z_' <<<"$triple")"
  cargo_home="${CARGO_HOME:-$HOME/.cargo}"
  if ! rustup target list --installed | grep -x >/dev/null "$triple"; then
    nsb_say "installing the Rust $triple target (rustup target add)"
    rustup target add "$triple"
  fi
  local build=("$CARGO" build)
  case "$arch" in
    amd64)
      command -v musl-gcc >/dev/null ||
        { echo "!! musl-gcc not found: ring's C code needs it for $triple (apt-get install musl-tools, or e2e-tests/install-deps.sh image)" >&2; exit 1; }
      ;;
    arm64)
      tool_path="$(zig_path)"
      build=("$CARGO" zigbuild)
      ;;
  esac
  out="$(nsb_target_dir)/$triple/release/namespace-baseline-reconciler"
  if [[ -x "$out" ]]; then
    nsb_say "the reconciler for $triple is built: cargo checks it is current (release profile)"
  else
    nsb_say "building the reconciler for $triple (release profile; a cold build takes 5-10 minutes on 2 cores)"
  fi
  t0=$SECONDS
  env ${tool_path:+PATH="$tool_path:$PATH"} \
    "CARGO_TARGET_${env_triple}_RUSTFLAGS=--remap-path-prefix=$ROOT=/namespace-baseline --remap-path-prefix=$cargo_home=/cargo" \
    "${build[@]}" -p namespace-baseline-reconciler --bin namespace-baseline-reconciler \
    --release --locked --target "$triple"
  [[ -x "$out" ]] || { echo "!! $out was not built" >&2; exit 1; }
  # Static: no program interpreter. Right machine. No path of this machine inside.
  if readelf -lW "$out" | grep >/dev/null 'program interpreter'; then
    echo "!! $out is dynamically linked" >&2; exit 1
  fi
  local machine
  machine="$(readelf -hW "$out" | sed -n 's/^ *Machine: *//p')"
  case "$arch:$machine" in
    amd64:*X86-64*|arm64:AArch64) ;;
    *) echo "!! $out is for '$machine', not $arch" >&2; exit 1 ;;
  esac
  if grep -qaF -e "$ROOT/" -e "$cargo_home/" "$out"; then
    echo "!! $out contains paths of this checkout or of $cargo_home: the path remapping did not apply (is RUSTFLAGS set? it overrides CARGO_TARGET_${env_triple}_RUSTFLAGS)" >&2
    exit 1
  fi
  staged="$NSB_IMAGE_DIR/linux/$arch/namespace-baseline-reconciler"
  mkdir -p "$(dirname "$staged")"
  cp -f "$out" "$staged.tmp"
  chmod 0755 "$staged.tmp"
  mv -f "$staged.tmp" "$staged"
  nsb_say "linux/$arch: $(stat -c %s "$staged") bytes, static, sha256 $(sha256sum "$staged" | cut -c1-16)… ($((SECONDS - t0)) s) -> ${staged#"$ROOT"/}"
}

if [[ $mode == binaries ]]; then
  # Only this build's platforms stay staged: a binary left from another build would be sent
  # with the build context and could be taken for a current one.
  for staged_dir in "$NSB_IMAGE_DIR"/linux/*/; do
    [[ -d "$staged_dir" ]] || continue
    [[ " ${platform_list[*]} " == *" linux/$(basename "$staged_dir") "* ]] || rm -rf "$staged_dir"
  done
  for p in "${platform_list[@]}"; do build_binary "$(nsb_arch "$p")"; done
  exit 0
fi

# --- image ---------------------------------------------------------------------------------
for p in "${platform_list[@]}"; do
  staged="$NSB_IMAGE_DIR/linux/$(nsb_arch "$p")/namespace-baseline-reconciler"
  [[ -x "$staged" ]] || { echo "!! $staged missing: run \`make reconciler-static PLATFORMS=$platforms\` first" >&2; exit 1; }
done
tool="$(nsb_container_tool)"
revision="$(nsb_revision)"
platform_arg="$(IFS=,; echo "${platform_list[*]}")"
oci_archive="$NSB_IMAGE_DIR/reconciler.oci.tar"
docker_archive="$NSB_IMAGE_DIR/reconciler.docker.tar"
rm -f "$oci_archive" "$docker_archive" "$NSB_IMAGE_DIR/image.env"
common=(-f Containerfile --build-arg "VERSION=$NSB_VERSION" --build-arg "REVISION=$revision")
multi=0
((${#platform_list[@]} > 1)) && multi=1
nsb_say "building $image for $platform_arg with $tool (version $NSB_VERSION, revision $revision)"

case "$tool" in
  podman|buildah)
    build=("$tool" build)
    [[ $tool == buildah ]] && build=(buildah bud)
    # Reproducible: every timestamp 0 (image, history, files), and no intermediate images,
    # whose ids (with real times in them) would end up in the history.
    repro=(--timestamp 0 --layers=false)
    # The name is taken from an older image or manifest list of that name (a list left by a
    # multi-platform build would otherwise keep the name, and reference instances that a
    # later build of the same image replaces).
    "$tool" manifest rm "$image" >/dev/null 2>&1 || true
    "$tool" rmi "$image" >/dev/null 2>&1 || true
    if [[ $multi == 1 ]]; then
      # A manifest list of one image per platform.
      "${build[@]}" "${common[@]}" "${repro[@]}" --platform "$platform_arg" --manifest "$image" .
      "$tool" manifest push --all "$image" "oci-archive:$oci_archive:$image"
    else
      "${build[@]}" "${common[@]}" "${repro[@]}" --platform "$platform_arg" -t "$image" .
      "$tool" push "$image" "oci-archive:$oci_archive:$image"
      "$tool" push "$image" "docker-archive:$docker_archive:$image"
    fi
    if [[ $multi == 1 ]]; then
      image_id="" # a manifest list: its digest is in the archive's index.json
    elif [[ $tool == podman ]]; then
      image_id="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
    else
      image_id="$(buildah inspect --type image --format '{{.FromImageID}}' "$image" 2>/dev/null || true)"
    fi
    ;;
  docker)
    [[ $multi == 0 ]] || { echo "!! docker: a multi-platform image needs \`docker buildx build --push\`; build one platform at a time, or use podman/buildah" >&2; exit 1; }
    # SOURCE_DATE_EPOCH=0 (BuildKit >= 0.11) sets the image's created time as --timestamp 0 does.
    SOURCE_DATE_EPOCH=0 docker build "${common[@]}" --build-arg SOURCE_DATE_EPOCH=0 --platform "$platform_arg" -t "$image" .
    docker save -o "$docker_archive" "$image"
    image_id="$(docker image inspect --format '{{.Id}}' "$image")"
    ;;
esac

cat >"$NSB_IMAGE_DIR/image.env" <<EOF
IMAGE=$image
IMAGE_ID=${image_id:-}
VERSION=$NSB_VERSION
REVISION=$revision
PLATFORMS=$platform_arg
TOOL=$tool
EOF
for p in "${platform_list[@]}"; do
  staged="$NSB_IMAGE_DIR/linux/$(nsb_arch "$p")/namespace-baseline-reconciler"
  nsb_say "  $p binary: $(stat -c %s "$staged") bytes ($(gzip -9c "$staged" | wc -c) gzipped: about what a registry stores and a node pulls)"
done
[[ -f $oci_archive ]] && nsb_say "  OCI archive: ${oci_archive#"$ROOT"/} ($(stat -c %s "$oci_archive") bytes)"
[[ -f $docker_archive ]] && nsb_say "  docker-archive: ${docker_archive#"$ROOT"/} ($(stat -c %s "$docker_archive") bytes; ctr -n k8s.io images import, docker/podman load)"
nsb_say "image $image (id ${image_id:-unknown}) built with $tool"
