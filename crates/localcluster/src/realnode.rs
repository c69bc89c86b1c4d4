//! The local cluster's real nodes: what tells one from the other (name, state
//! directory, addresses, network namespace, cgroup root, processes), the processes
//! of its containers, and the markers of a node a test has broken on purpose.
//!
//! The first node lives in the machine's network namespace (its bridge, its address
//! and CoreDNS's port are machine-wide); the second in a namespace of its own, joined
//! to the machine by a veth pair, with its pods under a cgroup root of its own, so
//! that its kube-proxy and kubelet own their tables and cgroups as on a machine of
//! their own (`hack/controlplane/node.sh` says how the packets go). Both carry the
//! label and taint [`NODE_LABEL`]; CoreDNS runs on the first only.

use std::path::{Path, PathBuf};

use crate::supervise::Component;

pub const NODE_LABEL: &str = "bosun.dev/real-node";
/// Every real node's pod range is in it: the routes and guards between nodes use it.
pub const POD_SUPERNET: &str = "10.245.0.0/16";

pub const CONTAINERD: Component = Component::named("containerd");
pub const KUBELET: Component = Component::named("kubelet");
pub const KUBE_PROXY: Component = Component::named("kube-proxy");
pub const COREDNS: Component = Component::named("coredns");
const fn second(name: &'static str, exe: &'static str) -> Component {
    Component { name, exe, cmdline_has: None }
}

/// What a node in a network namespace of its own has that the first node has not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnNamespace {
    /// `ip netns` name; its processes start through `nsenter --net=/run/netns/<it>`.
    pub netns: &'static str,
    /// The machine's end of the veth pair (the node's end is `eth0`), with /30 addresses.
    pub link: &'static str,
    pub link_host_ip: &'static str,
    pub link_node_ip: &'static str,
    /// kubelet's `cgroupRoot`: its pods' cgroups are under `<root>/kubepods`.
    pub cgroup_root: &'static str,
}

/// One real node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealNode {
    pub name: &'static str,
    /// Its state directory, in the cluster's.
    pub dir: &'static str,
    /// Appended to the names of its kubeconfigs and logs (`kube-proxy-2.kubeconfig`,
    /// `images-2.log`).
    pub suffix: &'static str,
    /// Its kubelet's certificate and kubeconfig name (`system:node:<name>`).
    pub identity: &'static str,
    /// Its address (its bridge's), the kubelet's and its pods' gateway.
    pub ip: &'static str,
    pub cidr: &'static str,
    pub bridge: &'static str,
    pub own: Option<OwnNamespace>,
    pub containerd: Component,
    pub kubelet: Component,
    pub kube_proxy: Component,
}

pub const FIRST: RealNode = RealNode {
    name: "bosun-node",
    dir: "node",
    suffix: "",
    identity: "node",
    ip: "10.245.0.1",
    cidr: "10.245.0.0/24",
    bridge: "bosun0",
    own: None,
    containerd: CONTAINERD,
    kubelet: KUBELET,
    kube_proxy: KUBE_PROXY,
};

pub const SECOND: RealNode = RealNode {
    name: "bosun-node-2",
    dir: "node-2",
    suffix: "-2",
    identity: "node-2",
    ip: "10.245.1.1",
    cidr: "10.245.1.0/24",
    bridge: "bosun1",
    own: Some(OwnNamespace {
        netns: "bosun-node-2",
        link: "bosun1-h",
        link_host_ip: "10.245.255.1",
        link_node_ip: "10.245.255.2",
        cgroup_root: "/bosun-node-2",
    }),
    containerd: second("containerd-2", "containerd"),
    kubelet: second("kubelet-2", "kubelet"),
    kube_proxy: second("kube-proxy-2", "kube-proxy"),
};

pub const REAL_NODES: [RealNode; 2] = [FIRST, SECOND];

/// How a test broke a node (`cluster.sh node stop|partition NAME`), kept as a marker
/// file in the node's directory until `start`/`heal` (or `up`) mends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// Its kubelet, containerd, kube-proxy (the second node's) and containers were
    /// killed at once, as in a power loss.
    Stopped,
    /// Cut off the network; its processes run on.
    Partitioned,
}

impl Broken {
    pub fn marker(self) -> &'static str {
        match self {
            Broken::Stopped => "stopped",
            Broken::Partitioned => "partitioned",
        }
    }
}

impl RealNode {
    pub fn by_name(name: &str) -> Option<&'static RealNode> {
        REAL_NODES.iter().find(|n| n.name == name)
    }

    /// Its state directory in the cluster's `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(self.dir)
    }

    /// Its containerd (the CRI namespace `k8s.io` holds its images).
    pub fn socket(&self, dir: &Path) -> PathBuf {
        self.path(dir).join("containerd.sock")
    }

    /// The processes it runs, in start order.
    pub fn components(&self) -> Vec<Component> {
        let mut all = vec![self.containerd, self.kubelet, self.kube_proxy];
        if self.own.is_none() {
            all.push(COREDNS);
        }
        all
    }

    /// The components a stop kills: the first node's kube-proxy and CoreDNS stay, as
    /// the machine itself (the apiserver calling a webhook's Service, looking up a
    /// name) depends on them.
    pub fn killed_by_stop(&self) -> Vec<Component> {
        let mut all = vec![self.kubelet, self.containerd];
        if self.own.is_some() {
            all.push(self.kube_proxy);
        }
        all
    }

    /// Where the machine reaches its kube-proxy's and kubelet's health endpoints.
    pub fn probe_host(&self) -> &'static str {
        if self.own.is_some() { self.ip } else { "127.0.0.1" }
    }

    /// The program and arguments that run `program args` on this node: in its network
    /// namespace, when it has one. nsenter execs in place, so the pid stays the
    /// program's; and unlike `ip netns exec` it keeps the machine's mount namespace,
    /// where containerd must see kubelet's volume mounts.
    pub fn launch(&self, program: PathBuf, args: Vec<String>) -> (PathBuf, Vec<String>) {
        match self.own {
            None => (program, args),
            Some(own) => {
                let mut wrapped = vec![format!("--net=/run/netns/{}", own.netns), "--".into()];
                wrapped.push(program.display().to_string());
                wrapped.extend(args);
                (PathBuf::from("nsenter"), wrapped)
            }
        }
    }

    /// The `kubepods` cgroups of its pods in every hierarchy this machine mounts (v1
    /// controllers, a hybrid's `unified/`, or a pure v2 tree).
    pub fn pod_cgroups(&self) -> Vec<PathBuf> {
        let root = self.own.map_or("", |o| o.cgroup_root.trim_start_matches('/'));
        let under = |d: PathBuf| if root.is_empty() { d.join("kubepods") } else { d.join(root).join("kubepods") };
        std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .filter_map(|e| Some(under(e.ok()?.path())))
            .chain([under(PathBuf::from("/sys/fs/cgroup"))])
            .filter(|d| d.is_dir())
            .collect()
    }

    /// The processes of its containers: every process in its `kubepods` cgroups.
    pub fn container_pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        let mut todo = self.pod_cgroups();
        while let Some(d) = todo.pop() {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            let children = std::fs::read_dir(&d).into_iter().flatten().filter_map(|e| e.ok());
            todo.extend(children.map(|e| e.path()).filter(|p| p.is_dir()));
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Freezes (or thaws) every process of its pods at once, where the machine has a
    /// freezer (v1's `freezer` hierarchy, v2's `cgroup.freeze`): a stop then kills
    /// them all in the same instant, as a power loss does, rather than one by one.
    pub fn freeze(&self, frozen: bool) {
        for d in self.pod_cgroups() {
            let (file, value) = if d.starts_with("/sys/fs/cgroup/freezer") {
                ("freezer.state", if frozen { "FROZEN" } else { "THAWED" })
            } else {
                ("cgroup.freeze", if frozen { "1" } else { "0" })
            };
            let f = d.join(file);
            if f.exists() {
                let _ = std::fs::write(f, value);
            }
        }
    }

    /// How it is broken, if a test broke it.
    pub fn broken(&self, dir: &Path) -> Option<Broken> {
        [Broken::Stopped, Broken::Partitioned].into_iter().find(|b| self.path(dir).join(b.marker()).exists())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_nodes_differ_in_every_machine_wide_name() {
        let [a, b] = REAL_NODES;
        for (x, y) in [(a.name, b.name), (a.dir, b.dir), (a.ip, b.ip), (a.cidr, b.cidr), (a.bridge, b.bridge)] {
            assert_ne!(x, y);
        }
        let names = |n: &RealNode| n.components().iter().map(|c| c.name).collect::<Vec<_>>();
        assert!(names(&a).iter().all(|c| !names(&b).contains(c)), "{:?} {:?}", names(&a), names(&b));
        assert_ne!(a.identity, b.identity);
        assert_eq!(RealNode::by_name("bosun-node-2"), Some(&SECOND));
        assert_eq!(RealNode::by_name("bosun-node-3"), None);
    }

    #[test]
    fn every_pod_range_is_in_the_supernet() {
        for n in REAL_NODES {
            assert!(n.cidr.starts_with("10.245.") && n.ip.starts_with("10.245."), "{n:?}");
        }
        assert_eq!(POD_SUPERNET, "10.245.0.0/16");
    }

    #[test]
    fn only_a_node_with_its_own_namespace_starts_through_nsenter() {
        let (p, args) = FIRST.launch("/bin/kubelet".into(), vec!["--v=1".into()]);
        assert_eq!((p, args), (PathBuf::from("/bin/kubelet"), vec!["--v=1".to_owned()]));
        let (p, args) = SECOND.launch("/bin/kubelet".into(), vec!["--v=1".into()]);
        assert_eq!(p, PathBuf::from("nsenter"));
        assert_eq!(args, ["--net=/run/netns/bosun-node-2", "--", "/bin/kubelet", "--v=1"]);
        assert_eq!(SECOND.probe_host(), "10.245.1.1");
        assert_eq!(FIRST.probe_host(), "127.0.0.1");
        assert!(!FIRST.killed_by_stop().contains(&KUBE_PROXY));
        assert!(SECOND.killed_by_stop().contains(&SECOND.kube_proxy));
    }

    #[test]
    fn a_broken_node_is_told_by_its_marker() {
        let dir = std::env::temp_dir().join(format!("localcluster-realnode-{}", std::process::id()));
        std::fs::create_dir_all(SECOND.path(&dir)).unwrap();
        assert_eq!(SECOND.broken(&dir), None);
        std::fs::write(SECOND.path(&dir).join("partitioned"), "").unwrap();
        assert_eq!(SECOND.broken(&dir), Some(Broken::Partitioned));
        assert_eq!(FIRST.broken(&dir), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
