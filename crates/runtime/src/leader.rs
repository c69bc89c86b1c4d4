//! Leader election on a `coordination.k8s.io/v1` Lease, with kube-lease-manager.
//!
//! ```text
//!  standby ──every retry period: fresh LeaseManager, try to lock──▶ leader
//!  leader  ──renews (lease − renew) before expiry; changed() returns on loss──▶ exit(1)
//!  leader  ──SIGTERM──▶ finish in-flight reconciles ──▶ release the Lease ──▶ exit(0)
//! ```
//!
//! kube-lease-manager locks, renews and releases the Lease. Its standby only re-reads
//! a Lease held by someone else once that lease would have expired, so a released
//! lease would sit free until then; a standby here builds a fresh manager (one GET)
//! every retry period instead, like client-go's standby, so a graceful handover takes
//! about one retry period. A leader whose renewal fails or that sees another holder
//! stops at once: the process exits and never runs leaderless.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tracing::{debug, info, warn};

/// Lease timings and identity, validated.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
    pub renew: Duration,
    pub retry: Duration,
}

impl LeaseConfig {
    fn duration_secs(&self) -> u64 {
        self.duration.as_secs()
    }

    /// How long before expiry the leader renews: `lease − renew`.
    fn grace_secs(&self) -> u64 {
        self.duration.as_secs().saturating_sub(self.renew.as_secs())
    }

    /// Check the timings make sense; the message names the flags.
    pub fn validate(&self) -> Result<(), String> {
        if self.duration.as_secs() < 2 {
            return Err("--leader-elect-lease-duration must be at least 2s".into());
        }
        if self.renew.as_secs() == 0 || self.renew >= self.duration {
            return Err(
                "--leader-elect-renew-deadline must be at least 1s and shorter than --leader-elect-lease-duration"
                    .into(),
            );
        }
        if self.retry.is_zero() || self.retry > self.renew {
            return Err("--leader-elect-retry-period must be positive and at most --leader-elect-renew-deadline".into());
        }
        Ok(())
    }
}

/// Whether this replica leads, for writers, `/readyz` and the `bosun_leader` gauge.
#[derive(Debug, Default)]
pub struct Leadership {
    leader: AtomicBool,
    gauge: Gauge,
}

impl Leadership {
    pub fn register(&self, registry: &mut Registry) {
        registry.register("bosun_leader", "1 if this replica holds the leader lease", self.gauge.clone());
    }

    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
    }

    pub fn set(&self, leader: bool) {
        self.leader.store(leader, Ordering::SeqCst);
        self.gauge.set(i64::from(leader));
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lost the lease {0}")]
    Lost(String),
    #[error("renewing the lease {name}: {source}")]
    Renew {
        name: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
}

async fn manager(client: &Client, cfg: &LeaseConfig) -> Result<LeaseManager, kube_lease_manager::LeaseManagerError> {
    LeaseManagerBuilder::new(client.clone(), &cfg.name)
        .with_namespace(&cfg.namespace)
        .with_identity(&cfg.identity)
        .with_duration(cfg.duration_secs())
        .with_grace(cfg.grace_secs())
        .build()
        .await
}

/// Wait until this replica holds the lease.
pub async fn acquire(client: &Client, cfg: &LeaseConfig) -> LeaseManager {
    info!(lease = %cfg.name, namespace = %cfg.namespace, identity = %cfg.identity, "waiting for the leader lease");
    loop {
        match try_acquire(client, cfg).await {
            Ok(Some(mgr)) => {
                info!(lease = %cfg.name, identity = %cfg.identity, "acquired the leader lease");
                return mgr;
            }
            Ok(None) => continue,
            Err(err) => warn!(%err, lease = %cfg.name, "trying to acquire the lease"),
        }
        tokio::time::sleep(cfg.retry).await;
    }
}

/// One attempt, for at most a retry period: the lease's manager once this replica
/// holds it, `None` while another replica does.
pub async fn try_acquire(
    client: &Client,
    cfg: &LeaseConfig,
) -> Result<Option<LeaseManager>, kube_lease_manager::LeaseManagerError> {
    let mgr = manager(client, cfg).await?;
    match tokio::time::timeout(cfg.retry, mgr.changed()).await {
        Ok(Ok(true)) => Ok(Some(mgr)),
        Ok(Ok(false)) | Err(_) => {
            debug!(lease = %cfg.name, "the lease is held by another replica");
            Ok(None)
        }
        Ok(Err(err)) => Err(err),
    }
}

/// Keep renewing the lease; returns only when it is lost or cannot be renewed.
pub async fn hold(mgr: &LeaseManager, cfg: &LeaseConfig) -> LeaseError {
    loop {
        match mgr.changed().await {
            Ok(true) => continue,
            Ok(false) => return LeaseError::Lost(cfg.name.clone()),
            Err(source) => return LeaseError::Renew { name: cfg.name.clone(), source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(lease: u64, renew: u64, retry: u64) -> LeaseConfig {
        LeaseConfig {
            name: "bosun".into(),
            namespace: "default".into(),
            identity: "a".into(),
            duration: Duration::from_secs(lease),
            renew: Duration::from_secs(renew),
            retry: Duration::from_secs(retry),
        }
    }

    #[test]
    fn defaults_are_valid_and_renew_five_seconds_before_expiry() {
        let c = cfg(15, 10, 2);
        assert_eq!(c.validate(), Ok(()));
        assert_eq!((c.duration_secs(), c.grace_secs()), (15, 5));
    }

    #[test]
    fn nonsense_timings_name_the_flag() {
        assert!(cfg(15, 15, 2).validate().unwrap_err().contains("--leader-elect-renew-deadline"));
        assert!(cfg(15, 10, 11).validate().unwrap_err().contains("--leader-elect-retry-period"));
        assert!(cfg(1, 0, 0).validate().unwrap_err().contains("--leader-elect-lease-duration"));
    }
}
