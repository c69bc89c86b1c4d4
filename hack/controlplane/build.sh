#!/usr/bin/env bash
# Builds the pinned upstream control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok) from the Go module proxy into a
# cache outside the checkout, and prints the cache's bin directory.
# `build.sh node` does the same for the real node's components (kubelet,
# kube-proxy, CoreDNS), kept in a cache directory of their own so that either
# set can change without rebuilding the other.
#
# The cache key is the pinned versions plus a hash of the wrapper modules'
# go.mod/go.sum, so every clone on this machine reuses one build and a version
# bump builds into a fresh directory. A finished build is published by an atomic
# rename, so an interrupted build never looks complete.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${BOSUN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/bosun}
set_=${1:-controlplane}
case $set_ in
  controlplane)
    key=$(cd "$here" && cat versions.env etcd/go.mod kube/go.mod kwok/go.mod etcd/go.sum kube/go.sum kwok/go.sum | sha256sum | cut -c1-12)
    dest="$cache_root/controlplane/k8s-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_${key}"
    bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
    ;;
  node)
    coredns_version=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" { print $3 }' "$here/coredns/go.mod")
    key=$(cd "$here" && cat versions.env node/go.mod coredns/go.mod coredns/main.go node/go.sum coredns/go.sum | sha256sum | cut -c1-12)
    dest="$cache_root/node/k8s-${KUBE_VERSION}_coredns-${coredns_version}_${key}"
    bins=(kubelet kube-proxy coredns)
    ;;
  *) echo "usage: $0 [controlplane|node]" >&2; exit 2 ;;
esac

complete() {
  local b
  for b in "${bins[@]}"; do [ -x "$dest/bin/$b" ] || return 1; done
  [ "$set_" != controlplane ] || [ -d "$dest/stages" ]
}

if complete; then
  echo "$dest/bin"
  exit 0
fi

command -v go >/dev/null || { echo "build.sh: go is not installed (needed to build the control plane)" >&2; exit 1; }

mkdir -p "$(dirname "$dest")"
# One build of a set at a time (two clones starting their clusters at once share
# the cache): a second caller waits here for the first, then finds it complete.
exec 9>"$(dirname "$dest")/.lock"
if ! flock -n 9; then
  echo "build.sh: another build of the $set_ set is running; waiting for it" >&2
  flock 9
fi
if complete; then
  echo "$dest/bin"
  exit 0
fi
work=$(mktemp -d "$(dirname "$dest")/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/stages"

# No DWARF from the compiler: the linker's -w would drop it anyway, and not making
# it saves about an eighth of the compile (CoreDNS: 81 s of CPU instead of 94).
export CGO_ENABLED=0 GOFLAGS="-mod=mod -gcflags=all=-dwarf=false" GOTOOLCHAIN=local
start=$(date +%s)
log() { echo "build.sh: $*" >&2; }

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build_controlplane() {
  log "building etcd $ETCD_VERSION"
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$work/bin/etcd" .)

  log "building kube-apiserver, kube-controller-manager, kube-scheduler $KUBE_VERSION"
  (cd "$here/kube" && go build -trimpath -ldflags "$kube_ldflags" -o "$work/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler)

  log "building kwok $KWOK_VERSION"
  (cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$work/bin/kwok" sigs.k8s.io/kwok/cmd/kwok)

  # kwok's own stage definitions (pod/node lifecycles, volume binding) ship in its
  # module; take them from there rather than keeping copies in this repository.
  kwok_src=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  cp -r "$kwok_src/kustomize/stage/." "$work/stages/"
  chmod -R u+w "$work/stages"
}

# kubelet and kube-proxy of the control plane's release (the wrapper module
# pins the same k8s.io/kubernetes version with the same replaces), and CoreDNS.
build_node() {
  log "building kubelet, kube-proxy $KUBE_VERSION"
  (cd "$here/node" && go build -trimpath -ldflags "$kube_ldflags" -o "$work/bin/" \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy)
  log "building coredns $coredns_version (the plugins the node's Corefile uses: coredns/main.go)"
  (cd "$here/coredns" && go build -trimpath -ldflags "-s -w" -o "$work/bin/coredns" .)
}

"build_$set_"

echo "$(( $(date +%s) - start ))" > "$work/build-seconds"
# Another build of the same key may have finished meanwhile: keep the first.
if complete; then
  rm -rf "$work"
else
  rm -rf "$dest"
  mv "$work" "$dest"
fi
trap - EXIT
log "built in $(cat "$dest/build-seconds")s into $dest"
echo "$dest/bin"
