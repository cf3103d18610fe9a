#!/usr/bin/env bash
# Finds (or installs) Kubewarden's kwctl and policy-server 1.35.0 for the tests: the one place
# that knows where they come from, so kwctl.bats, the Makefile's push/annotate targets and the
# cluster/node scenarios' policy-server all use the same two programs. Neither is in the Rust
# crate registry, so nothing here builds them.
#
# Usage: e2e-tests/kubewarden/install.sh                 # prints the directory holding both
#        e2e-tests/kubewarden/install.sh kwctl           # prints the path of kwctl
#        e2e-tests/kubewarden/install.sh policy-server   # prints the path of policy-server
#        e2e-tests/kubewarden/install.sh stack           # prints the directory of the whole
#                                                        # stack the test node installs: the two,
#                                                        # kubewarden-controller, audit-scanner
#                                                        # and charts/ (its three Helm charts)
#        e2e-tests/kubewarden/install.sh --check         # writes nothing: fails, saying what
#                                                        # to do, when it could not supply them
# The answer is the last line on stdout; progress and errors go to stderr.
#
# Where each program comes from, first match wins:
#   1. KWCTL / POLICY_SERVER: a path (or a name on PATH) of your own build; any version is
#      taken, with a warning when it is not 1.35.0.
#   2. kwctl / policy-server on PATH, when its --version says 1.35.0.
#   3. ${NSB_CACHE_DIR:-~/.cache/namespace-baseline}/kubewarden/1.35.0/, unpacked there from
#      NSB_KUBEWARDEN_TOOLS (default: ../shared/tools/kubewarden beside this repository) by that
#      directory's own `install` script, which checks them against its SHA256SUMS.
# The stack (the controller, the audit scanner, the charts) comes only from 3.: the test node
# builds its images from those programs, so that the charts install unchanged.
# In directory mode, when the two come from different places, the directory printed is one of
# symbolic links to them (under the cache, named by a hash of their paths).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VERSION=1.35.0
CACHE_ROOT="${NSB_CACHE_DIR:-$HOME/.cache/namespace-baseline}/kubewarden"
DIR="$CACHE_ROOT/$VERSION"
TOOLS="${NSB_KUBEWARDEN_TOOLS:-$ROOT/../shared/tools/kubewarden}"

log() { echo "[kubewarden] $*" >&2; }
die() { echo "!! kubewarden: $*" >&2; exit 1; }

want=${1:-dir}
check_only=0
case $want in
dir | kwctl | policy-server | stack) ;;
--check) want=dir check_only=1 ;;
*) echo "usage: $0 [kwctl|policy-server|stack|--check]" >&2; exit 2 ;;
esac

version_of() { "$1" --version 2>/dev/null | head -1 | awk '{print $2}'; }

# The cache, filled once per version under a lock (the prebuild and a test step may both ask).
from_cache() {
  if ((check_only == 0)); then
    mkdir -p "$CACHE_ROOT"
    exec 9>"$DIR.lock"
    flock 9
  fi
  if [[ $(version_of "$DIR/kwctl") == "$VERSION" && $(version_of "$DIR/policy-server") == "$VERSION" ]]; then
    exec 9>&-
    return
  fi
  if ((check_only)) && [[ -x $TOOLS/install ]]; then
    log "kwctl and policy-server $VERSION would be unpacked from $TOOLS into $DIR"
    return
  fi
  [[ -x $TOOLS/install ]] || die "kwctl and policy-server $VERSION are neither named (KWCTL=..., POLICY_SERVER=...) nor on PATH, and $TOOLS/install does not exist.
   Point the tests at them with one of:
     NSB_KUBEWARDEN_TOOLS=/path/to/shared/tools/kubewarden   (the directory with kwctl.xz, policy-server.xz, SHA256SUMS, install)
     KWCTL=/path/to/kwctl POLICY_SERVER=/path/to/policy-server   (your own 1.35.0 builds: https://github.com/kubewarden/adm-controller/releases/tag/v$VERSION)
   then run the same command again."
  log "unpacking kwctl and policy-server $VERSION from $TOOLS into $DIR (checksums checked)"
  local out
  out=$("$TOOLS/install" "$DIR" 2>&1) || die "$TOOLS/install $DIR failed:
$out"
  exec 9>&-
}

# resolve ENV_VALUE NAME: the path of one program, by the order above.
resolve() {
  local named=$1 name=$2 path version
  if [[ -n $named ]]; then
    path=$(command -v "$named") || die "$name: '$named' (from the environment) is not an executable file"
    version=$(version_of "$path")
    [[ $version == "$VERSION" ]] || log "warning: $path says version '${version:-?}'; the tests were written against $VERSION"
    realpath "$path"
    return
  fi
  if path=$(command -v "$name") && [[ $(version_of "$path") == "$VERSION" ]]; then
    realpath "$path"
    return
  fi
  from_cache
  echo "$DIR/$name"
}

case $want in
stack)
  from_cache
  for file in kubewarden-controller audit-scanner policy-server charts/kubewarden-crds-1.27.0.tgz \
    charts/kubewarden-controller-5.13.0.tgz charts/kubewarden-defaults-3.13.0.tgz; do
    [[ -e $DIR/$file ]] || die "$DIR/$file is missing: $TOOLS/install did not unpack the whole stack"
  done
  echo "$DIR"
  ;;
kwctl) resolve "${KWCTL:-}" kwctl ;;
policy-server) resolve "${POLICY_SERVER:-}" policy-server ;;
dir)
  kwctl=$(resolve "${KWCTL:-}" kwctl)
  policy_server=$(resolve "${POLICY_SERVER:-}" policy-server)
  if [[ $(dirname "$kwctl") == "$(dirname "$policy_server")" && $(basename "$kwctl") == kwctl &&
    $(basename "$policy_server") == policy-server ]]; then
    dirname "$kwctl"
  else
    links="$CACHE_ROOT/links-$(printf '%s\n%s\n' "$kwctl" "$policy_server" | sha256sum | cut -c1-16)"
    ((check_only)) && { echo "$links"; exit 0; }
    mkdir -p "$links"
    ln -sfn "$kwctl" "$links/kwctl"
    ln -sfn "$policy_server" "$links/policy-server"
    echo "$links"
  fi
  ;;
esac
