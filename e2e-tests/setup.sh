#!/usr/bin/env bash
# Everything `make test` needs on the machine, checked (and installed) before the long build
# starts: `make test` runs this first, `.ci/run` through it. Idempotent: what is present is
# only checked. Debian packages are installed with apt-get as root, or with `sudo -n` when
# that works; otherwise the script says what to run and stops before anything is built.
#
#   e2e-tests/setup.sh            # check and install
#   e2e-tests/setup.sh --check    # check only: list what is missing, exit 1 if anything is
#
# What and why:
#   apt   bats (e2e-tests/kwctl.bats), jq (control-plane scripts, kwctl.bats), openssl and
#         curl (control-plane certificates, readiness), chromium + chromium-driver (the
#         playground's browser test), binaryen (wasm-opt: `make policy.wasm`); then the groups of e2e-tests/install-deps.sh (image:
#         musl-tools, podman, runc, python3-yaml; workflows: shellcheck) and
#         e2e-tests/node/install-deps.sh (containerd, runc, CNI plugins, ...) for the image,
#         registry, workflow and node tests.
#   rust  rustfmt, clippy, the wasm32-wasip1 (policy) and wasm32-unknown-unknown (playground)
#         targets.
#   tools Go >= 1.26 (the control plane, built from Go modules) and Node.js >= 20 with npm
#         (the browser test) must be there: they are not installed from Debian (its Go is
#         too old); the script says so. Kubewarden's kwctl and policy-server 1.35.0 (kwctl.bats,
#         make push, the admission chain of the cluster and node tests): neither is in the
#         Rust crate registry; e2e-tests/kubewarden/install.sh finds them (KWCTL,
#         POLICY_SERVER, PATH) or unpacks them, checksums checked, into the tools cache.
#   npm   playground/tests' node_modules (npm ci), when its lock changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

check_only=0
[[ ${1:-} == --check ]] && check_only=1

say() { echo ">> setup: $*" >&2; }
problems=()

APT_PACKAGES=(bats jq openssl curl chromium chromium-driver binaryen)

# How to run apt-get: as root, through passwordless sudo, or not at all.
if [[ $(id -u) == 0 ]]; then
  AS_ROOT=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  AS_ROOT=(sudo -n)
else
  AS_ROOT=(none)
fi

apt_missing() {
  local pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep >/dev/null 'install ok installed' || echo "$pkg"
  done
}

mapfile -t missing < <(apt_missing "${APT_PACKAGES[@]}")
if ((${#missing[@]})); then
  if ((check_only)) || [[ ${AS_ROOT[*]} == none ]] || ! command -v apt-get >/dev/null; then
    problems+=("Debian packages missing: ${missing[*]} (run: sudo apt-get install -y ${missing[*]})")
  else
    say "apt-get install ${missing[*]}"
    "${AS_ROOT[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${AS_ROOT[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
      problems+=("apt-get could not install ${missing[*]}")
  fi
fi

# The other test groups' own installers (each checks first, installs only what is missing).
if ((check_only)); then
  :
elif [[ ${AS_ROOT[*]} == none ]]; then
  say "not root and no passwordless sudo: the image/node test packages are only checked"
  "$ROOT/e2e-tests/node/install-deps.sh" >/dev/null 2>&1 ||
    problems+=("the node tests' packages: run sudo e2e-tests/node/install-deps.sh")
else
  "${AS_ROOT[@]}" "$ROOT/e2e-tests/install-deps.sh" all ||
    problems+=("e2e-tests/install-deps.sh all failed")
  "${AS_ROOT[@]}" "$ROOT/e2e-tests/node/install-deps.sh" ||
    problems+=("e2e-tests/node/install-deps.sh failed")
fi

# Rust: components and targets (rustup installs them without root).
if command -v rustup >/dev/null; then
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep >/dev/null "^$component" || {
      if ((check_only)); then problems+=("rustup component $component"); else
        say "rustup component add $component"; rustup component add "$component"; fi
    }
  done
  for target in wasm32-wasip1 wasm32-unknown-unknown; do
    rustup target list --installed | grep -x >/dev/null "$target" || {
      if ((check_only)); then problems+=("rustup target $target"); else
        say "rustup target add $target"; rustup target add "$target"; fi
    }
  done
else
  problems+=("rustup not found (https://rustup.rs)")
fi

# Go and Node.js: checked, not installed.
version_at_least() { # $1 >= $2, dotted versions
  [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" == "$2" ]]
}
if command -v go >/dev/null; then
  go_version="$(go env GOVERSION 2>/dev/null | sed 's/^go//')"
  # An older Go fetches 1.26 itself when GOTOOLCHAIN allows (go.mod names it).
  version_at_least "$go_version" 1.26 || [[ $(go env GOTOOLCHAIN) != local ]] ||
    problems+=("Go $go_version is older than 1.26 and GOTOOLCHAIN=local")
else
  problems+=("Go >= 1.26 not found: it builds the local control plane (https://go.dev/dl/)")
fi
if command -v node >/dev/null && command -v npm >/dev/null; then
  node_version="$(node --version | sed 's/^v//')"
  version_at_least "$node_version" 20 || problems+=("Node.js $node_version is older than 20")
else
  problems+=("Node.js >= 20 and npm not found: they run the playground's browser test")
fi

# Kubewarden's tools: found, or unpacked from ../shared/tools/kubewarden (NSB_KUBEWARDEN_TOOLS).
if ((check_only)); then
  "$ROOT/e2e-tests/kubewarden/install.sh" --check >/dev/null ||
    problems+=("kwctl and policy-server 1.35.0: see the message above (e2e-tests/kubewarden/install.sh)")
elif kubewarden_dir="$("$ROOT/e2e-tests/kubewarden/install.sh")"; then
  say "kwctl and policy-server 1.35.0 in $kubewarden_dir"
else
  problems+=("kwctl and policy-server 1.35.0: see the message above (e2e-tests/kubewarden/install.sh)")
fi

# The browser test's npm packages (playwright-core), when the lock is newer than the install.
if ((check_only == 0)) && command -v npm >/dev/null &&
  ! [[ playground/tests/node_modules/.package-lock.json -nt playground/tests/package-lock.json ]]; then
  say "npm ci in playground/tests"
  (cd playground/tests && npm ci --no-audit --no-fund --loglevel=error) || problems+=("npm ci in playground/tests failed")
fi

if ((${#problems[@]})); then
  echo "!! setup: make test cannot run yet:" >&2
  printf '!!   %s\n' "${problems[@]}" >&2
  exit 1
fi
say "everything make test needs is here"
