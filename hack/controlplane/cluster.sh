#!/usr/bin/env bash
# A real, local Kubernetes control plane for development and tests: etcd,
# kube-apiserver, kube-controller-manager and kube-scheduler built from the pinned
# upstream sources (build.sh), kwok playing the kubelets of a few fake nodes, and
# two real nodes beside them (containerd, runc, kubelet and kube-proxy each, and
# CoreDNS; their machine steps are node.sh's) for the pods that must really run.
#
# Usage: cluster.sh up | down | status | kubeconfig | env
#        cluster.sh sa-kubeconfig NAMESPACE SERVICEACCOUNT [DURATION]
#        cluster.sh restart-apiserver [OUTAGE_SECONDS]
#        cluster.sh node stop|start|partition|heal bosun-node|bosun-node-2
#
# State and logs live in ${BOSUN_CLUSTER_DIR:-<repo>/.cluster}. The supervisor is
# crates/localcluster (`localcluster cluster VERB`; the tests call it as a library).
# This compiles it with cargo's progress and a line every 10 s (a cold build takes
# minutes), with bosun's package selected beside it, so that their common crates
# are compiled with the same features: once for both. For `up` (make run, make
# test) bosun's binary is built in the same cargo build (`make build` after it
# finds everything fresh).
#
# The cold builds after it (the Go builds, the images) run one after the other in
# the supervisor: on 2 cores each keeps both busy (idle under 5%), and side by side
# they took longer in all (980 s to a reconciling bosun instead of 867 s, measured).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
bins=(--bin localcluster)
[ "${1:-}" != up ] || bins+=(--bin bosun)
cargo build --locked --manifest-path "$repo/Cargo.toml" -p bosun-localcluster -p bosun "${bins[@]}" &
build=$!
waited=0
while kill -0 "$build" 2>/dev/null; do
  sleep 1
  waited=$((waited + 1))
  if ((waited % 10 == 0)); then
    echo "cluster.sh: still compiling the local cluster's supervisor${bins[3]:+ and bosun} (${waited}s)" >&2
  fi
done
wait "$build"
exec "$target/debug/localcluster" cluster "$@"
