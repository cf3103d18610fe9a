#!/usr/bin/env bash
# The policy's OCI artifact through a real registry, offline (make registry-tests):
#
# 1. builds (first time) and starts the CNCF distribution registry on 127.0.0.1, filesystem
#    storage in a temporary directory;
# 2. pushes policy.wasm with oras as Kubewarden stores a policy: config
#    application/vnd.wasm.config.v1+json holding `{}`, one layer
#    application/vnd.wasm.content.layer.v1+wasm; the `created` annotation oras adds is pinned,
#    so a second push of the same module (another tag) must give the same digest;
# 3. runs the Rust tests of this directory (oci-client, the library of Kubewarden's
#    policy-fetcher): pulled by digest as policy-server pulls a registry:// module, the module
#    is byte-identical, the media types are Kubewarden's, and Kubewarden's own way of pushing
#    stores the same blobs;
# 4. `make push-policy` (make push's policy half) as a user runs it: kwctl 1.35 annotates
#    policy.wasm with metadata.yml and pushes it; the registry serves annotated-policy.wasm
#    under the printed digest, with the metadata's annotations on the manifest. With a KWCTL
#    that does not exist it must fail before pushing anything, naming kwctl (the module
#    without kwctl's annotation is refused by policy-server).
#
# The registry is stopped by its PID and its directory removed on exit (KEEP_STATE=1 keeps it).
# Environment: CARGO, CARGO_TARGET_DIR, POLICY_WASM (default ./policy.wasm: `make policy.wasm`),
# NSB_CACHE_DIR.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CARGO="${CARGO:-cargo}"
# shellcheck source=../control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
# shellcheck source=lib.sh
. "$ROOT/e2e-tests/registry/lib.sh"
# shellcheck source=../image/lib.sh
. "$ROOT/e2e-tests/image/lib.sh"
cd "$ROOT"

POLICY_WASM="${POLICY_WASM:-$ROOT/policy.wasm}"
[[ -s "$POLICY_WASM" ]] || { echo "!! $POLICY_WASM not found: run \`make policy.wasm\` first" >&2; exit 1; }
command -v jq >/dev/null || { echo "!! jq not found (apt-get install jq)" >&2; exit 1; }
POLICY_REPO=policies/namespace-baseline
CREATED=1970-01-01T00:00:00Z
WASM_CONFIG_MEDIA_TYPE=application/vnd.wasm.config.v1+json
WASM_LAYER_MEDIA_TYPE=application/vnd.wasm.content.layer.v1+wasm

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nsb-registry-tests.XXXXXX")"
mkdir -p "$WORK/registry"
cleanup() {
  local rc=$?
  nsb_registry_stop "$WORK/registry"
  nsb_keep_or_remove "$WORK" "$rc" "registry log: $WORK/registry/registry.log"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nsb_say "building the registry tests (oci-client)"
"$CARGO" test -p namespace-baseline-registry-tests --locked --no-run
nsb_say "oras and the registry (built from the Go module proxy on first use)"
ORAS="$(nsb_oras)"
nsb_registry_start "$WORK/registry"

# oras stores a file under its name (org.opencontainers.image.title of the layer): push a copy
# named policy.wasm wherever POLICY_WASM is.
mkdir -p "$WORK/push"
cp "$POLICY_WASM" "$WORK/push/policy.wasm"
printf '{}' >"$WORK/push/config.json"
push() {
  (cd "$WORK/push" && "$ORAS" push --plain-http --no-tty \
    --config "config.json:$WASM_CONFIG_MEDIA_TYPE" \
    --annotation "org.opencontainers.image.created=$CREATED" \
    --format go-template='{{.digest}}' \
    "$NSB_REGISTRY/$POLICY_REPO:$1" "policy.wasm:$WASM_LAYER_MEDIA_TYPE")
}
nsb_say "oras push policy.wasm ($(stat -c %s "$POLICY_WASM") bytes) to $NSB_REGISTRY/$POLICY_REPO:v$NSB_VERSION"
digest="$(push "v$NSB_VERSION" | tail -n 1)"
[[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || { echo "!! oras push printed no digest: $digest" >&2; exit 1; }
again="$(push "again" | tail -n 1)"
[[ "$again" == "$digest" ]] || { echo "!! a second push of the same module gave $again, the first $digest: the digest is not stable" >&2; exit 1; }
nsb_say "pushed twice, same digest both times: $digest"

# What the registry itself says, over its HTTP API (no oras, no oci-client).
manifest="$(curl -fsS -H "Accept: application/vnd.oci.image.manifest.v1+json" \
  "http://$NSB_REGISTRY/v2/$POLICY_REPO/manifests/$digest")"
echo "$manifest" | jq -c . | sed 's/^/   manifest: /'
[[ "sha256:$(printf '%s' "$manifest" | sha256sum | cut -d' ' -f1)" == "$digest" ]] ||
  { echo "!! the manifest served for $digest does not hash to it" >&2; exit 1; }

nsb_say "pulling it back by digest with oci-client, as Kubewarden's policy-server does"
export NSB_REGISTRY
NSB_POLICY_REF="$NSB_REGISTRY/$POLICY_REPO@$digest" NSB_POLICY_WASM="$POLICY_WASM" NSB_POLICY_CREATED="$CREATED" \
  "$CARGO" test -p namespace-baseline-registry-tests --locked -- --nocapture --test-threads=1

nsb_say "make push-policy, as a user publishes the policy: kwctl annotate, then kwctl push (plain HTTP: TLS_VERIFY=false)"
set +e
out="$(make -s --no-print-directory push-policy REGISTRY="$NSB_REGISTRY/team" TLS_VERIFY=false 2>&1)"
rc=$?
set -e
while IFS= read -r line; do echo "   make push-policy: $line"; done <<<"$out"
[[ $rc == 0 ]] || { echo "!! make push-policy failed (exit $rc)" >&2; exit 1; }
pushed="$(sed -n 's|^policy: registry://||p' <<<"$out")"
[[ "$pushed" =~ ^$NSB_REGISTRY/team/$POLICY_REPO@sha256:[0-9a-f]{64}$ ]] ||
  { echo "!! make push-policy printed no pinned reference: '$pushed'" >&2; exit 1; }
# What the registry serves under that digest: one layer, annotated-policy.wasm byte for byte,
# and the manifest carries the metadata's annotations (what Artifact Hub and renovate read).
manifest="$(curl -fsS -H "Accept: application/vnd.oci.image.manifest.v1+json" \
  "http://$NSB_REGISTRY/v2/team/$POLICY_REPO/manifests/${pushed#*@}")"
layer="$(jq -r '.layers | if length == 1 then .[0].digest else error("\(length) layers") end' <<<"$manifest")"
[[ "sha256:$(curl -fsS "http://$NSB_REGISTRY/v2/team/$POLICY_REPO/blobs/$layer" | sha256sum | cut -d' ' -f1)" == \
  "sha256:$(sha256sum annotated-policy.wasm | cut -d' ' -f1)" ]] ||
  { echo "!! the pushed layer $layer is not annotated-policy.wasm" >&2; exit 1; }
title="$(jq -r '.annotations["io.kubewarden.policy.title"] // empty' <<<"$manifest")"
[[ "$title" == namespace-baseline ]] || { echo "!! the pushed manifest lacks metadata.yml's title annotation: $(jq -c .annotations <<<"$manifest")" >&2; exit 1; }
nsb_say "pushed and served by digest: one layer, annotated-policy.wasm ($(stat -c %s annotated-policy.wasm) bytes), title annotation '$title'"

nsb_say "make push-policy with a KWCTL that does not exist must refuse, naming kwctl, and push nothing"
set +e
out="$(make -s --no-print-directory push-policy REGISTRY="$NSB_REGISTRY/check" TLS_VERIFY=false KWCTL="$WORK/no-such-kwctl" 2>&1)"
rc=$?
set -e
while IFS= read -r line; do echo "   make push-policy: $line"; done <<<"$out"
[[ $rc != 0 ]] || { echo "!! make push-policy succeeded without kwctl" >&2; exit 1; }
grep -q kwctl <<<"$out" || { echo "!! make push-policy failed without naming kwctl" >&2; exit 1; }
catalog="$(curl -fsS "http://$NSB_REGISTRY/v2/_catalog")"
if jq -e '.repositories | any(startswith("check/"))' <<<"$catalog" >/dev/null; then
  echo "!! make push-policy without kwctl pushed something: $catalog" >&2
  exit 1
fi
nsb_say "refused (exit $rc), nothing under check/: $(jq -c .repositories <<<"$catalog")"
nsb_say "registry tests passed"
