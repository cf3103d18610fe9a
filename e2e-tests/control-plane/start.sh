#!/usr/bin/env bash
# Start a local etcd + kube-apiserver on 127.0.0.1 (random free ports).
#
# Usage: start.sh [STATE_DIR]      (default: a new `mktemp -d` directory)
#
# Progress goes to stderr; the last stdout line is the state dir. Afterwards:
#   set -a; . STATE_DIR/env; set +a     # KUBECONFIG, NSB_APISERVER_URL, NSB_ADMIN_TOKEN, ...
#   stop.sh STATE_DIR                   # KEEP_STATE=1 keeps the directory
#
# Env: NSB_CACHE_DIR (binary cache root, see build.sh), NSB_CONTROL_PLANE_BIN_DIR
# (use binaries from there instead), NSB_START_TIMEOUT (readiness timeout, s, default 60),
# NSB_APISERVER_EXTRA_ARGS / NSB_ETCD_EXTRA_ARGS (extra flags, whitespace-split; a flag given
# again there wins), NSB_APISERVER_PORT (a fixed secure port instead of a free one).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

T0=$(nsb_now_ms)
TIMEOUT_S="${NSB_START_TIMEOUT:-60}"

# --- binaries -------------------------------------------------------------------
if [[ -n "${NSB_CONTROL_PLANE_BIN_DIR:-}" ]]; then
  BIN_DIR="$NSB_CONTROL_PLANE_BIN_DIR"
else
  BIN_DIR="$("$NSB_CP_DIR/build.sh" --print-dir)"
  if [[ ! -x "$BIN_DIR/kube-apiserver" || ! -x "$BIN_DIR/etcd" ]]; then
    nsb_log "binaries not found in $BIN_DIR, building them"
    BIN_DIR="$("$NSB_CP_DIR/build.sh" | tail -n 1)"
    T0=$(nsb_now_ms)   # report the startup time without the build
  fi
fi
[[ -x "$BIN_DIR/kube-apiserver" && -x "$BIN_DIR/etcd" ]] || nsb_die "no kube-apiserver/etcd in $BIN_DIR"
K8S_VERSION="$("$BIN_DIR/kube-apiserver" --version | awk '{print $2}')"

# --- state dir ------------------------------------------------------------------
if [[ $# -ge 1 && -n "$1" ]]; then
  STATE_DIR="$1"
  mkdir -p "$STATE_DIR"
  [[ -z "$(ls -A "$STATE_DIR")" ]] || nsb_die "state dir $STATE_DIR is not empty"
else
  STATE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/nsb-control-plane.XXXXXX")"
fi
STATE_DIR="$(cd "$STATE_DIR" && pwd -P)"
touch "$STATE_DIR/$NSB_MARKER"
chmod 700 "$STATE_DIR"
nsb_log "state dir: $STATE_DIR"

started_ok=0
cleanup_on_failure() {
  if [[ $started_ok == 0 ]]; then
    nsb_stop kube-apiserver "$STATE_DIR"
    nsb_stop etcd "$STATE_DIR"
    nsb_log "startup FAILED; logs kept in $STATE_DIR (remove with: $NSB_CP_DIR/stop.sh $STATE_DIR)"
  fi
}
trap cleanup_on_failure EXIT

# --- certificates, keys, tokens, audit policy -------------------------------------
cd "$STATE_DIR"
mkdir -p certs
mkdir -m 700 etcd
(
  umask 077
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 365 -subj "/CN=nsb-control-plane-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -new "${ec[@]}" -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
  cat >apiserver.ext <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
    -extfile apiserver.ext -out apiserver.crt 2>/dev/null
  rm -f apiserver.csr apiserver.ext
  # The API server's client certificate for kubelets (logs, exec, port-forward: `kubectl logs`
  # on the test node, whose kubelet trusts this CA); unused where no kubelet runs.
  openssl req -new "${ec[@]}" -keyout kubelet-client.key -out kubelet-client.csr \
    -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
  openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
    -extfile <(printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n') \
    -out kubelet-client.crt 2>/dev/null
  rm -f kubelet-client.csr ca.srl
  # Service-account token signing key pair (ES256).
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out sa.key 2>/dev/null
  openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
) || nsb_die "openssl failed"

ADMIN_TOKEN="$(openssl rand -hex 24)"
ALICE_TOKEN="$(openssl rand -hex 24)"
# token,user,uid,"group1,group2" (system:authenticated is added automatically)
cat >tokens.csv <<EOF
$ADMIN_TOKEN,admin,nsb-admin,"system:masters"
$ALICE_TOKEN,alice,nsb-alice
EOF
chmod 600 tokens.csv

# One audit event per request (RequestReceived omitted), metadata only; Lease writes with
# their bodies (the soak reads who held the lease when, and the resourceVersion order).
# The tests read the log from byte offsets: it must not be rotated under them (the API
# server rotates at 100 MB by default, which a 20,000-namespace bench passes:
# --audit-log-maxsize below).
cat >audit-policy.yaml <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: RequestResponse
    verbs: ["create", "update", "patch"]
    resources:
      - group: coordination.k8s.io
        resources: ["leases"]
  - level: Metadata
EOF

# --- etcd -----------------------------------------------------------------------
# Single member, no fsync (test data only). Short heartbeat/election timeouts: a fresh
# single-node etcd elects itself after ~1 election tick, 1 s with the defaults, ~0.1 s here.
start_etcd() {
  local ports client peer
  mapfile -t ports < <(nsb_pick_ports 2)
  client=${ports[0]} peer=${ports[1]}
  NSB_ETCD_URL="http://127.0.0.1:$client"
  # shellcheck disable=SC2086
  nsb_write_script "$STATE_DIR/etcd.sh" "$STATE_DIR/etcd.pid" "$BIN_DIR/etcd" \
    --name=nsb \
    --data-dir="$STATE_DIR/etcd" \
    --listen-client-urls="$NSB_ETCD_URL" \
    --advertise-client-urls="$NSB_ETCD_URL" \
    --listen-peer-urls="http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
    --initial-cluster="nsb=http://127.0.0.1:$peer" \
    --initial-cluster-state=new \
    --unsafe-no-fsync \
    --heartbeat-interval=25 \
    --election-timeout=250 \
    --log-level=warn \
    ${NSB_ETCD_EXTRA_ARGS:-}
  nsb_launch etcd "$STATE_DIR"
  local pid i
  pid="$(cat "$STATE_DIR/etcd.pid")"
  for ((i = 0; i < 200; i++)); do
    nsb_owned_pid "$pid" "$STATE_DIR" || return 2
    curl -s --max-time 1 "$NSB_ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"' && return 0
    sleep 0.05
  done
  return 1
}

for attempt in 1 2 3 4 5; do
  rc=0; start_etcd || rc=$?
  [[ $rc == 0 ]] && break
  if [[ $rc == 2 ]] && grep -q 'address already in use' etcd.log && [[ $attempt -lt 5 ]]; then
    nsb_log "etcd port was taken, retrying with other ports"
    rm -rf etcd && mkdir -m 700 etcd && : >etcd.log
    continue
  fi
  nsb_tail_log etcd.log
  nsb_die "etcd did not become healthy"
done
nsb_log "etcd ready at $NSB_ETCD_URL ($(nsb_elapsed "$T0"))"

# --- kube-apiserver ---------------------------------------------------------------
# Default admission plugins stay enabled (ServiceAccount/TokenRequest work without a
# controller-manager once the ServiceAccount object exists). --endpoint-reconciler-type=none:
# 127.0.0.1 is not a valid Endpoints address, the default "lease" reconciler would log an
# error every 10 s. --enable-priority-and-fairness=false: fewer moving parts, no APF objects.
write_apiserver_script() {
  local port=$1
  # shellcheck disable=SC2086
  nsb_write_script "$STATE_DIR/kube-apiserver.sh" "$STATE_DIR/kube-apiserver.pid" "$BIN_DIR/kube-apiserver" \
    --etcd-servers="$NSB_ETCD_URL" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$port" \
    --cert-dir="$STATE_DIR/certs" \
    --tls-cert-file="$STATE_DIR/apiserver.crt" \
    --tls-private-key-file="$STATE_DIR/apiserver.key" \
    --client-ca-file="$STATE_DIR/ca.crt" \
    --kubelet-client-certificate="$STATE_DIR/kubelet-client.crt" \
    --kubelet-client-key="$STATE_DIR/kubelet-client.key" \
    --token-auth-file="$STATE_DIR/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-key-file="$STATE_DIR/sa.pub" \
    --service-account-signing-key-file="$STATE_DIR/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --api-audiences=https://kubernetes.default.svc \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=false \
    --enable-priority-and-fairness=false \
    --audit-policy-file="$STATE_DIR/audit-policy.yaml" \
    --audit-log-path="$STATE_DIR/audit.log" \
    --audit-log-format=json \
    --audit-log-mode=blocking \
    --audit-log-maxsize=4096 \
    --profiling=false \
    --endpoint-reconciler-type=none \
    ${NSB_APISERVER_EXTRA_ARGS:-}
}

APISERVER_PORT=""
for attempt in 1 2 3 4 5; do
  # NSB_APISERVER_PORT: a fixed port (the test node runs its own network namespace and the
  # usual 6443); else a free one.
  APISERVER_PORT="${NSB_APISERVER_PORT:-$(nsb_pick_ports 1)}"
  NSB_APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"
  write_apiserver_script "$APISERVER_PORT"
  nsb_launch kube-apiserver "$STATE_DIR"
  rc=0; nsb_wait_apiserver "$STATE_DIR" "$NSB_APISERVER_URL" "$ADMIN_TOKEN" "$TIMEOUT_S" || rc=$?
  [[ $rc == 0 ]] && break
  if [[ $rc == 2 ]] && grep -q 'address already in use' kube-apiserver.log && [[ $attempt -lt 5 && -z "${NSB_APISERVER_PORT:-}" ]]; then
    nsb_log "kube-apiserver port was taken, retrying with another port"
    : >kube-apiserver.log
    continue
  fi
  nsb_tail_log kube-apiserver.log
  nsb_die "kube-apiserver did not become ready"
done

# --- kubeconfigs, env -------------------------------------------------------------
write_kubeconfig() {
  local file=$1 user=$2 token=$3
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: nsb
    cluster:
      server: $NSB_APISERVER_URL
      certificate-authority-data: $(base64 -w0 <ca.crt)
users:
  - name: $user
    user:
      token: $token
contexts:
  - name: nsb-$user
    context:
      cluster: nsb
      user: $user
      namespace: default
current-context: nsb-$user
EOF
  chmod 600 "$file"
}
write_kubeconfig kubeconfig admin "$ADMIN_TOKEN"
write_kubeconfig kubeconfig-alice alice "$ALICE_TOKEN"

cat >settings <<EOF
NSB_APISERVER_URL=$NSB_APISERVER_URL
NSB_ETCD_URL=$NSB_ETCD_URL
NSB_ADMIN_TOKEN=$ADMIN_TOKEN
NSB_ALICE_TOKEN=$ALICE_TOKEN
NSB_K8S_VERSION=$K8S_VERSION
EOF
nsb_write_env "$STATE_DIR"

started_ok=1
nsb_log "kube-apiserver $K8S_VERSION ready at $NSB_APISERVER_URL (etcd pid $(cat etcd.pid), apiserver pid $(cat kube-apiserver.pid))"
nsb_log "startup took $(nsb_elapsed "$T0"); env: $STATE_DIR/env; stop with: $NSB_CP_DIR/stop.sh $STATE_DIR"
echo "$STATE_DIR"
