//! Kubernetes Events (events.k8s.io) on the custom resource, for what users need to
//! see: children created or changed, and reconciles that failed.
//!
//! Reasons are fixed CamelCase words to filter on (`kubectl get events
//! --field-selector reason=InvalidSpec`): `Created`, `Updated`, and for failures the
//! error's bounded category (`InvalidSpec`, `Conflict`, `ApiUnavailable`, …).
//! Publishing an event never fails or delays a reconcile; a failure to publish is logged.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
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
        let reporter = Reporter { controller: "bosun".into(), instance: Some(identity.to_owned()) };
        Self { recorder: Recorder::new(client, reporter) }
    }

    /// A child of `owner` was created or changed by an apply. The child is the event's
    /// `related` object (the recorder folds events that differ only in their note).
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
        self.publish(owner, EventType::Normal, reason, action, note, Some(child))
    }

    /// The spec of `owner` cannot be served; `reason` is the one on its Ready condition.
    pub fn refused(&self, owner: &ObjectReference, reason: &str, message: &str) {
        self.publish(owner, EventType::Warning, reason, "Reconcile", message.to_owned(), None);
    }

    /// A reconcile of `owner` failed.
    pub fn failed(&self, owner: &ObjectReference, err: &Error) {
        self.publish(owner, EventType::Warning, err.category(), "Reconcile", err.user_message(), None);
    }

    /// Publish in the background: a reconcile never waits for its events (its worker
    /// would otherwise sit out an event write per child it created).
    fn publish(
        &self,
        owner: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        // events.k8s.io caps the note at 1 KiB.
        let note: String = note.chars().take(1000).collect();
        let event = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: related };
        let (recorder, owner, reason) = (self.recorder.clone(), owner.clone(), reason.to_owned());
        tokio::spawn(async move {
            if let Err(err) = recorder.publish(&event, &owner).await {
                debug!(%err, reason, "could not publish event");
            }
        });
    }
}
