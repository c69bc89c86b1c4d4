//! The dependency engine of stacks (AppStack, EcommercePlatform): a stack is a list
//! of components, each naming the components it starts after. One pass walks them in
//! order:
//!
//! - a component whose dependencies are all Ready in this pass — or whose children
//!   already exist — is applied, and reports its health from what it applied;
//! - any other waits, its children not created, its status saying what for.
//!
//! A component that becomes un-Ready later does not tear its dependents down: they
//! exist, so they are kept up to date and the status shows who is not Ready. Kinds
//! declare their components and build their children; the order, the waiting and the
//! summary live here once.

use std::future::Future;
use std::pin::Pin;

use bosun_api::stack::{ComponentStatus, Phase};

use crate::error::Error;

/// How a component is after this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    pub ready: bool,
    /// Why it is not ready (or a note when it is).
    pub message: Option<String>,
}

impl Health {
    pub fn ready() -> Self {
        Self { ready: true, message: None }
    }

    pub fn not_ready(message: impl Into<String>) -> Self {
        Self { ready: false, message: Some(message.into()) }
    }
}

/// Applying a component's children: its health, or an error. An error the user has to
/// fix (a name someone else holds, a child the apiserver refuses) fails the component
/// and the stack; any other is retried.
pub type Apply<'a> = Pin<Box<dyn Future<Output = Result<Health, Error>> + Send + 'a>>;

/// One component of a stack.
pub struct Component<'a> {
    pub name: &'static str,
    /// The components that must be Ready before its children are created.
    pub after: &'static [&'static str],
    /// Its children exist already: kept up to date whatever its dependencies say.
    pub started: bool,
    /// Applies its children; not polled while it waits.
    pub apply: Apply<'a>,
}

impl std::fmt::Debug for Component<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Component")
            .field("name", &self.name)
            .field("after", &self.after)
            .field("started", &self.started)
            .finish()
    }
}

/// The result of a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pass {
    pub components: Vec<ComponentStatus>,
    /// The first refusal a component met: the stack is `Failed` until it is fixed.
    pub refused: Option<(&'static str, String)>,
}

impl Pass {
    /// `Failed` on a refusal, `Running` when every component is Ready, else `Deploying`.
    pub fn phase(&self) -> Phase {
        if self.refused.is_some() {
            Phase::Failed
        } else if self.components.iter().all(|c| c.ready) {
            Phase::Running
        } else {
            Phase::Deploying
        }
    }

    /// The message of the Ready condition: the components not ready, each with why.
    pub fn summary(&self) -> String {
        let waiting: Vec<String> = self
            .components
            .iter()
            .filter(|c| !c.ready)
            .map(|c| match &c.message {
                Some(m) => format!("{}: {m}", c.name),
                None => c.name.clone(),
            })
            .collect();
        if waiting.is_empty() { "every component is Ready".to_owned() } else { waiting.join("; ") }
    }
}

/// Walk `components` in order (each after the ones it names), applying those that may
/// start. Transient errors end the pass (the reconcile is retried); refusals fail their
/// component, and its dependents wait.
pub async fn converge(components: Vec<Component<'_>>) -> Result<Pass, Error> {
    let mut statuses: Vec<ComponentStatus> = Vec::with_capacity(components.len());
    let mut refused = None;
    for component in components {
        let waiting: Vec<&str> =
            component.after.iter().copied().filter(|d| !statuses.iter().any(|s| s.name == *d && s.ready)).collect();
        let health = if !component.started && !waiting.is_empty() {
            Health::not_ready(format!("waiting for {} to be Ready", waiting.join(" and ")))
        } else {
            match component.apply.await {
                Ok(health) => health,
                Err(err) if err.is_invalid_spec() || matches!(err, Error::NameConflict(_)) => {
                    let message = err.user_message();
                    refused.get_or_insert((err.category(), message.clone()));
                    Health::not_ready(message)
                }
                Err(err) => return Err(err),
            }
        };
        statuses.push(ComponentStatus {
            name: component.name.to_owned(),
            ready: health.ready,
            message: health.message,
        });
    }
    Ok(Pass { components: statuses, refused })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A component that records that it ran and reports `ready`.
    fn component<'a>(
        name: &'static str,
        after: &'static [&'static str],
        started: bool,
        ready: bool,
        ran: &'a Mutex<Vec<&'static str>>,
    ) -> Component<'a> {
        Component {
            name,
            after,
            started,
            apply: Box::pin(async move {
                ran.lock().unwrap().push(name);
                Ok(if ready { Health::ready() } else { Health::not_ready("starting") })
            }),
        }
    }

    fn stack<'a>(db: (bool, bool), backend: (bool, bool), ran: &'a Mutex<Vec<&'static str>>) -> Vec<Component<'a>> {
        vec![
            component("database", &[], db.0, db.1, ran),
            component("cache", &["database"], false, true, ran),
            component("backend", &["database"], backend.0, backend.1, ran),
            component("frontend", &["backend"], false, true, ran),
        ]
    }

    #[tokio::test]
    async fn nothing_starts_before_what_it_depends_on_is_ready() {
        let ran = Mutex::new(vec![]);
        let pass = converge(stack((false, false), (false, true), &ran)).await.unwrap();
        assert_eq!(*ran.lock().unwrap(), vec!["database"]);
        assert_eq!(pass.phase(), Phase::Deploying);
        assert_eq!(pass.components[2].message.as_deref(), Some("waiting for database to be Ready"));
        assert_eq!(
            pass.summary(),
            "database: starting; cache: waiting for database to be Ready; backend: waiting for database to be Ready; \
             frontend: waiting for backend to be Ready"
        );
    }

    #[tokio::test]
    async fn each_ready_component_lets_the_next_start_in_the_same_pass() {
        let ran = Mutex::new(vec![]);
        let pass = converge(stack((false, true), (false, false), &ran)).await.unwrap();
        assert_eq!(*ran.lock().unwrap(), vec!["database", "cache", "backend"]);
        assert!(!pass.components[3].ready);

        let ran = Mutex::new(vec![]);
        let pass = converge(stack((true, true), (true, true), &ran)).await.unwrap();
        assert_eq!(*ran.lock().unwrap(), vec!["database", "cache", "backend", "frontend"]);
        assert_eq!(pass.phase(), Phase::Running);
        assert_eq!(pass.summary(), "every component is Ready");
    }

    #[tokio::test]
    async fn a_dependency_that_stops_being_ready_does_not_stop_its_started_dependents() {
        let ran = Mutex::new(vec![]);
        // The database went un-Ready; the backend exists, the frontend does not yet.
        let pass = converge(stack((true, false), (true, true), &ran)).await.unwrap();
        assert_eq!(*ran.lock().unwrap(), vec!["database", "backend", "frontend"]);
        assert_eq!(pass.phase(), Phase::Deploying);
        let ready: Vec<bool> = pass.components.iter().map(|c| c.ready).collect();
        assert_eq!(ready, vec![false, false, true, true]);
    }

    #[tokio::test]
    async fn a_refused_component_fails_the_stack_and_its_dependents_wait() {
        let ran = Arc::new(Mutex::new(vec![]));
        let components = vec![
            Component {
                name: "database",
                after: &[],
                started: false,
                apply: Box::pin(async { Err(Error::NameConflict("PostgreSQL shop-db is not bosun's".to_owned())) }),
            },
            component("backend", &["database"], false, true, &ran),
        ];
        let pass = converge(components).await.unwrap();
        assert!(ran.lock().unwrap().is_empty());
        assert_eq!(pass.phase(), Phase::Failed);
        assert_eq!(pass.refused.as_ref().map(|r| r.0), Some("NameConflict"));
        assert_eq!(pass.components[0].message.as_deref(), Some("PostgreSQL shop-db is not bosun's"));
    }
}
