#!/usr/bin/env bash
# The operator's manual, followed as written: the command blocks of docs/install.md and
# docs/upgrade.md marked `console nsb-test=<step>` run here, unchanged, in one bash session
# (a block sets variables later ones read), against the test node and the Kubewarden it
# installed from its charts (kubewarden.sh). Why: a command a user is told to run is run by
# a test, so a doc step that is refused, waits for nothing or leaves a webhook behind fails
# here first (issue 53).
#
#   manual.sh STATE_DIR    (inside the node's network namespace, like kubewarden.sh)
#
# Two paths, each from install to "nothing left refusing requests":
#   helm    install.md with the PREVIOUS round's chart (git archive of $NSB_MANUAL_PREVIOUS),
#           then upgrade.md: the upgrade to this checkout's chart, the rollback, backing off
#           to monitor and back to protect, and the removal;
#   deploy  install.md with the previous round's deploy/, then upgrade.md with this one's.
# NSB_MANUAL_PATHS picks them (default "helm deploy"). The image and the module are this
# checkout's in both versions (`make image push` builds them once): what the upgrade changes
# is the chart and the manifests.
#
# Every marked block of the two pages is run by a path here or named in NOT_RUN with the
# reason; a marked block this script does not know fails it, so a new doc step is never left
# untested silently. What the test sets, as a user would: REGISTRY (the node's registry),
# CNI_NAMESPACE (a namespace it creates: kube-router, the node's network plugin, runs in
# kube-system, which the Pod rule already leaves out), SOURCES (kwctl's sources file naming
# the registry's CA; `make push` reads it from the environment), podman's trust of that CA
# (/etc/containers/certs.d/<registry>/ca.crt, removed on exit) and containerd's (start.sh,
# kubewarden.sh). kubectl is the node's (v1.36.5, node/build.sh), helm the chart tests' own.
#
# Environment: NSB_HELM_BIN, KWCTL (node-tests.sh), NSB_MANUAL_PREVIOUS (default below: the
# commit the round began from), NSB_MANUAL_PATHS.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NSB_LOG_PREFIX=manual
# shellcheck source=lib.sh
. "$HERE/lib.sh"
log() { nsb_log "$@"; }

# The previous round's last commit: its chart and deploy/ are what a user upgrades from.
PREVIOUS="${NSB_MANUAL_PREVIOUS:-42c4fd2}"
PATHS="${NSB_MANUAL_PATHS:-helm deploy}"

# The marked steps no path runs, and why. Nothing else may be left out.
declare -A NOT_RUN=(
  [install.md#kubewarden-repo]="needs charts.kubewarden.io (no internet here); kubewarden.sh installs the same three charts, same versions, from ../shared/tools/kubewarden"
  [install.md#install-kubewarden]="Kubewarden is already on the node (kubewarden.sh: the same helm installs, plus the registry's CA as sourceAuthorities)"
  [install.md#dedicated-policy-server]="optional; a second PolicyServer's two pods do not fit beside the tests' on two cores"
  [install.md#sign-policy]="optional; offline, its kwctl verify fails fetching Sigstore's TUF root, as the page says: node test n11 runs the same cosign and kwctl commands with the offline trust config"
  [install.md#verification-config]="optional; node test n11 runs it with a verifying PolicyServer"
)

HELM_STEPS_INSTALL=(push break-glass helm-api-door helm-values helm-install pod-gate-exempt first-baseline enforce)
HELM_STEPS_UPGRADE=(upgrade-values upgrade-crd upgrade rollback back-off-monitor back-to-protect uninstall-policies
  remove-walls uninstall-reconciler clear-finalizers uninstall-crd remove-orphaned-walls remove-orphaned-reports verify-removed)
DEPLOY_STEPS_INSTALL=(push break-glass deploy-reconciler deploy-api-door deploy-admission-policy pod-gate-exempt first-baseline enforce)
DEPLOY_STEPS_UPGRADE=(deploy-upgrade deploy-uninstall-policies remove-walls deploy-uninstall-reconciler clear-finalizers
  uninstall-crd remove-orphaned-walls remove-orphaned-reports verify-removed)

[[ $# -eq 1 && -f "$1/$NSB_NODE_MARKER" ]] || { echo "usage: $0 STATE_DIR (of node/start.sh)" >&2; exit 2; }
STATE_DIR="$(cd "$1" && pwd -P)"
set -a
# shellcheck disable=SC1091
. "$STATE_DIR/env"
set +a
[[ -n "${NSB_NODE_REGISTRY:-}" ]] || nsb_die "no NSB_NODE_REGISTRY in $STATE_DIR/env: the manual needs Kubewarden and the registry (kubewarden.sh)"
HELM="${NSB_HELM_BIN:-$("$ROOT/charts/install-helm.sh" | tail -n 1)}"
KWCTL="${KWCTL:-$("$ROOT/e2e-tests/kubewarden/install.sh" kwctl | tail -n 1)}"
[[ -x "$NSB_K8S_NODE_BIN/kubectl" ]] || nsb_die "no kubectl in $NSB_K8S_NODE_BIN (e2e-tests/node/build.sh builds it)"

WORK="$STATE_DIR/manual"
rm -rf "$WORK"
mkdir -p "$WORK/bin" "$WORK/helm"
ln -s "$NSB_K8S_NODE_BIN/kubectl" "$WORK/bin/kubectl"
ln -s "$HELM" "$WORK/bin/helm"
ln -s "$KWCTL" "$WORK/bin/kwctl"

# --- the blocks ---------------------------------------------------------------------------------
# marked_steps PAGE: the step names of PAGE's marked blocks, in order.
marked_steps() { sed -n 's/^```console nsb-test=\([a-z0-9-]*\)$/\1/p' "$ROOT/docs/$1"; }
# block PAGE STEP: the commands of that block (exactly one such block).
block() {
  local n
  n="$(marked_steps "$1" | grep -cx -- "$2" || true)"
  [[ "$n" == 1 ]] || nsb_die "docs/$1 has $n blocks marked nsb-test=$2 (expected 1)"
  awk -v open="\`\`\`console nsb-test=$2" '$0 == open { on = 1; next } on && $0 == "```" { exit } on { print }' "$ROOT/docs/$1"
}

# Every marked block is run by a path or named in NOT_RUN.
declare -A run_by_a_path=()
for s in "${HELM_STEPS_INSTALL[@]}" "${DEPLOY_STEPS_INSTALL[@]}"; do run_by_a_path[install.md#$s]=1; done
for s in "${HELM_STEPS_UPGRADE[@]}" "${DEPLOY_STEPS_UPGRADE[@]}"; do run_by_a_path[upgrade.md#$s]=1; done
for page in install.md upgrade.md; do
  while read -r s; do
    [[ -n "${run_by_a_path[$page#$s]:-}" || -n "${NOT_RUN[$page#$s]:-}" ]] ||
      nsb_die "docs/$page: the block nsb-test=$s is run by no path of $0 and not in its NOT_RUN: add it to a path (or say why not)"
  done < <(marked_steps "$page")
done
for s in "${!NOT_RUN[@]}"; do log "not run: $s: ${NOT_RUN[$s]}"; done

# The versions: the previous round's chart and deploy/ (what a user upgrades from), and this
# checkout's (the new version's checkout a user upgrades to), each its own directory; the
# values files the install writes are carried over, as a user keeps them.
git -C "$ROOT" cat-file -e "$PREVIOUS^{commit}" 2>/dev/null ||
  nsb_die "the previous round's commit $PREVIOUS is not in this clone (NSB_MANUAL_PREVIOUS; a shallow clone lacks it)"

# script PATH_NAME: the session's script for one path, cd lines between a version's steps.
script() {
  local path=$1 steps_install steps_upgrade s
  if [[ $path == helm ]]; then
    steps_install=("${HELM_STEPS_INSTALL[@]}"); steps_upgrade=("${HELM_STEPS_UPGRADE[@]}")
  else
    steps_install=("${DEPLOY_STEPS_INSTALL[@]}"); steps_upgrade=("${DEPLOY_STEPS_UPGRADE[@]}")
  fi
  cat <<EOF
set -euo pipefail
trap 'echo ">> manual: step \$STEP of the $path path FAILED (exit \$?)" >&2' ERR
step() { STEP=\$1; echo ">> manual: \$(date -u +%T) \$1"; }
EOF
  for s in "${steps_install[@]}"; do
    # push builds and publishes from this checkout (its Makefile); the rest of the install
    # runs in the previous version's directory.
    if [[ $s == push ]]; then echo "cd '$ROOT'"; else echo "cd '$WORK/$path/previous'"; fi
    echo "step install.md#$s"
    block install.md "$s"
  done
  echo "cp api-door.yaml nsb-values.yaml '$WORK/$path/current/' 2>/dev/null || true"
  echo "cd '$WORK/$path/current'"
  for s in "${steps_upgrade[@]}"; do
    echo "step upgrade.md#$s"
    block upgrade.md "$s"
  done
  echo 'echo ">> manual: path done"'
}

# --- what the test sets up, as a user would ---------------------------------------------------------
export PATH="$WORK/bin:$PATH"
export HELM_CONFIG_HOME="$WORK/helm/config" HELM_CACHE_HOME="$WORK/helm/cache" HELM_DATA_HOME="$WORK/helm/data"
export REGISTRY="$NSB_NODE_REGISTRY/hedronite"
export CNI_NAMESPACE=nsb-manual-cni
export SOURCES="$NSB_KWCTL_SOURCES"
PODMAN_CA_DIR="/etc/containers/certs.d/$NSB_NODE_REGISTRY"
podman_ca_ours=0
if [[ ! -e "$PODMAN_CA_DIR/ca.crt" ]]; then
  mkdir -p "$PODMAN_CA_DIR"
  cp "$NSB_NODE_REGISTRY_CA" "$PODMAN_CA_DIR/ca.crt"
  podman_ca_ours=1
fi

k() { kubectl "$@"; }
# After a path, or when one failed: whatever the path left, removed (not a doc step: the
# next path and the other node tests start from a cluster without Namespace Baseline).
clear_leftovers() {
  k delete clusteradmissionpolicy namespace-baseline namespace-baseline-pods --ignore-not-found --wait --timeout=2m >/dev/null 2>&1 || true
  helm uninstall namespace-baseline --namespace default --wait --timeout 2m >/dev/null 2>&1 || true
  k get nsb -o name 2>/dev/null | xargs -r -n1 kubectl patch --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  k delete --ignore-not-found --wait=false -f "$ROOT/deploy/reconciler.yaml" -f "$ROOT/deploy/rbac.yaml" -f "$ROOT/deploy/policy-server-rbac.yaml" >/dev/null 2>&1 || true
  k delete crd namespacebaselines.hedronite.io --ignore-not-found --wait --timeout=2m >/dev/null 2>&1 || true
  k delete networkpolicies --all-namespaces -l app.kubernetes.io/managed-by=namespace-baseline >/dev/null 2>&1 || true
  k delete namespace nsb-demo "$CNI_NAMESPACE" namespace-baseline --ignore-not-found --wait --timeout=3m >/dev/null 2>&1 || true
}
cleanup() {
  local rc=$?
  ((rc == 0)) || { log "cleaning up after a failure"; clear_leftovers; }
  ((podman_ca_ours == 0)) || rm -rf "$PODMAN_CA_DIR"
  rm -f "$ROOT/push.out"
  exit "$rc"
}
trap cleanup EXIT

# The node starts without Namespace Baseline: nothing of it may be there before the manual.
if k get crd namespacebaselines.hedronite.io >/dev/null 2>&1 || k get clusteradmissionpolicy namespace-baseline >/dev/null 2>&1; then
  nsb_die "Namespace Baseline is already installed on the node: the manual starts from a cluster without it"
fi

rc=0
declare -A took=()
for path in $PATHS; do
  [[ $path == helm || $path == deploy ]] || nsb_die "NSB_MANUAL_PATHS: unknown path $path (helm, deploy)"
  mkdir -p "$WORK/$path/previous" "$WORK/$path/current"
  # What the chart's symlinks point at (metadata.yml, deploy/crd.yaml) comes along.
  git -C "$ROOT" archive "$PREVIOUS" charts/namespace-baseline deploy metadata.yml | tar -x -C "$WORK/$path/previous"
  cp -r "$ROOT/charts" "$ROOT/deploy" "$ROOT/metadata.yml" "$WORK/$path/current/"
  k create namespace "$CNI_NAMESPACE" >/dev/null
  script "$path" >"$WORK/$path.sh"
  log "the $path path: install.md from $PREVIOUS's ${path/helm/chart}, upgrade.md to this checkout's ($WORK/$path.sh)"
  t0=$SECONDS
  if bash "$WORK/$path.sh" 2>&1 | tee "$WORK/$path.log"; then
    took[$path]=$((SECONDS - t0))
    log "the $path path passed in ${took[$path]} s"
  else
    rc=1
    log "the $path path FAILED after $((SECONDS - t0)) s ($(grep -m1 'FAILED' "$WORK/$path.log" || echo 'see above'))"
  fi
  # Nothing left refusing requests, whatever happened (verify-removed checked it on success).
  clear_leftovers
done
((rc == 0)) || exit 1
for path in $PATHS; do log "passed: $path (${took[$path]} s)"; done
