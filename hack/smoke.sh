#!/usr/bin/env bash
# The smoke test of an install of bosun: the same steps on the local cluster
# (`make smoke`) and on staging (.github/workflows/ci.yaml, on main).
#
# Usage: smoke.sh [all] | install | check | uninstall
#   install    bosun from charts/bosun: `helm upgrade --install --wait` (the CRDs
#              applied first, unless APPLY_CRDS=false: Helm never upgrades a chart's crds/)
#   check      config/samples/staging-platform.yaml applied into SMOKE_NAMESPACE must be
#              Ready within SMOKE_TIMEOUT; if it is not, what failed is printed (its
#              status, its children, the namespace's events, bosun's log). The namespace
#              (and so the platform, its database and its claims) is deleted either way.
#   uninstall  `helm uninstall` of the release, and its namespace.
#   all        install and check; on the local cluster (LOCAL=true), uninstall too.
#
# Environment:
#   KUBECONFIG         the cluster (required)
#   IMG                bosun's image (default localhost/bosun:dev): the chart's image.repository/tag
#   RUNNER_IMG         the Backup runner's image (default localhost/bosun-runner:dev, bosun's
#                      own default; another one becomes --runner-image)
#   RELEASE            the Helm release (default bosun)
#   RELEASE_NAMESPACE  its namespace (default bosun-system)
#   SMOKE_NAMESPACE    the platform's namespace (default bosun-smoke): made by the check,
#                      labelled bosun.dev/smoke=true, and deleted by it; a namespace of that
#                      name without the label is refused, never deleted
#   SMOKE_SAMPLE       the platform (default config/samples/staging-platform.yaml)
#   SMOKE_TIMEOUT      how long it may take to become Ready (default 300s)
#   HELM               the helm program (default: helm on PATH, else hack/backends/build.sh helm)
#   HELM_ARGS          more arguments for helm upgrade (split on spaces), e.g.
#                      "-f staging-values.yaml --timeout 10m"
#   APPLY_CRDS         true (default unless LOCAL): kubectl apply --server-side the chart's CRDs
#   LOCAL              true: the local cluster (hack/controlplane, BOSUN_CLUSTER_DIR), see below
#
# The chart is one per cluster: its ClusterRole, ClusterRoleBinding and webhook
# configurations have fixed names. Before installing, install refuses when any of them
# belongs to something else (another release, `make deploy`), naming it.
#
# LOCAL=true (make smoke) is the local cluster, which `make test` shares: its e2e tests
# run bosuns of their own and install the chart themselves (crates/bosun/tests/install.rs,
# release bosun in bosun-system). So here:
# - the images are loaded into the real node (hack/docker-build.sh load, as make deploy
#   does), and RELEASE_NAMESPACE sends its pods there (the annotations config/local gives
#   bosun-system); the platform's pods run on the fake nodes;
# - bosun watches SMOKE_NAMESPACE only (--namespaces), and the chart's webhooks are off:
#   their configurations would send every WebApp of the cluster to this bosun
#   (failurePolicy Fail), the tests' ones included;
# - the CRDs are left as they are (Helm creates them only when missing);
# - the ClusterRole the e2e tests apply (config/rbac/role.yaml, the chart's own rules) is
#   adopted for the install (helm --take-ownership) and put back as it was after the
#   uninstall;
# - `all` uninstalls at the end, so no bosun of the smoke test stays on the real node
#   and the tests can install the chart again. On staging the release stays: it is
#   the staging deployment.
set -euo pipefail

here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
repo=$(dirname "$here")
chart=$repo/charts/bosun
img=${IMG:-localhost/bosun:dev}
default_runner_img=localhost/bosun-runner:dev
runner_img=${RUNNER_IMG:-$default_runner_img}
release=${RELEASE:-bosun}
release_ns=${RELEASE_NAMESPACE:-bosun-system}
smoke_ns=${SMOKE_NAMESPACE:-bosun-smoke}
sample=${SMOKE_SAMPLE:-$repo/config/samples/staging-platform.yaml}
timeout=${SMOKE_TIMEOUT:-300s}
local_cluster=${LOCAL:-false}
apply_crds=${APPLY_CRDS:-$([ "$local_cluster" = true ] && echo false || echo true)}
smoke_label=bosun.dev/smoke

# What runs on exit, last added first (each is harmless when there is nothing to do).
cleanups=()
on_exit() {
  local rc=$? i
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do "${cleanups[i]}" || rc=1; done
  exit "$rc"
}
trap on_exit EXIT

started=$(date +%s)
log() { echo "smoke.sh [$(($(date +%s) - started))s]: $*" >&2; }
die() { log "$*"; exit 1; }

[ -n "${KUBECONFIG:-}" ] || die "KUBECONFIG is not set: which cluster?"
[ -f "$sample" ] || die "no sample at $sample"

helm_bin() {
  if [ -n "${HELM:-}" ]; then echo "$HELM"; return; fi
  if command -v helm >/dev/null; then command -v helm; return; fi
  echo "$("$here/backends/build.sh" helm)/helm"
}

# The chart's image.repository and image.tag for an image reference (the chart has no
# digest field).
image_values() { # REF
  local ref=$1 name=$1 tag=latest
  [[ $ref != *@* ]] || die "IMG=$ref: the chart takes a repository and a tag, not a digest"
  if [[ ${ref##*/} == *:* ]]; then name=${ref%:*} tag=${ref##*:}; fi
  printf 'image:\n  repository: "%s"\n  tag: "%s"\n' "$name" "$tag"
}

# The values this install adds to the chart's defaults and HELM_ARGS.
write_values() { # FILE
  local args=()
  [ "$runner_img" = "$default_runner_img" ] || args+=("--runner-image=$runner_img")
  [ "$local_cluster" != true ] || args+=("--namespaces=$smoke_ns")
  {
    image_values "$img"
    if [ "$local_cluster" = true ]; then
      printf 'webhook:\n  enabled: false\n'
    fi
    if ((${#args[@]})); then
      echo "extraArgs:"
      printf -- '- "%s"\n' "${args[@]}"
    fi
  } >"$1"
}

# What the chart makes, as JSON objects one after another (kubectl's -o json of a stream).
render() { # VALUES-FILE
  "$(helm_bin)" template "$release" "$chart" -n "$release_ns" -f "$1" | kubectl create --dry-run=client -o json -f -
}

# The cluster-scoped objects of a rendering (kind.group/name), whose names are fixed.
cluster_scoped() { # RENDERED-JSON
  kubectl create --dry-run=client -o name -f "$1" |
    grep -E '^(clusterrole|clusterrolebinding|validatingwebhookconfiguration|mutatingwebhookconfiguration)\.' || true
}

# The rules of ClusterRole NAME among JSON objects, in one canonical line.
rules_of() { # NAME < JSON...
  python3 -c '
import json, sys
text, at, decoder = sys.stdin.read(), 0, json.JSONDecoder()
while text[at:].strip():
    o, end = decoder.raw_decode(text[at:].lstrip())
    at = len(text) - len(text[at:].lstrip()) + end
    if o.get("kind") == "ClusterRole" and o["metadata"]["name"] == sys.argv[1]:
        print(json.dumps(o.get("rules", []), sort_keys=True))
' "$1"
}

# Who an existing object belongs to: "release NS/NAME" (Helm's annotations), else its
# field managers.
owner_of() { # KIND/NAME
  kubectl get "$1" -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-namespace}/{.metadata.annotations.meta\.helm\.sh/release-name}{"\n"}{range .metadata.managedFields[*]}{.manager}{" "}{end}'
}

# Where preflight keeps what it adopted until the uninstall puts it back: beside the
# local cluster's state, so that it goes with the cluster (LOCAL only).
adopted_dir() { echo "${BOSUN_CLUSTER_DIR:?BOSUN_CLUSTER_DIR is not set}/smoke-adopted/$release_ns.$release"; }

# Before installing: every cluster-scoped object the chart would make is absent or this
# release's, or (LOCAL) the e2e tests' copy of bosun's ClusterRole with the chart's own
# rules, which is saved and adopted (take_ownership=true), to be put back after the
# uninstall. Anything else is refused, naming its owner.
take_ownership=false
preflight() { # VALUES-FILE
  local rendered obj out helm_owner managers conflicts=()
  rendered=$(mktemp)
  render "$1" >"$rendered"
  for obj in $(cluster_scoped "$rendered"); do
    out=$(owner_of "$obj" 2>/dev/null) || continue   # absent
    helm_owner=$(head -n 1 <<<"$out")
    managers=$(tail -n +2 <<<"$out")
    if [ "$helm_owner" = "$release_ns/$release" ]; then continue; fi
    if [ "$helm_owner" != / ]; then
      conflicts+=("$obj belongs to Helm release ${helm_owner#*/} in namespace ${helm_owner%%/*}")
    elif [ "$local_cluster" = true ] && [ "$obj" = clusterrole.rbac.authorization.k8s.io/bosun-manager-role ] && [[ " $managers " == *" bosun-e2e "* ]]; then
      # The tests' bosuns run with it: installing must not change what they may do.
      if [ "$(kubectl get "$obj" -o json | rules_of bosun-manager-role)" != "$(rules_of bosun-manager-role <"$rendered")" ]; then
        conflicts+=("$obj, as the e2e tests applied it (config/rbac/role.yaml), has rules other than the chart's copy (charts/bosun/files/rbac; make manifests writes both); installing would change the tests' permissions")
        continue
      fi
      mkdir -p "$(adopted_dir)"
      kubectl get "$obj" -o json >"$(adopted_dir)/${obj//\//_}.json"
      take_ownership=true
      log "$obj is the e2e tests' copy: adopted for the install, put back after the uninstall"
    else
      conflicts+=("$obj exists, written by: ${managers:-?}(make deploy's? make undeploy KEEP_CRDS=true removes that bosun)")
    fi
  done
  rm -f "$rendered"
  if ((${#conflicts[@]})); then
    log "bosun's chart installs once per cluster, and these objects of it are someone else's:"
    printf '  %s\n' "${conflicts[@]}" >&2
    die "smoke that install instead (RELEASE and RELEASE_NAMESPACE naming it), or remove it first"
  fi
}

# Puts back what preflight adopted, as it was before (the uninstall deleted it).
restore_adopted() {
  [ "$local_cluster" = true ] && [ -d "$(adopted_dir)" ] || return 0
  local f
  for f in "$(adopted_dir)"/*.json; do
    [ -e "$f" ] || continue
    python3 - "$f" <<'EOF' | kubectl apply --server-side --force-conflicts --field-manager=bosun-e2e -f - >&2
import json, sys
# As kubectl get printed it, made applicable: no server-set fields.
obj = json.load(open(sys.argv[1]))
for k in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
    obj["metadata"].pop(k, None)
json.dump(obj, sys.stdout)
EOF
    log "put back $(basename "$f" .json | tr _ /)"
    rm -f "$f"
  done
  rmdir "$(adopted_dir)" "$(dirname "$(adopted_dir)")" 2>/dev/null || true
}

# LOCAL: the images into the real node, and the release's namespace sending its pods
# there (what config/local does for bosun-system).
prepare_local() {
  "$here/docker-build.sh" load "$img" "$runner_img" --cluster "${BOSUN_CLUSTER_DIR:?BOSUN_CLUSTER_DIR is not set (LOCAL=true is the local cluster)}" ||
    die "loading the images into the real nodes failed; build them first: make docker-build IMG=$img RUNNER_IMG=$runner_img"
  kubectl apply -f - >&2 <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $release_ns
  annotations:
    scheduler.alpha.kubernetes.io/node-selector: bosun.dev/real-node=true
    scheduler.alpha.kubernetes.io/defaultTolerations: '[{"key":"bosun.dev/real-node","operator":"Equal","value":"true","effect":"NoSchedule"}]'
EOF
}

cmd_install() {
  local helm values
  helm=$(helm_bin)
  values=$(mktemp)
  write_values "$values"
  preflight "$values"
  if [ "$local_cluster" = true ]; then prepare_local; fi
  if [ "$apply_crds" = true ]; then
    log "applying the chart's CRDs"
    kubectl apply --server-side --force-conflicts -f "$chart/crds" >&2
    kubectl wait --for=condition=Established --timeout=60s -f "$chart/crds" >/dev/null
  fi
  local args=(upgrade --install "$release" "$chart" -n "$release_ns" -f "$values" --wait --timeout 5m)
  [ "$local_cluster" = true ] || args+=(--create-namespace)
  [ "$take_ownership" != true ] || args+=(--take-ownership)
  # shellcheck disable=SC2206 # HELM_ARGS is split on spaces, as documented
  args+=(${HELM_ARGS:-})
  log "helm ${args[*]} ($img)"
  "$helm" "${args[@]}" >&2 || {
    report_bosun
    rm -f "$values"
    die "helm upgrade --install failed"
  }
  rm -f "$values"
  log "bosun is running: release $release in namespace $release_ns"
}

# bosun's pods and the end of each one's log.
report_bosun() {
  echo "--- bosun in $release_ns" >&2
  kubectl -n "$release_ns" get deployment,pods -o wide >&2 || true
  local pod
  for pod in $(kubectl -n "$release_ns" get pods -l control-plane=controller-manager -o name 2>/dev/null); do
    echo "--- $pod (last 30 lines)" >&2
    kubectl -n "$release_ns" logs "$pod" --tail=30 >&2 || true
  done
}

# What explains a platform that is not Ready: its status, its children, the events.
report_platform() { # PLATFORM
  echo "--- $1" >&2
  kubectl -n "$smoke_ns" describe "$1" >&2 || true
  echo "--- what it made" >&2
  kubectl -n "$smoke_ns" get postgresql,statefulset,deployment,service,pvc,pods,backup,ingress -o wide >&2 || true
  echo "--- events in $smoke_ns" >&2
  kubectl -n "$smoke_ns" get events --sort-by=.lastTimestamp >&2 || true
  report_bosun
}

# Deletes the smoke test's namespace (the platform first, so that bosun, still running,
# sees it go), bounded.
cleanup_platform() {
  kubectl get namespace "$smoke_ns" >/dev/null 2>&1 || return 0
  log "deleting namespace $smoke_ns"
  kubectl -n "$smoke_ns" delete -f "$sample" --ignore-not-found --wait --timeout=120s >&2 ||
    log "the platform was not gone within 120s"
  kubectl delete namespace "$smoke_ns" --wait --timeout=180s >&2 ||
    log "namespace $smoke_ns was not gone within 180s: kubectl get namespace $smoke_ns -o yaml says what holds it"
}

cmd_check() {
  local label platform
  if kubectl get namespace "$smoke_ns" >/dev/null 2>&1; then
    label=$(kubectl get namespace "$smoke_ns" -o jsonpath="{.metadata.labels.${smoke_label//./\\.}}")
    [ "$label" = true ] ||
      die "namespace $smoke_ns exists and is not the smoke test's (no label $smoke_label=true): set SMOKE_NAMESPACE to another"
    log "namespace $smoke_ns is left from an earlier run: deleting it first"
    cleanup_platform
  fi
  cleanups+=(cleanup_platform)
  # (bosun.dev/nodes=fake: on the local cluster, the platform's pods go to the fake
  # nodes, as the check is of bosun, not of its images; elsewhere it means nothing)
  kubectl create -f - >&2 <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $smoke_ns
  labels: {$smoke_label: "true", bosun.dev/nodes: fake}
EOF
  platform=$(kubectl -n "$smoke_ns" apply -f "$sample" -o name)
  log "$platform applied in $smoke_ns; waiting up to $timeout for Ready"
  local applied=$SECONDS
  if ! kubectl -n "$smoke_ns" wait --for=condition=Ready "$platform" --timeout="$timeout" >&2; then
    report_platform "$platform"
    die "FAILED: $platform in $smoke_ns is not Ready after $timeout"
  fi
  log "$platform is Ready after $((SECONDS - applied))s"
  kubectl -n "$smoke_ns" get "$platform" -o wide >&2
  cleanup_platform
}

cmd_uninstall() {
  local helm
  helm=$(helm_bin)
  log "helm uninstall $release -n $release_ns"
  "$helm" uninstall "$release" -n "$release_ns" --ignore-not-found --wait >&2
  restore_adopted
  # What bosun made at run time there (its certificate Secret, its Lease) goes with it.
  kubectl delete namespace "$release_ns" --ignore-not-found --wait --timeout=120s >&2
}

cmd_all() {
  if [ "$local_cluster" = true ]; then
    # Also when the install or the check fails: no bosun of the smoke test stays.
    cleanups+=(cmd_uninstall)
  fi
  cmd_install
  cmd_check
  log "passed"
}

case ${1:-all} in
  all) cmd_all ;;
  install) cmd_install ;;
  check) cmd_check ;;
  uninstall) cmd_uninstall ;;
  *) echo "usage: smoke.sh [all] | install | check | uninstall" >&2; exit 2 ;;
esac
