//! The world → PostgreSQLStatus.

use super::*;
use k8s_openapi::api::core::v1::Pod;

/// Whether every instance of the StatefulSet runs the current spec and is ready.
pub(super) fn all_ready(db: &PostgreSQL, sts: &StatefulSet) -> bool {
    let Some(status) = sts.status.as_ref() else { return false };
    let wanted = db.spec.replicas;
    let current = status.observed_generation.is_some_and(|g| Some(g) >= sts.metadata.generation);
    current
        && status.ready_replicas.unwrap_or(0) >= wanted
        && status.updated_replicas.unwrap_or(0) >= wanted
        && status.replicas <= wanted
}

/// Whether the database is ready: the StatefulSet as observed has every instance ready.
pub fn ready(db: &PostgreSQL, sts: Option<&StatefulSet>) -> bool {
    sts.is_some_and(|s| all_ready(db, s))
}

/// What the world looks like to the status computation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed<'a> {
    /// The StatefulSet as applied, or as it is when it was not applied.
    pub statefulset: Option<&'a StatefulSet>,
    pub refusal: Option<&'a Refusal>,
    /// The Backup child, if there is one.
    pub backup: Option<&'a Backup>,
    /// Why the Backup could not be created: its name is someone else's.
    pub backup_conflict: Option<&'a str>,
    /// Why an instance cannot start ([`crate::pods`]), when one cannot.
    pub stuck: Option<&'a str>,
    /// An instance pod that runs on a simulated node ([`crate::pods::simulated`]),
    /// when one does: nothing really runs.
    pub simulated: Option<&'a str>,
    /// The primary ([`crate::failover`]) and the last change of primary.
    pub primary: Option<&'a str>,
    pub last_change: Option<&'a PrimaryChange>,
    /// The primary's archiver, when it was asked (continuous archiving only).
    pub archiving: Option<&'a ArchiverSeen>,
    /// The major upgrade ([`crate::upgrade`]) as it stands after this look, if one is
    /// in progress or failed for the current spec.
    pub upgrade: Option<&'a MajorUpgrade>,
    /// The certificate the instances serve with, as the instance Secret holds it.
    pub server_certificate: Option<&'a ServerCertificate>,
    /// The instances' pods.
    pub instances: &'a [InstanceStatus],
    /// The pooler, as its Deployments report it ([`pooler_status`]).
    pub pooler: Option<&'a PoolerStatus>,
    /// Whether the primary knows the pooler's role ([`holds_pooler_password`]).
    pub pooler_role: bool,
}

/// `status.instances` of `pods` (the database's instances'), by name, each with since
/// when it has not answered bosun, if it has not for long.
pub fn instances_status<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    unanswered_since: impl Fn(&Pod) -> Option<Timestamp>,
) -> Vec<InstanceStatus> {
    let mut instances: Vec<InstanceStatus> = pods
        .into_iter()
        .map(|pod| InstanceStatus {
            name: pod.name_any(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            role: pod.labels().get(ROLE_LABEL).cloned(),
            ready: crate::failover::pod_ready(pod),
            unanswered_since: unanswered_since(pod).map(|t| t.to_string()),
            data_on_lost_node: None,
        })
        .collect();
    instances.sort_by(|a, b| a.name.cmp(&b.name));
    instances
}

/// The status a PostgreSQL should have.
pub fn status(db: &PostgreSQL, observed: Observed<'_>, now: Timestamp) -> PostgreSQLStatus {
    let generation = db.meta().generation;
    let sts = observed.statefulset;
    let ready_replicas = sts.map(|s| s.status.as_ref().and_then(|st| st.ready_replicas).unwrap_or(0));
    let running = ready(db, sts);
    let phase = match (observed.refusal, sts) {
        (Some(r), _) if !r.keeps_running() => Phase::Failed,
        (_, None) => Phase::Pending,
        _ if running => Phase::Running,
        _ => Phase::Provisioning,
    };
    let wanted = db.spec.replicas;
    let upgrade = observed.upgrade.filter(|u| u.step != UpgradeStep::Succeeded);
    let ready = match (observed.refusal, upgrade) {
        (Some(refusal), _) => Desired::new(types::READY, false, refusal.reason(), refusal.message()),
        (None, Some(u)) => {
            let reason = if u.step == UpgradeStep::Failed { reasons::UPGRADE_FAILED } else { reasons::UPGRADING };
            Desired::new(types::READY, false, reason, crate::upgrade::describe(u))
        }
        _ if running => match observed.simulated {
            Some(pod) => Desired::new(
                types::READY,
                true,
                reasons::SIMULATED,
                format!(
                    "{wanted} of {wanted} instances report ready, but on simulated nodes: no container runs (pod {pod} \
                     has none), so no database answers at {}; put the namespace's pods on a real node",
                    endpoint(db)
                ),
            ),
            None => Desired::new(
                types::READY,
                true,
                reasons::RUNNING_READY,
                format!("{wanted} of {wanted} instances ready; clients connect to {}", endpoint(db)),
            ),
        },
        _ if sts.is_none() => Desired::new(types::READY, false, reasons::PENDING, "the StatefulSet is not created yet"),
        _ => match observed.stuck {
            Some(cause) => Desired::new(
                types::READY,
                false,
                reasons::INSTANCE_STUCK,
                format!("{} of {wanted} instances ready; {cause}", ready_replicas.unwrap_or(0)),
            ),
            None => Desired::new(
                types::READY,
                false,
                reasons::PROVISIONING,
                format!("{} of {wanted} instances ready", ready_replicas.unwrap_or(0)),
            ),
        },
    };
    let previous = db.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    // Asked on most looks; between them (the primary not Ready, bosun restarted) the
    // last answer stands.
    let before = previous_status(db).and_then(|s| s.wal_archiving.as_ref());
    let wal_archiving = continuous_destination(db)
        .and_then(|_| observed.archiving.map(|seen| observe_archiver(before, seen)).or_else(|| before.cloned()));
    let archiving_condition = wal_archiving_condition(db, wal_archiving.as_ref());
    let (first_recoverable_point, last_recoverable_point) = recoverable(db, observed.backup, wal_archiving.as_ref());
    PostgreSQLStatus {
        first_recoverable_point,
        last_recoverable_point,
        observed_generation: generation,
        phase: Some(phase),
        ready_replicas,
        endpoint: Some(endpoint(db)),
        current_primary: observed.primary.map(str::to_owned).or_else(|| previous_status(db)?.current_primary.clone()),
        last_primary_change: observed.last_change.cloned().or_else(|| previous_status(db)?.last_primary_change.clone()),
        wal_archiving,
        secret_name: Some(secret_name(db)),
        upgrade: observed.upgrade.cloned().or_else(|| previous_status(db)?.upgrade.clone()),
        server_certificate: observed
            .server_certificate
            .cloned()
            .or_else(|| previous_status(db)?.server_certificate.clone()),
        instances: observed.instances.to_vec(),
        pooler: observed.pooler.cloned(),
        conditions: conditions::merge(
            previous,
            [
                Some(ready),
                Some(backup_configured(db, observed.backup, observed.backup_conflict)),
                archiving_condition,
                pooler_condition(db, observed.pooler, observed.pooler_role),
            ]
            .into_iter()
            .flatten()
            .collect(),
            generation,
            now,
        ),
    }
}

/// The first and last points a recovery can reach, with continuous archiving: the
/// end of the oldest base backup its Backup's last run kept, and the newest archived
/// WAL (each the last known when not known now).
pub(super) fn recoverable(
    db: &PostgreSQL,
    backup: Option<&Backup>,
    archiving: Option<&WalArchiving>,
) -> (Option<String>, Option<String>) {
    if continuous_destination(db).is_none() {
        return (None, None);
    }
    let previous = previous_status(db);
    let success = backup.and_then(|b| b.status.as_ref()?.last_successful_backup.as_ref());
    let first = success
        .filter(|_| backup.is_some_and(|b| b.spec.method == Some(Method::Base)))
        .and_then(|s| s.oldest_kept.as_ref().map(|t| t.0.to_string()))
        .or_else(|| previous?.first_recoverable_point.clone());
    let last =
        archiving.and_then(|a| a.last_archived_time.clone()).or_else(|| previous?.last_recoverable_point.clone());
    // Nothing is recoverable before a base backup exists, and a base backup alone
    // recovers to its end.
    let at = |t: &Option<String>| t.as_deref().and_then(|t| t.parse::<Timestamp>().ok());
    let last = match (at(&first), at(&last)) {
        (Some(f), Some(l)) if l < f => first.clone(),
        (Some(_), _) => last.or_else(|| first.clone()),
        (None, _) => None,
    };
    (first, last)
}

pub(super) fn previous_status(db: &PostgreSQL) -> Option<&PostgreSQLStatus> {
    db.status.as_ref()
}

pub(super) fn backup_configured(db: &PostgreSQL, backup: Option<&Backup>, conflict: Option<&str>) -> Desired {
    const TYPE: &str = postgresql_types::BACKUP_CONFIGURED;
    if !backups_enabled(db) {
        return Desired::new(TYPE, false, reasons::BACKUP_DISABLED, "spec.backup.enabled is not true");
    }
    if let Some(message) = conflict {
        return Desired::new(TYPE, false, reasons::NAME_CONFLICT, message);
    }
    let Some(backup) = backup else {
        return Desired::new(
            TYPE,
            false,
            reasons::WAITING_FOR_DATABASE,
            "the Backup is created once the database is Ready",
        );
    };
    let name = backup.name_any();
    let ready: Option<&Condition> =
        backup.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == types::READY));
    match ready {
        Some(c) if c.status == "True" => Desired::new(
            TYPE,
            true,
            reasons::SCHEDULED,
            format!("Backup {name} runs on schedule \"{}\"", backup.spec.schedule),
        ),
        Some(c) => Desired::new(TYPE, false, reasons::BACKUP_NOT_READY, format!("Backup {name}: {}", c.message)),
        None => Desired::new(TYPE, false, reasons::BACKUP_NOT_READY, format!("Backup {name} has no status yet")),
    }
}
