//! Prometheus metrics of the controllers, recorded once in the shared reconcile
//! wrapper so every kind gets them.
//!
//! Labels are bounded: `controller` (a kind), `result`, and an error `reason` from
//! [`crate::Error::category`]. The one exception is a few gauges per Backup, per
//! PostgreSQL and per standby (as kube-state-metrics has per object), which the
//! alerts and the dashboard need to say which one fails or lags; there are as many as
//! those objects, and they go with them ([`Gauges`], [`ReplicationLag`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub controller: &'static str,
    /// `success`, `refused` (the spec cannot be served) or `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub reason: &'static str,
}

/// A change of a database's primary: `Failover` or `Switchover`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PrimaryChangeLabels {
    pub controller: &'static str,
    pub kind: &'static str,
}

/// One Backup (`backup_namespace`: a target's own `namespace` label is Prometheus's).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackupLabels {
    pub backup_namespace: String,
    pub backup: String,
}

/// One PostgreSQL (`database_namespace`, as [`BackupLabels`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DatabaseLabels {
    pub database_namespace: String,
    pub database: String,
}

/// One instance of a PostgreSQL.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceLabels {
    pub database_namespace: String,
    pub database: String,
    pub instance: String,
}

/// A gauge of floating-point values (times in Unix seconds, 0/1 flags).
pub type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// Each standby's replication lag, as its primary said it on bosun's last look
/// (`pg_stat_replication`): bytes of WAL not yet replayed, and seconds. An instance
/// that no longer streams, and a database that is gone or whose primary cannot be
/// asked, lose their series.
#[derive(Debug, Default)]
pub struct ReplicationLag {
    pub bytes: Family<InstanceLabels, FloatGauge>,
    pub seconds: Family<InstanceLabels, FloatGauge>,
    exported: std::sync::Mutex<std::collections::HashMap<DatabaseLabels, Vec<String>>>,
}

/// One standby's lag: its instance, bytes and seconds (either unknown: no series).
pub type StandbyLag = (String, Option<f64>, Option<f64>);

impl ReplicationLag {
    /// `db`'s standbys' lag now: the series of the standbys not in `standbys` removed.
    pub fn set(&self, db: &DatabaseLabels, standbys: &[StandbyLag]) {
        let labels = |instance: &str| InstanceLabels {
            database_namespace: db.database_namespace.clone(),
            database: db.database.clone(),
            instance: instance.to_owned(),
        };
        let mut exported = self.exported.lock().unwrap_or_else(|e| e.into_inner());
        for gone in exported.remove(db).unwrap_or_default() {
            if !standbys.iter().any(|(name, ..)| *name == gone) {
                self.bytes.remove(&labels(&gone));
                self.seconds.remove(&labels(&gone));
            }
        }
        for (name, bytes, seconds) in standbys {
            for (family, value) in [(&self.bytes, bytes), (&self.seconds, seconds)] {
                match value {
                    Some(v) => {
                        family.get_or_create(&labels(name)).set(*v);
                    }
                    None => {
                        family.remove(&labels(name));
                    }
                }
            }
        }
        if !standbys.is_empty() {
            exported.insert(db.clone(), standbys.iter().map(|(name, ..)| name.clone()).collect());
        }
    }
}

/// What goes when an object's per-object series go ([`Gauges::gone`]).
pub trait Forget<L>: std::fmt::Debug + Send + Sync {
    fn forget(&self, labels: &L);
}

impl Forget<DatabaseLabels> for ReplicationLag {
    fn forget(&self, db: &DatabaseLabels) {
        self.set(db, &[]);
    }
}

/// The controllers' metric families.
#[derive(Debug)]
pub struct Metrics {
    pub reconciles: Family<ResultLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    pub ready_duration: Family<ControllerLabels, Histogram>,
    pub managed: Family<ControllerLabels, Gauge>,
    pub queue_depth: Family<ControllerLabels, Gauge>,
    /// Seconds from taking the lead to the first reconcile.
    pub takeover: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// When each Backup last succeeded (Unix seconds), from its status.
    pub backup_last_success: Family<BackupLabels, FloatGauge>,
    /// 1 for a Backup whose last run failed (`LastBackupSucceeded=False`), else 0.
    pub backup_failing: Family<BackupLabels, FloatGauge>,
    /// When a Backup's verification last succeeded (before the first: when the Backup
    /// was created), for Backups with `spec.verify`.
    pub backup_last_verified: Family<BackupLabels, FloatGauge>,
    /// 1 for a Backup whose last verification failed, else 0.
    pub backup_verification_failing: Family<BackupLabels, FloatGauge>,
    /// The longest time between two verifications of `spec.verify.schedule`.
    pub backup_verify_interval: Family<BackupLabels, FloatGauge>,
    /// When a PostgreSQL's primary last archived a WAL file (Unix seconds).
    pub wal_last_archived: Family<DatabaseLabels, FloatGauge>,
    /// 1 while a PostgreSQL's last WAL archiving attempt failed, else 0.
    pub wal_archiving_failing: Family<DatabaseLabels, FloatGauge>,
    /// A PostgreSQL's `archive_timeout`, so an alert can tell lagging from idle.
    pub wal_archive_timeout: Family<DatabaseLabels, FloatGauge>,
    /// When the certificate a PostgreSQL's instances serve clients with expires (Unix
    /// seconds): bosun's, which it renews, or the one `spec.certificates` names.
    pub server_certificate_expiry: Family<DatabaseLabels, FloatGauge>,
    /// WAL files a PostgreSQL's primary failed to archive, counted between bosun's
    /// looks at its archiver (`pg_stat_archiver.failed_count`'s growth), so
    /// `increase(...) > 0` sees a failure that a later push made good.
    pub wal_archive_failures: Family<DatabaseLabels, Counter>,
    /// Changes of a database's primary, and how long each took.
    pub primary_changes: Family<PrimaryChangeLabels, Counter>,
    pub primary_change_duration: Family<PrimaryChangeLabels, Histogram>,
    /// A PostgreSQL's instances: as many as its spec asks, and how many are Ready.
    pub postgresql_instances: Family<DatabaseLabels, FloatGauge>,
    pub postgresql_instances_ready: Family<DatabaseLabels, FloatGauge>,
    /// Its standbys' replication lag.
    pub replication_lag: std::sync::Arc<ReplicationLag>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            // 1 ms … ~33 s
            reconcile_duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 16))),
            // 0.5 s … ~68 min
            ready_duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.5, 2.0, 14))),
            managed: Family::default(),
            queue_depth: Family::default(),
            takeover: Gauge::default(),
            backup_last_success: Family::default(),
            backup_failing: Family::default(),
            backup_last_verified: Family::default(),
            backup_verification_failing: Family::default(),
            backup_verify_interval: Family::default(),
            wal_last_archived: Family::default(),
            wal_archiving_failing: Family::default(),
            wal_archive_timeout: Family::default(),
            wal_archive_failures: Family::default(),
            server_certificate_expiry: Family::default(),
            primary_changes: Family::default(),
            // 0.1 s … ~100 s
            primary_change_duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.1, 2.0, 11))),
            postgresql_instances: Family::default(),
            postgresql_instances_ready: Family::default(),
            replication_lag: std::sync::Arc::default(),
        }
    }
}

impl Metrics {
    /// Register every family under the `bosun` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("bosun");
        r.register("reconciles", "Reconciles by controller and result", self.reconciles.clone());
        r.register("reconcile_errors", "Failed reconciles by controller and bounded reason", self.errors.clone());
        r.register("reconcile_duration_seconds", "Duration of one reconcile", self.reconcile_duration.clone());
        r.register(
            "ready_duration_seconds",
            "Time from a resource's creation until it first became Ready",
            self.ready_duration.clone(),
        );
        r.register("managed_resources", "Custom resources currently managed, by controller", self.managed.clone());
        r.register(
            "workqueue_depth",
            "Objects triggered by a watch and waiting for their reconcile to start, by controller",
            self.queue_depth.clone(),
        );
        r.register(
            "leader_first_reconcile_seconds",
            "Seconds from acquiring the leader lease (or starting, without leader election) to the first reconcile",
            self.takeover.clone(),
        );
        r.register(
            "backup_last_success_timestamp_seconds",
            "When each Backup last succeeded, in Unix seconds (absent before its first good run)",
            self.backup_last_success.clone(),
        );
        r.register("backup_failing", "1 for a Backup whose last run failed, else 0", self.backup_failing.clone());
        r.register(
            "backup_last_verified_timestamp_seconds",
            "When a verification of each Backup with spec.verify last succeeded (before the first: when the Backup was created), in Unix seconds",
            self.backup_last_verified.clone(),
        );
        r.register(
            "backup_verification_failing",
            "1 for a Backup whose last verification failed (its newest dump did not restore or did not pass the checks), else 0",
            self.backup_verification_failing.clone(),
        );
        r.register(
            "backup_verify_interval_seconds",
            "The longest time between two verifications of each Backup's spec.verify.schedule",
            self.backup_verify_interval.clone(),
        );
        r.register(
            "postgresql_wal_last_archived_timestamp_seconds",
            "When the primary of each continuously archived PostgreSQL last archived a WAL file, in Unix seconds",
            self.wal_last_archived.clone(),
        );
        r.register(
            "postgresql_wal_archiving_failing",
            "1 for a PostgreSQL whose last WAL archiving attempt failed, else 0",
            self.wal_archiving_failing.clone(),
        );
        r.register(
            "postgresql_wal_archive_timeout_seconds",
            "The archive_timeout of each continuously archived PostgreSQL",
            self.wal_archive_timeout.clone(),
        );
        r.register(
            "postgresql_wal_archive_failures",
            "WAL files the primary of each continuously archived PostgreSQL failed to archive, as bosun counted them",
            self.wal_archive_failures.clone(),
        );
        r.register(
            "postgresql_server_certificate_expiry_timestamp_seconds",
            "When the certificate each PostgreSQL's instances serve clients with expires, in Unix seconds",
            self.server_certificate_expiry.clone(),
        );
        r.register(
            "postgresql_primary_changes",
            "Changes of a PostgreSQL's primary, by kind (Failover, Switchover)",
            self.primary_changes.clone(),
        );
        r.register(
            "postgresql_primary_change_duration_seconds",
            "From bosun's decision to change a PostgreSQL's primary until the new primary accepts writes",
            self.primary_change_duration.clone(),
        );
        r.register(
            "postgresql_instances",
            "The instances each PostgreSQL's spec asks for (spec.replicas)",
            self.postgresql_instances.clone(),
        );
        r.register(
            "postgresql_instances_ready",
            "The Ready instances of each PostgreSQL",
            self.postgresql_instances_ready.clone(),
        );
        r.register(
            "postgresql_replication_lag_bytes",
            "WAL each standby has yet to replay, in bytes, as its primary said it on bosun's last look",
            self.replication_lag.bytes.clone(),
        );
        r.register(
            "postgresql_replication_lag_seconds",
            "Each standby's replay lag in seconds (pg_stat_replication.replay_lag; 0 once caught up), as its primary said it on bosun's last look",
            self.replication_lag.seconds.clone(),
        );
    }

    /// Every family with one series, as a scrape shows them once each has a sample (a
    /// family without one is not in a scrape at all): the names bosun can export, for
    /// the checks of what reads them (the dashboard's panels, the alerts).
    pub fn declared() -> String {
        let m = Metrics::default();
        let (controller, result, reason, kind) = ("x", "x", "x", "x");
        let db = DatabaseLabels { database_namespace: "x".into(), database: "x".into() };
        let backup = BackupLabels { backup_namespace: "x".into(), backup: "x".into() };
        m.reconciles.get_or_create(&ResultLabels { controller, result }).inc();
        m.errors.get_or_create(&ErrorLabels { controller, reason }).inc();
        m.reconcile_duration.get_or_create(&ControllerLabels { controller }).observe(0.0);
        m.ready_duration.get_or_create(&ControllerLabels { controller }).observe(0.0);
        m.managed.get_or_create(&ControllerLabels { controller }).set(0);
        m.queue_depth.get_or_create(&ControllerLabels { controller }).set(0);
        m.takeover.set(0.0);
        for family in [
            &m.backup_last_success,
            &m.backup_failing,
            &m.backup_last_verified,
            &m.backup_verification_failing,
            &m.backup_verify_interval,
        ] {
            family.get_or_create(&backup).set(0.0);
        }
        for family in [
            &m.wal_last_archived,
            &m.wal_archiving_failing,
            &m.wal_archive_timeout,
            &m.server_certificate_expiry,
            &m.postgresql_instances,
            &m.postgresql_instances_ready,
        ] {
            family.get_or_create(&db).set(0.0);
        }
        m.wal_archive_failures.get_or_create(&db).inc();
        m.primary_changed(controller, kind, 0.0);
        m.replication_lag.set(&db, &[("x".into(), Some(0.0), Some(0.0))]);
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut text = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }

    /// Create the zero series of `controller` for every result and error reason, so
    /// the families are visible and `rate()` works before anything happened.
    pub fn init(&self, controller: &'static str) {
        for result in ["success", "refused", "error"] {
            let _ = self.reconciles.get_or_create(&ResultLabels { controller, result });
        }
        for reason in crate::error::Error::CATEGORIES {
            let _ = self.errors.get_or_create(&ErrorLabels { controller, reason });
        }
        let _ = self.reconcile_duration.get_or_create(&ControllerLabels { controller });
        let _ = self.ready_duration.get_or_create(&ControllerLabels { controller });
        let _ = self.managed.get_or_create(&ControllerLabels { controller });
        let _ = self.queue_depth.get_or_create(&ControllerLabels { controller });
    }

    pub fn reconciled(&self, controller: &'static str, result: &'static str, seconds: f64) {
        self.reconciles.get_or_create(&ResultLabels { controller, result }).inc();
        self.reconcile_duration.get_or_create(&ControllerLabels { controller }).observe(seconds);
    }

    /// A database's primary changed (`kind`: `Failover` or `Switchover`) in `seconds`.
    pub fn primary_changed(&self, controller: &'static str, kind: &'static str, seconds: f64) {
        let labels = PrimaryChangeLabels { controller, kind };
        self.primary_changes.get_or_create(&labels).inc();
        self.primary_change_duration.get_or_create(&labels).observe(seconds);
    }

    pub fn failed(&self, controller: &'static str, reason: &'static str) {
        self.errors.get_or_create(&ErrorLabels { controller, reason }).inc();
    }

    pub fn became_ready(&self, controller: &'static str, seconds_since_creation: f64) {
        self.ready_duration.get_or_create(&ControllerLabels { controller }).observe(seconds_since_creation);
    }
}

#[derive(Debug)]
/// The per-object gauges of one kind: `read` gives an object's labels and one value
/// per family (`None`: no series for it now).
pub struct Gauges<K, L: Clone + std::hash::Hash + Eq> {
    pub families: Vec<Family<L, FloatGauge>>,
    pub read: ReadGauges<K, L>,
    /// Series of the object's that others set, to remove with the object's own.
    pub gone: Option<std::sync::Arc<dyn Forget<L>>>,
}

/// An object's labels and its value in each gauge family, or `None`.
pub type ReadGauges<K, L> = fn(&K) -> Option<(L, Vec<Option<f64>>)>;

impl<K, L> Gauges<K, L>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug,
{
    /// Set the gauges to what `object` says now: a reconcile calls it with the status
    /// it wrote, so a scrape right after a run already tells of it.
    pub fn set(&self, object: &K) -> Option<L> {
        let (labels, values) = (self.read)(object)?;
        for (family, value) in self.families.iter().zip(values) {
            match value {
                Some(v) => {
                    family.get_or_create(&labels).set(v);
                }
                None => {
                    family.remove(&labels);
                }
            }
        }
        Some(labels)
    }

    /// Keep the gauges at what the cached objects say, every 10 s (what a reconcile
    /// did not set: a time-based value, an object changed by someone else). The series
    /// of an object that is gone, or reads as `None`, go with it.
    pub async fn export(self, store: kube::runtime::reflector::Store<crate::guard::Guarded<K>>) {
        let mut exported: std::collections::HashSet<L> = std::collections::HashSet::new();
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            let mut now = std::collections::HashSet::new();
            for object in store.state() {
                let crate::guard::Guarded(Ok(object)) = object.as_ref() else { continue };
                if let Some(labels) = self.set(object) {
                    now.insert(labels);
                }
            }
            for gone in exported.difference(&now) {
                for family in &self.families {
                    family.remove(gone);
                }
                if let Some(also) = &self.gone {
                    also.forget(gone);
                }
            }
            exported = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    fn exported(metrics: &Metrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text.lines().filter(|l| l.starts_with("bosun_postgresql_replication_lag")).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn a_standbys_lag_series_goes_with_the_standby_and_with_its_database() {
        let metrics = Metrics::default();
        let db = DatabaseLabels { database_namespace: "shop".into(), database: "orders".into() };
        let lag = &metrics.replication_lag;
        lag.set(&db, &[("orders-1".into(), Some(4096.0), Some(1.5)), ("orders-2".into(), Some(0.0), None)]);
        let text = exported(&metrics);
        assert!(text.contains(r#"bosun_postgresql_replication_lag_bytes{database_namespace="shop",database="orders",instance="orders-1"} 4096.0"#), "{text}");
        assert!(
            text.contains(r#"instance="orders-2"} 0.0"#)
                && !text.contains(r#"lag_seconds{database_namespace="shop",database="orders",instance="orders-2"}"#),
            "{text}"
        );
        // orders-1 became the primary: its series go.
        lag.set(&db, &[("orders-2".into(), Some(8.0), Some(0.2))]);
        let text = exported(&metrics);
        assert!(!text.contains("orders-1") && text.contains(r#"instance="orders-2"} 8.0"#), "{text}");
        lag.forget(&db);
        assert_eq!(exported(&metrics), "", "a database gone leaves no series");
    }

    #[test]
    fn every_registered_family_is_declared() {
        let declared = Metrics::declared();
        let types = declared.lines().filter(|l| l.starts_with("# TYPE bosun_")).count();
        let registered = include_str!("metrics.rs").matches(concat!("r.reg", "ister(")).count();
        assert_eq!(types, registered, "a family registered but not given a sample in declared():\n{declared}");
    }
}
