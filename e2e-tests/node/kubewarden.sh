#!/usr/bin/env bash
# Kubewarden on the test node as its users install it, and the policy where users keep it:
#   1. an OCI registry on the node's address, over HTTPS with a CA of its own (the CNCF
#      distribution registry of e2e-tests/registry/, its state in the node's state dir);
#   2. the policy pushed there with `make push-policy` (kwctl annotate + kwctl push, the
#      registry's CA given to kwctl in a sources file, as a user with a private registry does);
#   3. Kubewarden 1.35.0 installed with `helm install` of its three charts (kubewarden-crds,
#      kubewarden-controller, kubewarden-defaults), unchanged, from ../kubewarden/install.sh,
#      with only the values a user sets: the default PolicyServer's replicas, the registry's CA
#      (sourceAuthorities) and its log (debug, JSON: the tests read which reviews it answered);
#      the images are the node's own (build.sh), under the names the charts give them;
#   4. waits until the controller answers and the default PolicyServer runs as a Deployment.
# Appends what the tests need to STATE_DIR/env (the registry, its CA, the policy's reference
# by digest) and prints each step's time.
#
# Usage: kubewarden.sh STATE_DIR   (inside the node's network namespace: node-tests.sh runs it
#                                   with nsenter; KUBECONFIG and the node's env from STATE_DIR)
# Environment: NSB_HELM_BIN (charts/install-helm.sh), NSB_POLICY_SERVER_REPLICAS (default 1).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NSB_LOG_PREFIX=kubewarden
# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=../registry/lib.sh
. "$ROOT/e2e-tests/registry/lib.sh"
log() { nsb_log "$@"; }

[[ $# -eq 1 && -f "$1/$NSB_NODE_MARKER" ]] || { echo "usage: $0 STATE_DIR (of node/start.sh)" >&2; exit 2; }
STATE_DIR="$(cd "$1" && pwd -P)"
set -a
# shellcheck disable=SC1091
. "$STATE_DIR/env"
set +a
HELM="${NSB_HELM_BIN:-$("$ROOT/charts/install-helm.sh" | tail -n 1)}"
STACK="$("$ROOT/e2e-tests/kubewarden/install.sh" stack | tail -n 1)"
NAMESPACE=kubewarden
WORK="$STATE_DIR/kubewarden"
mkdir -p "$WORK/tls" "$WORK/registry"
T0=$(nsb_now_ms)
step_t0=$T0
step() { log "$1 ($(nsb_elapsed "$step_t0"))"; step_t0=$(nsb_now_ms); }

api() {   # api PATH: GET, the body on stdout, fails on HTTP >= 400
  curl -sS --fail-with-body --max-time 10 --cacert "$NSB_CA_FILE" -H "Authorization: Bearer $NSB_ADMIN_TOKEN" "$NSB_APISERVER_URL$1"
}
wait_for() {  # wait_for WHAT TIMEOUT_S CMD...: poll CMD every 0.5 s
  local what=$1 timeout=$2 t0; shift 2
  t0=$(nsb_now_ms)
  until "$@" >/dev/null 2>&1; do
    (( $(nsb_now_ms) - t0 > timeout * 1000 )) && { log "timed out after ${timeout}s waiting for $what"; return 1; }
    sleep 0.5
  done
}

# --- 1. the registry, HTTPS with its own CA ---------------------------------------------------
REGISTRY="$NSB_NODE_IP:5000"
CA="$WORK/tls/ca.crt"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj "/CN=namespace-baseline test registry CA" -keyout "$WORK/tls/ca.key" -out "$CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$NSB_NODE_IP" \
  -keyout "$WORK/tls/registry.key" -out "$WORK/tls/registry.csr" 2>/dev/null
openssl x509 -req -in "$WORK/tls/registry.csr" -CA "$CA" -CAkey "$WORK/tls/ca.key" -CAcreateserial -days 2 \
  -extfile <(printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$NSB_NODE_IP") \
  -out "$WORK/tls/registry.crt" 2>/dev/null
nsb_registry_start "$WORK/registry" "$REGISTRY" "$WORK/tls/registry.crt" "$WORK/tls/registry.key" "$CA"
step "registry at https://$REGISTRY"
# The node's containerd trusts the registry's CA, as a node admin sets it up for a private
# registry: images pushed there (docs/install.md's `make image push`) are pulled by kubelet.
mkdir -p "$STATE_DIR/containerd/certs.d/$REGISTRY"
cat >"$STATE_DIR/containerd/certs.d/$REGISTRY/hosts.toml" <<EOF
server = "https://$REGISTRY"
[host."https://$REGISTRY"]
  capabilities = ["pull", "resolve"]
  ca = "$CA"
EOF

# --- 2. the policy, pushed as a user pushes it ------------------------------------------------
cat >"$WORK/sources.yaml" <<EOF
source_authorities:
  "$REGISTRY":
    - type: Path
      path: $CA
EOF
push_out="$(make -s -C "$ROOT" --no-print-directory push-policy REGISTRY="$REGISTRY/hedronite" SOURCES="$WORK/sources.yaml" 2>&1)" ||
  { echo "$push_out" >&2; nsb_die "make push-policy failed"; }
POLICY_REF="$(sed -n 's/^policy: //p' <<<"$push_out")"
[[ "$POLICY_REF" == registry://"$REGISTRY"/*@sha256:* ]] || { echo "$push_out" >&2; nsb_die "make push-policy printed no policy reference by digest"; }
step "policy pushed: $POLICY_REF"

# --- 3. Kubewarden's three charts ---------------------------------------------------------------
# The values a user sets, and nothing else: the default PolicyServer's replicas, the registry's
# CA, and its log (level and format).
cat >"$WORK/defaults-values.yaml" <<EOF
policyServer:
  replicaCount: ${NSB_POLICY_SERVER_REPLICAS:-1}
  sourceAuthorities:
    - uri: "$REGISTRY"
      certs:
        - |
$(sed 's/^/          /' "$CA")
  env:
    - name: KUBEWARDEN_LOG_LEVEL
      value: debug
    - name: KUBEWARDEN_LOG_FMT
      value: json
EOF
helm() { "$HELM" --kubeconfig "$KUBECONFIG" "$@"; }
helm install kubewarden-crds "$STACK/charts/kubewarden-crds-1.27.0.tgz" \
  --namespace "$NAMESPACE" --create-namespace --wait >"$WORK/helm-crds.log" 2>&1 ||
  { cat "$WORK/helm-crds.log" >&2; nsb_die "helm install kubewarden-crds failed"; }
step "helm install kubewarden-crds 1.27.0"
helm install kubewarden-controller "$STACK/charts/kubewarden-controller-5.13.0.tgz" \
  --namespace "$NAMESPACE" --wait --timeout 3m >"$WORK/helm-controller.log" 2>&1 ||
  { cat "$WORK/helm-controller.log" >&2; nsb_die "helm install kubewarden-controller failed"; }
step "helm install kubewarden-controller 5.13.0 (controller Ready)"
helm install kubewarden-defaults "$STACK/charts/kubewarden-defaults-3.13.0.tgz" \
  --namespace "$NAMESPACE" --values "$WORK/defaults-values.yaml" --wait >"$WORK/helm-defaults.log" 2>&1 ||
  { cat "$WORK/helm-defaults.log" >&2; nsb_die "helm install kubewarden-defaults failed"; }
step "helm install kubewarden-defaults 3.13.0"

# --- 4. the default PolicyServer, a Deployment the controller made ------------------------------
policy_server_ready() {
  api "/apis/apps/v1/namespaces/$NAMESPACE/deployments/policy-server-default" |
    jq -e --argjson n "${NSB_POLICY_SERVER_REPLICAS:-1}" '.status.readyReplicas == $n and .status.updatedReplicas == $n'
}
wait_for "the default PolicyServer's Deployment" 180 policy_server_ready || {
  api "/apis/policies.kubewarden.io/v1/policyservers/default" | jq .status >&2 || true
  api "/api/v1/namespaces/$NAMESPACE/pods" | jq -r '.items[] | "\(.metadata.name) \(.status.phase) \(.status.containerStatuses // [] | map(.state) | tostring)"' >&2 || true
  nsb_die "the default PolicyServer did not become ready"
}
step "PolicyServer default: Deployment policy-server-default ready"

cat >>"$STATE_DIR/env" <<EOF
NSB_KUBEWARDEN_NAMESPACE=$NAMESPACE
NSB_NODE_REGISTRY=$REGISTRY
NSB_NODE_REGISTRY_CA=$CA
NSB_NODE_REGISTRY_CA_KEY=$WORK/tls/ca.key
NSB_KWCTL_SOURCES=$WORK/sources.yaml
NSB_POLICY_REF=$POLICY_REF
EOF
log "Kubewarden installed from its charts in $(nsb_elapsed "$T0")"
