//! `status NAME` of a PostgreSQL: every instance with its role, node, readiness,
//! timeline, position and lag, and synchronous state, as the instances say it now
//! (their instance managers' status, through a port-forward); WAL archiving, the last
//! backup and verification, the recoverability window, the server's certificate and
//! the recent events, as bosun recorded them.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bosun_api::backup::Backup;
use bosun_api::postgresql::{PostgreSQL, PrimaryChange, ServerCertificate, WalArchiving};
use bosun_controller::instances::{AskError, connector, request_over};
use bosun_instance::api;
use bosun_instance::status::{Archiver, Replication, Status, lsn};
use bosun_resources::instances as build;
use bosun_resources::postgresql::{APP_NAME, ROLE_LABEL};
use futures::future::join_all;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::render::{Paint, bytes};
use crate::status::{self, ConditionLine, EventLine, brief, since};
use crate::{Output, Session};

/// How long one instance may take to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// One instance, as the screen and the JSON say it.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceLine {
    pub name: String,
    pub node: Option<String>,
    /// The role label bosun gave the pod.
    pub role: Option<String>,
    /// The pod is Ready.
    pub ready: bool,
    /// What the instance said of itself, when it answered.
    pub timeline: Option<u32>,
    /// A primary's current WAL position, a standby's last replayed one.
    pub lsn: Option<String>,
    /// How far a standby's replay is behind its primary's position, in bytes.
    pub lag_bytes: Option<u64>,
    /// The primary's measure of a standby's replay lag, in seconds.
    pub lag_seconds: Option<f64>,
    /// A standby's replication as its primary sees it: `streaming`, `catchup`, …
    pub replication: Option<String>,
    /// `sync`, `quorum`, `potential` or `async`.
    pub sync_state: Option<String>,
    pub version: Option<String>,
    /// Why the instance could not be asked, or its server did not answer.
    pub problem: Option<String>,
    /// The lost node that holds its only copy of its data, as bosun reports it.
    pub data_on_lost_node: Option<String>,
}

/// The backup side: the database's Backup (`<name>-backup`), when it has one.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupLine {
    pub name: String,
    pub last_successful: Option<bosun_api::backup::SuccessfulBackup>,
    pub last_verified: Option<bosun_api::backup::VerifiedBackup>,
    pub running: Option<bosun_api::backup::RunningBackup>,
    pub conditions: Vec<ConditionLine>,
}

/// The pooler (`spec.pooler`): what the spec asks for and what its Deployments report.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolerLine {
    /// Where its clients connect, once bosun reported it.
    pub endpoint: Option<String>,
    pub mode: String,
    pub instances: i32,
    pub ready_instances: i32,
    /// With `readOnly`: the standbys' side, `(ready, wanted)`, and its Service.
    pub read_only: Option<(i32, i32)>,
    pub read_only_service: Option<String>,
    /// How long a change of primary may hold its clients.
    pub max_pause: String,
}

/// The pooler's line of `db`, when it has one.
pub fn pooler_line(db: &PostgreSQL) -> Option<PoolerLine> {
    use bosun_resources::postgresql::{DEFAULT_MAX_PAUSE, DEFAULT_POOLER_INSTANCES, pooler_name};
    let spec = db.spec.pooler.as_ref()?;
    let st = db.status.as_ref().and_then(|s| s.pooler.as_ref());
    let instances = spec.instances.unwrap_or(DEFAULT_POOLER_INSTANCES);
    Some(PoolerLine {
        endpoint: st.map(|s| s.endpoint.clone()),
        mode: spec.mode.unwrap_or_default().as_str().to_owned(),
        instances,
        ready_instances: st.map_or(0, |s| s.ready_instances),
        read_only: spec
            .read_only
            .unwrap_or(false)
            .then(|| (st.and_then(|s| s.read_only_ready_instances).unwrap_or(0), instances)),
        read_only_service: spec.read_only.unwrap_or(false).then(|| pooler_name(db, true)),
        max_pause: spec.max_pause.clone().unwrap_or_else(|| DEFAULT_MAX_PAUSE.to_owned()),
    })
}

/// A PostgreSQL on one screen.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseStatus {
    pub namespace: String,
    pub name: String,
    pub version: String,
    pub replicas: i32,
    pub ready_replicas: i32,
    pub phase: Option<String>,
    pub endpoint: Option<String>,
    pub current_primary: Option<String>,
    pub synchronous: Option<String>,
    pub last_primary_change: Option<PrimaryChange>,
    pub instances: Vec<InstanceLine>,
    pub pooler: Option<PoolerLine>,
    pub wal_archiving: Option<WalArchiving>,
    /// The primary's archiver as it says it now.
    pub archiver: Option<Archiver>,
    pub first_recoverable_point: Option<String>,
    pub last_recoverable_point: Option<String>,
    pub backup: Option<BackupLine>,
    pub server_certificate: Option<ServerCertificate>,
    pub conditions: Vec<ConditionLine>,
    pub events: Vec<EventLine>,
    /// How long gathering all this took, in milliseconds.
    pub took_ms: u64,
}

/// The database's instances' pods: its StatefulSet's, by name.
pub async fn instance_pods(session: &Session, db: &PostgreSQL) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(session.client.clone(), &session.namespace);
    let name = db.name_any();
    let selector = format!("app.kubernetes.io/name={APP_NAME},app.kubernetes.io/instance={name}");
    let listed = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| anyhow::anyhow!("listing {name}'s pods: {}", brief(&e)))?;
    let mut pods: Vec<Pod> = listed
        .items
        .into_iter()
        .filter(|p| p.owner_references().iter().any(|o| o.kind == "StatefulSet" && o.name == name))
        .collect();
    pods.sort_by_key(|p| p.name_any().rsplit('-').next().and_then(|n| n.parse::<u32>().ok()).unwrap_or(u32::MAX));
    Ok(pods)
}

pub async fn get(session: &Session, name: &str) -> anyhow::Result<PostgreSQL> {
    let api: Api<PostgreSQL> = Api::namespaced(session.client.clone(), &session.namespace);
    match api.get_opt(name).await {
        Ok(Some(db)) => Ok(db),
        Ok(None) => anyhow::bail!("postgresql {}/{name} not found", session.namespace),
        Err(e) => Err(anyhow::anyhow!("reading postgresql {}/{name}: {}", session.namespace, brief(&e))),
    }
}

/// Ask every instance's manager its status, at once, through port-forwards.
async fn ask_all(session: &Session, db: &PostgreSQL, pods: &[Pod]) -> Vec<Result<Status, String>> {
    let secrets: Api<Secret> = Api::namespaced(session.client.clone(), &session.namespace);
    let secret_name = build::secret_name(db);
    let access = match secrets.get_opt(&secret_name).await {
        Ok(Some(secret)) => build::access(&secret).ok_or_else(|| format!("the Secret {secret_name} is incomplete")),
        Ok(None) => Err(format!("the Secret {secret_name} is not there yet")),
        Err(e) => Err(format!("the Secret {secret_name} could not be read: {}", brief(&e))),
    };
    let connection = access.and_then(|a| connector(&a));
    let api: Api<Pod> = Api::namespaced(session.client.clone(), &session.namespace);
    let asks = pods.iter().map(|pod| {
        let (api, connection) = (api.clone(), connection.clone());
        async move {
            if bosun_resources::pods::simulated(pod) {
                return Err("on a fake node: nothing runs there".to_owned());
            }
            if pod.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_none() {
                return Err("not running yet".to_owned());
            }
            let (connector, token) = connection?;
            let name = pod.name_any();
            let server_name = build::server_name(db, &name);
            let ask = async {
                let mut forward = api.portforward(&name, &[api::PORT]).await.map_err(|e| brief(&e))?;
                let stream = forward.take_stream(api::PORT).ok_or("the port-forward gave no stream")?;
                let answer = request_over(
                    stream,
                    &connector,
                    &token,
                    &server_name,
                    hyper::Method::GET,
                    api::paths::STATUS,
                    None,
                )
                .await
                .map_err(|e: AskError| e.to_string());
                forward.abort();
                serde_json::from_slice::<Status>(&answer?).map_err(|e| format!("an answer that does not parse: {e}"))
            };
            tokio::time::timeout(ASK_TIMEOUT, ask)
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {ASK_TIMEOUT:?}")))
        }
    });
    join_all(asks).await
}

/// The instances' lines, from their pods and what each said.
pub fn instance_lines(pods: &[Pod], answers: &[Result<Status, String>]) -> Vec<InstanceLine> {
    let primary = answers.iter().flatten().find_map(|s| s.server.as_ref().filter(|server| !server.in_recovery));
    let position = primary.and_then(|p| p.current_lsn.as_deref()).and_then(lsn);
    let seen = |name: &str| -> Option<&Replication> { primary?.replication.iter().find(|r| r.name == name) };
    let lags = primary.map(bosun_instance::status::Server::standby_lag).unwrap_or_default();
    pods.iter()
        .zip(answers)
        .map(|(pod, answer)| {
            let name = pod.name_any();
            let mut line = InstanceLine {
                node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                role: pod.labels().get(ROLE_LABEL).cloned(),
                ready: bosun_resources::failover::pod_ready(pod),
                ..InstanceLine::default()
            };
            match answer {
                Err(why) => line.problem = Some(why.clone()),
                Ok(status) => match &status.server {
                    None => {
                        line.problem =
                            Some(status.server_error.clone().unwrap_or_else(|| "the server does not answer".into()))
                    }
                    Some(server) => {
                        line.timeline = server.timeline;
                        line.version = Some(server.version.clone());
                        line.lsn =
                            if server.in_recovery { server.replay_lsn.clone() } else { server.current_lsn.clone() };
                        if server.in_recovery {
                            let replayed = line.lsn.as_deref().and_then(lsn);
                            line.lag_bytes = position.zip(replayed).map(|(p, r)| p.saturating_sub(r));
                            if let Some(r) = seen(&name) {
                                line.replication = Some(r.state.clone());
                                line.sync_state = Some(r.sync_state.clone());
                                line.lag_seconds = lags.iter().find(|l| l.0 == r.name).and_then(|l| l.2);
                            } else if !server.receiving {
                                line.replication = Some("not streaming".into());
                            }
                        }
                    }
                },
            }
            line.name = name;
            line
        })
        .collect()
}

pub async fn gather(session: &Session, name: &str) -> anyhow::Result<DatabaseStatus> {
    let started = Instant::now();
    let db = get(session, name).await?;
    let backups: Api<Backup> = Api::namespaced(session.client.clone(), &session.namespace);
    let backup_name = format!("{name}-backup");
    let (pods, backup) = tokio::join!(instance_pods(session, &db), backups.get_opt(&backup_name));
    let pods = pods?;
    let mut names: Vec<String> = pods.iter().map(ResourceExt::name_any).collect();
    names.extend([name.to_owned(), backup_name.clone()]);
    let (answers, events) = tokio::join!(ask_all(session, &db, &pods), status::events(session, &names, 10));
    let mut instances = instance_lines(&pods, &answers);
    let st = db.status.clone().unwrap_or_default();
    for line in &mut instances {
        let reported = st.instances.iter().find(|i| i.name == line.name);
        line.data_on_lost_node = reported.and_then(|i| i.data_on_lost_node.clone());
    }
    // pg_stat_archiver answers with archiving off too: said only when it is on.
    let archiver = answers.iter().flatten().find_map(|s| s.server.as_ref()?.archiver.clone());
    let archiver = archiver.filter(|_| st.wal_archiving.is_some());
    let backup = backup.ok().flatten().map(|b| {
        let st = b.status.unwrap_or_default();
        let conditions = status::conditions(serde_json::to_value(&st).ok().as_ref());
        BackupLine {
            name: backup_name,
            last_successful: st.last_successful_backup,
            last_verified: st.last_verified,
            running: st.running,
            conditions,
        }
    });
    let synchronous = db.spec.synchronous.as_ref().map(|s| serde_json::to_string(s).unwrap_or_default());
    Ok(DatabaseStatus {
        namespace: session.namespace.clone(),
        name: name.to_owned(),
        version: db.spec.version.as_str().to_owned(),
        replicas: db.spec.replicas,
        ready_replicas: st.ready_replicas.unwrap_or(0),
        phase: st.phase.as_ref().map(|p| format!("{p:?}")),
        endpoint: st.endpoint.clone(),
        current_primary: st.current_primary.clone(),
        synchronous,
        last_primary_change: st.last_primary_change.clone(),
        instances,
        pooler: pooler_line(&db),
        wal_archiving: st.wal_archiving.clone(),
        archiver,
        first_recoverable_point: st.first_recoverable_point.clone(),
        last_recoverable_point: st.last_recoverable_point.clone(),
        backup,
        server_certificate: st.server_certificate.clone(),
        conditions: status::conditions(serde_json::to_value(&st).ok().as_ref()),
        events: events?,
        took_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

pub async fn run(session: &Session, name: &str, output: Output) -> anyhow::Result<ExitCode> {
    let view = gather(session, name).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&view)?),
        Output::Text => print!("{}", text(&view, &Paint::for_stdout())),
    }
    Ok(ExitCode::SUCCESS)
}

fn or_dash(value: Option<String>) -> String {
    value.unwrap_or_else(|| "-".to_owned())
}

/// The screen.
pub fn text(view: &DatabaseStatus, paint: &Paint) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let ready = format!("{}/{} ready", view.ready_replicas, view.replicas);
    let ready = if view.ready_replicas >= view.replicas { paint.good(&ready) } else { paint.bad(&ready) };
    let _ = writeln!(
        out,
        "{} {}/{}  PostgreSQL {}  {}  {}",
        paint.bold("PostgreSQL"),
        view.namespace,
        view.name,
        view.version,
        paint.state(view.phase.as_deref().unwrap_or("Pending")),
        ready
    );
    let _ = writeln!(
        out,
        "  primary: {}   endpoint: {}{}",
        or_dash(view.current_primary.clone()),
        or_dash(view.endpoint.clone()),
        view.synchronous.as_ref().map(|s| format!("   synchronous: {s}")).unwrap_or_default()
    );
    if let Some(change) = &view.last_primary_change {
        let took = change.seconds.map(|s| format!(" in {s:.1} s")).unwrap_or_default();
        let _ = writeln!(
            out,
            "  last primary change: {} {} → {}{took}, {} ({})",
            change.kind,
            change.from,
            change.to,
            since(Some(&change.started)),
            change.reason
        );
    }

    let _ = writeln!(out, "\n{}", paint.bold("Instances"));
    let _ = writeln!(
        out,
        "  {:<20} {:<8} {:<16} {:<6} {:>3} {:<12} {:<20} REPLICATION",
        "NAME", "ROLE", "NODE", "READY", "TL", "LSN", "LAG"
    );
    for i in &view.instances {
        let lag = match (i.lag_bytes, i.lag_seconds) {
            (Some(b), Some(s)) => format!("{}, {s:.1} s", bytes(b)),
            (Some(b), None) => bytes(b),
            _ => "-".to_owned(),
        };
        let replication = match (&i.replication, &i.sync_state) {
            (Some(r), Some(s)) => format!("{r}, {s}"),
            (Some(r), None) => r.clone(),
            _ => String::new(),
        };
        let ready = if i.ready { paint.good("yes   ") } else { paint.bad("no    ") };
        let _ = writeln!(
            out,
            "  {:<20} {:<8} {:<16} {} {:>3} {:<12} {:<20} {}",
            i.name,
            or_dash(i.role.clone()),
            or_dash(i.node.clone()),
            ready,
            i.timeline.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            or_dash(i.lsn.clone()),
            lag,
            paint.state(&replication)
        );
        if let Some(problem) = &i.problem {
            let _ = writeln!(out, "  {:<20} {}", "", paint.bad(problem));
        }
        if let Some(node) = &i.data_on_lost_node {
            let lost = format!(
                "its only data is on the lost node {node}: it comes back with the node, or annotate \
                 {}={} to replace it",
                bosun_api::postgresql::REPLACE_ANNOTATION,
                i.name
            );
            let _ = writeln!(out, "  {:<20} {}", "", paint.bad(&lost));
        }
    }

    if let Some(p) = &view.pooler {
        let _ = writeln!(out, "\n{}", paint.bold("Pooler"));
        let ready = |ready: i32, wanted: i32| {
            let text = format!("{ready}/{wanted} ready");
            if ready >= wanted { paint.good(&text) } else { paint.bad(&text) }
        };
        let _ = writeln!(
            out,
            "  read-write: {}  {}  mode {}, pauses at most {}",
            or_dash(p.endpoint.clone()),
            ready(p.ready_instances, p.instances),
            p.mode,
            p.max_pause
        );
        if let Some((ready_ro, wanted)) = p.read_only {
            let _ =
                writeln!(out, "  read-only:  {}  {}", or_dash(p.read_only_service.clone()), ready(ready_ro, wanted));
        }
    }

    let _ = writeln!(out, "\n{}", paint.bold("Continuous backup"));
    match (&view.wal_archiving, &view.archiver) {
        (None, None) => {
            let _ = writeln!(out, "  WAL archiving: off (spec.backup.continuous)");
        }
        (recorded, now) => {
            let wal = now
                .as_ref()
                .and_then(|a| a.last_archived_wal.clone())
                .or(recorded.as_ref().and_then(|r| r.last_archived_wal.clone()));
            let at = recorded.as_ref().and_then(|r| r.last_archived_time.clone());
            let failed =
                now.as_ref().map(|a| a.failed_count).or(recorded.as_ref().and_then(|r| r.failed_count)).unwrap_or(0);
            let failures = format!("{failed} failed");
            let failures = if failed > 0 { paint.warn(&failures) } else { failures };
            let _ = writeln!(out, "  WAL archiving: last {} {}  ({failures})", or_dash(wal), since(at.as_deref()));
            if let Some(error) = recorded.as_ref().and_then(|r| r.last_error.clone()) {
                let _ = writeln!(out, "  {}", paint.bad(&format!("last error: {error}")));
            }
        }
    }
    match (&view.first_recoverable_point, &view.last_recoverable_point) {
        (Some(first), last) => {
            let _ = writeln!(out, "  recoverable: from {first} to {}", last.clone().unwrap_or_else(|| "now".into()));
        }
        (None, _) => {
            let _ = writeln!(out, "  recoverable: no base backup yet");
        }
    }
    match &view.backup {
        None => {
            let _ = writeln!(out, "  backups: none (spec.backup)");
        }
        Some(b) => {
            let last = b.last_successful.as_ref().map(|l| {
                format!("{} ({}, {})", l.key, bytes(u64::try_from(l.size).unwrap_or(0)), crate::render::ago(l.time.0))
            });
            let _ = writeln!(out, "  backup {}: last good {}", b.name, or_dash(last));
            if let Some(v) = &b.last_verified {
                let outcome = format!("{:?}", v.outcome);
                let _ = writeln!(out, "    verified: {} {}", paint.state(&outcome), crate::render::ago(v.time.0));
            }
            if let Some(r) = &b.running {
                let _ = writeln!(
                    out,
                    "    running: {} read {}, stored {}",
                    r.job,
                    bytes(u64::try_from(r.read_bytes).unwrap_or(0)),
                    bytes(u64::try_from(r.stored_bytes).unwrap_or(0))
                );
            }
            for c in b.conditions.iter().filter(|c| c.status != "True") {
                let _ = writeln!(
                    out,
                    "    {}",
                    paint.warn(&format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                );
            }
        }
    }
    if let Some(cert) = &view.server_certificate {
        let _ = writeln!(out, "\n{}", paint.bold("Server certificate"));
        let expires = since(Some(&cert.not_after));
        let soon = cert
            .not_after
            .parse::<jiff::Timestamp>()
            .is_ok_and(|t| t.as_second() - jiff::Timestamp::now().as_second() < 14 * 86_400);
        let expires = if soon { paint.bad(&expires) } else { expires };
        let _ = writeln!(out, "  from Secret {}, expires {} ({expires})", cert.secret_name, cert.not_after);
    }
    crate::render::conditions(&mut out, paint, &view.conditions);
    crate::render::events(&mut out, paint, &view.events);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bosun_instance::status::Server;

    /// Database `shop/db` of `(replicas, ready)` with `instances` and `pooler`.
    fn view(replicas: (i32, i32), instances: Vec<InstanceLine>, pooler: Option<PoolerLine>) -> DatabaseStatus {
        DatabaseStatus {
            namespace: "shop".into(),
            name: "db".into(),
            version: "17".into(),
            replicas: replicas.0,
            ready_replicas: replicas.1,
            phase: Some("Running".into()),
            endpoint: None,
            current_primary: Some("db-0".into()),
            synchronous: None,
            last_primary_change: None,
            instances,
            pooler,
            wal_archiving: None,
            archiver: None,
            first_recoverable_point: None,
            last_recoverable_point: None,
            backup: None,
            server_certificate: None,
            conditions: Vec::new(),
            events: Vec::new(),
            took_ms: 3,
        }
    }

    fn pod(name: &str, role: &str, ready: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {ROLE_LABEL: role}},
            "spec": {"nodeName": "node-a", "containers": []},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_standbys_lag_is_the_primarys_position_less_its_replay() {
        let primary = Status {
            server: Some(Server {
                timeline: Some(2),
                current_lsn: Some("0/5000000".into()),
                replication: vec![Replication {
                    name: "db-1".into(),
                    state: "streaming".into(),
                    sync_state: "sync".into(),
                    replay_lsn: Some("0/4FFF000".into()),
                    replay_lag_ms: Some(1500),
                }],
                ..Server::default()
            }),
            ..Status::default()
        };
        let standby = Status {
            server: Some(Server {
                in_recovery: true,
                timeline: Some(2),
                replay_lsn: Some("0/4FFF000".into()),
                receiving: true,
                ..Server::default()
            }),
            ..Status::default()
        };
        let pods = [pod("db-0", "primary", true), pod("db-1", "replica", true), pod("db-2", "replica", false)];
        let answers = [Ok(primary), Ok(standby), Err("no answer within 5s".to_owned())];
        let lines = instance_lines(&pods, &answers);
        assert_eq!((lines[0].lsn.as_deref(), lines[0].lag_bytes), (Some("0/5000000"), None));
        assert_eq!(lines[1].lag_bytes, Some(0x1000));
        assert_eq!(lines[1].lag_seconds, Some(1.5));
        assert_eq!(
            (lines[1].replication.as_deref(), lines[1].sync_state.as_deref()),
            (Some("streaming"), Some("sync"))
        );
        assert_eq!((lines[2].ready, lines[2].problem.as_deref()), (false, Some("no answer within 5s")));
        assert_eq!(lines[2].node.as_deref(), Some("node-a"));
        let view = view((3, 2), lines, None);
        let screen = text(&view, &Paint::default());
        assert!(screen.contains("2/3 ready"), "{screen}");
        assert!(screen.contains("4.0 KiB, 1.5 s") && screen.contains("streaming, sync"), "{screen}");
        assert!(screen.contains("no answer within 5s"), "{screen}");
        assert!(!screen.contains('\x1b'), "{screen}");
    }

    #[test]
    fn the_pooler_shows_what_was_asked_and_what_serves() {
        let db: PostgreSQL = serde_json::from_value(serde_json::json!({
            "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {"version": "17", "storage": "1Gi", "replicas": 2,
                     "pooler": {"instances": 3, "mode": "transaction", "readOnly": true}},
            "status": {"pooler": {"endpoint": "db-pooler.shop.svc:5432", "readyInstances": 3,
                                  "readOnlyReadyInstances": 1}}
        }))
        .unwrap();
        let line = pooler_line(&db).unwrap();
        assert_eq!((line.instances, line.ready_instances, line.read_only), (3, 3, Some((1, 3))));
        assert_eq!((line.mode.as_str(), line.max_pause.as_str()), ("transaction", "10s"));
        let mut plain = db.clone();
        plain.spec.pooler = None;
        assert!(pooler_line(&plain).is_none());
        let view = view((2, 2), Vec::new(), Some(line));
        let screen = text(&view, &Paint::default());
        assert!(screen.contains("read-write: db-pooler.shop.svc:5432  3/3 ready  mode transaction"), "{screen}");
        assert!(screen.contains("read-only:  db-pooler-ro  1/3 ready"), "{screen}");
    }

    #[test]
    fn an_instance_with_its_data_on_a_lost_node_says_how_to_replace_it() {
        let lost = InstanceLine {
            name: "db-1".into(),
            data_on_lost_node: Some("node-b".into()),
            problem: Some("no answer within 5s".into()),
            ..InstanceLine::default()
        };
        let screen = text(&view((2, 1), vec![lost], None), &Paint::default());
        assert!(screen.contains("its only data is on the lost node node-b"), "{screen}");
        assert!(screen.contains("database.example.com/replace-instance=db-1"), "{screen}");
    }
}
