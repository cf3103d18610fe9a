#!/usr/bin/env bash
# `make push REGISTRY=...`: publish the reconciler image (built by `make image`) and the policy
# (annotated-policy.wasm, from `kwctl annotate`, pushed with `kwctl push`), then print the
# digests and the install commands that pin them. `make push-policy REGISTRY=...`: the policy
# alone (no --image).
#
#   e2e-tests/image/push.sh [--image REF] --policy REF [--platforms LIST] --kwctl PATH
#
# The Makefile checks REGISTRY, finds kwctl (e2e-tests/kubewarden/install.sh) and builds
# annotated-policy.wasm first. The policy is never pushed without kwctl: policy-server refuses
# a module that lacks kwctl's annotation ("Policy is missing protocol version, which is
# required for KubewardenWapc execution mode"). Registry credentials: `podman login` /
# `docker login` (kwctl reads the same ~/.docker/config.json or $REGISTRY_AUTH_FILE as
# docker). TLS_VERIFY=false for a registry without TLS (plain HTTP): podman/buildah's
# --tls-verify=false, and for kwctl a sources file naming the policy's registry insecure.
# SOURCES=FILE: kwctl's sources file for the policy's push (Kubewarden's sources.yaml: a
# registry's own CA under source_authorities, as the PolicyServer's sourceAuthorities).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../control-plane/session.sh
. "$ROOT/e2e-tests/control-plane/session.sh"
# shellcheck source=lib.sh
. "$ROOT/e2e-tests/image/lib.sh"
cd "$ROOT"

image="" policy="" platforms="linux/amd64" kwctl=""
while (($#)); do
  case "$1" in
    --image) image="$2"; shift 2 ;;
    --policy) policy="$2"; shift 2 ;;
    --platforms) platforms="$2"; shift 2 ;;
    --kwctl) kwctl="$2"; shift 2 ;;
    *) echo "push.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$policy" && -n "$kwctl" ]] || { sed -n '7p' "$0" >&2; exit 2; }
[[ -x "$kwctl" ]] || { echo "!! kwctl not found ($kwctl): the policy is published only with kwctl annotate + kwctl push" >&2; exit 1; }
[[ -s annotated-policy.wasm ]] || { echo "!! annotated-policy.wasm missing: make annotated-policy.wasm" >&2; exit 1; }
command -v jq >/dev/null || { echo "!! jq not found (apt-get install jq)" >&2; exit 1; }
read -r -a platform_list <<<"${platforms//,/ }"
tls_verify="${TLS_VERIFY:-true}"
work="$(mktemp -d "${TMPDIR:-/tmp}/nsb-push.XXXXXX")"
trap 'rm -rf "$work"' EXIT

push_policy() {
  local sources=()
  if [[ -n "${SOURCES:-}" ]]; then
    [[ -s "$SOURCES" ]] || { echo "!! SOURCES=$SOURCES: no such kwctl sources file" >&2; exit 1; }
    sources=(--sources-path "$SOURCES")
  elif [[ "$tls_verify" == false ]]; then
    printf 'insecure_sources:\n  - "%s"\n' "${policy%%/*}" >"$work/sources.yaml"
    sources=(--sources-path "$work/sources.yaml")
  fi
  nsb_say "pushing the policy (annotated-policy.wasm) to registry://$policy with $("$kwctl" --version | head -n 1)"
  policy_ref="$("$kwctl" push "${sources[@]}" -o json annotated-policy.wasm "registry://$policy" | jq -r .immutable_ref)"
  [[ "$policy_ref" == *@sha256:* ]] || { echo "!! kwctl push gave no immutable reference: '$policy_ref'" >&2; exit 1; }
}

if [[ -z "$image" ]]; then
  push_policy
  cat <<END

policy: registry://$policy_ref

Install with the chart, pinned by digest:
  --set admissionPolicy.module=registry://$policy_ref
or in deploy/admission-policy.yaml: spec.module: registry://$policy_ref
END
  exit 0
fi

tool="$(nsb_container_tool)"
repository="${image%:*}"
digestfile="$work/digest"

nsb_say "pushing the image $image ($platforms) with $tool"
case "$tool" in
  podman|buildah)
    if ((${#platform_list[@]} > 1)); then
      "$tool" manifest push --all --tls-verify="$tls_verify" --digestfile "$digestfile" "$image" "docker://$image"
    else
      "$tool" push --tls-verify="$tls_verify" --digestfile "$digestfile" "$image" "docker://$image"
    fi
    image_digest="$(cat "$digestfile")"
    ;;
  docker)
    docker push "$image"
    image_digest="$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$image" |
      sed -n "s|^$repository@||p" | sed -n 1p)"
    ;;
esac
[[ "$image_digest" =~ ^sha256:[0-9a-f]{64}$ ]] || { echo "!! no digest for the pushed image: '$image_digest'" >&2; exit 1; }

push_policy

cat <<EOF

image:  $repository@$image_digest
policy: registry://$policy_ref

Install with the chart, both pinned by digest:
  helm install namespace-baseline charts/namespace-baseline --namespace default \\
    --set reconciler.image.repository=$repository \\
    --set reconciler.image.digest=$image_digest \\
    --set admissionPolicy.module=registry://$policy_ref

or in deploy/: image: $repository@$image_digest (reconciler.yaml) and
  spec.module: registry://$policy_ref (admission-policy.yaml)
EOF
