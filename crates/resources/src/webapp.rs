//! WebApp → Deployment + Service, and Deployment → WebApp status.
//!
//! ```text
//!  WebApp ──desired_deployment──▶ Deployment ─┐
//!         └─desired_service─────▶ Service     │ (applied)
//!  WebApp + applied Deployment ──status──▶ WebAppStatus
//! ```

use crate::slim::SlimDeployment;
use std::collections::BTreeMap;

use bosun_api::conditions::{reasons, types};
use bosun_api::webapp::{Phase, WebAppKind, WebAppStatus};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::conditions::{self, Desired, Refused};
use crate::meta::{child_meta, standard_labels};

/// `app.kubernetes.io/name` of WebApp children.
pub const APP_NAME: &str = "webapp";
/// The one container of a WebApp's pods.
pub const CONTAINER_NAME: &str = "app";

/// Labels selecting a WebApp's pods: `app: <name>` as the spec requires. The selector of
/// a Deployment is immutable, so it holds only this one stable label.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_owned(), name.to_owned())])
}

fn labels(name: &str) -> BTreeMap<String, String> {
    let mut labels = standard_labels(APP_NAME, name);
    labels.extend(selector_labels(name));
    labels
}

/// The Deployment a WebApp should have.
pub fn desired_deployment<K: WebAppKind>(webapp: &K) -> Deployment {
    let name = webapp.name_any();
    let settings = webapp.settings();
    let container = Container {
        name: CONTAINER_NAME.to_owned(),
        image: Some(settings.image.to_owned()),
        ports: Some(vec![ContainerPort {
            container_port: settings.port,
            name: Some("http".to_owned()),
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        env: settings.env.map(<[_]>::to_vec),
        resources: settings.resources.cloned(),
        security_context: settings.security_context.cloned(),
        ..Container::default()
    };
    Deployment {
        metadata: child_meta(webapp, name.clone(), labels(&name)),
        spec: Some(DeploymentSpec {
            replicas: Some(settings.replicas),
            selector: LabelSelector { match_labels: Some(selector_labels(&name)), ..LabelSelector::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels(&name)), ..ObjectMeta::default() }),
                spec: Some(PodSpec { containers: vec![container], ..PodSpec::default() }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// The Service a WebApp should have: `port` → targetPort `port` on the pods.
pub fn desired_service<K: WebAppKind>(webapp: &K) -> Service {
    let name = webapp.name_any();
    let port = webapp.settings().port;
    Service {
        metadata: child_meta(webapp, name.clone(), labels(&name)),
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(&name)),
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                port,
                target_port: Some(IntOrString::Int(port)),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// What the world looks like to the status computation.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// The Deployment as the apiserver returned it from the last apply (`None` if it
    /// could not be applied).
    pub deployment: Option<&'a SlimDeployment>,
    /// Why the spec cannot be served: the apiserver refused a child, or a child's
    /// name is someone else's.
    pub refused: Option<Refused<'a>>,
}

/// The status a WebApp should have, given what was applied.
///
/// `phase` is `Pending` before the Deployment exists, `Deploying` from its creation
/// while it rolls out, `Running` once every desired replica is updated,
/// ready and available and no old pods remain, and `Failed` when the spec is invalid
/// or the rollout exceeded its progress deadline.
pub fn status<K: WebAppKind>(webapp: &K, observed: Observed<'_>, now: Timestamp) -> WebAppStatus {
    let desired = webapp.settings().replicas;
    let generation = webapp.meta().generation;
    let counts = observed.deployment.and_then(|d| d.status.as_ref());
    let available = counts.and_then(|s| s.available_replicas).unwrap_or(0);
    let ready = counts.and_then(|s| s.ready_replicas).unwrap_or(0);

    let (phase, conds) = match (observed.refused, observed.deployment) {
        (Some(refused), _) => (Phase::Failed, failed(refused.reason, refused.message)),
        (None, Some(deployment)) => rollout(deployment, desired),
        (None, None) => (Phase::Pending, pending("the Deployment has not been created yet")),
    };
    let previous = webapp.current_status().map(|s| s.conditions.as_slice()).unwrap_or_default();
    WebAppStatus {
        observed_generation: generation,
        available_replicas: available,
        ready_replicas: ready,
        phase: Some(phase),
        conditions: conditions::merge(previous, conds, generation, now),
    }
}

fn rollout(deployment: &SlimDeployment, desired: i32) -> (Phase, Vec<Desired>) {
    let status = deployment.status.clone().unwrap_or_default();
    let ready = status.ready_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let total = status.replicas.unwrap_or(0);
    // The message names only what the status counts too (and old pods, when there are
    // any): the Deployment controller's intermediate steps change nothing the WebApp
    // shows, so they cost no status write.
    let old = if total > desired { format!(", {} old pods still running", total - desired) } else { String::new() };
    let message = format!("rolling out: {ready}/{desired} replicas ready, {available} available{old}");
    let observed = status.observed_generation.is_some_and(|g| Some(g) >= deployment.metadata.generation);
    if !observed {
        // Just created or changed: the Deployment controller has not caught up yet.
        return (Phase::Deploying, progressing(message));
    }
    let deadline_exceeded = status.conditions.iter().flatten().any(|c| {
        c.type_ == "Progressing" && c.status == "False" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    if deadline_exceeded {
        return (Phase::Failed, failed(reasons::ROLLOUT_FAILED, "the Deployment exceeded its progress deadline"));
    }
    let updated = status.updated_replicas.unwrap_or(0);
    if updated == desired && ready == desired && available == desired && total == desired {
        let msg = format!("{available}/{desired} replicas available");
        return (
            Phase::Running,
            vec![
                Desired::new(types::READY, true, reasons::AVAILABLE, msg),
                Desired::new(types::PROGRESSING, false, reasons::ROLLOUT_COMPLETE, "the rollout is complete"),
                Desired::new(types::DEGRADED, false, reasons::AS_EXPECTED, ""),
            ],
        );
    }
    (Phase::Deploying, progressing(message))
}

fn progressing(message: String) -> Vec<Desired> {
    vec![
        Desired::new(types::READY, false, reasons::ROLLING_OUT, message.clone()),
        Desired::new(types::PROGRESSING, true, reasons::ROLLING_OUT, message),
        Desired::new(types::DEGRADED, false, reasons::AS_EXPECTED, ""),
    ]
}

fn pending(message: &str) -> Vec<Desired> {
    vec![
        Desired::new(types::READY, false, reasons::PENDING, message),
        Desired::new(types::PROGRESSING, true, reasons::PENDING, message),
        Desired::new(types::DEGRADED, false, reasons::AS_EXPECTED, ""),
    ]
}

fn failed(reason: &'static str, message: &str) -> Vec<Desired> {
    vec![
        Desired::new(types::READY, false, reason, message),
        Desired::new(types::PROGRESSING, false, reason, message),
        Desired::new(types::DEGRADED, true, reason, message),
    ]
}

#[cfg(test)]
mod tests {
    use bosun_api::webapp::{apps_v1, example_v1};
    use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};
    use k8s_openapi::api::core::v1::EnvVar;

    use super::*;

    fn webapp(replicas: i32) -> apps_v1::WebApp {
        let mut w: apps_v1::WebApp = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.example.com/v1",
            "kind": "WebApp",
            "metadata": {"name": "demo-app", "namespace": "shop", "uid": "1234", "generation": 2},
            "spec": {"image": "nginx:1.25", "replicas": replicas, "port": 80,
                     "env": [{"name": "MODE", "value": "prod"}]}
        }))
        .unwrap();
        w.status = None;
        w
    }

    fn deployment(
        generation: i64,
        observed: i64,
        updated: i32,
        ready: i32,
        available: i32,
        total: i32,
    ) -> SlimDeployment {
        SlimDeployment {
            metadata: ObjectMeta { generation: Some(generation), ..ObjectMeta::default() },
            status: Some(DeploymentStatus {
                observed_generation: Some(observed),
                updated_replicas: Some(updated),
                ready_replicas: Some(ready),
                available_replicas: Some(available),
                replicas: Some(total),
                ..DeploymentStatus::default()
            }),
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    fn condition<'a>(s: &'a WebAppStatus, t: &str) -> &'a bosun_api::conditions::Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn deployment_runs_the_image_with_the_spec() {
        let d = desired_deployment(&webapp(3));
        assert_eq!(d.metadata.name.as_deref(), Some("demo-app"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("shop"));
        let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("WebApp", "1234", Some(true)));
        let spec = d.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.selector.match_labels, Some(selector_labels("demo-app")));
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(pod_labels["app"], "demo-app");
        assert_eq!(pod_labels["app.kubernetes.io/managed-by"], "bosun");
        assert_eq!(pod_labels["app.kubernetes.io/instance"], "demo-app");
        let c = &spec.template.spec.unwrap().containers[0];
        assert_eq!(c.name, "app");
        assert_eq!(c.image.as_deref(), Some("nginx:1.25"));
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 80);
        assert_eq!(
            c.env.as_ref().unwrap(),
            &vec![EnvVar { name: "MODE".into(), value: Some("prod".into()), value_from: None }]
        );
    }

    #[test]
    fn service_targets_the_port_on_the_pods() {
        let s = desired_service(&webapp(1));
        let spec = s.spec.unwrap();
        assert_eq!(spec.selector, Some(selector_labels("demo-app")));
        let port = &spec.ports.unwrap()[0];
        assert_eq!(port.port, 80);
        assert_eq!(port.target_port, Some(IntOrString::Int(80)));
        assert_eq!(s.metadata.labels.unwrap()["app.kubernetes.io/name"], "webapp");
    }

    #[test]
    fn example_group_defaults_port_8080_and_apps_group_80() {
        let e: example_v1::WebApp = serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "WebApp", "metadata": {"name": "w"},
            "spec": {"image": "nginx", "replicas": 2}
        }))
        .unwrap();
        assert_eq!(e.settings().port, 8080);
        let a: apps_v1::WebApp = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": "w"},
            "spec": {"image": "nginx"}
        }))
        .unwrap();
        assert_eq!((a.settings().port, a.settings().replicas), (80, 1));
    }

    #[test]
    fn render_without_uid_has_no_owner_reference() {
        let mut w = webapp(1);
        w.metadata.uid = None;
        assert!(desired_deployment(&w).metadata.owner_references.is_none());
    }

    #[test]
    fn pending_before_the_deployment_exists_then_deploying() {
        let w = webapp(3);
        let s = status(&w, Observed { deployment: None, refused: None }, now());
        assert_eq!(s.phase, Some(Phase::Pending));
        let mut d = deployment(1, 0, 0, 0, 0, 0);
        d.status = None;
        let created = status(&w, Observed { deployment: Some(&d), refused: None }, now());
        assert_eq!(created.phase, Some(Phase::Deploying));
        assert_eq!(condition(&created, "Ready").status, "False");
        // The Deployment controller's first steps (observed, pods created, none ready)
        // change nothing a WebApp shows: no status write.
        let observed = deployment(1, 1, 3, 0, 0, 3);
        let mut w2 = webapp(3);
        w2.status = Some(created.clone());
        let s = status(&w2, Observed { deployment: Some(&observed), refused: None }, now());
        assert_eq!(s, created);
    }

    #[test]
    fn a_change_not_yet_observed_is_deploying_not_pending() {
        // Scaling 3 → 5: the Deployment's generation moved, its controller has not caught up.
        let d = deployment(2, 1, 3, 3, 3, 3);
        let s = status(&webapp(5), Observed { deployment: Some(&d), refused: None }, now());
        assert_eq!(s.phase, Some(Phase::Deploying));
        assert_eq!(condition(&s, "Ready").status, "False");
    }

    #[test]
    fn deploying_while_replicas_come_up() {
        let d = deployment(1, 1, 3, 1, 1, 3);
        let s = status(&webapp(3), Observed { deployment: Some(&d), refused: None }, now());
        assert_eq!(s.phase, Some(Phase::Deploying));
        assert_eq!((s.ready_replicas, s.available_replicas), (1, 1));
        assert_eq!(condition(&s, "Progressing").status, "True");
        assert_eq!(condition(&s, "Ready").reason, "RollingOut");
    }

    #[test]
    fn old_pods_still_running_is_not_ready() {
        // Surge during a rollout: 3 ready and updated, but a 4th old pod remains.
        let d = deployment(2, 2, 3, 3, 3, 4);
        let s = status(&webapp(3), Observed { deployment: Some(&d), refused: None }, now());
        assert_eq!(s.phase, Some(Phase::Deploying));
    }

    #[test]
    fn running_when_all_replicas_are_ready() {
        let d = deployment(1, 1, 3, 3, 3, 3);
        let w = webapp(3);
        let s = status(&w, Observed { deployment: Some(&d), refused: None }, now());
        assert_eq!(s.phase, Some(Phase::Running));
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(condition(&s, "Ready").status, "True");
        assert_eq!(condition(&s, "Progressing").status, "False");
        assert_eq!(condition(&s, "Degraded").status, "False");
    }

    #[test]
    fn recomputing_an_unchanged_world_gives_an_identical_status() {
        let d = deployment(1, 1, 3, 3, 3, 3);
        let mut w = webapp(3);
        let first = status(&w, Observed { deployment: Some(&d), refused: None }, now());
        w.status = Some(first.clone());
        let later = now() + jiff::SignedDuration::from_secs(600);
        assert_eq!(status(&w, Observed { deployment: Some(&d), refused: None }, later), first);
    }

    #[test]
    fn invalid_spec_fails_and_keeps_counts_of_what_still_runs() {
        let d = deployment(1, 1, 3, 3, 3, 3);
        let s = status(
            &webapp(3),
            Observed { deployment: Some(&d), refused: Some(Refused::invalid_spec("bad env")) },
            now(),
        );
        assert_eq!(s.phase, Some(Phase::Failed));
        assert_eq!(s.available_replicas, 3);
        let ready = condition(&s, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str(), ready.message.as_str()),
            ("False", "InvalidSpec", "bad env")
        );
        assert_eq!(condition(&s, "Degraded").status, "True");
    }

    #[test]
    fn progress_deadline_exceeded_is_failed() {
        let mut d = deployment(1, 1, 1, 0, 0, 3);
        d.status.as_mut().unwrap().conditions = Some(vec![DeploymentCondition {
            type_: "Progressing".into(),
            status: "False".into(),
            reason: Some("ProgressDeadlineExceeded".into()),
            ..DeploymentCondition::default()
        }]);
        let s = status(&webapp(3), Observed { deployment: Some(&d), refused: None }, now());
        assert_eq!(s.phase, Some(Phase::Failed));
        assert_eq!(condition(&s, "Degraded").reason, "RolloutFailed");
    }
}
