//! What a run said: its JSON result (the termination message), its Job finished or running.

use super::*;

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
    // A container the kubelet lost track of has the kubelet's message ("could not be
    // located"), not the run's: an earlier attempt's, or the cause a stuck run was told
    // (the Secret it could not mount), stays the story.
    let terminated = [status.state.as_ref(), status.last_state.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .find(|t| !crate::pods::lost_by_kubelet(t))?;
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
pub(super) fn container_status<'a>(pod: &'a Pod, container: &str) -> Option<&'a ContainerStatus> {
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

pub(super) fn job_prefix(job: &str) -> String {
    format!("Job {job} ")
}
