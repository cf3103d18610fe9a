#!/usr/bin/env bash
# Smoke test: build (or reuse) the binaries, start a control plane, poke it with
# curl, restart the apiserver, stop everything. Exits non-zero on any failure.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "PASS: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
summary() { echo "$pass passed, $fail failed"; }

t=$SECONDS
if "$HERE/build.sh" >/dev/null; then ok "build.sh (${SECONDS}s)"; else bad "build.sh"; summary; exit 1; fi

t0=$(date +%s%3N)
STATE_DIR="$("$HERE/start.sh" | tail -n 1)"
if [[ -n "$STATE_DIR" && -f "$STATE_DIR/env" ]]; then
  ok "start.sh ($(( $(date +%s%3N) - t0 )) ms)"
else
  bad "start.sh"; summary; exit 1
fi
trap '[[ -n "${STATE_DIR:-}" ]] && "$HERE/stop.sh" "$STATE_DIR"' EXIT
set -a
# shellcheck disable=SC1091
. "$STATE_DIR/env"
set +a
ETCD_PID=$NSB_ETCD_PID

# api METHOD PATH [TOKEN] [JSON_BODY] -> prints body, then the HTTP status on the last line
api() {
  local method=$1 path=$2 token=${3:-$NSB_ADMIN_TOKEN} body=${4:-}
  local args=(-s --max-time 10 --cacert "$NSB_CA_FILE" -X "$method" -H "Authorization: Bearer $token" -w '\n%{http_code}')
  [[ -n "$body" ]] && args+=(-H 'Content-Type: application/json' -d "$body")
  curl "${args[@]}" "$NSB_APISERVER_URL$path"
}
status_of() { tail -n 1 <<<"$1"; }
body_of() { sed '$d' <<<"$1"; }

# /version
r="$(api GET /version)"
ver="$(body_of "$r" | jq -r .gitVersion)"
check "/version is v1.36.x (got $ver, minor $(body_of "$r" | jq -r .minor))" \
  bash -c '[[ $1 == v1.36.* && $2 == 36 ]]' _ "$ver" "$(body_of "$r" | jq -r .minor)"

# namespace + configmap
ns="smoke-$RANDOM"
r="$(api POST /api/v1/namespaces "" "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$ns\"}}")"
check "admin creates namespace $ns (HTTP $(status_of "$r"))" test "$(status_of "$r")" = 201
r="$(api POST "/api/v1/namespaces/$ns/configmaps" "" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"}}')"
check "admin creates configmap (HTTP $(status_of "$r"))" test "$(status_of "$r")" = 201
r="$(api GET "/api/v1/namespaces/$ns/configmaps/cm")"
check "configmap reads back" test "$(body_of "$r" | jq -r .data.k)" = v

# RBAC: alice has no permissions
r="$(api GET /api/v1/namespaces/default/secrets "$NSB_ALICE_TOKEN")"
check "alice gets 403 listing secrets (HTTP $(status_of "$r"))" test "$(status_of "$r")" = 403
r="$(api GET /api/v1/namespaces/default/secrets "not-a-token")"
check "unknown token gets 401 (HTTP $(status_of "$r"))" test "$(status_of "$r")" = 401
check "kubeconfig-alice embeds alice's token" grep -q "token: $NSB_ALICE_TOKEN" "$NSB_KUBECONFIG_ALICE"

# ServiceAccount + TokenRequest
r="$(api POST /api/v1/namespaces/default/serviceaccounts "" '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"smoke"}}')"
check "admin creates serviceaccount (HTTP $(status_of "$r"))" test "$(status_of "$r")" = 201
r="$(api POST /api/v1/namespaces/default/serviceaccounts/smoke/token "" \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":600}}')"
sa_token="$(body_of "$r" | jq -r '.status.token // empty')"
check "TokenRequest returns a token (HTTP $(status_of "$r"))" test -n "$sa_token"
r="$(api POST /apis/authentication.k8s.io/v1/selfsubjectreviews "$sa_token" \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}')"
who="$(body_of "$r" | jq -r '.status.userInfo.username // empty')"
check "SA token authenticates as $who" test "$who" = system:serviceaccount:default:smoke
r="$(api GET /api/v1/namespaces "$sa_token")"
check "SA token gets 403 listing namespaces (HTTP $(status_of "$r"))" test "$(status_of "$r")" = 403

# audit log
n_total=$(wc -l <"$NSB_AUDIT_LOG")
n_alice=$(jq -c 'select(.user.username=="alice" and .verb=="list" and .responseStatus.code==403)' "$NSB_AUDIT_LOG" | wc -l)
n_admin_create=$(jq -c 'select(.user.username=="admin" and .verb=="create")' "$NSB_AUDIT_LOG" | wc -l)
check "audit log has entries ($n_total total, $n_admin_create admin creates, $n_alice alice 403 lists)" \
  test "$n_total" -gt 0 -a "$n_alice" -ge 1 -a "$n_admin_create" -ge 4

# restart only the apiserver; etcd keeps its data and PID
old_pid=$NSB_APISERVER_PID
t0=$(date +%s%3N)
if "$HERE/restart.sh" "$STATE_DIR" kube-apiserver; then
  ok "restart.sh kube-apiserver ($(( $(date +%s%3N) - t0 )) ms)"
else
  bad "restart.sh kube-apiserver"
fi
set -a
# shellcheck disable=SC1091
. "$STATE_DIR/env"
set +a
check "apiserver has a new PID ($old_pid -> $NSB_APISERVER_PID), etcd the same" \
  test "$NSB_APISERVER_PID" != "$old_pid" -a "$NSB_ETCD_PID" = "$ETCD_PID"
r="$(api GET "/api/v1/namespaces/$ns/configmaps/cm")"
check "configmap survives the apiserver restart" test "$(body_of "$r" | jq -r .data.k)" = v

# stop
trap - EXIT
"$HERE/stop.sh" "$STATE_DIR"
# gone = no such PID, or a zombie waiting for whichever ancestor adopted it to reap it
gone() { local s; s="$(ps -o stat= -p "$1" 2>/dev/null)"; [[ -z "$s" || "$s" == Z* ]]; }
both_gone() { gone "$NSB_APISERVER_PID" && gone "$NSB_ETCD_PID"; }
check "stop.sh ended both processes" both_gone
check "stop.sh removed the state dir" test ! -e "$STATE_DIR"

summary
[[ $fail == 0 ]]
