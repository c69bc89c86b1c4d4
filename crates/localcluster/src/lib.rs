//! The local cluster's supervisor, as a library (`crates/testing` calls it directly)
//! and a small CLI (`localcluster`, behind `hack/controlplane/cluster.sh` and
//! `hack/backends.sh`).
//!
//! - [`supervise`]: a set's state directory, its lock, and starting, finding,
//!   stopping and reaping its processes, once for every set;
//! - [`ports`]: free ports below the ephemeral range;
//! - [`controlplane`]: the local Kubernetes control plane and its real node
//!   (`hack/controlplane/cluster.sh`), with [`bootstrap`] (what its health checks
//!   ask of the apiserver), [`pki`] and [`kubeconfig`] (its certificates and
//!   kubeconfigs), [`realnode`] (what tells its two real nodes apart) and
//!   [`cluster`] (its state directory, which others read);
//! - [`backends`]: the backup tests' database and storage servers (`hack/backends.sh`).
//!
//! Machine steps stay in shell, called as steps: the real node's network rules,
//! sysctls and cgroups (`hack/controlplane/node.sh`), the builds
//! (`hack/controlplane/build.sh`, `hack/backends/build.sh`) and the images
//! (`hack/images.sh`).

pub mod backends;
pub mod bootstrap;
pub mod cluster;
pub mod controlplane;
pub mod kubeconfig;
pub mod pki;
pub mod ports;
pub mod realnode;
pub mod supervise;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

/// The repository this crate was built from: the build recipes (`hack/backends/build.sh`)
/// and the object stores' client (`hack/backends/objstore.py`) live there.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap_or_else(|_| PathBuf::from("."))
}

/// Progress, on stderr (stdout carries only what a caller may capture).
pub fn log(message: &str) {
    eprintln!("backends: {message}");
}

/// Runs a set-up step; its output is the error when it fails.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
