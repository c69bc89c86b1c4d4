//! The Restore controller.
//!
//! Pipeline: finished already? stop → the Job as cached, else which dump (the
//! Backup's destination and newest good key, or the spec's) → the Secrets the run
//! reads exist, with their keys (else wait, looking again every 30 s) → build and
//! create the Job → its result once it finished, or what keeps its pod from starting
//! → compute status → write it only if it changed, with a Warning for a run that is
//! stuck or failed.
//!
//! A Restore runs once. Its Job is created once and never re-applied (a Job's pod
//! template cannot change, and a second run would meet the tables the first one
//! loaded); a Job deleted before it finished fails the Restore instead of running it
//! again. Once `Succeeded` or `Failed`, the status never changes.

use std::future::Future;
use std::sync::Arc;

use bosun_api::backup::{Backup, Restore};
use bosun_api::conditions::{reasons, types};
use bosun_resources::backup::{self as build, Dump, RestoreObserved};
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use crate::apply::apply_child;
use crate::children::{Owned, controlled_by};
use crate::context::Context;
use crate::error::Error;
use crate::kinds::{Served, Type};
use crate::permissions::{self, Permission};
use crate::read;
use crate::status::update_status;
use crate::wiring::{self, Outcome};

/// The `controller` label of this controller in metrics and logs.
const CONTROLLER: &str = "restore";

/// What this controller does with the API: Restores, their Jobs, the Backups they
/// name (read), the pods of their Jobs (listed, for results and progress), the Warning
/// events of a pod that does not start, and the Secrets the run reads (for their keys).
pub const PERMISSIONS: &[Permission] = &{
    let [a, b, c] = permissions::reconciled("backup.example.com", "restores");
    [
        a,
        b,
        c,
        Permission::new("backup.example.com", "backups", &["get"]),
        Permission::new("batch", "jobs", permissions::OWN),
        Permission::new("", "pods", &["list"]),
        Permission::new("", "events", &["list"]),
        Permission::new("", "secrets", &["get"]),
    ]
};

/// The restore controller, for the registry of kinds.
pub const SERVED: Served = Served {
    controllers: &[CONTROLLER],
    types: &[Type::unrendered::<Restore>()],
    permissions: PERMISSIONS,
    start: |start| start.in_each_namespace(|ctx, ns, concurrency, stop| Box::pin(run(ctx, ns, concurrency, stop))),
};

/// Run the Restore controller in `namespace` (or cluster-wide).
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    wiring::run_owning::<Restore, Job, _, _>(CONTROLLER, ctx, namespace, concurrency, shutdown, reconcile).await;
}

async fn reconcile(restore: Arc<Restore>, ctx: Arc<Context>, jobs: Owned<Job>) -> Result<Outcome, Error> {
    let restore = restore.as_ref();
    let previous = restore.status.clone().unwrap_or_default();
    if previous.phase.is_some_and(|p| p.finished()) {
        return Ok(Outcome::Applied);
    }
    let ns = restore.namespace().unwrap_or_default();
    let job_name = build::restore_job_name(&restore.name_any());
    let cached = jobs.get(&ns, &job_name).filter(|j| controlled_by(j.as_ref(), restore));
    let mut requested_key = previous.key.clone();
    let mut refusal: Option<(&'static str, String)> = None;
    let job = match cached {
        Some(job) => Some((*job).clone()),
        // Created before and not in the cache: just created (the watch is behind) or
        // deleted; the apiserver tells which.
        None if previous.job.is_some() => match read::metadata::<Job>(&ctx.client, &ns, &job_name).await? {
            Some(_) => return Ok(Outcome::Applied),
            None => None,
        },
        None => {
            let backup = match &restore.spec.backup_ref {
                Some(r) => Api::<Backup>::namespaced(ctx.client.clone(), &ns)
                    .get_opt(&r.name)
                    .await
                    .map_err(|source| Error::Read { what: format!("Backup {ns}/{}", r.name), source })?,
                None => None,
            };
            match dump(restore, backup.as_ref()) {
                Err(message) => {
                    refusal = Some((reasons::BACKUP_NOT_FOUND, message));
                    None
                }
                Ok(dump) => {
                    requested_key = dump.key.clone();
                    let destination_field = match (&restore.spec.source, &backup) {
                        (Some(_), _) | (None, None) => "spec.source.destination".to_owned(),
                        (None, Some(b)) => format!("spec.backupRef: Backup {}'s spec.destination", b.name_any()),
                    };
                    let needs = build::secrets_needed(
                        &restore.spec.target,
                        "spec.target.connection.secretRef",
                        dump.destination,
                        &destination_field,
                    );
                    // A Job runs once: it is made only when what it reads is there.
                    if let Some(message) = read::credentials_missing(&ctx.client, &ns, &needs).await? {
                        refusal = Some((reasons::CREDENTIALS_MISSING, message));
                        None
                    } else {
                        let desired = build::desired_job(restore, &dump, &ctx.settings.runner_image);
                        match apply_child(&ctx, restore, &jobs, desired).await {
                            Ok(applied) => Some(applied),
                            Err(Error::NameConflict(message)) => {
                                refusal = Some((reasons::NAME_CONFLICT, message));
                                None
                            }
                            Err(err) if err.is_invalid_spec() => {
                                refusal = Some((reasons::INVALID_SPEC, err.user_message()));
                                None
                            }
                            Err(err) => return Err(err),
                        }
                    }
                }
            }
        }
    };
    let (mut result, mut stuck, mut running) = (None, None, false);
    if let Some(j) = &job {
        let pods = read::job_pods(&ctx.client, &ns, &j.name_any()).await?;
        if build::finish(j).is_some() {
            result = pods.iter().find_map(|p| build::run_result(p, build::RESTORE_CONTAINER));
        } else {
            running = true;
            stuck = read::pod_stuck(&ctx.client, ctx.now(), &ns, pods.first()).await?;
        }
    }
    let observed = RestoreObserved {
        job: job.as_ref(),
        requested_key: requested_key.as_deref(),
        result: result.as_ref(),
        refusal: refusal.as_ref().map(|(reason, message)| (*reason, message.as_str())),
        stuck: stuck.as_deref(),
    };
    let status = build::restore_status(restore, observed, ctx.now());
    let announce = update_status(&ctx, CONTROLLER, restore, &status).await?;
    if announce {
        ctx.events.condition_failed(
            &restore.object_ref(&()),
            Some(ObjectRef::<Job>::new(&job_name).within(&ns).into()),
            types::READY,
            &[reasons::RUN_STUCK, reasons::RESTORE_FAILED],
            &previous.conditions,
            &status.conditions,
        );
    }
    Ok(match refusal {
        Some(refused) => Outcome::of(Some(refused), announce),
        // Nothing else triggers a look at a pod that does not start.
        None if running => Outcome::Requeue(crate::read::POD_RECHECK),
        None => Outcome::Applied,
    })
}

/// Which dump `restore` loads: the spec's key, or the newest good dump of the Backup
/// it names (`backup`, as read; its status's key when it has one, else the newest in
/// its folder). An error message when the Backup does not exist.
fn dump<'a>(restore: &'a Restore, backup: Option<&'a Backup>) -> Result<Dump<'a>, String> {
    if let Some(source) = &restore.spec.source {
        return Ok(Dump { destination: &source.destination, key: Some(source.key.clone()), backup: None });
    }
    let wanted = restore.spec.backup_ref.as_ref().map(|r| r.name.as_str()).unwrap_or_default();
    let Some(backup) = backup else {
        return Err(format!(
            "spec.backupRef: Backup {wanted} does not exist in namespace {}; looking again every 30s",
            restore.namespace().unwrap_or_default()
        ));
    };
    let key = backup.status.as_ref().and_then(|s| s.last_successful_backup.as_ref()).map(|b| b.key.clone());
    Ok(Dump { destination: &backup.spec.destination, key, backup: Some(backup.name_any()) })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mock;

    fn restore(status: serde_json::Value) -> Arc<Restore> {
        let r = json!({
            "apiVersion": "backup.example.com/v1", "kind": "Restore",
            "metadata": {"name": "nightly-restore", "namespace": "shop", "uid": "uid-restore", "generation": 1},
            "spec": {"backupRef": {"name": "nightly"},
                     "target": {"type": "postgresql", "connection": {"host": "restored-db", "database": "app", "secretRef": {"name": "restored-db-credentials"}}}},
            "status": status,
        });
        Arc::new(serde_json::from_value(r).unwrap())
    }

    #[tokio::test]
    async fn a_finished_restore_never_runs_again() {
        for phase in ["Succeeded", "Failed"] {
            let r = restore(json!({"phase": phase}));
            let (ctx, calls) = mock::context(mock::answer(r.as_ref()));
            let outcome = reconcile(r, ctx, mock::cache([])).await.unwrap();
            assert_eq!(outcome, Outcome::Applied);
            assert_eq!(calls.writes(), Vec::<String>::new(), "{phase}: a restore runs once");
        }
    }

    #[tokio::test]
    async fn a_backup_that_is_not_there_is_refused_and_no_job_is_made() {
        let r = restore(json!(null));
        let (ctx, calls) = mock::context(mock::answer(r.as_ref()));
        let outcome = reconcile(r, ctx, mock::cache([])).await.unwrap();
        assert!(
            matches!(&outcome, Outcome::Refused { reason: "BackupNotFound", message, .. } if message.contains("nightly")),
            "{outcome:?}"
        );
        assert!(!calls.writes().iter().any(|w| w.contains("/jobs")), "{:?}", calls.writes());
        assert_eq!(mock::condition(&calls, "Ready"), "False/BackupNotFound");
    }
}
