//! Whether a pod bosun started (a backup or restore run, a database instance) can make
//! progress, judged from its status and, where the status cannot tell, from the
//! Warning events about it. Pure.
//!
//! ```text
//!  pod status ──progress──▶ Fine | Stuck(cause) | Waiting { since, said }
//!  Waiting + now + the pod's Warning events ──waited_too_long──▶ Some(cause) | None
//! ```
//!
//! A cause the status states that does not clear by waiting is told at once: an image
//! that cannot be pulled, a Secret or key an environment variable names that does not
//! exist, a container that keeps crashing. A pod no node takes yet is told
//! [`WARNING_AFTER`] after the scheduler first said so (a claim still binding, a node
//! joining, clear by themselves). A pod that only waits in `ContainerCreating` (a
//! volume that cannot be mounted, say: a missing Secret shows only in events) is told
//! [`WARNING_AFTER`] after it was scheduled when an event says why, and
//! [`SILENT_AFTER`] after when none does.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodStatus, ProjectedVolumeSource,
    SecretProjection, SecretVolumeSource, Volume, VolumeProjection,
};
use kube::ResourceExt;

/// How long a pod may wait to start, with a Warning event about it, before it counts
/// as stuck: long enough for a volume attach that fails once, short enough that a
/// missing Secret is told (by a controller looking every 20 s) before the deadline of a
/// run of a schedule of every minute (60 s).
pub const WARNING_AFTER: Duration = Duration::from_secs(20);
/// How long a pod may wait to start with no event saying why.
pub const SILENT_AFTER: Duration = Duration::from_secs(300);

/// Waiting reasons of a container that do not clear by waiting a little: the image, the
/// container's configuration, or the process itself is wrong.
const STUCK_WAITING: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
    "RunContainerError",
    "PreStartHookError",
    "PostStartHookError",
];

/// What a pod's status says of its progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Running, finished, or waiting for nothing that looks wrong yet.
    Fine,
    /// It cannot start or keeps failing: the cause, in words that name it.
    Stuck(String),
    /// Not started since this time: not taken by a node yet (`said`: the scheduler's
    /// words, from the status), or scheduled and waiting for a reason its status does
    /// not tell (`said` is `None`: the events may).
    Waiting { since: Timestamp, said: Option<String> },
}

/// The progress of `pod`, from its status alone.
pub fn progress(pod: &Pod) -> Progress {
    let name = pod.name_any();
    let Some(status) = pod.status.as_ref() else { return Progress::Fine };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return Progress::Fine;
    }
    let conditions = status.conditions.as_deref().unwrap_or_default();
    if let Some(c) = conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False") {
        let since = c.last_transition_time.as_ref().or(pod.metadata.creation_timestamp.as_ref());
        return match (c.reason.as_deref(), since) {
            (Some("Unschedulable"), Some(since)) => {
                let why = c.message.as_deref().unwrap_or("no reason given");
                Progress::Waiting { since: since.0, said: Some(format!("pod {name} cannot be scheduled: {why}")) }
            }
            _ => Progress::Fine,
        };
    }
    let containers = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    for container in containers {
        if let Some(cause) = stuck_container(container) {
            return Progress::Stuck(format!("pod {name}: {cause}"));
        }
    }
    if status.phase.as_deref() != Some("Pending") {
        return Progress::Fine;
    }
    let scheduled = conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "True");
    let since = scheduled.and_then(|c| c.last_transition_time.as_ref()).or(pod.metadata.creation_timestamp.as_ref());
    since.map_or(Progress::Fine, |t| Progress::Waiting { since: t.0, said: None })
}

/// Whether `pod` runs on a simulated node (kwok's fake nodes): it is Running, but no
/// container of it has an ID — a kubelet names every container it starts, a simulator
/// starts none.
pub fn simulated(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    status.phase.as_deref() == Some("Running") && !containers.is_empty() && containers.iter().all(without_id)
}

/// Whether a container reported terminated was simulated: a kubelet names every
/// container it starts and the ID stays when it ends; a simulated node (kwok)
/// completes a Job's containers, exit code 0, without ever naming one. (A kubelet's
/// `ContainerStatusUnknown`, which may have no ID either, ends with 137.)
pub fn simulated_run(status: &ContainerStatus) -> bool {
    let terminated = status.state.as_ref().and_then(|s| s.terminated.as_ref());
    terminated.is_some_and(|t| t.exit_code == 0) && without_id(status)
}

/// Whether a container's termination is the kubelet's account of a container it lost
/// track of (most often one that never started, its pod ended by a deadline): reason
/// `ContainerStatusUnknown`, with the kubelet's own message, never the container's.
pub fn lost_by_kubelet(terminated: &ContainerStateTerminated) -> bool {
    terminated.reason.as_deref() == Some("ContainerStatusUnknown")
}

fn without_id(status: &ContainerStatus) -> bool {
    status.container_id.as_deref().is_none_or(str::is_empty)
}

/// A pod's volume as a cache keeps it: its name and the Secrets it holds, no items.
pub fn slim_volume(volume: Volume) -> Volume {
    Volume {
        name: volume.name,
        secret: volume
            .secret
            .map(|s| SecretVolumeSource { secret_name: s.secret_name, ..SecretVolumeSource::default() }),
        projected: volume.projected.map(|p| ProjectedVolumeSource {
            sources: p.sources.map(|sources| {
                sources
                    .into_iter()
                    .filter_map(|s| s.secret)
                    .map(|s| SecretProjection { name: s.name, ..SecretProjection::default() })
                    .map(|secret| VolumeProjection { secret: Some(secret), ..VolumeProjection::default() })
                    .collect()
            }),
            ..ProjectedVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Drop from `pod`'s status all that [`progress`] and a database's failover do not
/// read (addresses, times of containers, resources, ...), for caches of many pods.
pub fn slim_status(pod: &mut Pod) {
    let Some(status) = pod.status.take() else { return };
    let slim_container = |c: ContainerStatus| ContainerStatus {
        name: c.name,
        image: c.image,
        // Whether there is one ([`simulated`]), not which.
        container_id: c.container_id.map(|_| "-".to_owned()),
        restart_count: c.restart_count,
        state: c.state.map(|s| ContainerState { waiting: s.waiting, ..ContainerState::default() }),
        last_state: c.last_state.map(|s| ContainerState { terminated: s.terminated, ..ContainerState::default() }),
        ..ContainerStatus::default()
    };
    let slim_all = |cs: Option<Vec<ContainerStatus>>| cs.map(|cs| cs.into_iter().map(slim_container).collect());
    pod.status = Some(PodStatus {
        phase: status.phase,
        // Ready with its time only: how long a database's primary has not been ready.
        conditions: status.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| c.type_ == "PodScheduled" || c.type_ == "Ready")
                .map(|c| match c.type_.as_str() {
                    "Ready" => PodCondition { reason: None, message: None, last_probe_time: None, ..c },
                    _ => c,
                })
                .collect()
        }),
        init_container_statuses: slim_all(status.init_container_statuses),
        container_statuses: slim_all(status.container_statuses),
        // Where a database instance's API answers.
        pod_ip: status.pod_ip,
        ..PodStatus::default()
    });
}

/// Why `container` cannot run, when its waiting reason says it cannot.
fn stuck_container(container: &ContainerStatus) -> Option<String> {
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    if !STUCK_WAITING.contains(&reason) {
        return None;
    }
    let name = &container.name;
    if reason == "CrashLoopBackOff" {
        // The back-off message only says it waits; the last exit says why.
        let last = container.last_state.as_ref().and_then(|s| s.terminated.as_ref());
        let exit = last.map_or_else(String::new, |t| {
            let detail = [t.reason.as_deref(), t.message.as_deref().map(str::trim)]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(": ");
            format!(
                "; last exit code {}{}",
                t.exit_code,
                if detail.is_empty() { detail } else { format!(", {detail}") }
            )
        });
        return Some(format!(
            "container {name} keeps crashing (CrashLoopBackOff, {} restarts){exit}",
            container.restart_count
        ));
    }
    let image = container.image.as_str();
    if matches!(reason, "ErrImagePull" | "ImagePullBackOff") {
        // The kubelet alternates the two, with messages that change each time: told in
        // words that stay the same while it tries (its events have each error).
        return Some(format!("container {name} cannot pull its image {image} (ErrImagePull, ImagePullBackOff)"));
    }
    let message = waiting.message.as_deref().map(str::trim).filter(|m| !m.is_empty());
    let about_image = reason.contains("Image");
    Some(match (about_image, message) {
        (true, Some(m)) => format!("container {name} cannot get its image {image} ({reason}): {m}"),
        (true, None) => format!("container {name} cannot get its image {image} ({reason})"),
        (false, Some(m)) => format!("container {name} cannot start ({reason}): {m}"),
        (false, None) => format!("container {name} cannot start ({reason})"),
    })
}

/// Whether the pod `pod`, [`Progress::Waiting`] since `since` with what its status
/// `said`, is stuck at `now`, and why. `warnings` are the reasons and notes of the
/// Warning events about it, newest last (read only when the status said nothing).
pub fn waited_too_long(
    pod: &str,
    since: Timestamp,
    said: Option<&str>,
    now: Timestamp,
    warnings: &[(String, String)],
) -> Option<String> {
    // Words that do not change while it waits: the status is written once, not each look.
    let waited = now.duration_since(since).unsigned_abs();
    if let Some(said) = said {
        return (waited >= WARNING_AFTER).then(|| said.to_owned());
    }
    match warnings.last() {
        Some((reason, note)) if waited >= WARNING_AFTER => {
            Some(format!("pod {pod} has not started in {}s: {reason}: {}", WARNING_AFTER.as_secs(), note.trim()))
        }
        None if waited >= SILENT_AFTER => {
            Some(format!("pod {pod} has not started in {}s, and no event says why", SILENT_AFTER.as_secs()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "run-1-abcde", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": status,
        }))
        .expect("pod")
    }

    fn waiting(reason: &str, message: &str) -> Pod {
        pod(json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"}],
            "containerStatuses": [{
                "name": "backup", "image": "localhost/bosun-runner:nope", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}},
            }],
        }))
    }

    #[test]
    fn a_running_pod_without_container_ids_is_simulated_also_in_a_slim_cache() {
        let running = |id: Option<&str>| {
            pod(json!({"phase": "Running", "containerStatuses": [{
                "name": "postgres", "image": "postgres:15", "imageID": "", "ready": true, "restartCount": 0,
                "containerID": id, "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}},
            }]}))
        };
        let (fake, real) = (running(None), running(Some("containerd://4f2a")));
        assert!(simulated(&fake) && !simulated(&real));
        assert!(!simulated(&waiting("ContainerCreating", "")), "not running: nothing to say yet");
        for (mut p, expected) in [(fake, true), (real, false)] {
            slim_status(&mut p);
            assert_eq!(simulated(&p), expected, "after slim_status");
        }
    }

    #[test]
    fn a_slim_pod_keeps_its_address() {
        let mut p = pod(json!({"phase": "Running", "podIP": "10.245.0.7", "hostIP": "10.0.0.1"}));
        slim_status(&mut p);
        let status = p.status.unwrap_or_default();
        assert_eq!((status.pod_ip.as_deref(), status.host_ip), (Some("10.245.0.7"), None));
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + secs).expect("time") // 2026-01-01T00:00:00Z + secs
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_stuck_naming_the_image() {
        let Progress::Stuck(cause) = progress(&waiting("ErrImageNeverPull", "Container image is not present")) else {
            panic!("not stuck")
        };
        assert!(cause.contains("localhost/bosun-runner:nope") && cause.contains("ErrImageNeverPull"), "{cause}");
        assert!(cause.starts_with("pod run-1-abcde: container backup"), "{cause}");
        // Pull errors alternate: one message for both.
        assert_eq!(progress(&waiting("ImagePullBackOff", "Back-off pulling")), progress(&waiting("ErrImagePull", "x")));
        let Progress::Stuck(cause) = progress(&waiting("ErrImagePull", "dial tcp: refused")) else { panic!() };
        assert!(cause.contains("cannot pull its image localhost/bosun-runner:nope"), "{cause}");
    }

    #[test]
    fn a_missing_secret_key_is_stuck_with_the_kubelets_words() {
        let p = waiting("CreateContainerConfigError", "couldn't find key password in Secret shop/db-credentials");
        assert_eq!(
            progress(&p),
            Progress::Stuck(
                "pod run-1-abcde: container backup cannot start (CreateContainerConfigError): couldn't find key password in Secret shop/db-credentials"
                    .to_owned()
            )
        );
    }

    #[test]
    fn a_crash_loop_tells_the_last_exit() {
        let p = pod(json!({
            "phase": "Running",
            "containerStatuses": [{
                "name": "backup", "image": "i", "imageID": "", "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container"}},
                "lastState": {"terminated": {"exitCode": 128, "reason": "StartError", "message": "exec: \"bosun\": executable file not found in $PATH"}},
            }],
        }));
        let Progress::Stuck(cause) = progress(&p) else { panic!("not stuck") };
        assert!(cause.contains("keeps crashing") && cause.contains("2 restarts"), "{cause}");
        assert!(cause.contains("exit code 128, StartError: exec: \"bosun\""), "{cause}");
    }

    #[test]
    fn an_unschedulable_pod_is_stuck_with_the_schedulers_reason_once_it_has_waited() {
        let p = pod(json!({
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "lastTransitionTime": "2026-01-01T00:00:02Z",
                "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}],
        }));
        let said = "pod run-1-abcde cannot be scheduled: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.";
        assert_eq!(progress(&p), Progress::Waiting { since: at(2), said: Some(said.to_owned()) });
        // A claim that is still binding clears by itself: no verdict within the bound,
        // and the scheduler's words, not the events', after it.
        let events = [("FailedScheduling".to_owned(), "older words".to_owned())];
        assert_eq!(waited_too_long("run-1-abcde", at(2), Some(said), at(21), &events), None);
        assert_eq!(waited_too_long("run-1-abcde", at(2), Some(said), at(22), &events).as_deref(), Some(said));
    }

    #[test]
    fn running_finished_and_briefly_waiting_pods_are_fine_or_waiting() {
        assert_eq!(progress(&pod(json!({"phase": "Running"}))), Progress::Fine);
        assert_eq!(progress(&pod(json!({"phase": "Failed"}))), Progress::Fine);
        assert_eq!(progress(&pod(json!({"phase": "Succeeded"}))), Progress::Fine);
        // Not yet tried by the scheduler: no verdict.
        let unscheduled = pod(json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}));
        assert_eq!(progress(&unscheduled), Progress::Fine);
        // ContainerCreating says nothing: waiting since it was scheduled.
        assert_eq!(progress(&waiting("ContainerCreating", "")), Progress::Waiting { since: at(1), said: None });
    }

    #[test]
    fn a_slim_status_gives_the_same_verdict() {
        for p in [
            waiting("ErrImageNeverPull", "not present"),
            waiting("ContainerCreating", ""),
            pod(json!({"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]})),
        ] {
            let mut slim = p.clone();
            slim_status(&mut slim);
            assert_eq!(progress(&slim), progress(&p));
        }
        let mut p = pod(json!({"phase": "Running", "hostIP": "10.0.0.1", "startTime": "2026-01-01T00:00:00Z"}));
        slim_status(&mut p);
        let status = p.status.unwrap_or_default();
        assert_eq!((status.host_ip, status.start_time), (None, None), "what nothing reads is dropped");
    }

    #[test]
    fn a_long_wait_is_stuck_with_the_newest_warning_or_after_the_silent_bound() {
        let warnings = vec![
            ("FailedScheduling".to_owned(), "old".to_owned()),
            (
                "FailedMount".to_owned(),
                "MountVolume.SetUp failed for volume \"destination-credentials\" : secret \"s3\" not found".to_owned(),
            ),
        ];
        assert_eq!(waited_too_long("p", at(0), None, at(19), &warnings), None, "within the bound");
        let cause = waited_too_long("p", at(0), None, at(21), &warnings).expect("stuck");
        assert_eq!(
            cause,
            "pod p has not started in 20s: FailedMount: MountVolume.SetUp failed for volume \"destination-credentials\" : secret \"s3\" not found"
        );
        assert_eq!(waited_too_long("p", at(0), None, at(299), &[]), None);
        assert_eq!(
            waited_too_long("p", at(0), None, at(300), &[]).as_deref(),
            Some("pod p has not started in 300s, and no event says why")
        );
    }
}
