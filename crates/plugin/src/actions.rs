//! What the on-call person does: a switchover (the annotation bosun already reads,
//! then the wait for the new primary), a backup or a verification now (a Job from its
//! CronJob, as `kubectl create job --from` makes it, then its progress and result),
//! and psql on an instance (kubectl exec, with the user's own rights).

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bosun_api::backup::{Backup, VerifyOutcome};
use bosun_api::postgresql::{PostgreSQL, SWITCHOVER_ANNOTATION};
use bosun_resources::backup::{cronjob_name, verify_cronjob_name};
use bosun_resources::postgresql::{CONTAINER, ROLE_LABEL, ROLE_PRIMARY, ROLE_REPLICA, SUPERUSER};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::render::bytes;
use crate::status::{brief, events};
use crate::{Global, Session, postgres};

/// How often a wait looks again.
const POLL: Duration = Duration::from_secs(1);

pub async fn switchover(session: &Session, name: &str, instance: &str, timeout: Duration) -> anyhow::Result<ExitCode> {
    let db = postgres::get(session, name).await?;
    let pods = postgres::instance_pods(session, &db).await?;
    let Some(pod) = pods.iter().find(|p| p.name_any() == instance) else {
        let known: Vec<String> = pods.iter().map(ResourceExt::name_any).collect();
        anyhow::bail!(
            "{instance} is not an instance of postgresql {}/{name} (its instances: {})",
            session.namespace,
            known.join(", ")
        );
    };
    if db.status.as_ref().and_then(|s| s.current_primary.as_deref()) == Some(instance)
        && pod.labels().get(ROLE_LABEL).map(String::as_str) == Some(ROLE_PRIMARY)
    {
        println!("{instance} is already the primary of {name}");
        return Ok(ExitCode::SUCCESS);
    }
    let api: Api<PostgreSQL> = Api::namespaced(session.client.clone(), &session.namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {SWITCHOVER_ANNOTATION: instance}}});
    let asked = jiff::Timestamp::now();
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| anyhow::anyhow!("asking for the switchover: {}", brief(&e)))?;
    println!("switchover of {name} to {instance} asked ({SWITCHOVER_ANNOTATION}); waiting up to {timeout:?}");
    let started = Instant::now();
    let mut said = std::collections::BTreeSet::new();
    loop {
        let db = postgres::get(session, name).await?;
        let primary = db.status.as_ref().and_then(|s| s.current_primary.clone());
        let labelled = postgres::instance_pods(session, &db)
            .await?
            .iter()
            .any(|p| p.name_any() == instance && p.labels().get(ROLE_LABEL).map(String::as_str) == Some(ROLE_PRIMARY));
        let pending = db.annotations().contains_key(SWITCHOVER_ANNOTATION);
        if primary.as_deref() == Some(instance) && labelled && !pending {
            println!("{instance} is the primary of {name} ({:.1} s)", started.elapsed().as_secs_f64());
            return Ok(ExitCode::SUCCESS);
        }
        // What bosun said of it since it was asked.
        for e in events(session, &[name.to_owned()], 50).await? {
            let new = e
                .time
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| t >= asked.checked_sub(jiff::SignedDuration::from_secs(1)).unwrap_or(asked));
            if new && e.reason.starts_with("Switch") && said.insert(format!("{}{}", e.reason, e.message)) {
                println!("  {} {}: {}", e.type_, e.reason, e.message);
                if matches!(e.reason.as_str(), "SwitchoverRefused" | "SwitchoverFailed") {
                    anyhow::bail!("the switchover of {name} to {instance} did not happen: {}", e.message);
                }
            }
        }
        if started.elapsed() > timeout {
            anyhow::bail!(
                "{instance} is not the primary of {name} after {timeout:?} (the primary is {}; the annotation is {})",
                primary.unwrap_or_else(|| "unknown".into()),
                if pending { "still there" } else { "gone" }
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A Backup by its name, or the one a PostgreSQL with backups makes.
async fn find_backup(session: &Session, name: &str) -> anyhow::Result<Backup> {
    let api: Api<Backup> = Api::namespaced(session.client.clone(), &session.namespace);
    if let Some(backup) =
        api.get_opt(name).await.map_err(|e| anyhow::anyhow!("reading backup {name}: {}", brief(&e)))?
    {
        return Ok(backup);
    }
    let dbs: Api<PostgreSQL> = Api::namespaced(session.client.clone(), &session.namespace);
    if dbs.get_opt(name).await.ok().flatten().is_some() {
        let made = format!("{name}-backup");
        return match api.get_opt(&made).await.ok().flatten() {
            Some(backup) => Ok(backup),
            None => anyhow::bail!("postgresql {}/{name} has no backups (spec.backup.enabled)", session.namespace),
        };
    }
    anyhow::bail!("no backup or postgresql {}/{name}", session.namespace)
}

/// A Job from `cronjob`'s template now, as `kubectl create job --from=cronjob/…` makes it.
async fn run_now(session: &Session, cronjob: &str, what: &str) -> anyhow::Result<String> {
    let cronjobs: Api<CronJob> = Api::namespaced(session.client.clone(), &session.namespace);
    let cj = match cronjobs.get_opt(cronjob).await {
        Ok(Some(cj)) => cj,
        Ok(None) => anyhow::bail!("the CronJob {}/{cronjob} is not there: {what}", session.namespace),
        Err(e) => anyhow::bail!("reading the CronJob {cronjob}: {}", brief(&e)),
    };
    let template = cj.spec.as_ref().map(|s| s.job_template.clone()).unwrap_or_default();
    let stamp = jiff::Timestamp::now().as_second();
    let mut name = format!("{cronjob}-now-{stamp}");
    name.truncate(63);
    let mut annotations = template.metadata.as_ref().and_then(|m| m.annotations.clone()).unwrap_or_default();
    annotations.insert("cronjob.kubernetes.io/instantiate".into(), "manual".into());
    let job = Job {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(session.namespace.clone()),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "CronJob".into(),
                name: cronjob.to_owned(),
                uid: cj.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    };
    let jobs: Api<Job> = Api::namespaced(session.client.clone(), &session.namespace);
    jobs.create(&PostParams::default(), &job)
        .await
        .map_err(|e| anyhow::anyhow!("creating the Job {name}: {}", brief(&e)))?;
    Ok(name)
}

/// Whether the Job finished: `Some(true)` succeeded, `Some(false)` failed.
async fn finished(session: &Session, job: &str) -> anyhow::Result<Option<bool>> {
    let jobs: Api<Job> = Api::namespaced(session.client.clone(), &session.namespace);
    let job = jobs.get(job).await.map_err(|e| anyhow::anyhow!("reading the Job {job}: {}", brief(&e)))?;
    let conditions = job.status.and_then(|s| s.conditions).unwrap_or_default();
    let done = |t: &str| conditions.iter().any(|c| c.type_ == t && c.status == "True");
    Ok(if done("Complete") {
        Some(true)
    } else if done("Failed") {
        Some(false)
    } else {
        None
    })
}

/// The Backup status's condition `type_`.
fn condition(status: &bosun_api::backup::BackupStatus, type_: &str) -> Option<crate::status::ConditionLine> {
    crate::status::conditions(serde_json::to_value(status).ok().as_ref()).into_iter().find(|c| c.type_ == type_)
}

async fn backup_now(session: &Session, name: &str) -> anyhow::Result<Backup> {
    let api: Api<Backup> = Api::namespaced(session.client.clone(), &session.namespace);
    api.get(name).await.map_err(|e| anyhow::anyhow!("reading backup {name}: {}", brief(&e)))
}

pub async fn backup(session: &Session, name: &str, timeout: Duration) -> anyhow::Result<ExitCode> {
    let backup = find_backup(session, name).await?;
    let backup_name = backup.name_any();
    let job = run_now(session, &cronjob_name(&backup_name), "is the Backup's controller running?").await?;
    println!("backup {backup_name}: Job {job} started");
    let started = Instant::now();
    let mut last = None;
    loop {
        let status = backup_now(session, &backup_name).await?.status.unwrap_or_default();
        if let Some(running) = status.running.as_ref().filter(|r| r.job == job)
            && last != Some((running.read_bytes, running.stored_bytes))
        {
            last = Some((running.read_bytes, running.stored_bytes));
            println!(
                "  {:>4} s  read {}, stored {}",
                started.elapsed().as_secs(),
                bytes(u64::try_from(running.read_bytes).unwrap_or(0)),
                bytes(u64::try_from(running.stored_bytes).unwrap_or(0))
            );
        }
        let good = status.last_successful_backup.as_ref().filter(|b| b.job.as_deref() == Some(job.as_str()));
        if let Some(good) = good {
            println!(
                "backup {backup_name}: stored {} ({}) in {:.0} s",
                good.key,
                bytes(u64::try_from(good.size).unwrap_or(0)),
                started.elapsed().as_secs_f64()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if finished(session, &job).await? == Some(false) {
            let why = condition(&status, "LastBackupSucceeded")
                .map(|c| format!("{}: {}", c.reason, c.message))
                .unwrap_or_else(|| "the Job failed".into());
            anyhow::bail!("backup {backup_name}: Job {job} failed: {why}");
        }
        if started.elapsed() > timeout {
            anyhow::bail!("backup {backup_name}: Job {job} has not finished after {timeout:?}; it goes on");
        }
        tokio::time::sleep(POLL).await;
    }
}

pub async fn verify(session: &Session, name: &str, timeout: Duration) -> anyhow::Result<ExitCode> {
    let backup = find_backup(session, name).await?;
    let backup_name = backup.name_any();
    let job = run_now(session, &verify_cronjob_name(&backup_name), "the Backup has no spec.verify").await?;
    println!("verification of {backup_name}: Job {job} started");
    let started = Instant::now();
    loop {
        let status = backup_now(session, &backup_name).await?.status.unwrap_or_default();
        if let Some(v) = status.last_verified.as_ref().filter(|v| v.job == job) {
            let what = format!(
                "{} tables, {} rows in {}",
                v.tables.unwrap_or(0),
                v.rows.unwrap_or(0),
                v.key.clone().unwrap_or_else(|| "-".into())
            );
            if v.outcome == VerifyOutcome::Succeeded {
                println!(
                    "verification of {backup_name}: succeeded ({what}) in {:.0} s",
                    started.elapsed().as_secs_f64()
                );
                return Ok(ExitCode::SUCCESS);
            }
            let why = condition(&status, "LastVerificationSucceeded").map(|c| c.message).unwrap_or_default();
            anyhow::bail!("verification of {backup_name} failed ({what}): {why}");
        }
        if finished(session, &job).await? == Some(false) && started.elapsed() > Duration::from_secs(30) {
            anyhow::bail!("verification of {backup_name}: Job {job} failed and bosun has not told why yet");
        }
        if started.elapsed() > timeout {
            anyhow::bail!("verification of {backup_name}: Job {job} has not finished after {timeout:?}; it goes on");
        }
        tokio::time::sleep(POLL).await;
    }
}

pub async fn psql(
    session: &Session,
    global: &Global,
    name: &str,
    replica: bool,
    args: &[String],
) -> anyhow::Result<ExitCode> {
    let db = postgres::get(session, name).await?;
    let pods = postgres::instance_pods(session, &db).await?;
    let want = if replica { ROLE_REPLICA } else { ROLE_PRIMARY };
    let ready = |p: &&k8s_openapi::api::core::v1::Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    };
    let Some(pod) = pods.iter().filter(ready).find(|p| p.labels().get(ROLE_LABEL).map(String::as_str) == Some(want))
    else {
        anyhow::bail!("postgresql {}/{name} has no Ready {want} now", session.namespace);
    };
    let mut kubectl = std::process::Command::new("kubectl");
    kubectl.args(["exec", "-n", &session.namespace]);
    if let Some(context) = &global.context {
        kubectl.args(["--context", context]);
    }
    kubectl.arg(if std::io::stdin().is_terminal() { "-it" } else { "-i" });
    kubectl.args([pod.name_any().as_str(), "-c", CONTAINER, "--", "psql", "-U", SUPERUSER]);
    kubectl.args(args);
    let status = kubectl.status().map_err(|e| anyhow::anyhow!("kubectl could not run ({e}): is it on PATH?"))?;
    Ok(ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1)))
}
