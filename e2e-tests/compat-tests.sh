#!/usr/bin/env bash
# The compatibility runs behind docs/install.md's table: every cluster scenario (the CRD, the
# walls and their repair, leader election, the admission chain through policy-server 1.35.0,
# ...) against kube-apiserver and etcd of other Kubernetes releases than the v1.36.5 the rest
# of the tests run. Why not in `make test`: each release is a Go build of its own (several
# minutes cold) and a cluster run of about 5 minutes, which CI's cold-run budget has no room
# for; run it when the table or a version changes, and put the result in the table.
#
#   e2e-tests/compat-tests.sh [vX.Y.Z ...] [-- extra libtest args, e.g. a test name filter]
#
# The releases default to the compat/ modules of e2e-tests/control-plane (the oldest the docs
# claim, v1.30.14, and the newest k8s.io/kubernetes the Go module proxy serves, v1.37.2);
# compat/module.sh writes the module of another. Each: e2e-tests/cluster-tests.sh with
# NSB_K8S_MODULE_DIR=compat/<release> (its build.sh and start.sh build or reuse that release's
# binaries, cached under ~/.cache/namespace-baseline/control-plane/<release>/). Exit code: 1
# when any release failed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NSB_SAY_PREFIX=">> compat-tests"
# shellcheck source=control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"

releases=()
while (($#)); do
  case "$1" in
    --) shift; break ;;
    v*) releases+=("$1"); shift ;;
    *) echo "compat-tests.sh: unknown argument $1 (releases are vX.Y.Z; test args after --)" >&2; exit 2 ;;
  esac
done
if ((${#releases[@]} == 0)); then
  for dir in "$ROOT"/e2e-tests/control-plane/compat/v*/; do releases+=("$(basename "$dir")"); done
fi

declare -A result=()
rc=0
for release in "${releases[@]}"; do
  [[ -f "$ROOT/e2e-tests/control-plane/compat/$release/go.mod" ]] ||
    { echo "!! no module for $release: e2e-tests/control-plane/compat/module.sh $release" >&2; exit 2; }
  # cluster-tests.sh builds (or reuses) that release's kube-apiserver and etcd as it starts
  # the control plane (build.sh and start.sh read NSB_K8S_MODULE_DIR).
  export NSB_K8S_MODULE_DIR="compat/$release"
  t0=$SECONDS
  nsb_say "Kubernetes $release: the cluster scenarios"
  if "$ROOT/e2e-tests/cluster-tests.sh" "$@"; then
    result[$release]="passed in $((SECONDS - t0)) s"
  else
    result[$release]="FAILED after $((SECONDS - t0)) s"
    rc=1
  fi
done
for release in "${releases[@]}"; do nsb_say "Kubernetes $release: ${result[$release]}"; done
exit "$rc"
