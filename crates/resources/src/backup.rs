//! Backup → CronJob, Restore → Job, and the runs' results → status. Pure.
//!
//! ```text
//!  Backup ──validate──▶ ok ──desired_cronjob──▶ CronJob <name>-cronjob (container `backup`)
//!                  └──▶ Refusal (nothing applied)
//!  Backup + CronJob + newest finished Job (+ its result) ──backup_status──▶ BackupStatus
//!  Restore + dump (destination, key | latest) ──desired_job──▶ Job <name>-restore (container `restore`)
//!  Restore + Job (+ its result) ──restore_status──▶ RestoreStatus
//! ```
//!
//! Both children run `bosun backup run` / `bosun restore run` (crate `bosun-runner`),
//! configured wholly by environment variables, so no value of a Secret is ever written
//! into the CronJob or the Job: the database password and the storage credentials are
//! `secretKeyRef` / `envFrom` references, resolved by the kubelet. A run writes its
//! result (key, size, checksum, or the error) as JSON to `/dev/termination-log`, where
//! the controller reads it from the pod's status without bucket credentials.

use std::collections::BTreeMap;

use bosun_api::backup::{
    Backup, BackupStatus, Destination, DestinationType, ENCRYPTION_KEY, RestorePhase, RestoreStatus, RetainedBackup,
    RetentionStatus, RunningBackup, Source, SourceType, SuccessfulBackup, VerifiedBackup, VerifyOutcome,
    schedule_pattern,
};
use bosun_api::conditions::{backup_types, reasons, types};
use bosun_backup_model::contract;
use bosun_backup_model::engine::Engine;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerStatus, EmptyDirVolumeSource, EnvFromSource, EnvVar, EnvVarSource, KeyToPath,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecretEnvSource, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{Resource, ResourceExt};
use serde::Deserialize;

use crate::conditions::{self, Desired};
use crate::meta::{child_meta, standard_labels};

/// `app.kubernetes.io/name` of a Backup's CronJob and the Jobs it starts.
pub const BACKUP_APP: &str = "backup";
/// `app.kubernetes.io/name` of a Restore's Job.
pub const RESTORE_APP: &str = "restore";
/// The container of a backup run.
pub const BACKUP_CONTAINER: &str = "backup";
/// The container of a restore run.
pub const RESTORE_CONTAINER: &str = "restore";
/// `app.kubernetes.io/name` of a Backup's verification CronJob and its Jobs.
pub const VERIFY_APP: &str = "backup-verify";
/// The container of a verification run (`bosun verify run`).
pub const VERIFY_CONTAINER: &str = "verify";
/// The throwaway database server of a verification run: a native sidecar.
pub const VERIFY_SERVER_CONTAINER: &str = "database";
/// The database a verification restores into.
pub const VERIFY_DATABASE: &str = "verify";
/// The uid of the `postgres` and `mysql` users of the official images (and Debian's).
pub const DATABASE_UID: i64 = 999;
/// Finished verification Jobs kept, of each outcome: the status tells of the newest.
pub const VERIFY_HISTORY: i32 = 1;
/// Where a `pvc` destination's claim is mounted.
pub const PVC_MOUNT: &str = "/backups";
/// Where the destination's Secret is mounted, for credentials that are files.
pub const CREDENTIALS_MOUNT: &str = "/var/run/secrets/bosun/destination";
/// Where the encryption Secret's identities are mounted.
pub const ENCRYPTION_MOUNT: &str = "/var/run/secrets/bosun/encryption";
/// Where a run writes its result.
pub const RESULT_FILE: &str = "/dev/termination-log";
/// The uid and gid runs use (the runner needs no privileges and writes no files).
pub const RUN_AS: i64 = 65532;
/// Finished Jobs a CronJob keeps, of each outcome.
pub const HISTORY: i32 = 3;
/// How late a missed run may still start (the controller manager was down, say).
pub const STARTING_DEADLINE_SECONDS: i64 = 3600;
/// Attempts of one backup run: the pod restarts in place (`OnFailure`) up to this many times.
pub const BACKUP_BACKOFF_LIMIT: i32 = 2;
/// The longest a backup run may take by default, however rare its schedule.
pub const MAX_RUN_DEADLINE_SECONDS: i64 = 24 * 3600;
/// How long a Restore's run may take before its Job is stopped and the Restore fails.
pub const RESTORE_DEADLINE_SECONDS: i64 = 24 * 3600;

/// The runner image `hack/images.sh runner` builds for the local cluster; `bosun run
/// --runner-image` sets another.
pub const DEFAULT_RUNNER_IMAGE: &str = "localhost/bosun-runner:dev";

/// The CronJob of `backup`.
pub fn cronjob_name(backup: &str) -> String {
    format!("{backup}-cronjob")
}

/// The verification CronJob of `backup`.
pub fn verify_cronjob_name(backup: &str) -> String {
    format!("{backup}-verify")
}

/// The Job of `restore`.
pub fn restore_job_name(restore: &str) -> String {
    format!("{restore}-restore")
}

/// Why a Backup is not Ready: its CronJob is not (or could not be) applied, or its
/// runs cannot start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The spec is not valid; the message names the field.
    InvalidSpec(String),
    /// The child's name is held by an object this resource does not control.
    NameConflict(String),
    /// A Secret (or a key of it) the runs need does not exist; the CronJob is in place,
    /// and this is looked at again until it does.
    CredentialsMissing(String),
}

impl Refusal {
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::InvalidSpec(_) => reasons::INVALID_SPEC,
            Refusal::NameConflict(_) => reasons::NAME_CONFLICT,
            Refusal::CredentialsMissing(_) => reasons::CREDENTIALS_MISSING,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::InvalidSpec(m) | Refusal::NameConflict(m) | Refusal::CredentialsMissing(m) => m.clone(),
        }
    }
}

/// A Secret a run reads, and the keys it must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretNeed {
    /// The field that names it, e.g. `spec.source.connection.secretRef`.
    pub field: String,
    pub name: String,
    /// Keys it must hold (none: any, as for a destination's provider variables).
    pub keys: &'static [&'static str],
}

/// The Secrets a run with `source` (under `source_field`) and `destination` (the
/// field `destination_field`) reads: the database's `username` and `password`, the
/// destination's credentials when it names a Secret, and its encryption keys.
pub fn secrets_needed(
    source: &Source,
    source_field: &str,
    destination: &Destination,
    destination_field: &str,
) -> Vec<SecretNeed> {
    let mut needs = vec![SecretNeed {
        field: source_field.to_owned(),
        name: source.connection.secret_ref.name.clone(),
        keys: &["username", "password"],
    }];
    needs.extend(destination.secret_ref.as_ref().map(|s| SecretNeed {
        field: format!("{destination_field}.secretRef"),
        name: s.name.clone(),
        keys: &[],
    }));
    needs.extend(destination.encryption.as_ref().map(|e| SecretNeed {
        field: format!("{destination_field}.encryption.secretRef"),
        name: e.secret_ref.name.clone(),
        keys: &[ENCRYPTION_KEY],
    }));
    needs
}

/// The first need that `keys_of` (a Secret's name → its keys, `None`: no such Secret)
/// does not meet, as a message naming the field, the Secret and the key.
pub fn missing_credentials(
    needs: &[SecretNeed],
    namespace: &str,
    keys_of: impl Fn(&str) -> Option<Vec<String>>,
) -> Option<String> {
    needs.iter().find_map(|need| {
        let SecretNeed { field, name, keys } = need;
        let Some(present) = keys_of(name) else {
            return Some(format!(
                "{field}: Secret {name} does not exist in namespace {namespace}; runs cannot start until it does"
            ));
        };
        let missing: Vec<&str> = keys.iter().copied().filter(|k| !present.iter().any(|p| p == k)).collect();
        (!missing.is_empty()).then(|| {
            format!("{field}: Secret {name} has no key {}; runs cannot start until it does", missing.join(" or "))
        })
    })
}

/// How long one run of `backup` may take before its Job stops it and counts it as
/// failed: `spec.activeDeadlineSeconds`, else the shortest interval between two runs
/// of the schedule (at most [`MAX_RUN_DEADLINE_SECONDS`]). A stuck run is then over
/// before the next one is due, which starts once it is (the CronJob's starting deadline
/// lets a run that `Forbid` held back start late).
pub fn run_deadline_seconds(backup: &Backup) -> i64 {
    backup.spec.active_deadline_seconds.unwrap_or_else(|| shortest_interval(&backup.spec.schedule))
}

/// The shortest time between two consecutive runs of `schedule` (UTC), in seconds, at
/// most [`MAX_RUN_DEADLINE_SECONDS`]; that maximum for a schedule that does not parse.
fn shortest_interval(schedule: &str) -> i64 {
    run_gaps(schedule, 512)
        .and_then(|gaps| gaps.into_iter().min())
        .unwrap_or(MAX_RUN_DEADLINE_SECONDS)
        .min(MAX_RUN_DEADLINE_SECONDS)
}

/// The longest time between two consecutive runs of `schedule` (UTC), in seconds (a
/// weekday schedule's weekend); `None` for a schedule that does not parse.
pub fn longest_interval(schedule: &str) -> Option<i64> {
    run_gaps(schedule, 2048)?.into_iter().max()
}

/// The gaps between the first `runs` runs of `schedule`, in seconds, from a fixed
/// start, so the answer is the same on every reconcile: 2001-01-01 (a Monday of a
/// year before a leap year) shows every pattern's gaps below a day in 512 runs, and a
/// weekday schedule's weekend within a few thousand.
fn run_gaps(schedule: &str, runs: usize) -> Option<Vec<i64>> {
    let parser = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build();
    let cron = parser.parse(schedule).ok()?;
    let start = Timestamp::from_second(978_307_200).unwrap_or(Timestamp::UNIX_EPOCH).to_zoned(jiff::tz::TimeZone::UTC);
    let times: Vec<i64> = cron.iter_after(start).take(runs).map(|t| t.timestamp().as_second()).collect();
    Some(times.windows(2).map(|w| w[1] - w[0]).collect())
}

/// What the schema cannot check: cron values (a range whose start is after its end,
/// a day that no month has) and the retention's arithmetic. The schema's patterns are
/// checked again too, for objects stored before the CRD had them.
pub fn validate(backup: &Backup) -> Result<(), Refusal> {
    validate_schedule("spec.schedule", &backup.spec.schedule)?;
    if let Some(verify) = &backup.spec.verify {
        validate_schedule("spec.verify.schedule", &verify.schedule)?;
    }
    if let Some(retention) = &backup.spec.retention {
        bosun_backup_model::retention::parse_retention("spec.retention", retention).map_err(Refusal::InvalidSpec)?;
    }
    Ok(())
}

/// Check a cron schedule as a CronJob would, naming its `field`.
pub fn validate_schedule(field: &str, schedule: &str) -> Result<(), Refusal> {
    let bad = |why: String| Refusal::InvalidSpec(format!("{field} {schedule:?}: {why}"));
    let pattern = regex::Regex::new(&schedule_pattern()).map_err(|e| bad(e.to_string()))?;
    if !pattern.is_match(schedule) {
        return Err(bad("not a cron expression of five fields (minute hour day-of-month month day-of-week, \
             e.g. \"0 2 * * *\") or one of @hourly, @daily, @weekly, @monthly, @yearly"
            .to_owned()));
    }
    // Ranges must run forwards: robfig/cron (the CronJob controller's parser) refuses `5-1`.
    for item in schedule.split([' ', '\t', ',']).filter(|f| !f.is_empty()) {
        let range = item.split('/').next().unwrap_or_default();
        if let Some((from, to)) = range.split_once('-')
            && let (Ok(from), Ok(to)) = (from.parse::<u32>(), to.parse::<u32>())
            && from > to
        {
            return Err(bad(format!("the range {range} runs backwards")));
        }
    }
    let parser = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build();
    parser.parse(schedule).map(|_| ()).map_err(|e| bad(e.to_string()))
}

/// The runner's engine for a source type: it names the password variable.
fn engine_of(source: SourceType) -> Engine {
    match source {
        SourceType::Postgresql => Engine::Postgresql,
        SourceType::Mysql => Engine::Mysql,
        SourceType::Mongodb => Engine::Mongodb,
    }
}

/// The variable holding the database user, which the database URL refers to.
const USERNAME_VARIABLE: &str = "BOSUN_DB_USERNAME";

fn secret_key(secret: &str, key: &str) -> Option<EnvVarSource> {
    Some(EnvVarSource {
        secret_key_ref: Some(SecretKeySelector { name: secret.to_owned(), key: key.to_owned(), optional: Some(false) }),
        ..EnvVarSource::default()
    })
}

fn value(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.to_owned(), value: Some(value.into()), value_from: None }
}

/// Percent-encode what is not unreserved in a URL path segment.
fn encode_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The variables that reach `db`: the user and password by reference to its Secret,
/// and its URL under `url_variable`, which names the user through the kubelet's
/// `$(VAR)` expansion (so the user is never copied out of the Secret either).
pub fn database_env(db: &Source, url_variable: &str) -> Vec<EnvVar> {
    let c = &db.connection;
    let secret = &c.secret_ref.name;
    let port = c.port.unwrap_or(db.type_.default_port());
    let url =
        format!("{}://$({USERNAME_VARIABLE})@{}:{port}/{}", db.type_.as_str(), c.host, encode_segment(&c.database));
    vec![
        EnvVar { name: USERNAME_VARIABLE.to_owned(), value: None, value_from: secret_key(secret, "username") },
        EnvVar {
            name: engine_of(db.type_).password_variable().to_owned(),
            value: None,
            value_from: secret_key(secret, "password"),
        },
        value(url_variable, url),
    ]
}

/// The runner's `--destination` for `d`.
pub fn destination_url(d: &Destination) -> String {
    let prefix = d.prefix.as_deref().unwrap_or_default().trim_matches('/');
    let join = |base: String| if prefix.is_empty() { base } else { format!("{base}/{prefix}") };
    match d.type_ {
        DestinationType::S3 => join(format!("s3://{}", d.bucket)),
        DestinationType::Gcs => join(format!("gs://{}", d.bucket)),
        DestinationType::Azure => join(format!("azure://{}", d.bucket)),
        DestinationType::Pvc => join(format!("file://{PVC_MOUNT}")),
    }
}

/// What a container needs to reach a destination: variables (the URL, the folder,
/// the endpoint, and the Secret's keys as the provider's variables), and the
/// Secret's and the claim's volumes and mounts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reach {
    pub env: Vec<EnvVar>,
    pub env_from: Option<Vec<EnvFromSource>>,
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
}

/// The variable `name` holding the pod's namespace (the downward API).
pub fn namespace_env(name: &str) -> EnvVar {
    let namespace = EnvVarSource {
        field_ref: Some(ObjectFieldSelector { field_path: "metadata.namespace".to_owned(), api_version: None }),
        ..EnvVarSource::default()
    };
    EnvVar { name: name.to_owned(), value: None, value_from: Some(namespace) }
}

/// The variables that give the runner the encryption keys of `d` (none without
/// encryption); the Secret's key is mounted by [`reach`]'s volumes. The message name
/// needs `BOSUN_BACKUP_NAMESPACE` defined before them.
pub fn encryption_env(d: &Destination) -> Vec<EnvVar> {
    let Some(encryption) = &d.encryption else { return Vec::new() };
    let secret = &encryption.secret_ref.name;
    vec![
        value(contract::BACKUP_ENCRYPTION_KEY_FILE, format!("{ENCRYPTION_MOUNT}/{ENCRYPTION_KEY}")),
        // What the runner's messages call it; the namespace by the kubelet's expansion.
        value(
            contract::BACKUP_ENCRYPTION_KEY_NAME,
            format!("Secret $(BOSUN_BACKUP_NAMESPACE)/{secret} (key {ENCRYPTION_KEY})"),
        ),
    ]
}

/// How to reach the destination `d` of the folder `<namespace>/<name>` (the
/// namespace is the pod's own, given by the downward API).
pub fn reach(d: &Destination, name: &str) -> Reach {
    let mut env = vec![
        value(contract::BACKUP_DESTINATION, destination_url(d)),
        namespace_env(contract::BACKUP_NAMESPACE),
        value(contract::BACKUP_NAME, name),
    ];
    env.extend(d.endpoint.as_ref().map(|e| value(contract::BACKUP_ENDPOINT, e.clone())));
    env.extend(d.region.as_ref().map(|r| value(contract::BACKUP_REGION, r.clone())));
    env.extend(encryption_env(d));
    let env_from = d.secret_ref.as_ref().map(|s| {
        vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource { name: s.name.clone(), optional: Some(false) }),
            ..EnvFromSource::default()
        }]
    });
    let (mut volumes, mut mounts) = (Vec::new(), Vec::new());
    if let Some(secret) = &d.secret_ref {
        volumes.push(Volume {
            name: "destination-credentials".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.name.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "destination-credentials".to_owned(),
            mount_path: CREDENTIALS_MOUNT.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if let Some(encryption) = &d.encryption {
        volumes.push(Volume {
            name: "encryption-key".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(encryption.secret_ref.name.clone()),
                items: Some(vec![KeyToPath {
                    key: ENCRYPTION_KEY.to_owned(),
                    path: ENCRYPTION_KEY.to_owned(),
                    mode: None,
                }]),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "encryption-key".to_owned(),
            mount_path: ENCRYPTION_MOUNT.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if d.type_ == DestinationType::Pvc {
        volumes.push(Volume {
            name: "backups".to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: d.bucket.clone(),
                read_only: None,
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "backups".to_owned(),
            mount_path: PVC_MOUNT.to_owned(),
            ..VolumeMount::default()
        });
    }
    Reach { env, env_from, volumes, mounts }
}

/// The pod of one run: `container` runs `bosun <args>` in `image` with `env`, as an
/// unprivileged user on a read-only root, without a ServiceAccount token.
fn run_pod(
    container: &str,
    image: &str,
    args: &[&str],
    d: &Destination,
    mut env: Vec<EnvVar>,
    backup: &str,
    restart_policy: &str,
) -> PodSpec {
    let Reach { env: dest_env, env_from, mut volumes, mut mounts } = reach(d, backup);
    env.extend(dest_env);
    env.push(value(contract::RESULT_FILE, RESULT_FILE));
    env.push(value("TMPDIR", "/tmp"));
    env.push(value("HOME", "/tmp"));
    volumes.insert(
        0,
        Volume {
            name: "tmp".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: Some(Quantity("16Mi".to_owned())),
            }),
            ..Volume::default()
        },
    );
    mounts.insert(0, VolumeMount { name: "tmp".to_owned(), mount_path: "/tmp".to_owned(), ..VolumeMount::default() });
    PodSpec {
        restart_policy: Some(restart_policy.to_owned()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS),
            run_as_group: Some(RUN_AS),
            fs_group: Some(RUN_AS),
            seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".to_owned(), localhost_profile: None }),
            ..PodSecurityContext::default()
        }),
        containers: vec![Container {
            name: container.to_owned(),
            image: Some(image.to_owned()),
            image_pull_policy: Some("IfNotPresent".to_owned()),
            command: Some(vec!["bosun".to_owned()]),
            args: Some(args.iter().map(|a| (*a).to_owned()).collect()),
            env: Some(env),
            env_from,
            volume_mounts: Some(mounts),
            termination_message_path: Some(RESULT_FILE.to_owned()),
            termination_message_policy: Some("File".to_owned()),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity("50m".to_owned())),
                    ("memory".to_owned(), Quantity("64Mi".to_owned())),
                ])),
                limits: Some(BTreeMap::from([("memory".to_owned(), Quantity("512Mi".to_owned()))])),
                ..ResourceRequirements::default()
            }),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_owned()]), add: None }),
                ..SecurityContext::default()
            }),
            ..Container::default()
        }],
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}

/// The CronJob a Backup should have: on its schedule (UTC), never two runs at once,
/// the last [`HISTORY`] Jobs of each outcome kept, each run `bosun backup run` in
/// `runner_image`.
pub fn desired_cronjob(backup: &Backup, runner_image: &str) -> CronJob {
    let name = backup.name_any();
    let spec = &backup.spec;
    let mut env = database_env(&spec.source, contract::BACKUP_SOURCE);
    env.extend(spec.retention.as_ref().map(|r| value(contract::BACKUP_RETENTION, r.clone())));
    env.extend(spec.keep_last.map(|n| value(contract::BACKUP_KEEP_LAST, n.to_string())));
    env.extend(spec.keep_daily.map(|n| value(contract::BACKUP_KEEP_DAILY, n.to_string())));
    env.extend(spec.keep_weekly.map(|n| value(contract::BACKUP_KEEP_WEEKLY, n.to_string())));
    env.extend(spec.keep_monthly.map(|n| value(contract::BACKUP_KEEP_MONTHLY, n.to_string())));
    if spec.method == Some(bosun_api::backup::Method::Base) {
        env.push(value(contract::BACKUP_METHOD, "base"));
    }
    let pod = run_pod(BACKUP_CONTAINER, runner_image, &["backup", "run"], &spec.destination, env, &name, "OnFailure");
    let run = Scheduled {
        app: BACKUP_APP,
        name: cronjob_name(&name),
        schedule: &spec.schedule,
        history: HISTORY,
        backoff_limit: BACKUP_BACKOFF_LIMIT,
        deadline: run_deadline_seconds(backup),
    };
    scheduled(backup, run, pod)
}

/// A CronJob of a Backup.
struct Scheduled<'a> {
    app: &'static str,
    name: String,
    schedule: &'a str,
    /// Finished Jobs kept, of each outcome.
    history: i32,
    backoff_limit: i32,
    deadline: i64,
}

/// The CronJob `run` of `backup`, starting `pod`: on its schedule (UTC), suspended
/// with the Backup, never two runs at once.
fn scheduled(backup: &Backup, run: Scheduled<'_>, pod: PodSpec) -> CronJob {
    let labels = standard_labels(run.app, &backup.name_any());
    let template_meta = Some(ObjectMeta { labels: Some(labels.clone()), ..ObjectMeta::default() });
    CronJob {
        metadata: child_meta(backup, run.name, labels),
        spec: Some(CronJobSpec {
            schedule: run.schedule.to_owned(),
            time_zone: Some("Etc/UTC".to_owned()),
            suspend: Some(backup.spec.suspend.unwrap_or(false)),
            concurrency_policy: Some("Forbid".to_owned()),
            starting_deadline_seconds: Some(STARTING_DEADLINE_SECONDS),
            successful_jobs_history_limit: Some(run.history),
            failed_jobs_history_limit: Some(run.history),
            job_template: JobTemplateSpec {
                metadata: template_meta.clone(),
                spec: Some(JobSpec {
                    backoff_limit: Some(run.backoff_limit),
                    active_deadline_seconds: Some(run.deadline),
                    template: PodTemplateSpec { metadata: template_meta, spec: Some(pod) },
                    ..JobSpec::default()
                }),
            },
        }),
        status: None,
    }
}

/// The images of the throwaway servers verifications restore into (the operator's
/// flags), when `spec.verify.image` names none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyImages {
    pub postgresql: String,
    pub mysql: String,
}

/// The verification CronJob of `backup` (`None` without `spec.verify`): on its own
/// schedule, one pod a run, in which the throwaway server runs as a native sidecar
/// (listening on the pod's loopback address only, its data in an `emptyDir` that goes
/// with the pod, its password the pod's uid) and `bosun verify run` restores the
/// newest good dump into it and checks it. Nothing of the source database is given
/// to it; no attempt is retried (a second would find the first one's tables).
pub fn desired_verify_cronjob(backup: &Backup, runner_image: &str, images: &VerifyImages) -> Option<CronJob> {
    let verify = backup.spec.verify.as_ref()?;
    let name = backup.name_any();
    let engine = backup.spec.source.type_;
    let password_variable = engine_of(engine).password_variable();
    let (user, port) = match engine {
        SourceType::Mysql => ("root", 3306),
        _ => ("postgres", 5432),
    };
    let mut env = vec![
        value(contract::VERIFY_TARGET, format!("{}://{user}@127.0.0.1:{port}/{VERIFY_DATABASE}", engine.as_str())),
        pod_uid_env(password_variable),
    ];
    env.extend(verify.query.as_ref().map(|q| value(contract::VERIFY_QUERY, q.clone())));
    let mut pod =
        run_pod(VERIFY_CONTAINER, runner_image, &["verify", "run"], &backup.spec.destination, env, &name, "Never");
    let (server, volume) = verify_server(engine, verify.image.as_deref(), images);
    pod.init_containers = Some(vec![server]);
    pod.volumes.get_or_insert_with(Vec::new).push(volume);
    let run = Scheduled {
        app: VERIFY_APP,
        name: verify_cronjob_name(&name),
        schedule: &verify.schedule,
        history: VERIFY_HISTORY,
        backoff_limit: 0,
        deadline: verify.active_deadline_seconds.unwrap_or_else(|| shortest_interval(&verify.schedule)),
    };
    Some(scheduled(backup, run, pod))
}

/// The variable `name` holding the pod's uid (the downward API): the throwaway
/// server's password, new for every run and written nowhere.
fn pod_uid_env(name: &str) -> EnvVar {
    let uid = EnvVarSource {
        field_ref: Some(ObjectFieldSelector { field_path: "metadata.uid".to_owned(), api_version: None }),
        ..EnvVarSource::default()
    };
    EnvVar { name: name.to_owned(), value: None, value_from: Some(uid) }
}

/// The throwaway server of a verification of `engine`'s dumps, and its data volume.
fn verify_server(engine: SourceType, image: Option<&str>, images: &VerifyImages) -> (Container, Volume) {
    let (default_image, env, args, data) = match engine {
        SourceType::Mysql => (
            &images.mysql,
            vec![pod_uid_env("MYSQL_ROOT_PASSWORD"), value("MYSQL_DATABASE", VERIFY_DATABASE)],
            vec!["--bind-address=127.0.0.1", "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=0"],
            "/var/lib/mysql",
        ),
        _ => (
            &images.postgresql,
            vec![
                pod_uid_env("POSTGRES_PASSWORD"),
                value("POSTGRES_DB", VERIFY_DATABASE),
                value("PGDATA", "/var/lib/postgresql/data/pgdata"),
            ],
            // Only the pod's own containers reach it; what it holds goes with the pod,
            // so it need not survive a crash either.
            vec![
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ],
            "/var/lib/postgresql/data",
        ),
    };
    let container = Container {
        name: VERIFY_SERVER_CONTAINER.to_owned(),
        image: Some(image.unwrap_or(default_image).to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        // A native sidecar: started first, stopped once the verification has ended.
        restart_policy: Some("Always".to_owned()),
        args: Some(args.into_iter().map(str::to_owned).collect()),
        env: Some(env),
        volume_mounts: Some(vec![VolumeMount {
            name: "verify-data".to_owned(),
            mount_path: data.to_owned(),
            ..VolumeMount::default()
        }]),
        resources: Some(crate::meta::requests(crate::meta::SERVER_CPU, crate::meta::SERVER_MEMORY)),
        security_context: Some(SecurityContext {
            run_as_user: Some(DATABASE_UID),
            run_as_group: Some(DATABASE_UID),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_owned()]), add: None }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    let volume = Volume {
        name: "verify-data".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    (container, volume)
}

/// Which dump a Restore loads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dump<'a> {
    pub destination: &'a Destination,
    /// The key; `None`: the newest good dump of the Backup `backup`.
    pub key: Option<String>,
    /// The Backup (in the Restore's namespace) whose folder holds the dumps: for `--latest`.
    pub backup: Option<String>,
}

/// The Job a Restore runs, once: `bosun restore run` in `runner_image`, no retries (a
/// second attempt would find the tables the first one loaded).
pub fn desired_job(restore: &bosun_api::backup::Restore, dump: &Dump<'_>, runner_image: &str) -> Job {
    let name = restore.name_any();
    let labels = standard_labels(RESTORE_APP, &name);
    let mut env = database_env(&restore.spec.target, contract::RESTORE_TARGET);
    match &dump.key {
        Some(key) => env.push(value(contract::RESTORE_KEY, key.clone())),
        None => env.push(value(contract::RESTORE_LATEST, "true")),
    }
    if restore.spec.overwrite == Some(true) {
        env.push(value(contract::RESTORE_OVERWRITE, "true"));
    }
    let folder = dump.backup.clone().unwrap_or_else(|| name.clone());
    let pod = run_pod(RESTORE_CONTAINER, runner_image, &["restore", "run"], dump.destination, env, &folder, "Never");
    let template_meta = Some(ObjectMeta { labels: Some(labels.clone()), ..ObjectMeta::default() });
    Job {
        metadata: child_meta(restore, restore_job_name(&name), labels),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(RESTORE_DEADLINE_SECONDS),
            template: PodTemplateSpec { metadata: template_meta, spec: Some(pod) },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// What a run wrote to its termination message.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    #[serde(default)]
    pub key: Option<String>,
    /// The oldest good backup kept after the run's retention (RFC 3339).
    #[serde(default)]
    pub oldest_kept: Option<String>,
    #[serde(default)]
    pub size: Option<i64>,
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    /// Why retention did not finish (a delete the store refused); the dump is good.
    #[serde(default)]
    pub retention_error: Option<String>,
    /// The good dumps retention kept, newest first (those that fit).
    #[serde(default)]
    pub kept: Option<Vec<KeptResult>>,
    /// How many it kept, when not all are listed.
    #[serde(default)]
    pub kept_count: Option<i64>,
    /// A verification's: tables in the restored database, their rows, the query's rows.
    #[serde(default)]
    pub tables: Option<i64>,
    #[serde(default)]
    pub rows: Option<i64>,
    #[serde(default)]
    pub query_rows: Option<i64>,
    #[serde(default)]
    pub duration_seconds: Option<f64>,
    /// The run "completed" on a simulated node (kwok's fake nodes): no container ran,
    /// so it did nothing and wrote nothing ([`crate::pods::simulated_run`]).
    #[serde(skip)]
    pub simulated: bool,
}

/// One kept dump in a run's result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct KeptResult {
    pub at: String,
    #[serde(default)]
    pub why: Vec<String>,
}

impl RunResult {
    /// What retention kept, as the Backup's status tells it; `None` when the run did
    /// not report it (a base backup, an older runner).
    pub fn retention(&self) -> Option<RetentionStatus> {
        let kept = self.kept.as_ref()?;
        let backups: Vec<RetainedBackup> = kept
            .iter()
            .filter_map(|k| Some(RetainedBackup { time: Time(k.at.parse().ok()?), rules: k.why.clone() }))
            .collect();
        Some(RetentionStatus {
            kept: self.kept_count.unwrap_or(backups.len() as i64),
            backups,
            error: self.retention_error.clone(),
        })
    }
}

/// The result the `container` of `pod` reported when it last terminated: the current
/// state's, else the previous attempt's (a restarted container).
pub fn run_result(pod: &Pod, container: &str) -> Option<RunResult> {
    let status = container_status(pod, container)?;
    let terminated = status
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| status.last_state.as_ref().and_then(|s| s.terminated.as_ref()))?;
    let Some(message) = terminated.message.as_deref().map(str::trim) else {
        // Nothing written: a run that a simulated node "completed" says so.
        return crate::pods::simulated_run(status).then(|| RunResult { simulated: true, ..RunResult::default() });
    };
    serde_json::from_str(message)
        .ok()
        .or_else(|| Some(RunResult { error: Some(message.to_owned()), ..RunResult::default() }))
}

/// Whether `container` of `pod` is running (so its log has a run's progress).
pub fn container_running(pod: &Pod, container: &str) -> bool {
    container_status(pod, container).is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// The status of `container` in `pod`, once the kubelet reported one.
fn container_status<'a>(pod: &'a Pod, container: &str) -> Option<&'a ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.iter().find(|s| s.name == container)
}

/// The status of the run `job` from the newest progress line in its container's `log`.
pub fn running_backup(job: &str, log: &str) -> Option<RunningBackup> {
    let p = bosun_backup_model::progress::Progress::newest_in(log)?;
    let bytes = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Some(RunningBackup {
        job: job.to_owned(),
        read_bytes: bytes(p.read_bytes),
        stored_bytes: bytes(p.stored_bytes),
        updated: Time(p.at),
    })
}

/// How a Job ended, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    Succeeded(Time),
    /// With the Job's own reason and message (e.g. `BackoffLimitExceeded`).
    Failed(Time, String),
    /// Not over: an attempt failed and the pod restarts (restartPolicy OnFailure). Told
    /// at once, because when the Job gives up it deletes the pod and its error with it.
    Retrying,
    /// Not over: the run cannot start or make progress (the cause, from
    /// [`crate::pods`]); its deadline ends it.
    Stuck(String),
}

impl Finish {
    /// When a finished Job ended, and why it failed (`None`: it succeeded); `None` for
    /// a run not over.
    pub fn ended(self) -> Option<(Time, Option<String>)> {
        match self {
            Finish::Succeeded(at) => Some((at, None)),
            Finish::Failed(at, why) => Some((at, Some(why))),
            Finish::Retrying | Finish::Stuck(_) => None,
        }
    }

    pub fn time(&self) -> Option<&Time> {
        match self {
            Finish::Succeeded(t) | Finish::Failed(t, _) => Some(t),
            Finish::Retrying | Finish::Stuck(_) => None,
        }
    }
}

/// Whether `job` has finished, from its `Complete` / `Failed` condition.
pub fn finish(job: &Job) -> Option<Finish> {
    let status = job.status.as_ref()?;
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let done = |type_: &str| conditions.iter().find(|c| c.type_ == type_ && c.status == "True");
    if let Some(c) = done("Complete") {
        let at = status.completion_time.clone().or_else(|| c.last_transition_time.clone());
        return at.map(Finish::Succeeded);
    }
    done("Failed").and_then(|c| {
        let why = [c.reason.as_deref(), c.message.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(": ");
        c.last_transition_time.clone().map(|t| Finish::Failed(t, why))
    })
}

/// The newest finished run of a Backup, with what it reported (`None` when the pod
/// is gone or wrote nothing).
#[derive(Clone, Debug, PartialEq)]
pub struct LastRun {
    pub job: String,
    pub finish: Finish,
    pub result: Option<RunResult>,
}

/// The newest finished Job among `jobs` (by finish time, then name).
pub fn newest_finished<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> Option<(&'a Job, Finish)> {
    jobs.into_iter().filter_map(|j| finish(j).map(|f| (j, f))).max_by(|(a, fa), (b, fb)| {
        fa.time().map(|t| t.0).cmp(&fb.time().map(|t| t.0)).then_with(|| a.name_any().cmp(&b.name_any()))
    })
}

/// The newest Job among `jobs` that is still running and started after `finished` did
/// (a run the deadline of the one before overlapped is still the newer run).
pub fn newest_running<'a>(jobs: impl IntoIterator<Item = &'a Job>, finished: Option<&Job>) -> Option<&'a Job> {
    let started = |j: &Job| j.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0);
    let after = finished.and_then(started);
    jobs.into_iter()
        .filter(|j| finish(j).is_none())
        .filter(|j| after.is_none_or(|after| started(j).is_some_and(|s| s > after)))
        .max_by_key(|j| (started(j), j.name_any()))
}

/// Whether the status already tells of the run of `job` (so its pod need not be read again).
pub fn reported(status: Option<&BackupStatus>, job: &str) -> bool {
    let Some(status) = status else { return false };
    let success = status.last_successful_backup.as_ref().is_some_and(|s| s.job.as_deref() == Some(job));
    let failure = status.conditions.iter().any(|c| {
        c.type_ == backup_types::LAST_BACKUP_SUCCEEDED
            && c.reason == reasons::BACKUP_FAILED
            && c.message.starts_with(&job_prefix(job))
    });
    success || failure
}

fn job_prefix(job: &str) -> String {
    format!("Job {job} ")
}

/// What the Backup status computation sees.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed<'a> {
    pub cronjob: Option<&'a CronJob>,
    pub refusal: Option<&'a Refusal>,
    /// The newest finished run, unless the status already reports it.
    pub last_run: Option<&'a LastRun>,
    /// The run in progress, as far as it told.
    pub running: Option<&'a RunningBackup>,
    /// The newest finished verification, unless the status already tells of it.
    pub verification: Option<&'a Verification>,
}

/// The status a Backup should have.
///
/// Ready when its CronJob is in place as specified (suspended or not).
/// `LastBackupSucceeded` tells of the newest finished run; `lastSuccessfulBackup`
/// keeps the newest good dump, whatever failed after it.
pub fn backup_status(backup: &Backup, observed: Observed<'_>, now: Timestamp) -> BackupStatus {
    let generation = backup.meta().generation;
    let previous = backup.status.clone().unwrap_or_default();
    let ready = match (observed.refusal, observed.cronjob) {
        (Some(refusal), _) => Desired::new(types::READY, false, refusal.reason(), refusal.message()),
        (None, None) => Desired::new(types::READY, false, reasons::PENDING, "the CronJob has not been created yet"),
        (None, Some(cj)) if backup.spec.suspend == Some(true) => Desired::new(
            types::READY,
            true,
            reasons::SUSPENDED,
            format!("CronJob {} is suspended: no runs start, no dump is deleted", cj.name_any()),
        ),
        (None, Some(cj)) => Desired::new(
            types::READY,
            true,
            reasons::SCHEDULED,
            format!("CronJob {} runs on the schedule {:?} (UTC)", cj.name_any(), backup.spec.schedule),
        ),
    };
    let mut last_successful = previous.last_successful_backup.clone();
    let mut retention = previous.retention.clone();
    let previous_run = previous.conditions.iter().find(|c| c.type_ == backup_types::LAST_BACKUP_SUCCEEDED);
    let run = match observed.last_run {
        Some(run) => {
            let (condition, success) = describe_run(run, previous_run.map(|c| c.message.as_str()));
            if success.is_some() {
                last_successful = success;
                retention = run.result.as_ref().and_then(RunResult::retention).or(retention);
            }
            condition
        }
        None => conditions::carried(
            &previous.conditions,
            backup_types::LAST_BACKUP_SUCCEEDED,
            &[
                reasons::BACKUP_SUCCEEDED,
                reasons::BACKUP_FAILED,
                reasons::BACKUP_RETRYING,
                reasons::RUN_STUCK,
                reasons::NO_RUN_YET,
            ],
            Desired::unknown(backup_types::LAST_BACKUP_SUCCEEDED, reasons::NO_RUN_YET, "no run has finished yet"),
        ),
    };
    let last_schedule_time =
        observed.cronjob.and_then(|cj| cj.status.as_ref()?.last_schedule_time.clone()).or(previous.last_schedule_time);
    let mut last_verified = previous.last_verified.clone();
    let mut last_successful_verification = previous.last_successful_verification.clone();
    let mut desired = vec![ready, run];
    if backup.spec.verify.is_some() {
        desired.push(match observed.verification {
            Some(run) => {
                let (condition, verified) = describe_verification(run);
                if verified.outcome == VerifyOutcome::Succeeded {
                    last_successful_verification = Some(verified.time.clone());
                }
                last_verified = Some(verified);
                condition
            }
            None => conditions::carried(
                &previous.conditions,
                backup_types::LAST_VERIFICATION_SUCCEEDED,
                &[reasons::VERIFIED, reasons::VERIFICATION_FAILED, reasons::NO_RUN_YET],
                Desired::unknown(
                    backup_types::LAST_VERIFICATION_SUCCEEDED,
                    reasons::NO_RUN_YET,
                    "no verification has finished yet",
                ),
            ),
        });
    }
    BackupStatus {
        observed_generation: generation,
        last_schedule_time,
        last_successful_backup: last_successful,
        retention,
        last_verified,
        last_successful_verification,
        running: observed.running.cloned(),
        conditions: conditions::merge(&previous.conditions, desired, generation, now),
    }
}

/// Whether the status already tells of the verification `job`.
pub fn verification_reported(status: Option<&BackupStatus>, job: &str) -> bool {
    status.and_then(|s| s.last_verified.as_ref()).is_some_and(|v| v.job == job)
}

/// A finished verification run.
#[derive(Clone, Debug, PartialEq)]
pub struct Verification {
    pub job: String,
    /// When it finished.
    pub time: Time,
    /// Why its Job failed; `None`: it succeeded.
    pub failed: Option<String>,
    /// What it reported (`None` when the pod is gone or wrote nothing).
    pub result: Option<RunResult>,
}

/// `LastVerificationSucceeded` for the finished verification `run`, and what the
/// status keeps of it.
fn describe_verification(run: &Verification) -> (Desired, VerifiedBackup) {
    let prefix = job_prefix(&run.job);
    let result = run.result.clone().unwrap_or_default();
    let (outcome, condition) = match &run.failed {
        None if result.simulated => (
            VerifyOutcome::Succeeded,
            Desired::new(
                backup_types::LAST_VERIFICATION_SUCCEEDED,
                true,
                reasons::SIMULATED,
                format!("{prefix}{SIMULATED_RUN}, so no dump was restored or checked"),
            ),
        ),
        None => {
            let message = match (&result.key, result.tables, result.rows) {
                (Some(key), Some(tables), Some(rows)) => {
                    let query = result.query_rows.map(|q| format!("; the query returned {q} rows")).unwrap_or_default();
                    format!("{prefix}restored {key} into a throwaway server: {tables} tables, {rows} rows{query}")
                }
                _ => format!("{prefix}succeeded; its result was not readable (pod gone)"),
            };
            (
                VerifyOutcome::Succeeded,
                Desired::new(backup_types::LAST_VERIFICATION_SUCCEEDED, true, reasons::VERIFIED, message),
            )
        }
        Some(why) => {
            let detail = result.error.clone().map_or_else(|| why.clone(), |e| format!("{e} ({why})"));
            let condition = Desired::new(
                backup_types::LAST_VERIFICATION_SUCCEEDED,
                false,
                reasons::VERIFICATION_FAILED,
                format!("{prefix}failed: {detail}; nothing was deleted"),
            );
            (VerifyOutcome::Failed, condition)
        }
    };
    let verified = VerifiedBackup {
        time: run.time.clone(),
        outcome,
        key: result.key,
        duration_seconds: result.duration_seconds.map(|d| d.round() as i64),
        tables: result.tables,
        rows: result.rows,
        job: run.job.clone(),
    };
    (condition, verified)
}

/// What a run that a simulated node "completed" says after its Job's name (its
/// condition is `True`, as with the other kinds on the fake nodes, which are there
/// for scale tests: the reason and message say nothing ran).
const SIMULATED_RUN: &str = "completed on a simulated node: no container ran";
/// What a retrying run's condition message says before the error.
const ATTEMPT_FAILED: &str = "an attempt failed: ";
/// What it says after it.
const RETRYING: &str = "; retrying";
/// What a stuck run's condition message says before the cause.
const CANNOT_RUN: &str = "cannot run: ";
/// What it says after it.
const UNTIL_DEADLINE: &str = "; it is stopped at its deadline";

/// `LastBackupSucceeded` for `run`, and the good dump it made. `previous` is the
/// condition's last message: when a failed run's pod is gone, the error an earlier
/// attempt reported there is kept.
fn describe_run(run: &LastRun, previous: Option<&str>) -> (Desired, Option<SuccessfulBackup>) {
    let prefix = job_prefix(&run.job);
    let result = run.result.clone().unwrap_or_default();
    let attempt_error = || {
        let rest = previous?.strip_prefix(&prefix)?;
        if let Some((_, error)) = rest.split_once(ATTEMPT_FAILED) {
            return Some(error.rsplit_once(RETRYING).map_or(error, |(e, _)| e).to_owned());
        }
        let cause = rest.split_once(CANNOT_RUN)?.1;
        Some(cause.rsplit_once(UNTIL_DEADLINE).map_or(cause, |(c, _)| c).to_owned())
    };
    match &run.finish {
        Finish::Succeeded(_) if result.simulated => (
            Desired::new(
                backup_types::LAST_BACKUP_SUCCEEDED,
                true,
                reasons::SIMULATED,
                format!("{prefix}{SIMULATED_RUN}, so no dump was stored"),
            ),
            None,
        ),
        Finish::Succeeded(at) => match (&result.key, result.size) {
            (Some(key), Some(size)) => (
                Desired::new(
                    backup_types::LAST_BACKUP_SUCCEEDED,
                    true,
                    reasons::BACKUP_SUCCEEDED,
                    match &result.retention_error {
                        None => format!("{prefix}stored {key} ({size} bytes, verified)"),
                        Some(e) => format!("{prefix}stored {key} ({size} bytes, verified); retention: {e}"),
                    },
                ),
                Some(SuccessfulBackup {
                    time: at.clone(),
                    key: key.clone(),
                    size,
                    job: Some(run.job.clone()),
                    oldest_kept: result.oldest_kept.as_deref().and_then(|t| t.parse().ok()).map(Time),
                }),
            ),
            // Complete, but its result is gone (the pod was deleted): a good run whose
            // key only the bucket knows.
            _ => (
                Desired::new(
                    backup_types::LAST_BACKUP_SUCCEEDED,
                    true,
                    reasons::BACKUP_SUCCEEDED,
                    format!("{prefix}succeeded; its result was not readable (pod gone), see `bosun backup list`"),
                ),
                None,
            ),
        },
        Finish::Retrying => (
            Desired::new(
                backup_types::LAST_BACKUP_SUCCEEDED,
                false,
                reasons::BACKUP_RETRYING,
                format!("{prefix}{ATTEMPT_FAILED}{}{RETRYING}", result.error.unwrap_or_default()),
            ),
            None,
        ),
        Finish::Stuck(cause) => (
            Desired::new(
                backup_types::LAST_BACKUP_SUCCEEDED,
                false,
                reasons::RUN_STUCK,
                format!(
                    "{prefix}{CANNOT_RUN}{cause}{UNTIL_DEADLINE} and the next scheduled run goes ahead; nothing was deleted"
                ),
            ),
            None,
        ),
        Finish::Failed(_, why) => {
            let detail = result.error.or_else(attempt_error).map_or_else(|| why.clone(), |e| format!("{e} ({why})"));
            (
                Desired::new(
                    backup_types::LAST_BACKUP_SUCCEEDED,
                    false,
                    reasons::BACKUP_FAILED,
                    format!("{prefix}failed: {detail}; nothing was deleted"),
                ),
                None,
            )
        }
    }
}

/// What the Restore status computation sees.
#[derive(Clone, Copy, Debug, Default)]
pub struct RestoreObserved<'a> {
    /// The Job, as applied or cached (`None`: none exists).
    pub job: Option<&'a Job>,
    /// The key the Job was asked for (`None`: the latest good dump).
    pub requested_key: Option<&'a str>,
    /// What the run reported, once the Job finished.
    pub result: Option<&'a RunResult>,
    /// Why the Job was not created (e.g. the Backup does not exist).
    pub refusal: Option<(&'static str, &'a str)>,
    /// Why the running Job cannot start or make progress ([`crate::pods`]).
    pub stuck: Option<&'a str>,
}

/// The status a Restore should have. Once Succeeded or Failed it never changes again:
/// a Restore runs once.
pub fn restore_status(
    restore: &bosun_api::backup::Restore,
    observed: RestoreObserved<'_>,
    now: Timestamp,
) -> RestoreStatus {
    let generation = restore.meta().generation;
    let previous = restore.status.clone().unwrap_or_default();
    if previous.phase.is_some_and(RestorePhase::finished) {
        return previous;
    }
    let job = observed.job;
    let job_status = job.and_then(|j| j.status.as_ref());
    let finished = job.and_then(finish);
    let result = observed.result.cloned().unwrap_or_default();
    let (phase, ready) = match (observed.refusal, job, &finished) {
        (Some((reason, message)), _, _) => (RestorePhase::Pending, Desired::new(types::READY, false, reason, message)),
        (None, None, _) if previous.job.is_some() => (
            RestorePhase::Failed,
            Desired::new(
                types::READY,
                false,
                reasons::RESTORE_FAILED,
                format!("Job {} was deleted before it finished", previous.job.clone().unwrap_or_default()),
            ),
        ),
        (None, None, _) => (
            RestorePhase::Pending,
            Desired::new(types::READY, false, reasons::PENDING, "the Job has not been created yet"),
        ),
        (None, Some(j), None | Some(Finish::Retrying | Finish::Stuck(_))) => {
            let started = job_status.and_then(|s| s.start_time.as_ref()).is_some();
            let phase = if started { RestorePhase::Running } else { RestorePhase::Pending };
            let ready = match observed.stuck {
                Some(cause) => Desired::new(
                    types::READY,
                    false,
                    reasons::RUN_STUCK,
                    format!(
                        "Job {} {CANNOT_RUN}{cause}{UNTIL_DEADLINE} ({RESTORE_DEADLINE_SECONDS}s after it started) and the Restore fails",
                        j.name_any()
                    ),
                ),
                None => Desired::new(
                    types::READY,
                    false,
                    reasons::RUNNING,
                    format!("Job {} is loading the dump", j.name_any()),
                ),
            };
            (phase, ready)
        }
        (None, Some(j), Some(Finish::Succeeded(_))) if result.simulated => (
            RestorePhase::Succeeded,
            Desired::new(
                types::READY,
                true,
                reasons::SIMULATED,
                format!("Job {} {SIMULATED_RUN}, so nothing was loaded", j.name_any()),
            ),
        ),
        (None, Some(j), Some(Finish::Succeeded(_))) => (
            RestorePhase::Succeeded,
            Desired::new(
                types::READY,
                true,
                reasons::RESTORED,
                format!(
                    "Job {} loaded {}",
                    j.name_any(),
                    result.key.as_deref().or(observed.requested_key).unwrap_or("the latest good dump")
                ),
            ),
        ),
        (None, Some(j), Some(Finish::Failed(_, why))) => (
            RestorePhase::Failed,
            Desired::new(
                types::READY,
                false,
                reasons::RESTORE_FAILED,
                format!(
                    "Job {} failed: {}",
                    j.name_any(),
                    // A run that never started: what kept it from starting, as told while it waited.
                    result.error.clone().unwrap_or_else(|| {
                        previous_cause(&previous.conditions).map_or_else(|| why.clone(), |c| format!("{c} ({why})"))
                    })
                ),
            ),
        ),
    };
    RestoreStatus {
        observed_generation: generation,
        phase: Some(phase),
        key: result.key.clone().or(observed.requested_key.map(str::to_owned)).or(previous.key),
        job: job.map(|j| j.name_any()).or(previous.job),
        start_time: job_status.and_then(|s| s.start_time.clone()).or(previous.start_time),
        completion_time: finished.as_ref().and_then(|f| f.time().cloned()).or(previous.completion_time),
        conditions: conditions::merge(&previous.conditions, vec![ready], generation, now),
    }
}

/// The cause a stuck run's Ready condition told, to carry it into the failure.
fn previous_cause(conditions: &[bosun_api::conditions::Condition]) -> Option<String> {
    let c = conditions.iter().find(|c| c.type_ == types::READY && c.reason == reasons::RUN_STUCK)?;
    let cause = c.message.split_once(CANNOT_RUN)?.1;
    Some(cause.rsplit_once(UNTIL_DEADLINE).map_or(cause, |(c, _)| c).to_owned())
}

#[cfg(test)]
mod tests {
    use bosun_api::backup::{Restore, RestoreSpec};
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus};
    use serde_json::json;

    use super::*;

    /// The spec's `nightly` example, as stored (with a uid, so children get an owner).
    fn nightly() -> Backup {
        serde_json::from_value(json!({
            "apiVersion": "backup.example.com/v1",
            "kind": "Backup",
            "metadata": {"name": "nightly", "namespace": "shop", "uid": "u-1", "generation": 1},
            "spec": {
                "source": {"type": "postgresql", "connection": {"host": "test-db", "port": 5432, "database": "app", "secretRef": {"name": "test-db-credentials"}}},
                "destination": {"type": "s3", "bucket": "backups"},
                "schedule": "0 2 * * *",
                "retention": "30d"
            }
        }))
        .expect("nightly")
    }

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("time"))
    }

    fn env_of(spec: &PodSpec) -> &[EnvVar] {
        spec.containers[0].env.as_deref().unwrap_or_default()
    }

    fn env_value<'a>(spec: &'a PodSpec, name: &str) -> Option<&'a str> {
        env_of(spec).iter().find(|e| e.name == name)?.value.as_deref()
    }

    #[test]
    fn schedules_a_cronjob_accepts() {
        for ok in [
            "0 2 * * *",
            "*/15 * * * *",
            "0 9-17 * * MON-FRI",
            "30 3 1,15 * *",
            "0 0 1 jan *",
            "0 0 * * 0",
            "0 0 ? * 6",
            "@daily",
            "@hourly",
            "5 4 * * sun",
        ] {
            assert_eq!(validate_schedule("spec.schedule", ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn bad_schedules_are_refused_naming_the_field() {
        for bad in [
            "61 * * * *",
            "every day",
            "* * * *",
            "* * * * * *",
            "0 24 * * *",
            "0 0 0 * *",
            "0 0 * 13 *",
            "0 0 * * 7",
            "*/0 * * * *",
            "5-1 * * * *",
            "@every 1h",
            "@sometimes",
            "",
        ] {
            let Err(Refusal::InvalidSpec(message)) = validate_schedule("spec.schedule", bad) else {
                panic!("{bad:?} was accepted")
            };
            assert!(message.starts_with("spec.schedule"), "{message}");
        }
    }

    #[test]
    fn the_crd_pattern_and_the_controller_agree() {
        // The same expression goes into the CRD's CEL rule: Rust's regex must agree with
        // the examples the schema is meant to refuse or let through.
        let re = regex::Regex::new(&schedule_pattern()).expect("pattern compiles");
        assert!(re.is_match("0 2 * * *") && re.is_match("@weekly"));
        assert!(!re.is_match("61 * * * *") && !re.is_match("every day"));
    }

    #[test]
    fn retention_is_checked_naming_the_field() {
        let mut b = nightly();
        assert_eq!(validate(&b), Ok(()));
        for bad in ["forever", "0d", "30"] {
            b.spec.retention = Some(bad.into());
            let Err(Refusal::InvalidSpec(message)) = validate(&b) else { panic!("{bad} accepted") };
            assert!(message.contains("spec.retention"), "{message}");
        }
    }

    #[test]
    fn an_encrypted_destination_mounts_only_the_identities_and_names_the_secret() {
        let plain = desired_cronjob(&nightly(), DEFAULT_RUNNER_IMAGE);
        let mut b = nightly();
        b.spec.destination.encryption = Some(bosun_api::backup::Encryption {
            secret_ref: bosun_api::backup::SecretRef { name: "backup-key".into() },
        });
        let pod_of = |cj: CronJob| cj.spec.unwrap().job_template.spec.unwrap().template.spec.unwrap();
        let pod = pod_of(desired_cronjob(&b, DEFAULT_RUNNER_IMAGE));
        assert_eq!(
            env_value(&pod, "BOSUN_BACKUP_ENCRYPTION_KEY_FILE"),
            Some("/var/run/secrets/bosun/encryption/identities")
        );
        assert_eq!(
            env_value(&pod, "BOSUN_BACKUP_ENCRYPTION_KEY_NAME"),
            Some("Secret $(BOSUN_BACKUP_NAMESPACE)/backup-key (key identities)")
        );
        let names: Vec<&str> = env_of(&pod).iter().map(|e| e.name.as_str()).collect();
        let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
        assert!(at("BOSUN_BACKUP_NAMESPACE") < at("BOSUN_BACKUP_ENCRYPTION_KEY_NAME"), "expanded: defined before");
        let volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == "encryption-key").expect("volume");
        let secret = volume.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("backup-key"));
        let items: Vec<&str> = secret.items.iter().flatten().map(|i| i.key.as_str()).collect();
        assert_eq!(items, ["identities"], "only the identities, nothing else the Secret holds");
        let mount = pod.containers[0].volume_mounts.as_ref().unwrap().iter().find(|m| m.name == "encryption-key");
        assert_eq!(mount.map(|m| (m.mount_path.as_str(), m.read_only)), Some((ENCRYPTION_MOUNT, Some(true))));
        // Without encryption the pod is what it was: nothing of it appears.
        let plain = pod_of(plain);
        assert!(env_of(&plain).iter().all(|e| !e.name.contains("ENCRYPTION")));
        assert!(plain.volumes.iter().flatten().all(|v| v.name != "encryption-key"));

        let needs =
            secrets_needed(&b.spec.source, "spec.source.connection.secretRef", &b.spec.destination, "spec.destination");
        let message = missing_credentials(&needs, "shop", |name| {
            (name == "test-db-credentials").then(|| vec!["username".to_owned(), "password".to_owned()])
        });
        assert_eq!(
            message.as_deref(),
            Some(
                "spec.destination.encryption.secretRef: Secret backup-key does not exist in namespace shop; runs cannot start until it does"
            )
        );
        let message = missing_credentials(&needs, "shop", |name| {
            Some(if name == "backup-key" {
                vec!["age.key".to_owned()]
            } else {
                vec!["username".to_owned(), "password".to_owned()]
            })
        });
        assert!(message.is_some_and(|m| m.contains("Secret backup-key has no key identities")));
    }

    #[test]
    fn the_nightly_example_becomes_a_cronjob_as_the_spec_says() {
        let cj = desired_cronjob(&nightly(), "localhost/bosun-runner:dev");
        assert_eq!(cj.metadata.name.as_deref(), Some("nightly-cronjob"));
        assert_eq!(cj.metadata.namespace.as_deref(), Some("shop"));
        let owner = &cj.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!((owner.kind.as_str(), owner.controller), ("Backup", Some(true)));
        let spec = cj.spec.as_ref().expect("spec");
        assert_eq!(spec.schedule, "0 2 * * *");
        assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
        assert_eq!(spec.suspend, Some(false));
        assert_eq!((spec.successful_jobs_history_limit, spec.failed_jobs_history_limit), (Some(3), Some(3)));
        let template = spec.job_template.spec.as_ref().expect("job").template.clone();
        let labels = template.metadata.and_then(|m| m.labels).expect("pod labels");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "bosun");
        let pod = template.spec.expect("pod");
        assert_eq!(pod.restart_policy.as_deref(), Some("OnFailure"));
        assert_eq!(pod.automount_service_account_token, Some(false));
        let c = &pod.containers[0];
        assert_eq!(c.name, "backup");
        assert_eq!(c.image.as_deref(), Some("localhost/bosun-runner:dev"));
        assert_eq!(c.args, Some(vec!["backup".to_owned(), "run".to_owned()]));
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_SOURCE"), Some("postgresql://$(BOSUN_DB_USERNAME)@test-db:5432/app"));
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_DESTINATION"), Some("s3://backups"));
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_RETENTION"), Some("30d"));
        let ns = env_of(&pod).iter().find(|e| e.name == "BOSUN_BACKUP_NAMESPACE").and_then(|e| e.value_from.clone());
        assert_eq!(ns.and_then(|v| v.field_ref).map(|f| f.field_path).as_deref(), Some("metadata.namespace"));
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_NAME"), Some("nightly"));
        assert_eq!(env_value(&pod, "BOSUN_RESULT_FILE"), Some("/dev/termination-log"));
        // Credentials only by reference.
        for name in ["BOSUN_DB_USERNAME", "PGPASSWORD"] {
            let var = env_of(&pod).iter().find(|e| e.name == name).expect(name);
            assert_eq!(var.value, None);
            let r = var.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()).expect("secretKeyRef");
            assert_eq!(r.name, "test-db-credentials");
        }
    }

    #[test]
    fn destinations_map_to_runner_urls_and_mounts() {
        let mut b = nightly();
        b.spec.destination.prefix = Some("/team/db/".into());
        b.spec.destination.endpoint = Some("http://minio:9000".into());
        b.spec.destination.secret_ref = Some(bosun_api::backup::SecretRef { name: "s3-creds".into() });
        b.spec.keep_last = Some(5);
        b.spec.source.type_ = SourceType::Mysql;
        b.spec.source.connection.port = None;
        b.spec.source.connection.database = "my db".into();
        let pod = desired_cronjob(&b, "img").spec.unwrap().job_template.spec.unwrap().template.spec.unwrap();
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_DESTINATION"), Some("s3://backups/team/db"));
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_ENDPOINT"), Some("http://minio:9000"));
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_KEEP_LAST"), Some("5"));
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_SOURCE"), Some("mysql://$(BOSUN_DB_USERNAME)@test-db:3306/my%20db"));
        assert!(env_of(&pod).iter().any(|e| e.name == "MYSQL_PWD" && e.value_from.is_some()));
        let from = pod.containers[0].env_from.as_ref().expect("envFrom");
        assert_eq!(from[0].secret_ref.as_ref().map(|s| s.name.as_str()), Some("s3-creds"));
        b.spec.destination.type_ = DestinationType::Pvc;
        b.spec.destination.bucket = "dumps".into();
        let pod = desired_cronjob(&b, "img").spec.unwrap().job_template.spec.unwrap().template.spec.unwrap();
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_DESTINATION"), Some("file:///backups/team/db"));
        let claim = pod.volumes.iter().flatten().find_map(|v| v.persistent_volume_claim.as_ref()).expect("claim");
        assert_eq!(claim.claim_name, "dumps");
    }

    fn verified(engine: &str, verify: serde_json::Value) -> Backup {
        let mut b = serde_json::to_value(nightly()).unwrap();
        b["spec"]["source"]["type"] = json!(engine);
        b["spec"]["verify"] = verify;
        serde_json::from_value(b).unwrap()
    }

    const IMAGES: fn() -> VerifyImages =
        || VerifyImages { postgresql: "postgres:17".into(), mysql: "mysql:8.4".into() };

    #[test]
    fn a_verification_pod_runs_its_server_beside_the_runner_on_the_loopback_only() {
        assert_eq!(desired_verify_cronjob(&nightly(), "img", &IMAGES()), None, "none without spec.verify");
        let b = verified("postgresql", json!({"schedule": "0 6 * * 0", "query": "SELECT 1 FROM t"}));
        let cj = desired_verify_cronjob(&b, "img", &IMAGES()).expect("a CronJob");
        assert_eq!(cj.metadata.name.as_deref(), Some("nightly-verify"));
        let spec = cj.spec.unwrap();
        assert_eq!((spec.schedule.as_str(), spec.successful_jobs_history_limit), ("0 6 * * 0", Some(1)));
        let job = spec.job_template.spec.unwrap();
        // No retry (a second attempt would meet the first one's tables); a week's deadline at most a day.
        assert_eq!((job.backoff_limit, job.active_deadline_seconds), (Some(0), Some(MAX_RUN_DEADLINE_SECONDS)));
        let pod = job.template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let runner = &pod.containers[0];
        assert_eq!(runner.args.as_deref(), Some(&["verify".to_owned(), "run".to_owned()][..]));
        assert_eq!(env_value(&pod, "BOSUN_VERIFY_TARGET"), Some("postgresql://postgres@127.0.0.1:5432/verify"));
        assert_eq!(env_value(&pod, "BOSUN_VERIFY_QUERY"), Some("SELECT 1 FROM t"));
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_NAME"), Some("nightly"));
        // Nothing of the source database: not its Secret, not its host.
        let text = serde_json::to_string(&pod).unwrap();
        assert!(!text.contains("test-db"), "the source is not reachable from a verification: {text}");
        let server = &pod.init_containers.as_ref().unwrap()[0];
        assert_eq!((server.restart_policy.as_deref(), server.image.as_deref()), (Some("Always"), Some("postgres:17")));
        assert!(server.args.iter().flatten().any(|a| a == "listen_addresses=127.0.0.1"), "{:?}", server.args);
        // One password, the pod's uid, for both; written nowhere.
        let uid = |c: &Container, name: &str| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == name)
                .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
                .map(|f| f.field_path.clone())
        };
        assert_eq!(uid(server, "POSTGRES_PASSWORD").as_deref(), Some("metadata.uid"));
        assert_eq!(uid(runner, "PGPASSWORD").as_deref(), Some("metadata.uid"));
        let data = pod.volumes.iter().flatten().find(|v| v.name == "verify-data").expect("its data volume");
        assert_eq!(data.empty_dir, Some(EmptyDirVolumeSource::default()), "the data goes with the pod");

        let mysql =
            verified("mysql", json!({"schedule": "@weekly", "image": "mariadb:11", "activeDeadlineSeconds": 3600}));
        let job = desired_verify_cronjob(&mysql, "img", &IMAGES()).unwrap().spec.unwrap().job_template.spec.unwrap();
        assert_eq!(job.active_deadline_seconds, Some(3600));
        let pod = job.template.spec.unwrap();
        let server = &pod.init_containers.as_ref().unwrap()[0];
        assert_eq!(server.image.as_deref(), Some("mariadb:11"), "spec.verify.image wins");
        assert!(server.args.iter().flatten().any(|a| a == "--bind-address=127.0.0.1"));
        assert_eq!(uid(server, "MYSQL_ROOT_PASSWORD").as_deref(), Some("metadata.uid"));
        assert_eq!(env_value(&pod, "BOSUN_VERIFY_TARGET"), Some("mysql://root@127.0.0.1:3306/verify"));
        assert_eq!(env_value(&pod, "BOSUN_VERIFY_QUERY"), None);
    }

    #[test]
    fn a_bad_verify_schedule_is_refused_naming_its_field() {
        let b = verified("postgresql", json!({"schedule": "0 6-1 * * *"}));
        let Err(Refusal::InvalidSpec(message)) = validate(&b) else { panic!("accepted") };
        assert!(message.starts_with("spec.verify.schedule \"0 6-1 * * *\""), "{message}");
    }

    #[test]
    fn the_longest_interval_of_a_schedule_spans_its_quiet_days() {
        assert_eq!(longest_interval("0 6 * * 0"), Some(7 * 86400));
        assert_eq!(longest_interval("0 2 * * *"), Some(86400));
        assert_eq!(longest_interval("*/5 * * * 1-5"), Some(2 * 86400 + 300), "a weekday schedule's weekend");
        assert_eq!(longest_interval("@monthly"), Some(31 * 86400));
        assert_eq!(longest_interval("not a schedule"), None);
    }

    #[test]
    fn a_verification_is_told_once_and_a_failure_keeps_the_last_good_one() {
        let mut b = verified("postgresql", json!({"schedule": "0 6 * * 0"}));
        let cj = desired_cronjob(&b, "img");
        let now = Timestamp::from_second(1000).unwrap();
        let s = backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now);
        assert_eq!(condition(&s, "LastVerificationSucceeded").reason, "NoRunYet");
        b.status = Some(s);
        let good = Verification {
            job: "verify-1".into(),
            time: at(300),
            failed: None,
            result: Some(RunResult {
                key: Some("shop/nightly/x.pgdump.zst".into()),
                size: Some(42),
                tables: Some(3),
                rows: Some(1200),
                query_rows: Some(1),
                duration_seconds: Some(12.4),
                ..Default::default()
            }),
        };
        let observed = Observed { cronjob: Some(&cj), verification: Some(&good), ..Observed::default() };
        let s = backup_status(&b, observed, now);
        let v = s.last_verified.clone().unwrap();
        assert_eq!(
            (v.outcome, v.key.as_deref(), v.tables, v.rows, v.duration_seconds, v.job.as_str()),
            (VerifyOutcome::Succeeded, Some("shop/nightly/x.pgdump.zst"), Some(3), Some(1200), Some(12), "verify-1")
        );
        assert_eq!(s.last_successful_verification, Some(at(300)));
        let c = condition(&s, "LastVerificationSucceeded");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Verified"));
        assert_eq!(
            c.message,
            "Job verify-1 restored shop/nightly/x.pgdump.zst into a throwaway server: 3 tables, 1200 rows; the query returned 1 rows"
        );
        b.status = Some(s.clone());
        assert!(verification_reported(b.status.as_ref(), "verify-1"));
        assert_eq!(backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now), s, "steady");

        let bad = Verification {
            job: "verify-2".into(),
            time: at(900),
            failed: Some("BackoffLimitExceeded".into()),
            result: Some(RunResult {
                key: Some("shop/nightly/x.pgdump.zst".into()),
                error: Some("shop/nightly/x.pgdump.zst: downloading the dump failed: zstd".into()),
                ..Default::default()
            }),
        };
        let s =
            backup_status(&b, Observed { cronjob: Some(&cj), verification: Some(&bad), ..Observed::default() }, now);
        let v = s.last_verified.clone().unwrap();
        assert_eq!(
            (v.outcome, v.time.clone(), v.key.as_deref()),
            (VerifyOutcome::Failed, at(900), Some("shop/nightly/x.pgdump.zst"))
        );
        assert_eq!(s.last_successful_verification, Some(at(300)), "the last good verification is kept");
        let c = condition(&s, "LastVerificationSucceeded");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "VerificationFailed"));
        assert!(c.message.contains("zstd") && c.message.ends_with("nothing was deleted"), "{}", c.message);

        // Without spec.verify: no condition about it.
        b.spec.verify = None;
        let s = backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now);
        assert!(s.conditions.iter().all(|c| c.type_ != "LastVerificationSucceeded"));
    }

    fn job(name: &str, finished: Option<(bool, i64)>) -> Job {
        let conditions = finished.map(|(ok, t)| {
            vec![JobCondition {
                type_: if ok { "Complete" } else { "Failed" }.into(),
                status: "True".into(),
                reason: (!ok).then(|| "BackoffLimitExceeded".into()),
                message: (!ok).then(|| "Job has reached the specified backoff limit".into()),
                last_transition_time: Some(at(t)),
                ..JobCondition::default()
            }]
        });
        Job {
            metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
            spec: None,
            status: Some(JobStatus {
                start_time: Some(at(10)),
                completion_time: finished.filter(|(ok, _)| *ok).map(|(_, t)| at(t)),
                conditions,
                ..JobStatus::default()
            }),
        }
    }

    fn condition<'a>(s: &'a BackupStatus, t: &str) -> &'a bosun_api::conditions::Condition {
        s.conditions.iter().find(|c| c.type_ == t).expect(t)
    }

    #[test]
    fn a_good_run_is_kept_through_later_failures() {
        let mut b = nightly();
        let cj = desired_cronjob(&b, "img");
        let now = Timestamp::from_second(1000).unwrap();
        let s = backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now);
        assert_eq!(condition(&s, "Ready").status, "True");
        assert_eq!(condition(&s, "LastBackupSucceeded").status, "Unknown");
        b.status = Some(s);

        let good = LastRun {
            job: "nightly-cronjob-1".into(),
            finish: Finish::Succeeded(at(100)),
            result: Some(RunResult {
                key: Some("shop/nightly/x.pgdump.zst".into()),
                size: Some(42),
                ..Default::default()
            }),
        };
        let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&good), ..Observed::default() }, now);
        let last = s.last_successful_backup.clone().expect("last good");
        assert_eq!((last.key.as_str(), last.size, last.time.clone()), ("shop/nightly/x.pgdump.zst", 42, at(100)));
        assert_eq!(condition(&s, "LastBackupSucceeded").status, "True");
        b.status = Some(s.clone());
        assert!(reported(b.status.as_ref(), "nightly-cronjob-1"));
        // Steady state: nothing new → the same status.
        assert_eq!(backup_status(&b, Observed { cronjob: Some(&cj), ..Observed::default() }, now), s);

        let bad = LastRun {
            job: "nightly-cronjob-2".into(),
            finish: Finish::Failed(at(200), "BackoffLimitExceeded".into()),
            result: Some(RunResult {
                error: Some("pg_dump: password authentication failed".into()),
                ..Default::default()
            }),
        };
        let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&bad), ..Observed::default() }, now);
        assert_eq!(s.last_successful_backup, Some(last), "a failure keeps the last good dump");
        let c = condition(&s, "LastBackupSucceeded");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "BackupFailed"));
        assert!(c.message.contains("password authentication failed"), "{}", c.message);
        b.status = Some(s);
        assert!(reported(b.status.as_ref(), "nightly-cronjob-2"));
        assert!(!reported(b.status.as_ref(), "nightly-cronjob-3"));
    }

    #[test]
    fn what_retention_kept_is_in_status_from_the_runs_result_and_outlives_failures() {
        let mut b = nightly();
        let cj = desired_cronjob(&b, "img");
        let now = Timestamp::from_second(1000).unwrap();
        // The JSON a run writes to its termination message, cut to what fits.
        let result: RunResult = serde_json::from_value(json!({
            "key": "shop/nightly/x.pgdump.zst", "size": 42,
            "kept": [{"at": "2026-03-02T02:00:00Z", "why": ["last", "daily", "monthly"]},
                     {"at": "2026-02-22T02:00:00Z", "why": ["weekly"]}],
            "keptCount": 9,
            "retentionError": "1 of 3 expired backups could not be deleted and are kept (the next good run tries again): locked"
        }))
        .unwrap();
        let good =
            LastRun { job: "nightly-cronjob-1".into(), finish: Finish::Succeeded(at(100)), result: Some(result) };
        let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&good), ..Observed::default() }, now);
        let retention = s.retention.clone().expect("retention in status");
        assert_eq!(retention.kept, 9, "the count, not the listed few");
        let listed: Vec<(String, Vec<String>)> =
            retention.backups.iter().map(|r| (r.time.0.to_string(), r.rules.clone())).collect();
        assert_eq!(listed[1], ("2026-02-22T02:00:00Z".to_owned(), vec!["weekly".to_owned()]));
        assert!(retention.error.as_deref().is_some_and(|e| e.contains("could not be deleted")));
        let c = condition(&s, "LastBackupSucceeded");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "BackupSucceeded"),
            "a refused delete is never fatal"
        );
        assert!(c.message.ends_with("verified); retention: 1 of 3 expired backups could not be deleted and are kept (the next good run tries again): locked"), "{}", c.message);
        b.status = Some(s.clone());
        let bad = LastRun {
            job: "nightly-cronjob-2".into(),
            finish: Finish::Failed(at(200), "BackoffLimitExceeded".into()),
            result: Some(RunResult { error: Some("boom".into()), ..Default::default() }),
        };
        let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&bad), ..Observed::default() }, now);
        assert_eq!(s.retention, Some(retention), "a failed run deletes nothing, so what is kept stays as told");
    }

    #[test]
    fn a_failed_attempt_is_told_at_once_and_its_error_outlives_the_pod() {
        let mut b = nightly();
        let cj = desired_cronjob(&b, "img");
        let now = Timestamp::from_second(1000).unwrap();
        let retrying = LastRun {
            job: "nightly-cronjob-7".into(),
            finish: Finish::Retrying,
            result: Some(RunResult {
                error: Some("password authentication failed for user \"app\"".into()),
                ..Default::default()
            }),
        };
        let s =
            backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&retrying), ..Observed::default() }, now);
        let c = condition(&s, "LastBackupSucceeded");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "BackupRetrying"));
        assert!(!reported(Some(&s), "nightly-cronjob-7"), "a retry is not the run's end");
        b.status = Some(s);
        // The Job gives up and deletes its pod: no result, the earlier error stays.
        let failed = LastRun {
            job: "nightly-cronjob-7".into(),
            finish: Finish::Failed(at(300), "BackoffLimitExceeded: Job has reached the specified backoff limit".into()),
            result: None,
        };
        let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&failed), ..Observed::default() }, now);
        let c = condition(&s, "LastBackupSucceeded");
        assert_eq!(c.reason, "BackupFailed");
        assert!(
            c.message.contains("password authentication failed") && c.message.contains("BackoffLimitExceeded"),
            "{}",
            c.message
        );
        assert!(!c.message.contains("retrying"), "{}", c.message);
        assert!(reported(Some(&s), "nightly-cronjob-7"));
    }

    #[test]
    fn a_refused_spec_is_not_ready() {
        let b = nightly();
        let refusal = Refusal::InvalidSpec("spec.schedule \"x\": nope".into());
        let s = backup_status(
            &b,
            Observed { refusal: Some(&refusal), ..Observed::default() },
            Timestamp::from_second(5).unwrap(),
        );
        let c = condition(&s, "Ready");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "InvalidSpec"));
        assert!(c.message.contains("spec.schedule"));
    }

    #[test]
    fn the_newest_finished_job_is_the_last_run() {
        let jobs =
            [job("a", Some((true, 100))), job("b", Some((false, 300))), job("c", None), job("d", Some((true, 200)))];
        let (newest, finish) = newest_finished(&jobs).expect("one finished");
        assert_eq!(newest.name_any(), "b");
        assert!(matches!(finish, Finish::Failed(_, ref why) if why.contains("BackoffLimitExceeded")));
    }

    #[test]
    fn a_run_started_while_the_one_before_was_ending_is_the_running_one() {
        let started = |mut j: Job, t: i64| {
            j.status.as_mut().unwrap().start_time = Some(at(t));
            j
        };
        // The one before ends at its deadline (60) the moment the next starts (60).
        let before = started(job("before", Some((false, 61))), 0);
        let jobs = [before.clone(), started(job("next", None), 60), started(job("older", None), 0)];
        let finished = newest_finished(&jobs).map(|(j, _)| j);
        assert_eq!(newest_running(&jobs, finished).map(|j| j.name_any()).as_deref(), Some("next"));
        // A run left over from before the newest finished one is not "in progress".
        assert!(newest_running(&jobs[2..], Some(&before)).is_none());
        assert_eq!(newest_running(&jobs[2..], None).map(|j| j.name_any()).as_deref(), Some("older"));
    }

    #[test]
    fn a_runs_result_is_read_from_its_termination_message() {
        let pod = |message: &str, current: bool| {
            let terminated = Some(ContainerState {
                terminated: Some(ContainerStateTerminated { message: Some(message.into()), ..Default::default() }),
                ..Default::default()
            });
            Pod {
                status: Some(PodStatus {
                    container_statuses: Some(vec![ContainerStatus {
                        name: "backup".into(),
                        state: if current { terminated.clone() } else { None },
                        last_state: if current { None } else { terminated },
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            }
        };
        let ok = run_result(&pod(r#"{"key":"k","size":7,"sha256":"ab"}"#, true), "backup").expect("result");
        assert_eq!((ok.key.as_deref(), ok.size), (Some("k"), Some(7)));
        let failed = run_result(&pod(r#"{"error":"bucket missing"}"#, false), "backup").expect("result");
        assert_eq!(failed.error.as_deref(), Some("bucket missing"));
        let plain = run_result(&pod("killed", true), "backup").expect("result");
        assert_eq!(plain.error.as_deref(), Some("killed"));
        assert_eq!(run_result(&pod("{}", true), "restore"), None);
    }

    #[test]
    fn runs_a_simulated_node_completed_say_that_nothing_ran() {
        // What kwok's pod-complete stage reports: terminated, Completed, no container ID,
        // no termination message; a kubelet's run always has an ID.
        let completed = |id: Option<&str>, message: Option<&str>| Pod {
            status: Some(PodStatus {
                phase: Some("Succeeded".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "backup".into(),
                    container_id: id.map(Into::into),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            reason: Some("Completed".into()),
                            message: message.map(Into::into),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let simulated = run_result(&completed(None, None), "backup").expect("a result");
        assert!(simulated.simulated && simulated.key.is_none() && simulated.error.is_none(), "{simulated:?}");
        let real = run_result(&completed(Some("containerd://9c1e"), Some(r#"{"key":"k","size":7}"#)), "backup");
        assert!(real.as_ref().is_some_and(|r| !r.simulated && r.key.as_deref() == Some("k")), "{real:?}");
        // A kubelet's run whose pod is gone or wrote nothing is not a simulated one, nor
        // is a container the kubelet lost track of (no ID, exit code 137).
        assert_eq!(run_result(&completed(Some("containerd://9c1e"), None), "backup"), None);
        let mut lost = completed(None, None);
        if let Some(t) = lost
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .and_then(|c| c[0].state.as_mut())
            .and_then(|s| s.terminated.as_mut())
        {
            (t.exit_code, t.reason) = (137, Some("ContainerStatusUnknown".into()));
        }
        assert_eq!(run_result(&lost, "backup"), None);

        let b = verified("postgresql", json!({"schedule": "0 6 * * 0"}));
        let cj = desired_cronjob(&b, "img");
        let now = Timestamp::from_second(1000).unwrap();
        let run =
            LastRun { job: "nightly-1".into(), finish: Finish::Succeeded(at(100)), result: Some(simulated.clone()) };
        let check =
            Verification { job: "verify-1".into(), time: at(300), failed: None, result: Some(simulated.clone()) };
        let observed =
            Observed { cronjob: Some(&cj), last_run: Some(&run), verification: Some(&check), ..Observed::default() };
        let s = backup_status(&b, observed, now);
        assert_eq!(s.last_successful_backup, None, "no dump exists");
        for (t, what) in
            [("LastBackupSucceeded", "no dump was stored"), ("LastVerificationSucceeded", "no dump was restored")]
        {
            let c = condition(&s, t);
            assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "SimulatedOnFakeNodes"), "{t}");
            assert!(
                c.message.contains("completed on a simulated node: no container ran") && c.message.contains(what),
                "{}",
                c.message
            );
        }

        let r = restore(json!({
            "source": {"destination": {"type": "s3", "bucket": "b"}, "key": "k1"},
            "target": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "s"}}},
        }));
        let done = job("back-restore", Some((true, 50)));
        let observed = RestoreObserved {
            job: Some(&done),
            requested_key: Some("k1"),
            result: Some(&simulated),
            refusal: None,
            stuck: None,
        };
        let s = restore_status(&r, observed, now);
        assert_eq!(s.phase, Some(RestorePhase::Succeeded));
        let c = &s.conditions[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "SimulatedOnFakeNodes"));
        assert!(c.message.ends_with("no container ran, so nothing was loaded"), "{}", c.message);
    }

    fn restore(spec: serde_json::Value) -> Restore {
        serde_json::from_value(json!({
            "apiVersion": "backup.example.com/v1", "kind": "Restore",
            "metadata": {"name": "back", "namespace": "shop", "uid": "r-1", "generation": 1},
            "spec": spec,
        }))
        .expect("restore")
    }

    #[test]
    fn a_restore_job_runs_once_with_the_key_or_the_latest() {
        let r = restore(json!({
            "backupRef": {"name": "nightly"},
            "target": {"type": "postgresql", "connection": {"host": "fresh-db", "database": "app", "secretRef": {"name": "fresh"}}},
        }));
        let b = nightly();
        let dump = Dump { destination: &b.spec.destination, key: None, backup: Some("nightly".into()) };
        let j = desired_job(&r, &dump, "img");
        assert_eq!(j.metadata.name.as_deref(), Some("back-restore"));
        let spec = j.spec.expect("spec");
        assert_eq!(spec.backoff_limit, Some(0));
        let pod = spec.template.spec.expect("pod");
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.containers[0].name, "restore");
        assert_eq!(env_value(&pod, "BOSUN_RESTORE_LATEST"), Some("true"));
        assert_eq!(env_value(&pod, "BOSUN_BACKUP_NAME"), Some("nightly"));
        assert_eq!(
            env_value(&pod, "BOSUN_RESTORE_TARGET"),
            Some("postgresql://$(BOSUN_DB_USERNAME)@fresh-db:5432/app")
        );
        assert_eq!(env_value(&pod, "BOSUN_RESTORE_OVERWRITE"), None);
        let dump = Dump { key: Some("k1".into()), ..dump };
        let pod = desired_job(&r, &dump, "img").spec.unwrap().template.spec.unwrap();
        assert_eq!(env_value(&pod, "BOSUN_RESTORE_KEY"), Some("k1"));
        assert_eq!(env_value(&pod, "BOSUN_RESTORE_LATEST"), None);
        let _: &RestoreSpec = &r.spec;
    }

    #[test]
    fn restore_phases_follow_the_job_and_end_for_good() {
        let mut r = restore(json!({
            "source": {"destination": {"type": "s3", "bucket": "b"}, "key": "k1"},
            "target": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "s"}}},
        }));
        let now = Timestamp::from_second(1000).unwrap();
        let seen = |r: &Restore, job: Option<&Job>, result: Option<&RunResult>| {
            restore_status(
                r,
                RestoreObserved { job, requested_key: Some("k1"), result, refusal: None, stuck: None },
                now,
            )
        };
        assert_eq!(seen(&r, None, None).phase, Some(RestorePhase::Pending));
        let running = job("back-restore", None);
        let s = seen(&r, Some(&running), None);
        assert_eq!(s.phase, Some(RestorePhase::Running));
        assert_eq!(s.start_time, Some(at(10)));
        r.status = Some(s);
        let done = job("back-restore", Some((true, 50)));
        let result = RunResult { key: Some("k1".into()), size: Some(9), ..Default::default() };
        let s = seen(&r, Some(&done), Some(&result));
        assert_eq!(s.phase, Some(RestorePhase::Succeeded));
        assert_eq!((s.key.as_deref(), s.completion_time.clone()), (Some("k1"), Some(at(50))));
        assert_eq!(s.conditions[0].status, "True");
        r.status = Some(s.clone());
        // Over: the Job's later fate (deleted, say) changes nothing.
        assert_eq!(seen(&r, None, None), s);

        // A Job deleted while it ran is a failed restore, not a second run.
        r.status = Some(seen(
            &restore(json!({"source": {"destination": {"type": "s3", "bucket": "b"}, "key": "k1"},
            "target": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "s"}}}})),
            Some(&running),
            None,
        ));
        let s = seen(&r, None, None);
        assert_eq!(s.phase, Some(RestorePhase::Failed));
        assert!(s.conditions[0].message.contains("deleted before it finished"));
    }

    #[test]
    fn a_runs_deadline_is_the_schedules_shortest_interval_or_the_field() {
        let with = |schedule: &str, deadline: Option<i64>| {
            let mut b = nightly();
            b.spec.schedule = schedule.to_owned();
            b.spec.active_deadline_seconds = deadline;
            run_deadline_seconds(&b)
        };
        assert_eq!(with("* * * * *", None), 60);
        assert_eq!(with("*/15 * * * *", None), 900);
        assert_eq!(with("@hourly", None), 3600);
        assert_eq!(with("0 9-17 * * MON-FRI", None), 3600, "the shortest gap, not the weekend's");
        assert_eq!(with("0 2,3 * * *", None), 3600);
        assert_eq!(with("0 2 * * *", None), MAX_RUN_DEADLINE_SECONDS);
        assert_eq!(with("0 2 * * 0", None), MAX_RUN_DEADLINE_SECONDS, "weekly: at most a day");
        assert_eq!(with("0 2 * * *", Some(7200)), 7200);
        let cj = desired_cronjob(&nightly(), DEFAULT_RUNNER_IMAGE);
        let job = cj.spec.expect("spec").job_template.spec.expect("job spec");
        assert_eq!(job.active_deadline_seconds, Some(MAX_RUN_DEADLINE_SECONDS));
    }

    #[test]
    fn missing_credentials_name_the_field_the_secret_and_the_key() {
        let b = nightly();
        let mut destination = b.spec.destination.clone();
        destination.secret_ref = Some(bosun_api::backup::SecretRef { name: "s3-credentials".into() });
        let needs =
            secrets_needed(&b.spec.source, "spec.source.connection.secretRef", &destination, "spec.destination");
        let keys = |pairs: &[(&str, &[&str])]| {
            let pairs: Vec<(String, Vec<String>)> =
                pairs.iter().map(|(n, ks)| ((*n).to_owned(), ks.iter().map(|k| (*k).to_owned()).collect())).collect();
            move |name: &str| pairs.iter().find(|(n, _)| n == name).map(|(_, ks)| ks.clone())
        };
        let all =
            keys(&[("test-db-credentials", &["username", "password"]), ("s3-credentials", &["AWS_ACCESS_KEY_ID"])]);
        assert_eq!(missing_credentials(&needs, "shop", all), None);
        let no_s3 = keys(&[("test-db-credentials", &["username", "password"])]);
        assert_eq!(
            missing_credentials(&needs, "shop", no_s3).as_deref(),
            Some(
                "spec.destination.secretRef: Secret s3-credentials does not exist in namespace shop; runs cannot start until it does"
            )
        );
        let no_password = keys(&[("test-db-credentials", &["username"]), ("s3-credentials", &[])]);
        let message = missing_credentials(&needs, "shop", no_password).expect("missing");
        assert!(
            message.starts_with("spec.source.connection.secretRef: Secret test-db-credentials has no key password"),
            "{message}"
        );
    }

    #[test]
    fn a_stuck_run_fails_the_last_backup_and_its_cause_outlives_the_deadline() {
        let mut b = nightly();
        let cj = desired_cronjob(&b, DEFAULT_RUNNER_IMAGE);
        let now = Timestamp::from_second(1000).unwrap();
        let cause = "pod nightly-cronjob-7-x has not started after 61s: FailedMount: secret \"s3\" not found";
        let stuck = LastRun { job: "nightly-cronjob-7".into(), finish: Finish::Stuck(cause.into()), result: None };
        let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&stuck), ..Observed::default() }, now);
        let c = condition(&s, "LastBackupSucceeded");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "RunStuck"));
        assert!(c.message.starts_with("Job nightly-cronjob-7 cannot run: pod nightly-cronjob-7-x"), "{}", c.message);
        assert!(c.message.contains("next scheduled run goes ahead"), "{}", c.message);
        b.status = Some(s);
        // The deadline ends it; the failure still names what kept it from starting.
        let over = LastRun {
            job: "nightly-cronjob-7".into(),
            finish: Finish::Failed(at(900), "DeadlineExceeded: Job was active longer than specified deadline".into()),
            result: None,
        };
        let s = backup_status(&b, Observed { cronjob: Some(&cj), last_run: Some(&over), ..Observed::default() }, now);
        let c = condition(&s, "LastBackupSucceeded");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "BackupFailed"));
        assert!(c.message.contains(cause) && c.message.contains("DeadlineExceeded"), "{}", c.message);
    }

    #[test]
    fn a_stuck_restore_says_why_and_its_failure_keeps_the_cause() {
        let mut r = restore(json!({
            "source": {"destination": {"type": "s3", "bucket": "b"}, "key": "k1"},
            "target": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "s"}}},
        }));
        let now = Timestamp::from_second(1000).unwrap();
        let running = job("back-restore", None);
        let cause = "pod back-restore-x: container restore cannot get its image i (ErrImageNeverPull)";
        let observed = RestoreObserved {
            job: Some(&running),
            requested_key: Some("k1"),
            stuck: Some(cause),
            ..RestoreObserved::default()
        };
        let s = restore_status(&r, observed, now);
        assert_eq!(s.conditions[0].reason, "RunStuck");
        assert!(s.conditions[0].message.contains(cause), "{}", s.conditions[0].message);
        r.status = Some(s);
        let mut failed = job("back-restore", None);
        failed.status = Some(JobStatus {
            start_time: Some(at(10)),
            conditions: Some(vec![JobCondition {
                type_: "Failed".into(),
                status: "True".into(),
                reason: Some("DeadlineExceeded".into()),
                last_transition_time: Some(at(900)),
                ..JobCondition::default()
            }]),
            ..JobStatus::default()
        });
        let observed = RestoreObserved { job: Some(&failed), requested_key: Some("k1"), ..RestoreObserved::default() };
        let s = restore_status(&r, observed, now);
        assert_eq!(s.phase, Some(RestorePhase::Failed));
        assert!(s.conditions[0].message.contains(cause), "{}", s.conditions[0].message);
    }
}
