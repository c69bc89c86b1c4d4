//! Kubernetes Events (events.k8s.io) on the custom resource, for what users need to
//! see: children created or changed, and reconciles that failed.
//!
//! Reasons are fixed CamelCase words to filter on (`kubectl get events
//! --field-selector reason=InvalidSpec`): `Created`, `Updated`, and for failures the
//! error's bounded category (`InvalidSpec`, `Conflict`, `ApiUnavailable`, …).
//! Publishing an event never fails or delays a reconcile; a failure to publish is logged.

use bosun_api::conditions::Condition;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client};
use tracing::debug;

use crate::error::Error;

/// What applying a child did to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildChange {
    Created,
    Updated,
    Unchanged,
}

pub struct Events {
    client: Client,
    identity: String,
    /// Warnings only: repeated failures fold into one event's series.
    recorder: Recorder,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Events reported as controller `bosun`, instance `identity` (the pod name).
    pub fn new(client: Client, identity: &str) -> Self {
        let reporter = Reporter { controller: REPORTER.into(), instance: Some(identity.to_owned()) };
        Self { recorder: Recorder::new(client.clone(), reporter), client, identity: identity.to_owned() }
    }

    /// A child of `owner` was created or changed by an apply. The child is the event's
    /// `related` object.
    ///
    /// Written as a new event each time, not through kube's `Recorder`: a real change
    /// happens once, so there is no series to fold it into, and the Recorder's cache of
    /// every event it ever sent was the largest thing in bosun's memory (9 MB of
    /// 26 MB at 1,000 WebApps).
    pub fn child(&self, owner: &ObjectReference, change: ChildChange, child: ObjectReference) {
        let (reason, action) = match change {
            ChildChange::Created => ("Created", "Create"),
            ChildChange::Updated => ("Updated", "Update"),
            ChildChange::Unchanged => return,
        };
        let note = format!(
            "{reason} {} {}",
            child.kind.as_deref().unwrap_or_default(),
            child.name.as_deref().unwrap_or_default()
        );
        self.normal(owner, reason, action, note, Some(child));
    }

    /// A child of `owner` that is no longer wanted was deleted.
    pub fn deleted(&self, owner: &ObjectReference, child: ObjectReference) {
        let note = format!(
            "Deleted {} {}",
            child.kind.as_deref().unwrap_or_default(),
            child.name.as_deref().unwrap_or_default()
        );
        self.normal(owner, "Deleted", "Delete", note, Some(child));
    }

    /// Workloads that consume a child of `owner` were restarted to pick up its new
    /// data: one event for the whole rollout, naming them (`Kind/name`).
    pub fn rolled_out(&self, owner: &ObjectReference, workloads: &[String]) {
        if workloads.is_empty() {
            return;
        }
        let note = format!("RolledOut {} workload(s): {}", workloads.len(), workloads.join(", "));
        self.normal(owner, "RolledOut", "Rollout", note.chars().take(1000).collect(), None);
    }

    /// Publish a Normal event in the background, as a new event.
    fn normal(
        &self,
        owner: &ObjectReference,
        reason: &'static str,
        action: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        let now = jiff::Timestamp::now();
        let namespace = owner.namespace.clone().unwrap_or_else(|| "default".into());
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", owner.name.as_deref().unwrap_or(REPORTER), now.as_nanosecond())),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            action: Some(action.into()),
            reason: Some(reason.into()),
            note: Some(note),
            event_time: Some(MicroTime(now)),
            regarding: Some(owner.clone()),
            related,
            reporting_controller: Some(REPORTER.into()),
            reporting_instance: Some(self.identity.clone()),
            type_: Some("Normal".into()),
            ..K8sEvent::default()
        };
        let api = Api::<K8sEvent>::namespaced(self.client.clone(), &namespace);
        tokio::spawn(async move {
            if let Err(err) = api.create(&PostParams::default(), &event).await {
                debug!(%err, reason, "could not publish event");
            }
        });
    }

    /// A database's primary changed: `reason` as a Warning (an instance was lost) or
    /// a Normal event; `related` is the new primary's pod.
    pub fn primary_changed(
        &self,
        owner: &ObjectReference,
        related: ObjectReference,
        (reason, warning): (&'static str, bool),
        note: String,
    ) {
        if warning {
            self.publish(owner, Some(related), reason, note);
        } else {
            self.normal(owner, reason, "Promote", note, Some(related));
        }
    }

    /// An instance of `owner` (its pod, `related`) was restarted by a rolling change.
    pub fn instance_restarted(&self, owner: &ObjectReference, related: ObjectReference, why: &str) {
        self.normal(owner, "Restarted", "Restart", format!("restarted: {why}"), Some(related));
    }

    /// An instance of `owner` (its pod, `related`) whose data was on a lost node was
    /// replaced, as the user asked.
    pub fn instance_replaced(&self, owner: &ObjectReference, related: ObjectReference, note: String) {
        self.normal(owner, "Replaced", "Replace", note, Some(related));
    }

    /// Something about an instance of `owner` (its pod, `related`: the same reason
    /// about another instance is its own event) needs the user: its data on a lost
    /// node, a replacement refused.
    pub fn instance_warning(&self, owner: &ObjectReference, related: ObjectReference, reason: &str, note: String) {
        self.publish(owner, Some(related), reason, note);
    }

    /// A standby of `owner` (its pod, `related`) that could not follow the primary was
    /// restarted to rewind its data.
    pub fn instance_rewound(&self, owner: &ObjectReference, related: ObjectReference, note: String) {
        self.publish(owner, Some(related), "Rewinding", note);
    }

    /// A major upgrade of `owner` reached a step: a Warning when it failed.
    pub fn upgrade_step(&self, owner: &ObjectReference, reason: &'static str, warning: bool, note: String) {
        if warning {
            self.warn(owner, reason, note);
        } else {
            self.normal(owner, reason, "Upgrade", note, None);
        }
    }

    /// bosun stopped waiting for a step of `owner`'s deletion and removed its finalizer
    /// (`reason`, e.g. `DeletionTimedOut`): the garbage collector deletes what is left.
    pub fn deletion_given_up(&self, owner: &ObjectReference, reason: &str, note: String) {
        self.warn(owner, reason, note);
    }

    /// Something about `owner` needs the user soon (`reason`, e.g. a certificate that
    /// expires): repeats fold into one series.
    pub fn warning(&self, owner: &ObjectReference, reason: &str, note: String) {
        self.warn(owner, reason, note);
    }

    /// The spec of `owner` cannot be served; `reason` is the one on its Ready condition.
    pub fn refused(&self, owner: &ObjectReference, reason: &str, message: &str) {
        self.warn(owner, reason, message.to_owned());
    }

    /// A Warning when the condition `type_` of `owner` has newly become False with one
    /// of `reasons` (a run that failed or cannot start): once per new failure, as the
    /// status is written once per change. `related`: the Job or pod it is about, so
    /// that a failure of another run or pod is its own event, not a repeat of the first
    /// (events of one reason about one object are counted as one series, with the
    /// first note).
    pub fn condition_failed(
        &self,
        owner: &ObjectReference,
        related: Option<ObjectReference>,
        type_: &str,
        reasons: &[&str],
        previous: &[Condition],
        next: &[Condition],
    ) {
        let Some(now) = next.iter().find(|c| c.type_ == type_ && c.status == "False") else { return };
        if !reasons.contains(&now.reason.as_str()) {
            return;
        }
        let before = previous.iter().find(|c| c.type_ == type_);
        if before.is_some_and(|b| b.status == now.status && b.reason == now.reason && b.message == now.message) {
            return;
        }
        self.publish(owner, related, &now.reason, now.message.clone());
    }

    /// A reconcile of `owner` failed.
    pub fn failed(&self, owner: &ObjectReference, err: &Error) {
        self.warn(owner, err.category(), err.user_message());
    }

    /// Publish a Warning in the background: a reconcile never waits for its events.
    fn warn(&self, owner: &ObjectReference, reason: &str, note: String) {
        self.publish(owner, None, reason, note);
    }

    fn publish(&self, owner: &ObjectReference, secondary: Option<ObjectReference>, reason: &str, note: String) {
        // events.k8s.io caps the note at 1 KiB.
        let note: String = note.chars().take(1000).collect();
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary,
        };
        let (recorder, owner, reason) = (self.recorder.clone(), owner.clone(), reason.to_owned());
        tokio::spawn(async move {
            if let Err(err) = recorder.publish(&event, &owner).await {
                debug!(%err, reason, "could not publish event");
            }
        });
    }
}

/// The `reportingController` of bosun's events.
const REPORTER: &str = "bosun";
