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
# crates/localcluster (`localcluster cluster VERB`; the tests call it as a library):
# this builds its CLI (incrementally, with cargo's progress, and a line every 10 s
# while one crate takes long: a cold build takes minutes) and runs it.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cargo build --locked --manifest-path "$repo/Cargo.toml" -p bosun-localcluster --bin localcluster &
build=$!
waited=0
while kill -0 "$build" 2>/dev/null; do
  sleep 1
  waited=$((waited + 1))
  if ((waited % 10 == 0)); then
    echo "cluster.sh: still compiling the local cluster's supervisor (${waited}s)" >&2
  fi
done
wait "$build"
exec cargo run -q --locked --manifest-path "$repo/Cargo.toml" -p bosun-localcluster --bin localcluster -- cluster "$@"
