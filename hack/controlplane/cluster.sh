#!/usr/bin/env bash
# A real, local Kubernetes control plane for development and tests: etcd,
# kube-apiserver, kube-controller-manager and kube-scheduler built from the pinned
# upstream sources (build.sh), kwok playing the kubelets of a few fake nodes, and
# one real node beside them (containerd, runc, kubelet, kube-proxy and CoreDNS; its
# machine steps are node.sh's) for the pods that must really run.
#
# Usage: cluster.sh up | down | status | kubeconfig | env
#        cluster.sh sa-kubeconfig NAMESPACE SERVICEACCOUNT [DURATION]
#        cluster.sh restart-apiserver [OUTAGE_SECONDS]
#
# State and logs live in ${BOSUN_CLUSTER_DIR:-<repo>/.cluster}. The supervisor is
# crates/localcluster (`localcluster cluster VERB`; the tests call it as a library).
# This compiles it with cargo's progress and a line every 10 s (a cold build takes
# minutes), with bosun's package selected beside it, so that their common crates
# are compiled with the same features: once for both.
#
# For `up` (make run, make test), bosun's binary is built in the same cargo build
# (`cargo build -p bosun` after it finds everything fresh), and the other cold
# builds start at once beside it, each in the background with its log under
# target/cluster-build/: the Go builds (the control plane's, then the real node's)
# and the node's images. The supervisor's own calls to build.sh and images.sh then
# wait for them (both lock) or, warm, find everything built and return at once.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$repo/hack/controlplane
target=${CARGO_TARGET_DIR:-$repo/target}
logs=$target/cluster-build

# The builds started early, and their children: stopped if this script fails
# before the supervisor takes over (Ctrl-C reaches them anyway, below).
early=()
# shellcheck disable=SC2046 # one pid per word
stop() { local p; for p in "$@"; do stop $(pgrep -P "$p" || true); kill "$p" 2>/dev/null || true; done; }
trap 'stop "${early[@]}"' EXIT
# A background job of a script ignores SIGINT; env gives it back the default, so
# that Ctrl-C stops these builds with everything else.
background() { # LOG COMMAND...
  local log=$1
  shift
  env --default-signal=INT "$@" >/dev/null 2>"$log" &
  early+=($!)
}
if [ "${1:-}" = up ]; then
  mkdir -p "$logs"
  root=false
  [ "$(id -u)" != 0 ] || root=true
  # The node's parts only where it can run at all (the supervisor decides for good).
  background "$logs/go.log" bash -c '"$1/build.sh" && { ! $2 || "$1/build.sh" node; }' - "$here" "$root"
  if $root && command -v mmdebstrap >/dev/null; then
    background "$logs/images.log" "$repo/hack/images.sh" build
  fi
fi

# The newest line of LOG while job PID runs, for the progress line.
beside() { # NAME PID LOG
  kill -0 "$2" 2>/dev/null || return 0
  printf '; beside it, %s: %s' "$1" "$(tail -n 1 "$3" 2>/dev/null | cut -c1-100)"
}

bins=(--bin localcluster)
[ "${1:-}" != up ] || bins+=(--bin bosun)
cargo build --locked --manifest-path "$repo/Cargo.toml" -p bosun-localcluster -p bosun "${bins[@]}" &
build=$!
waited=0
while kill -0 "$build" 2>/dev/null; do
  sleep 1
  waited=$((waited + 1))
  if ((waited % 10 == 0)); then
    line="cluster.sh: still compiling the local cluster's supervisor${bins[3]:+ and bosun} (${waited}s)"
    if ((${#early[@]})); then line+=$(beside "the Go builds" "${early[0]}" "$logs/go.log"); fi
    if ((${#early[@]} > 1)); then line+=$(beside "the images" "${early[1]}" "$logs/images.log"); fi
    echo "$line" >&2
  fi
done
wait "$build"
trap - EXIT
exec "$target/debug/localcluster" cluster "$@"
