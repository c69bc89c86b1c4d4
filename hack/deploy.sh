#!/usr/bin/env bash
# `make deploy` and `make undeploy`: bosun in a cluster, from the kustomize config.
#
# Usage: deploy.sh deploy | undeploy | render | resources | forget-local-run
#
# Environment (make sets it):
#   KUBECONFIG   the cluster
#   IMG          the bosun image (default localhost/bosun:dev)
#   RUNNER_IMG   the Backup runner image (default localhost/bosun-runner:dev)
#   LOCAL        true: the local cluster (hack/controlplane). The overlay is
#                config/local (bosun on the real node, the local database images)
#                and both images are first loaded from the container tool into the
#                real node's containerd, which pulls from no registry. false:
#                config/default, images pulled by the cluster (make docker-push).
#   BOSUN_CLUSTER_DIR  the local cluster's state directory (LOCAL=true)
#   KEEP_CRDS    undeploy: true removes everything but the CRDs (and so keeps
#                every custom resource)
#
# The overlay it applies is written to target/deploy/ (DEPLOY_DIR moves it) (kustomization.yaml naming
# the base and the images); `deploy.sh render` prints what it renders, and
# `deploy.sh resources` the custom resources of bosun's kinds in the cluster.
#
# forget-local-run (make install and deploy run it first): what a `make run` that did
# not stop cleanly (killed) left pointing at its URL — VoteConfig's conversion, and
# the webhook configurations it made — goes back to naming the webhook Service, as
# config/ ships it (a clean stop of `make run` does this itself): the apiserver
# refuses a webhook with both a URL and a Service, which an apply would leave.
#
# undeploy removes what deploy applied. Deleting a CRD deletes every resource of
# its kind, and the garbage collector then deletes what runs for them (their
# Deployments, Services, database StatefulSets; claims of data and credentials
# stay, as they are not owned). So while any custom resource of bosun's kinds
# exists, undeploy lists them and removes nothing: delete them yourself first, or
# pass KEEP_CRDS=true to remove only bosun and keep the CRDs and the resources.
set -euo pipefail

here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
repo=$(dirname "$here")
img=${IMG:-localhost/bosun:dev}
runner_img=${RUNNER_IMG:-localhost/bosun-runner:dev}
local_cluster=${LOCAL:-true}
overlay=${DEPLOY_DIR:-$repo/target/deploy}
namespace=bosun-system
deployment=bosun-controller-manager
default_runner_img=localhost/bosun-runner:dev

log() { echo "deploy.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# kustomize's images entry for an image reference: name plus tag or digest.
image_entry() { # REF
  local ref=$1 name tag
  if [[ $ref == *@* ]]; then
    printf '  newName: %s\n  digest: %s\n' "${ref%%@*}" "${ref#*@}"
    return
  fi
  name=$ref tag=latest
  if [[ ${ref##*/} == *:* ]]; then name=${ref%:*} tag=${ref##*:}; fi
  printf '  newName: %s\n  newTag: "%s"\n' "$name" "$tag"
}

write_overlay() {
  local base=config/default
  [ "$local_cluster" != true ] || base=config/local
  mkdir -p "$overlay"
  local from
  from=$(realpath --relative-to="$overlay" "$repo/$base")
  {
    echo "# Written by hack/deploy.sh for make deploy; IMG=$img RUNNER_IMG=$runner_img."
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources:"
    echo "- $from"
    echo "images:"
    echo "- name: localhost/bosun"
    image_entry "$img"
    if [ "$runner_img" != "$default_runner_img" ]; then
      cat <<EOF
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: $deployment
      namespace: $namespace
    spec:
      template:
        spec:
          containers:
          - name: manager
            env:
            - name: BOSUN_RUNNER_IMAGE
              value: $runner_img
EOF
    fi
  } >"$overlay/kustomization.yaml"
}

cmd_forget_local_run() {
  kubectl patch crd voteconfigs.voting.schoolofdevops.com --type=merge -p \
    '{"spec":{"conversion":{"webhook":{"clientConfig":{"url":null,"service":{"namespace":"bosun-system","name":"bosun-webhook-service","path":"/convert","port":443}}}}}}' \
    >/dev/null 2>&1 || true
  local kind url
  for kind in validatingwebhookconfiguration/bosun-validating-webhook-configuration \
    mutatingwebhookconfiguration/bosun-mutating-webhook-configuration; do
    url=$(kubectl get "$kind" --ignore-not-found -o jsonpath='{.webhooks[0].clientConfig.url}' 2>/dev/null || true)
    if [ -n "$url" ]; then
      log "removing $kind, left by a make run (it pointed at $url)"
      kubectl delete "$kind" --ignore-not-found >/dev/null
    fi
  done
}

cmd_deploy() {
  cmd_forget_local_run
  write_overlay
  if [ "$local_cluster" = true ]; then
    "$here/docker-build.sh" load "$img" "$runner_img" --cluster "${BOSUN_CLUSTER_DIR:?BOSUN_CLUSTER_DIR is not set}" ||
      die "loading the images into the real nodes failed; build them first: make docker-build IMG=$img RUNNER_IMG=$runner_img"
  fi
  log "applying $overlay ($img)"
  kubectl apply --server-side --force-conflicts -k "$overlay" >&2
  kubectl wait --for=condition=Established --timeout=60s -f "$repo/config/crd/bases" >/dev/null
  kubectl -n "$namespace" rollout status "deployment/$deployment" --timeout=180s >&2 ||
    die "bosun did not become ready; kubectl -n $namespace describe pods, kubectl -n $namespace logs deployment/$deployment"
  # Ready pods are not yet a routed Service: until the webhooks answer, every WebApp
  # would be refused (failurePolicy Fail). A server-side dry run goes through them
  # and stores nothing.
  for _ in $(seq 60); do
    if kubectl create --dry-run=server -n default -o name -f - >/dev/null 2>&1 <<EOF; then
apiVersion: apps.example.com/v1
kind: WebApp
metadata: {name: bosun-deploy-check}
spec: {image: "nginx:1.25", replicas: 1}
EOF
      log "bosun is running and its webhooks answer"
      return
    fi
    sleep 1
  done
  die "the webhooks do not answer through Service $namespace/bosun-webhook-service after 60 s"
}

# Every custom resource of bosun's kinds, as kind/name -n namespace lines.
custom_resources() {
  local crd
  for crd in $(kubectl get -f "$repo/config/crd/bases" -o name --ignore-not-found 2>/dev/null); do
    crd=${crd#*/}
    kubectl get "$crd" -A --ignore-not-found \
      -o jsonpath='{range .items[*]}{.kind}/{.metadata.name} -n {.metadata.namespace}{"\n"}{end}'
  done
}

# The rendered overlay without its CustomResourceDefinitions.
without_crds() {
  awk 'function flush() { if (doc != "" && !crd) printf "%s", doc; doc = ""; crd = 0 }
       /^---$/ { flush(); print "---"; next }
       /^kind: CustomResourceDefinition$/ { crd = 1 }
       { doc = doc $0 "\n" }
       END { flush() }'
}

cmd_undeploy() {
  [ -e "$overlay/kustomization.yaml" ] || write_overlay
  local rendered
  rendered=$(kubectl kustomize "$overlay")
  if [ "${KEEP_CRDS:-false}" = true ]; then
    log "removing everything but the CRDs"
    without_crds <<<"$rendered" | kubectl delete --ignore-not-found --wait -f - >&2
    return
  fi
  local left
  left=$(custom_resources)
  if [ -n "$left" ]; then
    log "not removing anything: deleting the CRDs would delete these resources, and with them the workloads they run:"
    sed 's/^/  /' <<<"$left" >&2
    die "delete them first if that is what you want, or remove only bosun and keep the CRDs and these resources: make undeploy KEEP_CRDS=true"
  fi
  kubectl delete --ignore-not-found --wait -f - <<<"$rendered" >&2
}

case ${1:-} in
  deploy) cmd_deploy ;;
  undeploy) cmd_undeploy ;;
  render) write_overlay; kubectl kustomize "$overlay" ;;
  resources) custom_resources ;;
  forget-local-run) cmd_forget_local_run ;;
  *) echo "usage: deploy.sh deploy | undeploy | render | resources" >&2; exit 2 ;;
esac
