//! The local cluster's supervisor, as a library (`crates/testing` calls it directly)
//! and a small CLI (`localcluster`, behind `hack/backends.sh`).
//!
//! - [`supervise`]: a set's state directory, its lock, and starting, finding,
//!   stopping and reaping its processes, once for every set;
//! - [`ports`]: free ports below the ephemeral range;
//! - [`backends`]: the backup tests' database and storage servers;
//! - [`pki`] and [`kubeconfig`]: the local control plane's certificates and
//!   kubeconfigs (`hack/controlplane/cluster.sh` calls the CLI for them);
//! - [`cluster`]: the files of the control plane's state directory others read.
//!
//! The local control plane's and the real node's processes are still started and
//! stopped by `cluster.sh`; they move here next, onto [`supervise`].

pub mod backends;
pub mod cluster;
pub mod kubeconfig;
pub mod pki;
pub mod ports;
pub mod supervise;

use std::path::{Path, PathBuf};

/// The repository this crate was built from: the build recipes (`hack/backends/build.sh`)
/// and the object stores' client (`hack/backends/objstore.py`) live there.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap_or_else(|_| PathBuf::from("."))
}

/// Progress, on stderr (stdout carries only what a caller may capture).
pub fn log(message: &str) {
    eprintln!("backends: {message}");
}
