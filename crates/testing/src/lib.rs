//! End-to-end test support for the local control plane.
//!
//! ```ignore
//! #[tokio::test]
//! async fn scales() {
//!     e2e("scales", |env| async move {
//!         let _bosun = env.start_bosun(&[]);
//!         env.apply(&webapp).await;
//!         env.wait_for::<WebApp>("demo", "Ready", is_ready).await;
//!     }).await;
//! }
//! ```
//!
//! * [`cluster`] connects to the running local cluster (`make cluster`, or started by
//!   `make test`) and **fails** with instructions when there is none: e2e tests never
//!   skip silently.
//! * [`e2e`] gives each test a fresh namespace and deletes it afterwards, also when
//!   the test panics.
//! * [`Env::start_bosun`] runs the real `bosun` binary as its own ServiceAccount with
//!   only the generated roles, watching only the test's namespace, so tests run
//!   in parallel without seeing each other's objects and prove the RBAC is enough.
//! * [`Env::use_real_node`] sends the namespace's pods to the cluster's one real node
//!   (see [`node`]), for what must really run; everything else runs on fake nodes.
//! * [`Env::wait_for`] polls with a timeout and, on failure, says what was expected
//!   and shows the object as it last was.
//! * [`backends()`] (no cluster) starts the real database and storage servers of
//!   `hack/backends.sh` for the backup runner's tests, and runs `bosun` against them.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // test support: failing loudly is the point

pub mod backends;
mod cluster;
mod env;
mod evidence;
mod identity;
pub mod node;
mod operator;

pub use backends::{Backends, Outcome, backends};
pub use cluster::{
    Cluster, NodeAction, NodeGuard, break_node, built_tool, cluster, cluster_dir, kubeconfig_path, on_real_node,
    repo_root, restart_apiserver,
};
pub use env::{Env, e2e};
pub use operator::Bosun;

/// How long a wait may take by default; the fake nodes make pods ready in about a second.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A port free now, below the kernel's range for outgoing connections
/// (`ip_local_port_range`, from 32768 by default): a port handed out for `:0` comes
/// from that range, and any connection's source port could take it before bosun binds
/// it (seen once: the standby's webhook server failed with "Address already in use").
pub fn free_port() -> u16 {
    loop {
        let port = 20000 + rand::random::<u16>() % 12000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
