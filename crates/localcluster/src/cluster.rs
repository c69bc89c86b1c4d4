//! The local control plane's state directory (`$BOSUN_CLUSTER_DIR`, default
//! `<repo>/.cluster`), as `hack/controlplane/cluster.sh` writes it: the files other
//! programs read (the tests, `make` targets), named once here.

use std::path::{Path, PathBuf};

use crate::repo_root;

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

    /// The real node's containerd (its CRI namespace `k8s.io` holds the images).
    pub fn containerd_socket(&self) -> PathBuf {
        self.path.join("node/containerd.sock")
    }

    /// Why this cluster runs no real node, as `up` found it; None when it runs one
    /// (or `up` recorded nothing).
    pub fn node_missing(&self) -> Option<String> {
        std::fs::read_to_string(self.path.join("node-missing"))
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_node_missing_reason_is_read_trimmed_and_absent_when_not_recorded() {
        let dir = std::env::temp_dir().join(format!("localcluster-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = ClusterDir::at(&dir);
        assert_eq!(c.node_missing(), None);
        std::fs::write(dir.join("node-missing"), "containerd is not installed\n").unwrap();
        assert_eq!(c.node_missing().as_deref(), Some("containerd is not installed"));
        assert_eq!(c.kubeconfig(), dir.join("kubeconfig"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
