//! The local control plane's state directory (`$BOSUN_CLUSTER_DIR`, default
//! `<repo>/.cluster`): its layout, and [`Cluster`], the record of how `up` started it
//! (`cluster.json`). Other programs (the tests, `make` targets) read it through
//! [`ClusterDir`]; [`crate::controlplane`] writes it.
//!
//! ```text
//! bosun-cluster        marker: this directory is ours and may be deleted
//! cluster.json         [Cluster]: ports, the build directories, the real node or why there is none
//! kubeconfig           admin kubeconfig (client certificate in system:masters)
//! certs/               ca.crt/ca.key, apiserver.*, sa.key/sa.pub, <identity>.crt/.key
//! kubeconfigs/         the other components' kubeconfigs
//! etcd/                etcd's data
//! kwok/                kwok.yaml (the stages kwok plays) and kwok's work directory
//! node/                the first real node (hack/controlplane/node.sh): containerd, kubelet, CNI state
//! node-2/              the second real node's
//! volumes/             the hostPath directories behind claims of the default class
//! logs/<component>.log (and bootstrap.log, images.log)
//! pids/<component>.pid   launches/<component>.json (how it was started)
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::realnode::{FIRST, RealNode, SECOND};
use crate::repo_root;

/// The marker file of a cluster's state directory.
pub const MARKER: &str = "bosun-cluster";

/// The ports of a cluster, on 127.0.0.1 (the kubelet's on the node's address).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ports {
    pub etcd: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
    pub kube_controller_manager: u16,
    pub kube_scheduler: u16,
    pub kubelet: u16,
    pub kubelet_healthz: u16,
    pub kube_proxy_metrics: u16,
    pub kube_proxy_healthz: u16,
}

/// A cluster as `up` started it (`cluster.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cluster {
    pub ports: Ports,
    /// The control plane build's `bin` directory (`hack/controlplane/build.sh`).
    pub bin: PathBuf,
    /// The real node: its build's `bin` directory, or why this cluster runs none.
    pub node: Result<PathBuf, String>,
    /// The second real node (with the first only), or why this cluster runs none; a
    /// record written before there was one reads as missing (`up` then adds it).
    #[serde(default = "not_recorded")]
    pub node_2: Result<(), String>,
}

fn not_recorded() -> Result<(), String> {
    Err("not in this cluster's record (started by an older checkout)".into())
}

impl Cluster {
    /// The real nodes this cluster runs (whole or broken by a test).
    pub fn real_nodes(&self) -> Vec<&'static RealNode> {
        match (&self.node, &self.node_2) {
            (Err(_), _) => vec![],
            (Ok(_), Err(_)) => vec![&FIRST],
            (Ok(_), Ok(())) => vec![&FIRST, &SECOND],
        }
    }
}

/// A cluster's state directory.
#[derive(Debug, Clone)]
pub struct ClusterDir {
    path: PathBuf,
}

impl ClusterDir {
    /// `$BOSUN_CLUSTER_DIR`, else `<repo>/.cluster`.
    pub fn from_env() -> ClusterDir {
        let path =
            std::env::var_os("BOSUN_CLUSTER_DIR").map(PathBuf::from).unwrap_or_else(|| repo_root().join(".cluster"));
        ClusterDir { path }
    }

    pub fn at(path: &Path) -> ClusterDir {
        ClusterDir { path: path.to_owned() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The admin's kubeconfig (a client certificate in `system:masters`); written
    /// under this name only once complete.
    pub fn kubeconfig(&self) -> PathBuf {
        self.path.join("kubeconfig")
    }

    /// Every real node's containerd this cluster runs (an image a test builds goes into
    /// each of them).
    pub fn containerd_sockets(&self) -> Vec<PathBuf> {
        let nodes = self.cluster().map(|c| c.real_nodes()).unwrap_or_default();
        nodes.iter().map(|n| n.socket(&self.path)).collect()
    }

    pub fn record(&self) -> PathBuf {
        self.path.join("cluster.json")
    }

    /// How `up` started the cluster; None before it has (or after `down`).
    pub fn cluster(&self) -> Option<Cluster> {
        serde_json::from_slice(&std::fs::read(self.record()).ok()?).ok()
    }

    /// Why this cluster runs no real node, as `up` found it; None when it runs one
    /// (or no cluster was started here).
    pub fn node_missing(&self) -> Option<String> {
        self.cluster().and_then(|c| c.node.err())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_record_round_trips_and_says_why_there_is_no_node() {
        let dir = std::env::temp_dir().join(format!("localcluster-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = ClusterDir::at(&dir);
        assert_eq!(c.node_missing(), None);
        let ports = Ports {
            etcd: 1,
            etcd_peer: 2,
            apiserver: 3,
            kube_controller_manager: 4,
            kube_scheduler: 5,
            kubelet: 6,
            kubelet_healthz: 7,
            kube_proxy_metrics: 8,
            kube_proxy_healthz: 9,
        };
        let mut record =
            Cluster { ports, bin: "/b".into(), node: Err("containerd is not installed".into()), node_2: Ok(()) };
        std::fs::write(c.record(), serde_json::to_vec(&record).unwrap()).unwrap();
        assert_eq!(c.node_missing().as_deref(), Some("containerd is not installed"));
        assert!(c.containerd_sockets().is_empty());
        record.node = Ok("/n".into());
        std::fs::write(c.record(), serde_json::to_vec(&record).unwrap()).unwrap();
        assert_eq!(c.node_missing(), None);
        assert_eq!(c.containerd_sockets(), [dir.join("node/containerd.sock"), dir.join("node-2/containerd.sock")]);
        // A record from before the second node: it reads as missing, with why.
        let mut old = serde_json::to_value(&record).unwrap();
        old.as_object_mut().unwrap().remove("node_2");
        std::fs::write(c.record(), serde_json::to_vec(&old).unwrap()).unwrap();
        assert!(c.cluster().unwrap().node_2.unwrap_err().contains("older checkout"));
        assert_eq!(c.containerd_sockets(), [dir.join("node/containerd.sock")]);
        assert_eq!(c.cluster().unwrap().ports, record.ports);
        assert_eq!(c.kubeconfig(), dir.join("kubeconfig"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
