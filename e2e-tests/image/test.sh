#!/usr/bin/env bash
# The reconciler image, as users get it and as a kubelet runs it (make image-tests, after
# make image):
#
# 1. the OCI archive of `make image` (target/image/reconciler.oci.tar) is loaded into a private
#    podman store (vfs, in a temporary directory) and is the image `make image` built (same
#    id); the Containerfile, rebuilt there from the same binary with --no-cache, gives the same
#    id again (reproducible);
# 2. both are pushed to a throwaway registry (e2e-tests/registry/) and get the same digest;
#    the image is removed locally, pulled back by that digest, and its config (user 65532,
#    entrypoint, OCI labels with the Cargo.toml version and the git revision) and its single
#    layer (one root-owned binary: no shell, no CA bundle) are checked;
# 3. on the local control plane (e2e-tests/control-plane/), with deploy/crd.yaml, the Namespace
#    of deploy/reconciler.yaml and deploy/rbac.yaml applied, the image pulled by digest runs as
#    the Deployment's container: the args and env of deploy/reconciler.yaml, a TokenRequest
#    token of the reconciler's ServiceAccount with ca.crt and namespace mounted read-only at
#    /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST/PORT set (the
#    in-cluster configuration, no kubeconfig), uid/gid 65532, read-only root filesystem, no
#    capabilities, no-new-privileges, host network (127.0.0.1 only). It must answer /healthz
#    and /readyz, take the Lease, converge the NamespaceBaseline of deploy/examples/seed.yaml
#    (walls in the labelled namespaces only, Ready/WallInPlace), repair a deleted wall, make
#    no request its RBAC refuses (audit log), and on SIGTERM exit 0 and release the Lease;
# 4. the CA decision (no CA bundle in the image): with a kubeconfig that has no CA the image
#    fails, naming the missing CA certificates; with the CA mounted and SSL_CERT_FILE set it
#    works.
#
# Needs podman (e2e-tests/install-deps.sh image): it fails, not skips, without it. Everything
# it starts (registry, control plane, containers) is stopped on exit and its state removed
# (KEEP_STATE=1, or a failure, keeps the logs and says where).
# Environment: CARGO, CARGO_TARGET_DIR, NSB_CACHE_DIR, NSB_IMAGE_TEST_TIMEOUT (s, default 60).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
# shellcheck source=lib.sh
. "$ROOT/e2e-tests/image/lib.sh"
# shellcheck source=../registry/lib.sh
. "$ROOT/e2e-tests/registry/lib.sh"
cd "$ROOT"

TIMEOUT="${NSB_IMAGE_TEST_TIMEOUT:-60}"
fail() { echo "!! image test: $*" >&2; exit 1; }

command -v podman >/dev/null || fail "podman not found: the image test builds, pushes, pulls and runs the image with it (apt-get install podman runc, or e2e-tests/install-deps.sh image)"
command -v runc >/dev/null || fail "runc not found: podman runs the image with it here (crun fails with cgroup v1 hybrid mode); apt-get install runc"
command -v jq >/dev/null || fail "jq not found (apt-get install jq)"
PYTHON="$(command -v python3 || true)"
if [[ -z "$PYTHON" ]] || ! "$PYTHON" -c 'import yaml' 2>/dev/null; then
  fail "python3 with PyYAML not found: it reads deploy/*.yaml (apt-get install python3-yaml)"
fi
[[ -f "$NSB_IMAGE_DIR/image.env" ]] || fail "$NSB_IMAGE_DIR/image.env missing: run \`make image\` first"
# IMAGE, IMAGE_ID, VERSION, REVISION, PLATFORMS, TOOL
# shellcheck disable=SC1091
. "$NSB_IMAGE_DIR/image.env"
: "${IMAGE:?}" "${VERSION:?}" "${REVISION:?}" "${TOOL:?}" "${IMAGE_ID?}"
[[ "$VERSION" == "$NSB_VERSION" ]] || fail "image.env says version $VERSION, Cargo.toml $NSB_VERSION: run \`make image\` again"
[[ "$TOOL" == podman ]] || echo ">> note: make image used $TOOL; the test loads its OCI archive into podman" >&2
ARCHIVE="$NSB_IMAGE_DIR/reconciler.oci.tar"
BINARY="$NSB_IMAGE_DIR/linux/amd64/namespace-baseline-reconciler"
[[ -f "$ARCHIVE" && -x "$BINARY" ]] || fail "$ARCHIVE or $BINARY missing: run \`make image\` (PLATFORMS including linux/amd64)"
ENTRYPOINT=/namespace-baseline-reconciler
SA_DIR=/var/run/secrets/kubernetes.io/serviceaccount

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nsb-image-tests.XXXXXX")"
export NSB_PODMAN_ROOT="$WORK/podman"
mkdir -p "$WORK/registry" "$NSB_PODMAN_ROOT"
CONTAINERS=()
cleanup() {
  local rc=$? c
  for c in "${CONTAINERS[@]}"; do
    [[ -s "$WORK/$c.log" ]] || nsb_podman logs "$c" >"$WORK/$c.log" 2>&1 || true
    nsb_podman rm -f -t 0 "$c" >/dev/null 2>&1 || true
  done
  nsb_stop_control_plane
  nsb_registry_stop "$WORK/registry"
  nsb_keep_or_remove "$WORK" "$rc" "container logs: $WORK/nsb-image-*.log, registry log: $WORK/registry/registry.log"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. the archive is the built image; a rebuild gives the same id -----------------------------
nsb_say "loading ${ARCHIVE#"$ROOT"/} into a private podman store ($NSB_PODMAN_ROOT)"
nsb_podman pull -q "oci-archive:$ARCHIVE" >/dev/null
loaded_id="$(nsb_podman image inspect --format '{{.Id}}' "$IMAGE")"
[[ -z "$IMAGE_ID" || "$loaded_id" == "$IMAGE_ID" ]] || fail "the archive holds image $loaded_id, make image built $IMAGE_ID"
nsb_say "rebuilding Containerfile from the same binary (--no-cache --layers=false --timestamp 0)"
nsb_podman build -q --no-cache --layers=false --timestamp 0 --platform linux/amd64 -f Containerfile \
  --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" -t localhost/nsb-rebuild:test . >/dev/null
rebuilt_id="$(nsb_podman image inspect --format '{{.Id}}' localhost/nsb-rebuild:test)"
[[ "$rebuilt_id" == "$loaded_id" ]] || fail "not reproducible: the rebuild is $rebuilt_id, make image's $loaded_id"
nsb_say "same image id: $loaded_id"

# .dockerignore: the context is the repository root, but only the staged binaries are sent.
printf 'FROM scratch\nCOPY . /context/\n' >"$WORK/Containerfile.context"
nsb_podman build -q --layers=false -f "$WORK/Containerfile.context" -t localhost/nsb-context:test . >/dev/null
CONTAINERS+=(nsb-context-probe)
nsb_podman create -q --name nsb-context-probe localhost/nsb-context:test /none >/dev/null
sent="$(nsb_podman export nsb-context-probe | tar -t | grep -v '/$' | grep '^context/' || true)"
unexpected="$(grep -vE '^context/target/image/linux/[a-z0-9]+/namespace-baseline-reconciler$' <<<"$sent" || true)"
[[ -n "$sent" && -z "$unexpected" ]] || fail "the build context holds more than the staged binaries: $(head -n 5 <<<"$unexpected")"
nsb_say "build context after .dockerignore: $(tr '\n' ' ' <<<"$sent")"
nsb_podman rm -f nsb-context-probe >/dev/null
nsb_podman rmi -f localhost/nsb-context:test >/dev/null

# --- 2. through the registry, by digest ---------------------------------------------------------
nsb_registry_start "$WORK/registry"
REPO="$NSB_REGISTRY/namespace-baseline-reconciler"
push() { nsb_podman push -q --tls-verify=false --digestfile "$WORK/digest" "$1" "docker://$REPO:$2"; cat "$WORK/digest"; }
digest="$(push "$IMAGE" "$VERSION")"
rebuilt_digest="$(push localhost/nsb-rebuild:test rebuild)"
[[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || fail "no digest from podman push: $digest"
[[ "$rebuilt_digest" == "$digest" ]] || fail "the two builds have different registry digests: $digest, $rebuilt_digest"
nsb_say "pushed both builds to $REPO: same digest $digest"
nsb_podman rmi -f "$IMAGE" localhost/nsb-rebuild:test >/dev/null
[[ -z "$(nsb_podman images -q)" ]] || fail "images left in the private store before the pull"
PULLED="$REPO@$digest"
nsb_podman pull -q --tls-verify=false "$PULLED" >/dev/null
nsb_say "pulled back by digest: $PULLED"

# The registry's own view (HTTP API): manifest, config, the one layer's files.
reg() { curl -fsS "http://$NSB_REGISTRY/v2/namespace-baseline-reconciler/$1" "${@:2}"; }
manifest="$(reg "manifests/$digest" -H 'Accept: application/vnd.oci.image.manifest.v1+json')"
config="$(reg "blobs/$(jq -r .config.digest <<<"$manifest")")"
check_config() {
  local got
  got="$(jq -c "$1" <<<"$config")"
  [[ "$got" == "$2" ]] || fail "image config $1 is $got, expected $2"
  echo "   $1 = $got"
}
check_config .architecture '"amd64"'
check_config .config.User '"65532:65532"'
check_config .config.Entrypoint "[\"$ENTRYPOINT\"]"
check_config .config.Cmd '["run"]'
check_config '.config.Labels["org.opencontainers.image.version"]' "\"$NSB_VERSION\""
check_config '.config.Labels["org.opencontainers.image.revision"]' "\"$REVISION\""
check_config '.config.Labels["org.opencontainers.image.source"]' '"https://github.com/hedronite/namespace-baseline"'
check_config '.config.Labels["org.opencontainers.image.licenses"]' '"Apache-2.0"'
check_config '.rootfs.diff_ids | length' 1
[[ "$REVISION" =~ ^[0-9a-f]{40}(-dirty)?$ ]] || fail "revision label $REVISION is not a git commit"
layers="$(jq -r '.layers | length' <<<"$manifest")"
[[ $layers == 1 ]] || fail "$layers layers, expected 1"
reg "blobs/$(jq -r '.layers[0].digest' <<<"$manifest")" -o "$WORK/layer.tar.gz"
files="$(tar -tvzf "$WORK/layer.tar.gz" --numeric-owner)"
echo "   layer: $files"
[[ "$(wc -l <<<"$files")" == 1 ]] || fail "the layer holds more than the binary (no shell, no CA bundle, nothing else)"
[[ "$files" == "-rwxr-xr-x 0/0 "*" ${ENTRYPOINT#/}" ]] || fail "the binary is not root-owned 0755 at $ENTRYPOINT"
tar -xzOf "$WORK/layer.tar.gz" "${ENTRYPOINT#/}" | cmp -s - "$BINARY" || fail "the binary in the image is not target/image/linux/amd64's"
image_bytes="$(jq '[.layers[].size] | add' <<<"$manifest")"
nsb_say "image: 1 layer, $image_bytes bytes compressed ($(stat -c %s "$BINARY") bytes uncompressed binary)"
echo "FIGURE image $PULLED: compressed $image_bytes bytes, binary $(stat -c %s "$BINARY") bytes"

# --- 3. run it as the Deployment's container on the local control plane --------------------------
nsb_say "building (or reusing) and starting the control plane"
nsb_start_control_plane
APISERVER_PORT="${NSB_APISERVER_URL##*:}"
kube() { curl -sS --max-time 10 --cacert "$NSB_CA_FILE" -H "Authorization: Bearer $NSB_ADMIN_TOKEN" "$@"; }
# yaml_docs FILE [KIND]: the documents of FILE (of one kind), one JSON object a line.
yaml_docs() {
  "$PYTHON" - "$@" <<'EOF'
import json, sys, yaml
kind = sys.argv[2] if len(sys.argv) > 2 else None
with open(sys.argv[1]) as f:
    for doc in yaml.safe_load_all(f):
        if doc and (kind is None or doc.get("kind") == kind):
            print(json.dumps(doc, separators=(",", ":")))
EOF
}
api_path() {
  jq -r '
    {CustomResourceDefinition: "customresourcedefinitions", Namespace: "namespaces",
     ServiceAccount: "serviceaccounts", ClusterRole: "clusterroles",
     ClusterRoleBinding: "clusterrolebindings", Role: "roles", RoleBinding: "rolebindings",
     NamespaceBaseline: "namespacebaselines"}[.kind] as $plural
    | if $plural == null then error("no resource for kind \(.kind)") else . end
    | (if .apiVersion == "v1" then "/api/v1" else "/apis/\(.apiVersion)" end)
      + (if .metadata.namespace then "/namespaces/\(.metadata.namespace)" else "" end)
      + "/\($plural)/\(.metadata.name)"'
}
# apply JSON: server-side apply, as `kubectl apply --server-side`.
apply() {
  local path code
  path="$(api_path <<<"$1")"
  code="$(kube -o "$WORK/apply.out" -w '%{http_code}' -X PATCH -H 'Content-Type: application/apply-patch+yaml' \
    --data-binary "$1" "$NSB_APISERVER_URL$path?fieldManager=nsb-image-test&force=true")"
  [[ $code == 200 || $code == 201 ]] || { cat "$WORK/apply.out" >&2; fail "apply $path: HTTP $code"; }
  echo "   applied $(jq -r '"\(.kind) \(.metadata.namespace // "" | if . == "" then "" else . + "/" end)\(.metadata.name)"' <<<"$1")"
}
apply_file() { local doc; while IFS= read -r doc; do apply "$doc"; done < <(yaml_docs "$@"); }
# wait_for DESCRIPTION COMMAND...: until COMMAND succeeds, at most TIMEOUT seconds.
wait_for() {
  local what=$1 t0=$SECONDS
  shift
  until "$@"; do
    ((SECONDS - t0 < TIMEOUT)) || fail "timed out after ${TIMEOUT}s waiting for $what"
    sleep 0.2
  done
}

nsb_say "deploy/crd.yaml, the Namespace of deploy/reconciler.yaml, deploy/rbac.yaml"
apply_file deploy/crd.yaml
crd_established() {
  kube "$NSB_APISERVER_URL/apis/apiextensions.k8s.io/v1/customresourcedefinitions/namespacebaselines.hedronite.io" |
    jq -e '.status.conditions // [] | any(.type == "Established" and .status == "True")' >/dev/null
}
wait_for "the CRD to be established" crd_established
apply_file deploy/reconciler.yaml Namespace
apply_file deploy/rbac.yaml

# The Deployment's container, as deploy/reconciler.yaml has it.
deployment="$(yaml_docs deploy/reconciler.yaml Deployment)"
container="$(jq -c '.spec.template.spec.containers[0]' <<<"$deployment")"
pod_security="$(jq -c '.spec.template.spec.securityContext' <<<"$deployment")"
SA_NAME="$(jq -r '.spec.template.spec.serviceAccountName' <<<"$deployment")"
POD_NAMESPACE="$(jq -r '.metadata.namespace' <<<"$deployment")"
jq -e '.securityContext | .runAsUser == 65532 and .readOnlyRootFilesystem == true and
  .allowPrivilegeEscalation == false and .capabilities.drop == ["ALL"]' <<<"$container" >/dev/null ||
  fail "deploy/reconciler.yaml's securityContext is not the one this test reproduces"
jq -e '.runAsUser == 65532 and .runAsGroup == 65532 and .runAsNonRoot == true' <<<"$pod_security" >/dev/null ||
  fail "deploy/reconciler.yaml's pod securityContext is not the one this test reproduces"
HTTP_PORT="$(nsb_pick_ports 1)"
POD_NAME="namespace-baseline-reconciler-image-test"
# --listen: 127.0.0.1 and a free port instead of 0.0.0.0:8080 (host network, test traffic only on
# the loopback).
mapfile -t ARGS < <(jq -r --arg listen "--listen=127.0.0.1:$HTTP_PORT" \
  '.args[] | if startswith("--listen=") then $listen else . end' <<<"$container")
ENV=(-e "POD_NAME=$POD_NAME" -e "POD_NAMESPACE=$POD_NAMESPACE")
while IFS= read -r kv; do ENV+=(-e "$kv"); done < <(jq -r '.env[] | select(.value != null) | "\(.name)=\(.value)"' <<<"$container")

nsb_say "a TokenRequest token of ServiceAccount $POD_NAMESPACE/$SA_NAME, with ca.crt and namespace, for $SA_DIR"
mkdir -p "$WORK/serviceaccount"
kube -X POST -H 'Content-Type: application/json' \
  --data '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":3600}}' \
  "$NSB_APISERVER_URL/api/v1/namespaces/$POD_NAMESPACE/serviceaccounts/$SA_NAME/token" |
  jq -je '.status.token' >"$WORK/serviceaccount/token" || fail "TokenRequest failed"
# -j: no newline after the token, as the kubelet writes it (kube-rs sends the file as is, and a
# newline makes the Authorization header invalid).
cp "$NSB_CA_FILE" "$WORK/serviceaccount/ca.crt"
printf '%s' "$POD_NAMESPACE" >"$WORK/serviceaccount/namespace"
chmod 0755 "$WORK/serviceaccount"
chmod 0644 "$WORK/serviceaccount"/*

CTR="nsb-image-test-$$"
CONTAINERS+=("$CTR")
RUN=(--network host --read-only --cap-drop ALL --security-opt no-new-privileges
  --user 65532:65532 --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --pull never)

# The binary as built unwinds: a panicking reconcile is contained and reported, the process
# lives (a binary built with panic = "abort" dies here with SIGABRT).
nsb_say "self-check: a panic in the image's binary is contained"
checked="$(nsb_podman run --rm "${RUN[@]}" "$PULLED" self-check)" ||
  fail "self-check failed: the binary in the image does not contain a panicking reconcile"
[[ "$checked" == "panics unwind: a panicking reconcile is contained and reported" ]] ||
  fail "self-check said: $checked"
nsb_say "podman run ${RUN[*]} $PULLED ${ARGS[*]}"
nsb_podman run -d --name "$CTR" "${RUN[@]}" \
  -v "$WORK/serviceaccount:$SA_DIR:ro" \
  -e KUBERNETES_SERVICE_HOST=127.0.0.1 -e "KUBERNETES_SERVICE_PORT=$APISERVER_PORT" "${ENV[@]}" \
  "$PULLED" "${ARGS[@]}" >/dev/null
t_start=$SECONDS
LOG="$WORK/$CTR.log"
save_logs() { nsb_podman logs "$CTR" >"$LOG" 2>&1 || true; }
running() {
  [[ "$(nsb_podman inspect --format '{{.State.Running}}' "$CTR")" == true ]] ||
    { save_logs; tail -n 20 "$LOG" >&2; fail "the container exited"; }
}
last_answer=""
probe() {
  running
  local code
  code="$(curl -s --max-time 2 -o "$WORK/probe" -w '%{http_code}' "http://127.0.0.1:$HTTP_PORT$1" || true)"
  last_answer="$(cat "$WORK/probe" 2>/dev/null || true) (HTTP $code)"
  [[ "$last_answer" == "$2 (HTTP 200)" ]]
}
# wait_probe PATH BODY: until PATH answers 200 with BODY; on a timeout, says what it answered.
wait_probe() {
  local t0=$SECONDS
  until probe "$1" "$2"; do
    ((SECONDS - t0 < TIMEOUT)) || { save_logs; tail -n 20 "$LOG" >&2; fail "$1 still answers '$last_answer' after ${TIMEOUT}s, not '$2'"; }
    sleep 0.2
  done
}
wait_probe /healthz ok
wait_probe /readyz "ready (leader)"
nsb_say "/healthz: ok; /readyz: ready (leader) ($((SECONDS - t_start)) s after the start)"

pid="$(nsb_podman inspect --format '{{.State.Pid}}' "$CTR")"
status="$(cat "/proc/$pid/status")"
grep -qE '^Uid:\s+65532\s+65532\s+65532\s+65532$' <<<"$status" || fail "the process does not run as uid 65532: $(grep ^Uid <<<"$status")"
grep -qE '^Gid:\s+65532\s+65532\s+65532\s+65532$' <<<"$status" || fail "the process does not run as gid 65532: $(grep ^Gid <<<"$status")"
grep -qE '^CapEff:\s+0+$' <<<"$status" || fail "the process has capabilities: $(grep ^CapEff <<<"$status")"
grep -qE '^NoNewPrivs:\s+1$' <<<"$status" || fail "no_new_privs is not set"
awk '$2 == "/" { print $4 }' "/proc/$pid/mounts" | tail -n 1 | grep -E >/dev/null '(^|,)ro(,|$)' || fail "the root filesystem is writable"
nsb_say "process $pid: uid/gid 65532, no capabilities, no_new_privs, read-only root"

lease_holder() {
  kube "$NSB_APISERVER_URL/apis/coordination.k8s.io/v1/namespaces/$POD_NAMESPACE/leases/namespace-baseline-reconciler" |
    jq -r '.spec.holderIdentity // "none"'
}
[[ "$(lease_holder)" == "$POD_NAME" ]] || fail "the Lease is held by $(lease_holder), not $POD_NAME"

nsb_say "namespaces nsb-image-a and -b labelled baseline=guarded, nsb-image-c not; the seed baseline"
for ns in a b c; do
  label='{}'
  [[ $ns == c ]] || label='{"baseline":"guarded"}'
  apply "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"nsb-image-$ns\",\"labels\":$label}}"
done
apply_file deploy/examples/seed.yaml
baseline="$(yaml_docs deploy/examples/seed.yaml | jq -r .metadata.name)"
netpols() { kube "$NSB_APISERVER_URL/apis/networking.k8s.io/v1/namespaces/$1/networkpolicies" | jq -r '[.items[].metadata.name] | sort | join(",")'; }
wall="nsb-$baseline-allow-dns,nsb-$baseline-default-deny"
converged() {
  running
  [[ "$(netpols nsb-image-a)" == "$wall" && "$(netpols nsb-image-b)" == "$wall" ]] || return 1
  kube "$NSB_APISERVER_URL/apis/hedronite.io/v1alpha1/namespacebaselines/$baseline" | jq -e '
    .status.namespaces == 2 and
    (.status.conditions // [] | any(.type == "Ready" and .status == "True" and .reason == "WallInPlace"))' >/dev/null
}
t0=$SECONDS
wait_for "the wall in nsb-image-a and nsb-image-b, and Ready/WallInPlace" converged
[[ -z "$(netpols nsb-image-c)" ]] || fail "nsb-image-c (not labelled) got NetworkPolicies: $(netpols nsb-image-c)"
nsb_say "converged within $((SECONDS - t0)) s: $wall in the 2 labelled namespaces, none in nsb-image-c, Ready/WallInPlace"

uid_of() { kube "$NSB_APISERVER_URL/apis/networking.k8s.io/v1/namespaces/nsb-image-a/networkpolicies/nsb-$baseline-default-deny" | jq -r '.metadata.uid // ""'; }
old_uid="$(uid_of)"
kube -o /dev/null -X DELETE "$NSB_APISERVER_URL/apis/networking.k8s.io/v1/namespaces/nsb-image-a/networkpolicies/nsb-$baseline-default-deny"
repaired() { running; local u; u="$(uid_of)"; [[ -n "$u" && "$u" != "$old_uid" ]]; }
wait_for "the deleted wall to come back" repaired
nsb_say "deleted nsb-image-a/nsb-$baseline-default-deny; recreated from the watch event"

user="system:serviceaccount:$POD_NAMESPACE:$SA_NAME"
requests="$(jq -c --arg u "$user" 'select(.user.username == $u)' "$NSB_AUDIT_LOG" | wc -l)"
forbidden="$(jq -c --arg u "$user" 'select(.user.username == $u and .responseStatus.code == 403)' "$NSB_AUDIT_LOG")"
((requests > 0)) || fail "no request of $user in the audit log: the in-cluster token was not used"
[[ -z "$forbidden" ]] || { echo "$forbidden" >&2; fail "requests of $user were refused by RBAC"; }
nsb_say "audit log: $requests requests as $user (the mounted token), none refused"

nsb_say "SIGTERM to the container (as the kubelet stops it)"
t0=$SECONDS
nsb_podman kill --signal TERM "$CTR" >/dev/null
exited() { [[ "$(nsb_podman inspect --format '{{.State.Running}}' "$CTR")" == false ]]; }
TIMEOUT=40 wait_for "the reconciler to exit after SIGTERM (it lets the writes in flight end, at most 12.5 s, then releases the Lease, retried for up to 5 s)" exited
exit_code="$(nsb_podman inspect --format '{{.State.ExitCode}}' "$CTR")"
save_logs
[[ "$exit_code" == 0 ]] || { tail -n 20 "$LOG" >&2; fail "exit code $exit_code after SIGTERM"; }
[[ "$(lease_holder)" == none ]] || fail "the Lease is still held by $(lease_holder) after the exit"
grep -q '"lease released"' "$LOG" || fail "the log does not say the Lease was released"
! grep -q 'panicked' "$LOG" || fail "the reconciler panicked (see $LOG)"
jq -e . "$LOG" >/dev/null 2>&1 || fail "the log is not JSON lines (--log-format=json)"
nsb_say "exited 0 $((SECONDS - t0)) s after SIGTERM; the Lease is released; $(wc -l <"$LOG") JSON log lines"

# --- 4. no CA bundle in the image -------------------------------------------------------------------
nsb_say "the image has no CA bundle: a kubeconfig without a CA fails, the CA given with SSL_CERT_FILE works"
mkdir -p "$WORK/kube"
cat >"$WORK/kube/config" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: nsb
    cluster:
      server: $NSB_APISERVER_URL
users:
  - name: admin
    user:
      token: $NSB_ADMIN_TOKEN
contexts:
  - name: nsb
    context: {cluster: nsb, user: admin}
current-context: nsb
EOF
cp "$NSB_CA_FILE" "$WORK/kube/ca.crt"
chmod 0755 "$WORK/kube"
chmod 0644 "$WORK/kube"/*
plan() {
  local name="nsb-image-plan-$1-$$"
  shift
  CONTAINERS+=("$name")
  nsb_podman run --name "$name" "${RUN[@]}" -v "$WORK/kube:/kube:ro" -e KUBECONFIG=/kube/config "$@" \
    "$PULLED" plan --cluster >"$WORK/plan-$name.log" 2>&1
}
rc=0; plan no-ca || rc=$?
[[ $rc == 1 ]] || { cat "$WORK"/plan-nsb-image-plan-no-ca-*.log >&2; fail "plan --cluster with a kubeconfig without CA exited $rc, expected 1"; }
grep -qi 'certificate' "$WORK"/plan-nsb-image-plan-no-ca-*.log || { cat "$WORK"/plan-nsb-image-plan-no-ca-*.log >&2; fail "the failure does not name the missing CA certificates"; }
echo "   without a CA: exit 1: $(grep -i -m1 -o '[^"]*certificate[^"]*' "$WORK"/plan-nsb-image-plan-no-ca-*.log | head -c 200)"
rc=0; plan ssl-cert-file -e SSL_CERT_FILE=/kube/ca.crt || rc=$?
[[ $rc == 0 ]] || { cat "$WORK"/plan-nsb-image-plan-ssl-cert-file-*.log >&2; fail "plan --cluster with SSL_CERT_FILE exited $rc, expected 0 (the wall is in place: nothing to change)"; }
echo "   with SSL_CERT_FILE=/kube/ca.crt: exit 0, nothing to change"
nsb_say "image tests passed"
