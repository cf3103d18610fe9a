#!/usr/bin/env bash
# Writes the Go module that builds kube-apiserver and etcd of another Kubernetes release, for
# the compatibility runs (docs/install.md's table): compat/vX.Y.Z/go.mod and go.sum, with
# k8s.io/kubernetes at that release, each staging module replaced by its published v0.Y.Z tag
# (as ../go.mod does for v1.36), and the etcd server of the version that release's own go.mod
# requires. The two commands are ../cmd/'s, copied in for `go mod tidy` and removed again
# (build.sh copies them in at each build), so that they are written once. Why a module per
# release: one go.mod can hold one k8s.io/kubernetes.
#
#   compat/module.sh v1.30.14     (then commit compat/v1.30.14/; build with
#                                  NSB_K8S_MODULE_DIR=compat/v1.30.14 ../build.sh)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${1:?usage: module.sh vX.Y.Z}"
[[ "$version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "module.sh: not a Kubernetes release: $version" >&2; exit 2; }
staging_tag="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
upstream_mod="$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": *"\([^"]*\)".*/\1/p')"
[[ -s "$upstream_mod" ]] || { echo "module.sh: cannot download k8s.io/kubernetes@$version" >&2; exit 1; }
go_version="$(awk '$1 == "go" { print $2; exit }' "$upstream_mod")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$upstream_mod")"
mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$upstream_mod")
dir="$HERE/$version"
rm -rf "$dir"
mkdir -p "$dir/cmd"
cp -r "$HERE/../cmd/kube-apiserver" "$HERE/../cmd/etcd" "$dir/cmd/"
{
  echo "// kube-apiserver and etcd of Kubernetes $version, for the compatibility runs: written by"
  echo "// ../module.sh $version (k8s.io/kubernetes is not meant to be used as a library: each"
  echo "// staging module is replaced by its published $staging_tag tag; etcd as $version requires)."
  echo "module github.com/namespace-baseline/e2e-tests/control-plane/compat/$version"
  echo
  echo "go $go_version"
  echo
  echo "require ("
  echo "	go.etcd.io/etcd/server/v3 $etcd_version"
  echo "	k8s.io/component-base $staging_tag"
  echo "	k8s.io/kubernetes $version"
  echo ")"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	$m => $m $staging_tag"; done
  echo ")"
} >"$dir/go.mod"
(cd "$dir" && go mod tidy)
rm -rf "$dir/cmd"
echo "$dir"
