#!/usr/bin/env bash
# The machine-level steps of the local cluster's real node, run by its supervisor
# (crates/localcluster, behind hack/controlplane/cluster.sh), which starts, checks
# and stops the node's daemons: containerd + runc (Debian), a kubelet and
# kube-proxy of the control plane's release and CoreDNS (built by `build.sh
# node`), the CNI bridge plugin, and the images of hack/images.sh. Pods that ask
# for it (label and taint bosun.dev/real-node) really run there; everything else
# keeps going to kwok's fake nodes.
#
# Usage (the supervisor passes the variables, one node at a time): node.sh STEP
#   unsupported   print why this machine cannot run the node (nothing if it can)
#   network-up    bridge, address, routes, sysctls and nftables rules (records what it changes)
#   configs       containerd's, CNI's, kubelet's and (first node) CoreDNS's configuration files
#   partition     cut the (second) node off the network, its processes left running
#   heal          undo partition
#   power-on      before a stopped (second) node starts again: what a reboot clears in
#                 its namespace (kube-proxy's tables, connection tracking)
#   teardown      after the node's processes are gone: mounts, cgroups, network, sysctls back
#
# Two real nodes per machine (the first one's bridge, address and DNS port are
# machine-wide). The first lives in the machine's network namespace; the second
# in a namespace of its own (kube-proxy's nftables tables and kubelet's chains
# are per namespace), joined to the machine by a veth pair, and with a cgroup
# root of its own. Network layout (also in the README):
#   10.245.0.0/16   the pods' supernet: every node's pod range is in it
#   10.245.0.0/24   pods of bosun-node, on the bridge bosun0
#   10.245.0.1      bosun-node itself (bridge address): kubelet, apiserver
#                   endpoint of the `kubernetes` Service, CoreDNS on port 53
#   10.245.1.0/24   pods of bosun-node-2, on the bridge bosun1 in the network
#                   namespace bosun-node-2
#   10.245.1.1      bosun-node-2 itself (its bridge address): kubelet, kube-proxy
#   10.245.255.0/30 the veth pair: bosun1-h .1 on the machine, eth0 .2 in the namespace
#   10.96.0.0/16    Services (10.96.0.1 kubernetes, 10.96.0.10 kube-dns)
# Pods get routes to their bridge, the supernet and the Service range only, no
# default route, and a forward rule drops anything from the supernet that
# would leave by another interface than the nodes' own: pod traffic reaches
# the nodes, other pods and Services, nothing off the machine. No
# masquerading (kube-proxy still SNATs a pod that reaches itself through its
# own Service, on the bridge).
#
# State under $BOSUN_CLUSTER_DIR/node and node-2 (wiped by `down`); the
# machine-wide things it touches (sysctls, cgroups, nftables/iptables, the
# bridge, the namespace and veth pair, /var/log/containers links, libcni's
# cache) are recorded at start and put back by teardown.
set -euo pipefail

# The cluster's shape, from the supervisor (crates/localcluster's cluster module
# holds the one copy of these values).
state=${BOSUN_CLUSTER_DIR:?set by the supervisor}
node_bridge=${NODE_BRIDGE:?} node_cidr=${NODE_CIDR:?} node_ip=${NODE_IP:?}
node_label=${NODE_LABEL:?} service_cidr=${SERVICE_CIDR:?} first_service_ip=${FIRST_SERVICE_IP:?}
dns_service_ip=${DNS_SERVICE_IP:?} cluster_domain=${CLUSTER_DOMAIN:?}
node_name=${NODE_NAME:?} pod_supernet=${POD_SUPERNET:?} host_ip=${HOST_NODE_IP:?}
# The interfaces cluster traffic may leave the machine's namespace by.
read -r -a host_links <<<"${HOST_LINKS:?}"
# The second node's: its state directory's name, network namespace, veth pair
# (the machine's end, its address, the node's end's address) and cgroup root.
# Empty for the first node.
node_dir_name=${NODE_DIR:-node} node_netns=${NODE_NETNS:-} node_link=${NODE_LINK:-}
link_host_ip=${LINK_HOST_IP:-} link_node_ip=${LINK_NODE_IP:-} cgroup_root=${NODE_CGROUP_ROOT:-}
# Built by hack/images.sh from kubelet's own pause.c; nothing is pulled.
pause_image=localhost/pause:k8s-v1.34.4
# Changed by kubelet (kernel tunables it insists on), kube-proxy and us; saved
# before the node starts and restored by teardown.
node_sysctls=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables
  net.bridge.bridge-nf-call-ip6tables vm.overcommit_memory vm.panic_on_oom
  kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# Every hierarchy kubelet may create kubepods in: the v1 controllers and, on a
# hybrid machine, the v2 tree mounted at unified/.
cgroup_controllers=(cpu cpuacct cpuset memory devices freezer blkio pids systemd hugetlb net_cls net_prio perf_event rdma misc unified)
node_dir() { echo "$state/$node_dir_name"; }
# Runs a command in the node's network namespace (the machine's for the first).
in_node() {
  if [ -n "$node_netns" ]; then ip netns exec "$node_netns" "$@"; else "$@"; fi
}
# nft's set syntax for a list of interface names.
link_set() { local l out=; for l in lo "${host_links[@]}"; do out+="${out:+, }\"$l\""; done; echo "{ $out }"; }

# Why this machine cannot run the real node, or nothing if it can.
node_unsupported() {
  [ "$(id -u)" = 0 ] || { echo "not running as root (containers need root here)"; return; }
  [ -w /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] ||
    { echo "no writable cgroup hierarchy at /sys/fs/cgroup"; return; }
  [ -d /proc/sys/net/bridge ] || modprobe br_netfilter 2>/dev/null ||
    { echo "no bridge netfilter (br_netfilter) in this kernel"; return; }
  local t
  for t in containerd runc nft iptables ip /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback; do
    command -v "$t" >/dev/null 2>&1 || [ -x "$t" ] ||
      { echo "$t is not installed (hack/prerequisites.sh installs it)"; return; }
  done
  if [ -n "$node_netns" ]; then
    command -v nsenter >/dev/null 2>&1 || { echo "nsenter is not installed (util-linux)"; return; }
    ip netns list >/dev/null 2>&1 || { echo "ip netns does not work here"; return; }
    return
  fi
  if ip link show "$node_bridge" >/dev/null 2>&1 && [ ! -e "$(node_dir)/up" ]; then
    local owner
    owner=$(cat /run/bosun-node.owner 2>/dev/null || true)
    if [ -n "$owner" ] && [ "$owner" != "$state" ] && [ -e "$owner/node/up" ]; then
      echo "the real node is already in use by the cluster in $owner (one per machine; stop it with BOSUN_CLUSTER_DIR=$owner hack/controlplane/cluster.sh down)"
      return
    fi
  fi
}


# --- start ---------------------------------------------------------------------

save_sysctls() {
  local f k
  f=$(node_dir)/sysctl.saved
  [ -e "$f" ] && return 0
  # The nftables tables that exist before the node: iptables-nft tables that
  # kubelet and kube-proxy create are removed again by teardown.
  nft list tables >"$(node_dir)/nft-tables.saved"
  for k in "${node_sysctls[@]}"; do
    [ -e "/proc/sys/${k//.//}" ] && echo "$k=$(cat "/proc/sys/${k//.//}")"
  done >"$f.tmp"
  mv "$f.tmp" "$f"
}

restore_sysctls() {
  local f k v
  f=$(node_dir)/sysctl.saved
  [ -r "$f" ] || return 0
  while IFS='=' read -r k v; do
    echo "$v" >"/proc/sys/${k//.//}" 2>/dev/null || echo "node.sh: could not restore $k=$v" >&2
  done <"$f"
}

# Bridge with the node's address, forwarding, the way from pods to the
# apiserver, and the guards that keep cluster traffic on the machine. Before
# the apiserver starts: it advertises this address for the `kubernetes`
# Service.
#
# The apiserver keeps listening on 127.0.0.1 only. Pods reach it through the
# `kubernetes` Service (10.96.0.1:443) or its endpoint (the node address and
# the apiserver's port); both are DNATed to the loopback listener by a chain
# that runs before kube-proxy's (the first NAT decision of a connection
# wins). route_localnet on this bridge alone lets such packets in and their
# replies out; it goes away with the bridge.
node_network_up() {
  local d
  d=$(node_dir)
  mkdir -p "$d"
  save_sysctls
  echo "$state" >/run/bosun-node.owner
  if ! ip link show "$node_bridge" >/dev/null 2>&1; then
    ip link add "$node_bridge" type bridge
  fi
  ip addr replace "$node_ip/${node_cidr#*/}" dev "$node_bridge"
  ip link set "$node_bridge" up
  # The Service range goes to the bridge from the node's address: the apiserver
  # calling a webhook Service (and any process here reaching a ClusterIP) is then
  # answered, as pods have no default route back to the machine's other addresses.
  ip route replace "$service_cidr" dev "$node_bridge" src "$node_ip"
  echo 1 >"/proc/sys/net/ipv4/conf/$node_bridge/route_localnet"
  echo 1 >/proc/sys/net/ipv4/ip_forward
  echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
  local links
  links=$(link_set)
  nft -f - <<EOF
table inet bosun-node
delete table inet bosun-node
table inet bosun-node {
  chain api {
    type nat hook prerouting priority dstnat - 10; policy accept;
    iifname "$node_bridge" ip daddr $first_service_ip tcp dport 443 dnat ip to 127.0.0.1:$APISERVER_PORT comment "kubernetes Service"
    iifname "$node_bridge" ip daddr $node_ip tcp dport $APISERVER_PORT dnat ip to 127.0.0.1:$APISERVER_PORT comment "its endpoint"
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ip saddr $pod_supernet oifname != $links counter drop comment "pod traffic stays on the machine"
  }
  chain out {
    type filter hook postrouting priority srcnat + 10; policy accept;
    oifname != $links ip daddr { $pod_supernet, $service_cidr } counter drop comment "cluster addresses are never sent off the machine"
    oifname != $links ip saddr $pod_supernet counter drop
  }
}
EOF
}

# The second node: its network namespace, the veth pair to the machine, its
# bridge, routes both ways (no default route in the namespace: nothing off the
# machine), forwarding in the namespace, and on the machine the way from its
# pods to the apiserver's loopback listener (as the first node's `api` chain,
# with route_localnet on the machine's end of the pair). The cgroup root its
# kubelet keeps its pods under (kubelet wants it to exist in every hierarchy).
second_node_network_up() {
  local d c
  d=$(node_dir)
  mkdir -p "$d"
  [ -e "/run/netns/$node_netns" ] || ip netns add "$node_netns"
  if ! ip link show "$node_link" >/dev/null 2>&1; then
    ip link add "$node_link" type veth peer name eth0 netns "$node_netns"
  fi
  ip addr replace "$link_host_ip/30" dev "$node_link"
  ip link set "$node_link" up
  in_node ip link set lo up
  in_node ip addr replace "$link_node_ip/30" dev eth0
  in_node ip link set eth0 up
  in_node ip link show "$node_bridge" >/dev/null 2>&1 || in_node ip link add "$node_bridge" type bridge
  in_node ip addr replace "$node_ip/${node_cidr#*/}" dev "$node_bridge"
  in_node ip link set "$node_bridge" up
  in_node ip route replace "$pod_supernet" via "$link_host_ip" src "$node_ip"
  in_node ip route replace "$service_cidr" via "$link_host_ip" src "$node_ip"
  in_node sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward; echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables'
  ip route replace "$node_cidr" via "$link_node_ip" src "$host_ip"
  echo 1 >"/proc/sys/net/ipv4/conf/$node_link/route_localnet"
  nft -f - <<EOF
table inet bosun-$node_name
delete table inet bosun-$node_name
table inet bosun-$node_name {
  chain api {
    type nat hook prerouting priority dstnat - 10; policy accept;
    iifname "$node_link" ip daddr $host_ip tcp dport $APISERVER_PORT dnat ip to 127.0.0.1:$APISERVER_PORT comment "the kubernetes Service's endpoint"
  }
}
EOF
  for c in "${cgroup_controllers[@]}"; do
    [ -d "/sys/fs/cgroup/$c" ] || continue
    mkdir -p "/sys/fs/cgroup/$c$cgroup_root"
  done
  if [ -d /sys/fs/cgroup/cpuset ]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset$cgroup_root/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset$cgroup_root/cpuset.mems"
  fi
  # A pure cgroup v2 machine: the root's controllers, delegated one level down.
  if [ -f /sys/fs/cgroup/cgroup.subtree_control ]; then
    local controllers
    read -r -a controllers </sys/fs/cgroup/cgroup.subtree_control
    for c in "${controllers[@]}"; do
      echo "+$c" >"/sys/fs/cgroup$cgroup_root/cgroup.subtree_control" 2>/dev/null || true
    done
  fi
}

# The second node cut off: nothing in or out of its end of the veth pair (the
# apiserver's calls to its kubelet, its kubelet's and kube-proxy's to the
# apiserver, every packet between its pods and the rest of the cluster). Its
# processes keep running and do not notice but by timeouts, as behind a failed
# switch.
node_partition() {
  nft -f - <<EOF
table inet bosun-partition-$node_name
delete table inet bosun-partition-$node_name
table inet bosun-partition-$node_name {
  chain in {
    type filter hook prerouting priority raw; policy accept;
    iifname "$node_link" counter drop
  }
  chain out {
    type filter hook postrouting priority raw; policy accept;
    oifname "$node_link" counter drop
  }
}
EOF
}

node_heal() {
  nft delete table inet "bosun-partition-$node_name" 2>/dev/null || true
}

# A machine that lost its power comes back with no packet filter state: kube-proxy
# then programs its tables from scratch. Kept instead, they trip kube-proxy 1.34's
# restart (an endpoint chain it had flushed as stale, to be deleted later, stays
# empty when the endpoint comes back: the Service's packets are then rejected).
node_power_on() {
  in_node nft delete table ip kube-proxy 2>/dev/null || true
  in_node nft delete table ip6 kube-proxy 2>/dev/null || true
  in_node conntrack -F >/dev/null 2>&1 || true
}

write_node_configs() {
  local d
  d=$(node_dir)
  mkdir -p "$d/cni" "$d/ipam" "$d/kubelet" "$d/pod-logs" "$d/containerd-root" "$d/containerd"
  cat >"$d/containerd.toml" <<EOF
version = 2
root = "$d/containerd-root"
state = "$d/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # runc cannot lower the sandbox's oom_score_adj here ("can't get final
  # child's PID from pipe: EOF"); clamp it to the current value instead.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  # Any uid may listen on any port inside its pod (the pod's own network namespace:
  # net.ipv4.ip_unprivileged_port_start=0), as containerd 2 and Docker do: a web
  # server of a restricted pod (runAsNonRoot) serves on port 80.
  enable_unprivileged_ports = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni"
    max_conf_num = 1
EOF
  # Routes: the Service range and the other nodes' pods through the node; the
  # node's pod range is on-link. No default route, so nothing off the machine
  # is reachable.
  local network=bosun
  [ -z "$node_netns" ] || network=bosun-${node_dir_name#node-}
  cat >"$d/cni/10-bosun.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$network",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$node_bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$d/ipam",
        "ranges": [[{"subnet": "$node_cidr", "gateway": "$node_ip"}]],
        "routes": [{"dst": "$service_cidr"}, {"dst": "$pod_supernet"}]
      }
    }
  ]
}
EOF
  # Pods with dnsPolicy Default get this instead of the machine's resolvers.
  : >"$d/resolv.conf"
  # The second node's kubelet answers its health checks on its own address (its
  # loopback is the namespace's), and keeps its pods under a cgroup root of its own.
  local healthz=127.0.0.1 root_line=
  if [ -n "$node_netns" ]; then
    healthz=$node_ip
    root_line="cgroupRoot: $cgroup_root"
  fi
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: $healthz
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $state/certs/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$d/containerd.sock
# cgroup v1 (hybrid) on these machines, and no systemd.
cgroupDriver: cgroupfs
$root_line
failCgroupV1: false
failSwapOn: false
clusterDNS: [$dns_service_ip]
clusterDomain: $cluster_domain
resolvConf: $d/resolv.conf
podLogsDir: $d/pod-logs
# Nothing here can pull an image again: never collect them, and never evict for
# disk. A shared CI disk is fuller than a production node's would be (these are
# 252G with anything from 80G to a few hundred MiB free): a percentage (1% = 2.5G)
# tainted the node disk-pressure for a whole CI run, and an absolute floor
# (100Mi), once crossed for a moment (a release build linking, an image being
# saved), makes the eviction manager reclaim disk the way it does first: it
# deletes every image no running container uses, and here none comes back (a CI
# run lost every real-node test after its release build that way). As kind
# does, the disk signals are off (0%); a disk that truly fills fails its writes.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%", imagefs.inodesFree: "0%"}
maxPods: 110
serializeImagePulls: false
registerNode: true
registerWithTaints:
- {key: $node_label, value: "true", effect: NoSchedule}
nodeStatusUpdateFrequency: 10s
syncFrequency: 10s
fileCheckFrequency: 0s
shutdownGracePeriod: 0s
EOF
  # The cluster's DNS runs on the first node only.
  [ -z "$node_netns" ] || return 0
  cat >"$d/Corefile" <<EOF
$cluster_domain:53 in-addr.arpa:53 ip6.arpa:53 {
  bind $node_ip
  errors
  kubernetes $cluster_domain in-addr.arpa ip6.arpa {
    kubeconfig $state/kubeconfigs/coredns.kubeconfig
    pods insecure
    fallthrough in-addr.arpa ip6.arpa
  }
  cache 5
  reload
}
# Nothing outside the cluster: pods have no route off the machine either.
.:53 {
  bind $node_ip
  errors
  template ANY ANY {
    rcode NXDOMAIN
  }
}
EOF
}

# --- teardown --------------------------------------------------------------------

# Removes what the node left on the machine, once the supervisor has stopped its
# daemons, its containers and their shims: mounts, cgroups, network, sysctls. Safe
# on a half-started or long-dead node (also used to clean up after a crash).
node_teardown() {
  local d i m c tree
  d=$(node_dir)
  [ -e "$d" ] || [ "$(cat /run/bosun-node.owner 2>/dev/null)" = "$state" ] || return 0
  # Mounts: container root filesystems, network namespaces, kubelet's volumes
  # (deepest first); the first node's teardown, the last, takes any left in the
  # state directory.
  local under=$state/
  [ -z "$node_netns" ] || under=$d/
  for ((i = 0; i < 5; i++)); do
    mapfile -t m < <(awk -v p="$under" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r)
    [ "${#m[@]}" -eq 0 ] && break
    for c in "${m[@]}"; do umount -l "$(printf '%b' "$c")" 2>/dev/null || true; done
  done
  # cgroups, leaves first: the first node's pods' tree, the second node's root.
  tree=kubepods
  [ -z "$cgroup_root" ] || tree=${cgroup_root#/}
  for c in "${cgroup_controllers[@]}"; do
    [ -d "/sys/fs/cgroup/$c/$tree" ] || continue
    find "/sys/fs/cgroup/$c/$tree" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  find /var/log/containers -maxdepth 1 -type l -lname "$d/*" -delete 2>/dev/null || true
  if [ -n "$node_netns" ]; then
    # Everything else of the second node is in its namespace (kube-proxy's and
    # kubelet's tables, its sysctls, the bridge) or goes with it (the veth pair
    # and the machine's route through it).
    nft delete table inet "bosun-partition-$node_name" 2>/dev/null || true
    nft delete table inet "bosun-$node_name" 2>/dev/null || true
    ip netns del "$node_netns" 2>/dev/null || true
    ip link del "$node_link" 2>/dev/null || true
    conntrack -D -s "$node_cidr" >/dev/null 2>&1 || true
    conntrack -D -d "$node_cidr" >/dev/null 2>&1 || true
    rm -rf "$d"
    return 0
  fi
  ip link del "$node_bridge" 2>/dev/null || true
  # Veths whose namespace is gone are deleted with it; the bridge took the rest.
  nft delete table inet bosun-node 2>/dev/null || true
  nft delete table ip kube-proxy 2>/dev/null || true
  nft delete table ip6 kube-proxy 2>/dev/null || true
  remove_kube_iptables
  remove_new_iptables_tables
  conntrack -D -s "$node_cidr" >/dev/null 2>&1 || true
  conntrack -D -d "$node_cidr" >/dev/null 2>&1 || true
  restore_sysctls
  # libcni's result cache of our networks (both nodes').
  rm -f /var/lib/cni/results/bosun-* 2>/dev/null || true
  rm -f /run/bosun-node.owner
  rm -rf "$d"
}

# The iptables-nft tables (filter, nat, mangle) that were not there before the
# node started and hold nothing but their built-in chains now.
remove_new_iptables_tables() {
  local saved family table cmd
  saved=$(node_dir)/nft-tables.saved
  [ -r "$saved" ] || return 0
  nft list tables 2>/dev/null | while read -r _ family table; do
    grep -qx "table $family $table" "$saved" && continue
    case $family in ip) cmd=iptables ;; ip6) cmd=ip6tables ;; *) continue ;; esac
    case $table in filter | nat | mangle | raw | security) ;; *) continue ;; esac
    if ! "$cmd" -w -t "$table" -S 2>/dev/null | grep -qv '^-P '; then
      nft delete table "$family" "$table" 2>/dev/null || true
    fi
  done
}

# kubelet and kube-proxy keep a few canary and hint chains in the iptables
# tables even in nftables mode; remove every KUBE-* chain they created.
remove_kube_iptables() {
  local cmd t chain
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for t in mangle nat filter; do
      for chain in $("$cmd" -w -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }'); do
        "$cmd" -w -t "$t" -F "$chain" 2>/dev/null || true
      done
      # Jumps into them from the built-in chains.
      "$cmd" -w -t "$t" -S 2>/dev/null | awk '$1 == "-A" && / -j KUBE-/' | while read -r -a rule; do
        rule[0]=-D
        "$cmd" -w -t "$t" "${rule[@]}" 2>/dev/null || true
      done
      for chain in $("$cmd" -w -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ { print $2 }'); do
        "$cmd" -w -t "$t" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

case ${1:-} in
  unsupported) node_unsupported ;;
  network-up)
    : "${APISERVER_PORT:?}"
    if [ -n "$node_netns" ]; then second_node_network_up; else node_network_up; fi ;;
  configs) : "${KUBELET_PORT:?}" "${KUBELET_HEALTHZ_PORT:?}"; write_node_configs ;;
  teardown) node_teardown ;;
  partition | heal)
    [ -n "$node_netns" ] || { echo "node.sh: $node_name shares the machine's network namespace: only a second node can be partitioned" >&2; exit 2; }
    "node_$1" ;;
  power-on)
    [ -n "$node_netns" ] || { echo "node.sh: $node_name shares the machine's network namespace, which a stop leaves alone" >&2; exit 2; }
    node_power_on ;;
  *) echo "usage: $0 unsupported | network-up | configs | partition | heal | power-on | teardown" >&2; exit 2 ;;
esac
