#!/usr/bin/env bash
# Starts and stops a real, local Kubernetes control plane for development and
# tests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler built
# from the pinned upstream sources (see build.sh), plus kwok, which plays the
# kubelets of a few fake nodes so that pods become Running/Ready, Job pods
# Succeed and PersistentVolumeClaims get bound, without any container runtime.
#
# One real node runs beside them (node.sh): containerd, runc, kubelet,
# kube-proxy and CoreDNS, for the pods that must really run.
#
# Usage: cluster.sh up | down | status | kubeconfig | env
#        cluster.sh sa-kubeconfig NAMESPACE SERVICEACCOUNT [DURATION]
#        cluster.sh restart-apiserver [OUTAGE_SECONDS]
#
# Everything lives in one state directory, ${BOSUN_CLUSTER_DIR:-<repo>/.cluster}:
#   bosun-cluster        marker: this directory is ours and may be deleted
#   bin-dir              the build.sh bin directory the processes were started from
#   ports.env            the ports, as sourceable KEY=value lines
#   kubeconfig           admin kubeconfig (client cert in group system:masters)
#   certs/               ca.crt/ca.key, apiserver.*, sa.key/sa.pub, <identity>.crt/.key
#   kubeconfigs/         kube-controller-manager.kubeconfig, kube-scheduler.kubeconfig
#   etcd/                etcd data
#   kwok/                kwok.yaml (the stages kwok plays) and kwok's work dir
#   manifests/           bootstrap.yaml (fake nodes, default StorageClass, cluster DNS)
#   node/                the real node (node.sh): containerd, kubelet, CNI state
#   node-missing         why this machine runs no real node (absent when it does)
#   volumes/             the hostPath directories behind claims of the default class
#   logs/<component>.log (and bootstrap.log: kubectl apply of manifests/)
#   pids/<component>.pid
#   args/<component>     the arguments it was started with, NUL-separated
#   .kube-cache/         kubectl discovery cache of this script's own calls
#
# Progress and errors go to stderr; stdout only carries what a caller may want
# to capture (kubeconfig path, env line, ServiceAccount kubeconfig).
set -euo pipefail
# Components must not end up as process-group leaders created by job control:
# setsid below only execs in place (keeping $! as the component's pid) when the
# caller is not a group leader, which holds as long as job control is off.
set +m

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
state=$(realpath -m "${BOSUN_CLUSTER_DIR:-$repo_root/.cluster}")
# A cold apiserver on a busy 2-core machine needs ~10 s; leave generous room
# for machines under load (e.g. while cargo builds) before calling it failed.
timeout=${BOSUN_CLUSTER_TIMEOUT:-120}

control_plane=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
components=("${control_plane[@]}")
# Fixed cluster shape. Service CIDR per Kubernetes convention; its first address
# is the "kubernetes" Service, which therefore must be in the serving cert.
service_cidr=10.96.0.0/16
first_service_ip=10.96.0.1
fake_nodes=(kwok-node-0 kwok-node-1)
# Name fixed by kwok's volume stages: they only act on claims and volumes of
# this class (see <build>/stages/volume/fast/*.yaml).
storage_class=kwok-volume
storage_provisioner=kwok.x-k8s.io/volume
# kwok's volume stages write hostPath volumes under this machine-wide default;
# ours go into the state directory, so `down` removes them with everything else.
kwok_volume_root=/tmp/kwok-local-path-provisioner

# shellcheck source=node.sh
. "$here/node.sh"
# The node's components are part of a cluster whose state says it runs one.
node_enabled && components+=("${node_components[@]}")

log() { echo "cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }
now() { echo "${EPOCHREALTIME/[,.]/}"; }  # microseconds, no subprocess
elapsed() { local us=$(( $(now) - $1 )); printf '%d.%01d' $((us / 1000000)) $((us % 1000000 / 100000)); }

# --- process bookkeeping ------------------------------------------------------

pidfile() { echo "$state/pids/$1.pid"; }

# The executable a component runs: containerd is Debian's, the node's own
# components come from the node build, the rest from the control plane build.
component_exe() {
  case $1 in
    containerd) command -v containerd ;;
    kubelet | kube-proxy | coredns) echo "$node_bin/$1" ;;
    *) echo "$bin/$1" ;;
  esac
}

# Prints the pid of a component if it is alive. The pid file alone is not
# enough: after a reboot or a crash the pid may have been reused by an
# unrelated process, so the running executable's name must match too.
component_pid() {
  local f pid exe
  f=$(pidfile "$1")
  [ -r "$f" ] || return 1
  read -r pid <"$f" 2>/dev/null || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)}   # the cache may have been rebuilt underneath it
  [ "${exe##*/}" = "$1" ] || return 1
  is_running "$pid" || return 1
  echo "$pid"
}

# kill -0 also succeeds for zombies, and our components are reparented to
# whatever init there is, which may reap late (in some VMs and containers only
# every couple of seconds); an exited process is not running.
is_running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }   # the state follows the parenthesised command name
  [ "${stat%% *}" != Z ]
}

alive_count() {
  local c n=0
  for c in "${components[@]}"; do component_pid "$c" >/dev/null && n=$((n + 1)); done
  echo "$n"
}

running() { [ -f "$state/kubeconfig" ] && [ "$(alive_count)" -eq "${#components[@]}" ]; }

require_running() {
  running || die "no local cluster running; start it with 'make cluster'"
}

# Processes of our binaries that still reference the state directory although
# no pid file names them any more (pid file lost, killed script mid-start).
# Matched on the executable name as well so that e.g. a `tail -f` on a log file
# in the state directory is never taken for a component.
strays() {
  local pid exe
  local pattern
  pattern=$(printf '%s/' "$state" | sed 's/[][\\.*^$+?(){}|]/\\&/g')
  for pid in $(pgrep -f -- "$pattern" || true); do
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    exe=${exe% (deleted)}
    case " ${components[*]} ${node_components[*]} " in *" ${exe##*/} "*) echo "$pid" ;; esac
  done
}

stop_all() {
  local c pid pids=() i
  for c in "${components[@]}"; do
    pid=$(component_pid "$c") && pids+=("$pid")
  done
  mapfile -t pids < <({ printf '%s\n' "${pids[@]}"; strays; } | grep . | sort -u)
  [ "${#pids[@]}" -gt 0 ] || return 0
  # All at once: nothing here needs an orderly shutdown (the data is thrown
  # away), and the clients just log connection errors while the rest go.
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do          # up to 5 s for graceful exit
    local left=()
    for pid in "${pids[@]}"; do is_running "$pid" && left+=("$pid"); done
    [ "${#left[@]}" -eq 0 ] && { await_reaped "${pids[@]}"; return 0; }
    sleep 0.1
  done
  local names=()
  for pid in "${left[@]}"; do names+=("$(basename "$(readlink "/proc/$pid/exe" 2>/dev/null)")[$pid]"); done
  log "still running 5 s after SIGTERM, sending SIGKILL: ${names[*]}"
  kill -KILL "${left[@]}" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do
    local still=()
    for pid in "${left[@]}"; do is_running "$pid" && still+=("$pid"); done
    [ "${#still[@]}" -eq 0 ] && { await_reaped "${pids[@]}"; return 0; }
    sleep 0.1
  done
  die "could not stop processes: ${still[*]}"
}

# Exited components linger as zombies until init reaps them, which on some
# VMs takes ~2 s. Waiting (briefly, best effort) means that right after `down`
# no process of ours shows up in ps/pgrep at all, which tests check.
await_reaped() {
  local i pid gone
  for ((i = 0; i < 50; i++)); do
    gone=1
    for pid in "$@"; do [ -e "/proc/$pid" ] && gone=0; done
    [ "$gone" = 1 ] && return 0
    sleep 0.1
  done
}

# Removes the state directory, but only if it is ours: BOSUN_CLUSTER_DIR may be
# mistyped, and rm -rf on someone's home directory is not a recoverable error.
remove_state() {
  [ -e "$state" ] || return 0
  if [ ! -e "$state/bosun-cluster" ] && [ -n "$(ls -A "$state")" ]; then
    die "$state exists but is not a bosun cluster directory (no bosun-cluster marker); not removing it"
  fi
  rm -rf "$state"
}

# up and down are serialised per state directory, so that concurrent test
# processes calling `up` start one cluster, not several fighting over one
# directory, while clusters in different directories do not wait for each
# other. The lock file cannot live in the state directory (`down` removes it)
# and would litter the checkout next to it, so it goes to the runtime dir.
lock() {
  local dir=${XDG_RUNTIME_DIR:-/tmp} key
  [ -d "$dir" ] && [ -w "$dir" ] || dir=/tmp
  key=$(printf '%s' "$state" | sha256sum | cut -c1-16)
  exec 9>>"$dir/bosun-cluster-$key.lock"
  flock 9
}

# --- setup ---------------------------------------------------------------------

# The local cluster's supervisor (crates/localcluster) makes the certificates
# (rcgen), the kubeconfigs (kube's types) and picks the free ports (below the
# kernel's ephemeral range, where no outgoing connection takes one before the
# component binds it). Its CLI is built once per `up` (cargo: incremental, quiet).
lc_bin=''
lc() {
  if [ -z "$lc_bin" ]; then
    cargo build -q --locked --manifest-path "$repo_root/Cargo.toml" -p bosun-localcluster --bin localcluster >&2 ||
      die "building crates/localcluster (the CLI this script calls) failed"
    lc_bin=${CARGO_TARGET_DIR:-$repo_root/target}/debug/localcluster
  fi
  "$lc_bin" "$@"
}

# The CA, the apiserver's serving certificate (every address clients use, the
# `kubernetes` Service's first address included), the control plane's client
# certificates (admin in system:masters; the controller-manager and scheduler as
# the users the built-in RBAC policy grants their permissions) and the
# ServiceAccount signing key pair; the node's identities when it runs one.
make_certs() {
  # shellcheck disable=SC2154 # node_ip: node.sh
  lc pki control-plane --dir "$state/certs" --name 127.0.0.1 --name "$first_service_ip" --name "$node_ip" \
    --name localhost --name kubernetes --name kubernetes.default --name kubernetes.default.svc \
    --name kubernetes.default.svc.cluster.local || die "certificate generation failed"
  ! node_enabled || node_certs
}

# A kubeconfig of the local apiserver as IDENTITY's client certificate, mode 600.
write_kubeconfig() {  # file identity
  lc kubeconfig --certs "$state/certs" --port "$APISERVER_PORT" --identity "$2" --out "$1" ||
    die "writing $1 failed"
}

# kwok's stage definitions are copied from its module by build.sh. Only the
# ones we need: nodes become Ready and keep a lease, pods become Ready and Job
# pods Succeed, deleted pods go away, and claims of the kwok StorageClass get a
# bound volume (and release/delete it again). The claims' binding is our own
# stage (stages/pvc-provision.yaml says why).
write_kwok_config() {
  local stages=$1 f first=1
  local files=(
    "$stages/node/fast/node-initialize.yaml"
    "$stages/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
    "$stages/pod/fast/pod-ready.yaml"
    "$stages/pod/fast/pod-complete.yaml"
    "$stages/pod/fast/pod-delete.yaml"
    "$here/stages/pvc-provision.yaml"
    "$stages/volume/fast/pv-bind.yaml"
    "$stages/volume/fast/pvc-delete.yaml"
    "$stages/volume/fast/pv-delete.yaml"
  )
  mkdir -p "$state/kwok"
  {
    for f in "${files[@]}"; do
      [ -f "$f" ] || die "kwok stage $f is missing; rebuild with build.sh"
      [ "$first" = 1 ] || echo "---"
      first=0
      sed "s|$kwok_volume_root|$state/volumes|g" "$f"
    done
  } >"$state/kwok/kwok.yaml"
}

# Fake nodes (played by kwok because of the annotation) and the default
# StorageClass. Applied whenever a health check finds them missing, so a test
# that deleted a node does not break the next `up`.
write_bootstrap() {
  local i name
  mkdir -p "$state/manifests"
  {
    for i in "${!fake_nodes[@]}"; do
      name=${fake_nodes[$i]}
      # Each node gets its own pod CIDR (/18: 16382 addresses) so kwok can hand
      # out distinct pod IPs for the 8,000 pods a node takes: `make bench N=10000`
      # needs 10,000 pods (at 1,100 a node, 7,800 of them stayed Pending). No
      # taints: any ordinary pod may land there.
      cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: $name
    node-role.kubernetes.io/agent: ""
spec:
  podCIDR: 10.244.$((i * 64)).0/18
  podCIDRs: [10.244.$((i * 64)).0/18]
status:
  # Made-up addresses; kwok copies the InternalIP into the pods' hostIP.
  addresses:
  - {type: InternalIP, address: 10.240.0.$((10 + i))}
  - {type: Hostname, address: $name}
  allocatable: {cpu: "512", memory: 4Ti, pods: "8000", ephemeral-storage: 16Ti}
  capacity: {cpu: "512", memory: 4Ti, pods: "8000", ephemeral-storage: 16Ti}
---
EOF
    done
    # allowVolumeExpansion lets the apiserver accept raised requests on claims
    # (the PersistentVolumeClaimResize admission plugin checks it). Nothing
    # resizes the fake volumes, so status.capacity keeps the old size.
    cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $storage_class
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: $storage_provisioner
reclaimPolicy: Delete
volumeBindingMode: Immediate
allowVolumeExpansion: true
EOF
    ! node_enabled || write_node_bootstrap
  } >"$state/manifests/bootstrap.yaml"
}

# Starts one component detached from this script's session (so Ctrl-C on
# `make cluster` or a test harness killing its process group leaves it alone)
# and with no inherited descriptors (a caller capturing our output through a
# pipe would otherwise wait for the components to exit). fd 9 is the lock.
# The arguments are recorded (NUL-separated, so any argument survives) for
# restart_component, which must start the component exactly as `up` did.
start() {  # component args...
  local c=$1 pid deadline exe
  shift
  exe=$(component_exe "$c")
  # Set here rather than by the caller so that a restart gets it too:
  # KWOK_WORKDIR keeps kwok from also loading a ~/.kwok/kwok.yaml.
  [ "$c" != kwok ] || local -x KWOK_WORKDIR="$state/kwok"
  mkdir -p "$state/args"
  { [ $# -eq 0 ] || printf '%s\0' "$@"; } >"$state/args/$c"
  setsid "$exe" "$@" </dev/null >>"$state/logs/$c.log" 2>&1 9<&- &
  pid=$!
  echo "$pid" >"$(pidfile "$c")"
  disown "$pid"  # no "Killed" job notices from this shell if `up` stops it again
  # $! is the forked shell, which only becomes the component after two execs
  # (itself into setsid, setsid into the component); on a loaded machine that
  # can take a while, and until then component_pid, which insists on the
  # component's executable to tell it from a reused pid, calls it dead. So
  # wait for the exec here: once start returns, the pid is the component or
  # gone (then wait_healthy reports it, with its log).
  deadline=$(( $(now) + 10000000 ))
  until [ "/proc/$pid/exe" -ef "$exe" ]; do   # builtin test: no fork while it is quick
    is_running "$pid" || break
    [ "$(now)" -lt "$deadline" ] ||
      die "$c (pid $pid) has not started 10 s after launch; '$0 down' cleans up"
    sleep 0.01
  done
}

# SIGTERM to one component and wait until it has exited; SIGKILL if it takes
# longer than 10 s (the apiserver drains its requests first).
stop_component() {  # component
  local c=$1 pid t0 deadline
  if ! pid=$(component_pid "$c"); then
    log "$c is not running"
    return 0
  fi
  log "stopping $c (pid $pid)"
  t0=$(now)
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(( t0 + 10000000 ))
  while is_running "$pid" && [ "$(now)" -lt "$deadline" ]; do sleep 0.1; done
  if is_running "$pid"; then
    log "$c still running 10 s after SIGTERM, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    deadline=$(( $(now) + 3000000 ))
    while is_running "$pid" && [ "$(now)" -lt "$deadline" ]; do sleep 0.1; done
    ! is_running "$pid" || die "could not stop $c (pid $pid)"
  fi
  await_reaped "$pid"
  log "$c stopped after $(elapsed "$t0")s"
}

# Stops a component and starts it again with the binary and the arguments
# `up` started it with, OUTAGE seconds later. Does not wait for its health.
restart_component() {  # component [outage-seconds]
  local c=$1 outage=${2:-0} args=()
  # Read before stopping: without a record (a cluster started by an older
  # cluster.sh) the component could not be brought back.
  if [ ! -r "$state/args/$c" ] || [ ! -r "$state/bin-dir" ]; then
    die "no recorded arguments for $c in $state; restart the cluster with down and up"
  fi
  mapfile -d '' -t args <"$state/args/$c"
  bin=$(cat "$state/bin-dir")
  node_bin=$(cat "$state/node-bin-dir" 2>/dev/null || true)
  stop_component "$c"
  if [ "$outage" != 0 ]; then
    log "$c down for ${outage}s"
    sleep "$outage"
  fi
  log "starting $c"
  start "$c" "${args[@]}"
}

# kube-apiserver, with the real node's settings when this cluster has one.
start_apiserver() {
  local certs=$state/certs node_args=()
  # With the real node, the `kubernetes` Service's endpoint is the node's
  # address (see node_network_up for how pods get from there to the loopback
  # listener), and the apiserver calls kubelet for logs and exec with a
  # certificate of its own. Without it, --advertise-address is loopback,
  # which Endpoints validation rejects, so the Service gets no endpoints.
  if node_enabled; then
    node_args=(--advertise-address="$node_ip" --endpoint-reconciler-type=lease
      --kubelet-client-certificate="$certs/kube-apiserver-kubelet-client.crt"
      --kubelet-client-key="$certs/kube-apiserver-kubelet-client.key"
      --kubelet-preferred-address-types=InternalIP)
  else
    node_args=(--advertise-address=127.0.0.1 --endpoint-reconciler-type=none)
  fi
  # --cert-dir only keeps the apiserver from writing to /var/run/kubernetes.
  # PodNodeSelector and PodTolerationRestriction let a test send every pod of
  # a namespace to the real node with two namespace annotations.
  start kube-apiserver \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    "${node_args[@]}" \
    --cert-dir="$certs" \
    --tls-cert-file="$certs/apiserver.crt" --tls-private-key-file="$certs/apiserver.key" \
    --client-ca-file="$certs/ca.crt" \
    --service-cluster-ip-range="$service_cidr" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$certs/sa.pub" \
    --service-account-signing-key-file="$certs/sa.key" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction,DefaultStorageClass,PodNodeSelector,PodTolerationRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
    --allow-privileged=true \
    --profiling=false
}

start_cluster() {
  mkdir -p "$state"
  touch "$state/bosun-cluster"
  mkdir -p "$state/logs" "$state/pids" "$state/kubeconfigs" "$state/etcd"
  chmod 700 "$state/etcd"
  echo "$bin" >"$state/bin-dir"

  read -r ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KUBE_CONTROLLER_MANAGER_PORT KUBE_SCHEDULER_PORT \
    KUBELET_PORT KUBELET_HEALTHZ_PORT KUBE_PROXY_METRICS_PORT KUBE_PROXY_HEALTHZ_PORT \
    <<<"$(lc ports 9)"
  cat >"$state/ports.env" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KUBE_CONTROLLER_MANAGER_PORT=$KUBE_CONTROLLER_MANAGER_PORT
KUBE_SCHEDULER_PORT=$KUBE_SCHEDULER_PORT
KUBELET_PORT=$KUBELET_PORT
KUBELET_HEALTHZ_PORT=$KUBELET_HEALTHZ_PORT
KUBE_PROXY_METRICS_PORT=$KUBE_PROXY_METRICS_PORT
KUBE_PROXY_HEALTHZ_PORT=$KUBE_PROXY_HEALTHZ_PORT
EOF

  # The real node's bridge carries the address the apiserver advertises, so
  # it comes first; a machine that cannot run containers gets the rest.
  components=("${control_plane[@]}")
  if [ -n "$node_bin" ]; then
    node_network_up
    components+=("${node_components[@]}")
    echo "$node_bin" >"$state/node-bin-dir"
  else
    echo "$node_reason" >"$state/node-missing"
  fi
  # etcd needs no certificates, so it boots while they are generated.
  # --unsafe-no-fsync: the data is disposable and fsync dominates write latency.
  start etcd --name=bosun --data-dir="$state/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="bosun=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state=new --unsafe-no-fsync --log-level=warn

  make_certs
  local c
  for c in admin kube-controller-manager kube-scheduler; do
    if [ "$c" = admin ]; then
      write_kubeconfig "$state/kubeconfig.tmp" admin
    else
      write_kubeconfig "$state/kubeconfigs/$c.kubeconfig" "$c"
    fi
  done
  write_kwok_config "$(dirname "$bin")/stages"
  write_bootstrap

  start_apiserver

  local certs=$state/certs
  # The controller-manager and scheduler start right away rather than after
  # the apiserver is ready (saves seconds); they retry until it answers. Their
  # delegated authentication reads a ConfigMap at startup which RBAC may not
  # allow yet while the apiserver bootstraps its policy, and would exit on
  # that without --authentication-tolerate-lookup-failure; the value is
  # picked up later by a background refresh.
  local kcm=$state/kubeconfigs/kube-controller-manager.kubeconfig
  start kube-controller-manager \
    --kubeconfig="$kcm" --authentication-kubeconfig="$kcm" --authorization-kubeconfig="$kcm" \
    --authentication-tolerate-lookup-failure=true \
    --bind-address=127.0.0.1 --secure-port="$KUBE_CONTROLLER_MANAGER_PORT" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$certs/sa.key" \
    --root-ca-file="$certs/ca.crt" \
    --cluster-signing-cert-file="$certs/ca.crt" --cluster-signing-key-file="$certs/ca.key" \
    --service-cluster-ip-range="$service_cidr" \
    --cluster-name=bosun-local \
    --controllers='*' \
    --node-monitor-grace-period=120s \
    --kube-api-qps=100 --kube-api-burst=200 \
    --profiling=false

  local sched=$state/kubeconfigs/kube-scheduler.kubeconfig
  start kube-scheduler \
    --kubeconfig="$sched" --authentication-kubeconfig="$sched" --authorization-kubeconfig="$sched" \
    --authentication-tolerate-lookup-failure=true \
    --bind-address=127.0.0.1 --secure-port="$KUBE_SCHEDULER_PORT" \
    --leader-elect=false \
    --profiling=false

  # The admin kubeconfig appears under its final name only now, so that
  # `kubeconfig` never hands out a half-written file. kwok uses it too.
  mv "$state/kubeconfig.tmp" "$state/kubeconfig"

  # Node leases (renewed every 10 s) keep the node lifecycle controller from
  # marking the fake nodes unreachable between the rare status heartbeats. After
  # an apiserver outage kwok's lease retries back off for half a minute or more;
  # the controller manager's grace period (120 s, not 50) outlasts that, because a
  # fake node once marked unreachable has its pods marked not Ready, and kwok never
  # makes them Ready again (a test after chaos.rs's apiserver restart saw that).
  start kwok \
    --kubeconfig="$state/kubeconfig" \
    --config="$state/kwok/kwok.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds=40 \
    --cidr=10.244.128.0/17

  ! node_enabled || start_node
}

# --- health ----------------------------------------------------------------

kc() { kubectl --kubeconfig "$state/kubeconfig" --cache-dir "$state/.kube-cache" --request-timeout=5s "$@"; }

api_get() {
  local d=$state/certs
  curl -s --max-time 3 --cacert "$d/ca.crt" --cert "$d/admin.crt" --key "$d/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT$1" || true
}

# HTTP status of an apiserver path as the admin (000 if unreachable).
api_status() {
  local d=$state/certs
  curl -s -o /dev/null -w '%{http_code}' --max-time 3 --cacert "$d/ca.crt" \
    --cert "$d/admin.crt" --key "$d/admin.key" "https://127.0.0.1:$APISERVER_PORT$1" || true
}

# Runs one round of checks; on failure sets `failed` to a description and
# `culprit` to the component whose log explains it best. check_apiserver is
# the part that a restarted apiserver has to pass.
failed='' culprit=''
check_apiserver() {
  failed='' culprit=''
  if ! curl -sf --max-time 3 "http://127.0.0.1:$ETCD_PORT/health" >/dev/null; then
    failed="etcd /health" culprit=etcd; return 1
  fi
  if [ "$(api_status /readyz)" != 200 ]; then
    failed="kube-apiserver /readyz" culprit=kube-apiserver; return 1
  fi
}

check() {
  check_apiserver || return 1
  # Created as soon as the apiserver is up, while the others still start.
  local missing=0 n
  [ "$(api_status "/apis/storage.k8s.io/v1/storageclasses/$storage_class")" = 200 ] || missing=1
  for n in "${fake_nodes[@]}"; do
    [ "$(api_status "/api/v1/nodes/$n")" = 200 ] || missing=1
  done
  if [ "$missing" = 1 ]; then
    # kubectl apply is idempotent; a failure here is retried next round.
    kc apply -f "$state/manifests/bootstrap.yaml" >/dev/null 2>"$state/logs/bootstrap.log" || true
    failed="fake nodes and StorageClass to be created" culprit=bootstrap; return 1
  fi
  if ! curl -skf --max-time 3 "https://127.0.0.1:$KUBE_CONTROLLER_MANAGER_PORT/healthz" >/dev/null; then
    failed="kube-controller-manager /healthz" culprit=kube-controller-manager; return 1
  fi
  if ! curl -skf --max-time 3 "https://127.0.0.1:$KUBE_SCHEDULER_PORT/healthz" >/dev/null; then
    failed="kube-scheduler /healthz" culprit=kube-scheduler; return 1
  fi
  # Ready and untainted: the node lifecycle controller removes the not-ready
  # taint a few seconds after kwok reports Ready; until then pods stay Pending.
  local name ready taints
  while read -r name ready taints; do
    if [ "$ready" != True ]; then
      failed="node $name to become Ready" culprit=kwok; return 1
    fi
    if [ -n "$taints" ]; then
      failed="node $name to lose its taints ($taints)" culprit=kube-controller-manager; return 1
    fi
  done < <(kc get nodes "${fake_nodes[@]}" -o \
    jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}{"\n"}{end}' 2>/dev/null \
    || echo "? unknown")
  if [ "$(api_status /api/v1/namespaces/default/serviceaccounts/default)" != 200 ]; then
    failed="ServiceAccount default/default" culprit=kube-controller-manager; return 1
  fi
  check_node
}

# Waits until CHECK (default: check) passes. Returns 2 (with `exited` set)
# if a component died; exits the script on timeout.
exited=''
wait_healthy() {  # start-time [check what-is-then-reached]
  local start=$1 check_fn=${2:-check} reached=${3:-cluster healthy} deadline c last=''
  exited=''
  deadline=$(( $(now) + timeout * 1000000 ))
  while :; do
    for c in "${components[@]}"; do
      if ! component_pid "$c" >/dev/null; then
        log "$c exited; last lines of $state/logs/$c.log:"
        tail -n 30 "$state/logs/$c.log" >&2 || true
        exited=$c
        return 2
      fi
    done
    "$check_fn" && break
    # One line per stage reached, which also shows where start-up time goes.
    if [ "$failed" != "$last" ]; then
      log "$(elapsed "$start")s: waiting for $failed"
      last=$failed
    fi
    if [ "$(now)" -gt "$deadline" ]; then
      log "not healthy after ${timeout}s: waiting for $failed; last lines of $state/logs/$culprit.log:"
      tail -n 30 "$state/logs/$culprit.log" >&2 || true
      if [ "$culprit" = kube-apiserver ]; then
        log "failing readiness checks:"
        api_get '/readyz?verbose' | grep -v '^\[+\]' >&2 || true
      fi
      die "cluster left running for inspection; '$0 down' stops it"
    fi
    sleep 0.2
  done
  log "$reached after $(elapsed "$start")s (kubeconfig: $state/kubeconfig)"
}

# --- subcommands ---------------------------------------------------------------

load_ports() {
  [ -f "$state/ports.env" ] || return 1
  # shellcheck source=/dev/null
  . "$state/ports.env"
}

cmd_up() {
  local start n
  start=$(now)
  lock
  # Under the lock, so that concurrent `up`s wait for one cold build (up to
  # half an hour) instead of each starting their own; returns at once when
  # the cache is complete.
  bin=$("$here/build.sh")
  n=$(alive_count)
  if [ "$n" -eq "${#components[@]}" ] && [ -f "$state/kubeconfig" ]; then
    if [ "$(cat "$state/bin-dir" 2>/dev/null)" != "$bin" ]; then
      log "warning: the running cluster uses $(cat "$state/bin-dir" 2>/dev/null), not $bin; run down and up to switch"
    fi
    load_ports
    log "already running; checking health"
    node_enabled || add_node
  else
    if [ "$n" -gt 0 ]; then
      log "found a partial cluster ($n of ${#components[@]} processes alive); restarting it"
    elif [ -e "$state" ]; then
      log "removing stale state in $state (no component running)"
    fi
    stop_all
    node_teardown
    remove_state
    pick_node
    log "starting control plane in $state"
    start_cluster
  fi
  local rc=0
  wait_healthy "$start" || rc=$?
  if [ "$rc" = 2 ] && grep -q 'address already in use' "$state/logs/$exited.log" 2>/dev/null; then
    log "port conflict; restarting with other ports"
    stop_all
    node_teardown
    remove_state
    start_cluster
    rc=0
    wait_healthy "$start" || rc=$?
  fi
  [ "$rc" = 0 ] || die "cluster failed to start ('$0 down' cleans up)"
  if node_enabled; then
    # shellcheck disable=SC2154 # node_name, node_label: node.sh
    log "real node $node_name: Ready (pods with node selector $node_label=true and its toleration run there)"
  else
    log "real node: MISSING — $(node_missing_reason); tests that need it will fail"
  fi
}

# Decides whether this cluster gets the real node, building its components
# (once, cached like the control plane's) if so. Sets node_bin, or
# node_reason when the machine cannot run it.
node_bin='' node_reason=''
pick_node() {
  node_reason=$(node_unsupported)
  [ -z "$node_reason" ] || return 0
  node_bin=$("$here/build.sh" node) || { node_reason="building kubelet, kube-proxy and CoreDNS failed"; node_bin=''; }
}

# A running cluster started without the real node gets it once the machine can
# run it (e.g. after hack/prerequisites.sh installed containerd): the node's
# network, certificates and daemons start, and kube-apiserver restarts with the
# node's settings. etcd and everything stored in it stay. When the machine still
# cannot, the reason is found anew and recorded.
add_node() {
  pick_node
  if [ -z "$node_bin" ]; then
    echo "$node_reason" >"$state/node-missing"
    return 0
  fi
  log "real node was missing ($(node_missing_reason)); this machine can run it now: adding it"
  node_network_up
  echo "$node_bin" >"$state/node-bin-dir"
  rm -f "$state/node-missing"
  node_certs
  write_bootstrap
  stop_component kube-apiserver
  start_apiserver
  components+=("${node_components[@]}")
  start_node
}

cmd_down() {
  lock
  if [ ! -e "$state" ]; then
    log "no local cluster in $state"
    return 0
  fi
  stop_all
  node_teardown
  local left
  left=$(strays)
  [ -z "$left" ] || die "processes still running: $left"
  remove_state
  log "stopped; removed $state"
}

cmd_status() {
  local c pid port ok=0
  echo "state directory: $state"
  load_ports || true
  for c in "${components[@]}"; do
    case $c in
      etcd) port="${ETCD_PORT:-?} (peer ${ETCD_PEER_PORT:-?})" ;;
      kube-apiserver) port=${APISERVER_PORT:-?} ;;
      kube-controller-manager) port=${KUBE_CONTROLLER_MANAGER_PORT:-?} ;;
      kube-scheduler) port=${KUBE_SCHEDULER_PORT:-?} ;;
      kubelet) port="${KUBELET_PORT:-?} (healthz ${KUBELET_HEALTHZ_PORT:-?})" ;;
      kube-proxy) port="${KUBE_PROXY_HEALTHZ_PORT:-?} (healthz)" ;;
      coredns) port="53 on $node_ip" ;;
      *) port="-" ;;
    esac
    if pid=$(component_pid "$c"); then
      printf '%-24s running  pid %-8s port %s\n' "$c" "$pid" "$port"
    else
      printf '%-24s stopped\n' "$c"
      ok=1
    fi
  done
  if [ "$ok" = 0 ]; then
    echo "apiserver: https://127.0.0.1:$APISERVER_PORT (/readyz: $(api_status /readyz))"
    echo "kubeconfig: $state/kubeconfig"
  fi
  node_enabled || echo "real node: missing — $(node_missing_reason)"
  return "$ok"
}

# For chaos tests: the apiserver goes away (gracefully) and comes back on the
# same port with the same state, as in a control-plane upgrade; clients must
# ride it out. The other components stay up and reconnect on their own.
cmd_restart_apiserver() {
  if [ $# -gt 1 ]; then die "usage: $0 restart-apiserver [OUTAGE_SECONDS]"; fi
  local outage=${1:-0} start
  [[ $outage =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
    die "OUTAGE_SECONDS must be a number of seconds, not '$outage'"
  lock
  require_running
  load_ports
  restart_component kube-apiserver "$outage"
  start=$(now)
  local rc=0
  wait_healthy "$start" check_apiserver "kube-apiserver ready" || rc=$?
  [ "$rc" = 0 ] || die "kube-apiserver failed to restart; 'make cluster' (up) restarts the cluster"
}

cmd_kubeconfig() {
  require_running
  echo "$state/kubeconfig"
}

cmd_env() {
  require_running
  printf 'export KUBECONFIG=%q\n' "$state/kubeconfig"
}

cmd_sa_kubeconfig() {
  if [ $# -lt 2 ] || [ $# -gt 3 ]; then die "usage: $0 sa-kubeconfig NAMESPACE SERVICEACCOUNT [DURATION]"; fi
  local ns=$1 sa=$2 duration=${3:-24h} token
  require_running
  load_ports
  token=$(kc create token "$sa" -n "$ns" --duration="$duration") ||
    die "could not get a token for ServiceAccount $ns/$sa"
  lc kubeconfig --certs "$state/certs" --port "$APISERVER_PORT" --token-stdin --user "$ns-$sa" --namespace "$ns" \
    <<<"$token"
}

usage() {
  cat >&2 <<EOF
usage: $0 COMMAND
  up                      build if needed, start the local cluster (no-op if healthy), wait for health
  down                    stop all components and remove $state
  status                  show components, pids and ports (exit 1 unless all run)
  kubeconfig              print the admin kubeconfig path
  env                     print an 'export KUBECONFIG=...' line
  sa-kubeconfig NS SA [DURATION]
                          print a kubeconfig for ServiceAccount NS/SA (token valid DURATION, default 24h)
  restart-apiserver [OUTAGE_SECONDS]
                          stop kube-apiserver, wait OUTAGE_SECONDS (default 0), start it again
                          with the same arguments and wait until it is ready (chaos tests)
EOF
  exit "${1:-2}"
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
  up) [ $# -eq 0 ] || usage; cmd_up ;;
  down) [ $# -eq 0 ] || usage; cmd_down ;;
  status) [ $# -eq 0 ] || usage; cmd_status ;;
  kubeconfig) [ $# -eq 0 ] || usage; cmd_kubeconfig ;;
  env) [ $# -eq 0 ] || usage; cmd_env ;;
  sa-kubeconfig) cmd_sa_kubeconfig "$@" ;;
  restart-apiserver) cmd_restart_apiserver "$@" ;;
  -h | --help | help) usage 0 ;;
  *) usage ;;
esac
