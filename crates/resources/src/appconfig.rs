//! AppConfig → rendered data → ConfigMap; consumers → which to roll, and when; status.
//!
//! ```text
//!  AppConfig ──render──▶ data ──desired_config_map──▶ ConfigMap <application>-config
//!                  └──▶ TemplateError (nothing applied, nobody rolled)
//!  data ──hash──▶ sha256 ─┐
//!  workloads ──references──▶ consumers (annotation, created) ─┴─plan──▶ roll now / wait / nothing
//! ```
//!
//! Whether a consumer is rolled is decided from what is stored, never from memory: its
//! pod-template annotation `config.example.com/<application>-config-hash` against the
//! hash of the data, and, for a consumer without the annotation, whether it existed
//! when the data last changed. So a restart of bosun or a new leader rolls nothing.
//! When is decided from the status: a change waits `settle` (so changes in quick
//! succession roll once, with the last data) and at least `min_interval` after the
//! previous rollout (so a flapping configuration cannot restart a workload more often).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bosun_api::appconfig::{AppConfig, AppConfigStatus};
use bosun_api::conditions::{reasons, types};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use crate::conditions::{self, Desired};
use crate::meta::{child_meta, standard_labels};

/// `app.kubernetes.io/name` of AppConfig children.
pub const APP_NAME: &str = "appconfig";

/// The ConfigMap an AppConfig renders into.
pub fn config_map_name(application: &str) -> String {
    format!("{application}-config")
}

/// The pod-template annotation that carries the hash of the data a consumer runs with.
pub fn annotation_key(config_map: &str) -> String {
    format!("config.example.com/{config_map}-hash")
}

/// The field manager that writes only that annotation, one per ConfigMap: an apply
/// under a manager removes the fields that manager set before and left out, so two
/// AppConfigs rolling one workload must not share one.
pub fn rollout_manager(config_map: &str) -> String {
    format!("bosun-rollout.{config_map}")
}

/// Why an AppConfig is not (or could not be) published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A value does not render; the message names the key.
    Template(String),
    /// Another AppConfig renders into the same ConfigMap.
    Conflict(String),
    /// The apiserver refused the ConfigMap.
    InvalidSpec(String),
}

impl Refusal {
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Template(_) => reasons::TEMPLATE_ERROR,
            Refusal::Conflict(_) => reasons::CONFLICT,
            Refusal::InvalidSpec(_) => reasons::INVALID_SPEC,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::Template(m) | Refusal::Conflict(m) | Refusal::InvalidSpec(m) => m.clone(),
        }
    }
}

/// Render every value with `application`, `environment`, `namespace` and `name`;
/// an unknown variable is an error. The first failing key (in key order) is named.
pub fn render(app: &AppConfig) -> Result<BTreeMap<String, String>, Refusal> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    let vars = minijinja::context! {
        application => app.spec.application,
        environment => app.spec.environment.as_str(),
        namespace => app.namespace().unwrap_or_default(),
        name => app.name_any(),
    };
    app.spec
        .config
        .iter()
        .map(|(key, template)| {
            env.render_str(template, &vars).map(|v| (key.clone(), v)).map_err(|e| {
                let detail = e.detail().map(|d| format!(": {d}")).unwrap_or_default();
                Refusal::Template(format!("spec.config.{key}: {}{detail}", e.kind()))
            })
        })
        .collect()
}

/// sha256 (hex) of the rendered data: keys and values, length-prefixed, in key order.
pub fn hash(data: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (k, v) in data {
        for part in [k, v] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
    }
    hex::encode(h.finalize())
}

/// The ConfigMap an AppConfig publishes `data` in.
pub fn desired_config_map(app: &AppConfig, data: BTreeMap<String, String>) -> ConfigMap {
    let name = config_map_name(&app.spec.application);
    ConfigMap {
        metadata: child_meta(app, name, standard_labels(APP_NAME, &app.name_any())),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The ConfigMaps a pod spec reads, in any container (init and ephemeral included):
/// `envFrom`, `env[].valueFrom.configMapKeyRef`, `configMap` and `projected` volumes.
pub fn references(spec: &PodSpec) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
    for c in containers {
        for from in c.env_from.iter().flatten() {
            names.extend(from.config_map_ref.as_ref().map(|r| r.name.clone()));
        }
        for var in c.env.iter().flatten() {
            names.extend(var.value_from.as_ref().and_then(|f| f.config_map_key_ref.as_ref()).map(|r| r.name.clone()));
        }
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        for from in c.env_from.iter().flatten() {
            names.extend(from.config_map_ref.as_ref().map(|r| r.name.clone()));
        }
        for var in c.env.iter().flatten() {
            names.extend(var.value_from.as_ref().and_then(|f| f.config_map_key_ref.as_ref()).map(|r| r.name.clone()));
        }
    }
    for v in spec.volumes.iter().flatten() {
        names.extend(v.config_map.as_ref().map(|c| c.name.clone()));
        let projected = v.projected.as_ref().and_then(|p| p.sources.as_ref());
        names.extend(projected.into_iter().flatten().filter_map(|s| s.config_map.as_ref().map(|c| c.name.clone())));
    }
    names
}

/// A workload that consumes the ConfigMap, as the decision needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    /// `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: &'static str,
    pub name: String,
    pub uid: String,
    pub created: Option<Timestamp>,
    /// The value of its hash annotation, if it has one.
    pub hash: Option<String>,
}

impl Consumer {
    /// `Kind/name`, as `status.rolledOut` lists it.
    pub fn id(&self) -> String {
        format!("{}/{}", self.kind, self.name)
    }

    /// Whether it runs older data than `hash`: its annotation says another hash, or it
    /// has none and existed before the data last changed (one made since started with
    /// the current data; before the first change there was nothing older to run).
    pub fn stale(&self, hash: &str, changed: Option<&Time>) -> bool {
        match (&self.hash, changed) {
            (Some(h), _) => h != hash,
            // Both times have whole seconds: made within the second of the change may
            // have missed it, so it counts as older (one needless rollout rather than
            // one missed).
            (None, Some(changed)) => self.created.is_some_and(|c| c <= changed.0),
            (None, None) => false,
        }
    }
}

/// How rollouts are paced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// How long a change waits for more before consumers roll.
    pub settle: Duration,
    /// The least time between two rollouts of one AppConfig's consumers.
    pub min_interval: Duration,
}

/// What to do with the consumers now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan<'a> {
    /// Every consumer runs the current data.
    Nothing,
    /// Roll these now.
    Roll(Vec<&'a Consumer>),
    /// Stale consumers wait this long (settle time or minimum interval).
    Wait(Duration),
}

/// The plan for `consumers` given the data's `hash` and the status as stored.
pub fn plan<'a>(
    status: &AppConfigStatus,
    consumers: &'a [Consumer],
    hash: &str,
    changed: Option<&Time>,
    pace: Pace,
    now: Timestamp,
) -> Plan<'a> {
    let stale: Vec<&Consumer> = consumers.iter().filter(|c| c.stale(hash, changed)).collect();
    if stale.is_empty() {
        return Plan::Nothing;
    }
    // Status times have whole seconds: count from the end of the second they name.
    let after = |t: Timestamp, d: Duration| t + jiff::SignedDuration::try_from(d).unwrap_or_default();
    let end_of = |t: &Time| after(t.0, Duration::from_secs(1));
    let since = status.rollout_pending_since.as_ref().map(end_of).unwrap_or(now);
    let earliest = [
        Some(after(since, pace.settle)),
        status.last_rollout_time.as_ref().map(|t| after(end_of(t), pace.min_interval)),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(now);
    if earliest > now {
        let wait = earliest.duration_since(now).unsigned_abs();
        Plan::Wait(wait.max(Duration::from_millis(50)))
    } else {
        Plan::Roll(stale)
    }
}

/// When the data last changed, given its `hash` now: now, if the status holds another
/// hash; else as the status says (the first rendering is not a change).
pub fn changed_time(status: &AppConfigStatus, hash: &str, now: Timestamp) -> Option<Time> {
    match status.config_hash.as_deref() {
        Some(h) if h != hash => Some(Time(now)),
        _ => status.config_changed_time.clone(),
    }
}

/// What the status computation sees.
#[derive(Clone, Debug, Default)]
pub struct Observed<'a> {
    /// The hash of the data published (`None`: not published).
    pub hash: Option<&'a str>,
    pub refusal: Option<&'a Refusal>,
    /// The plan made (and, for `Roll`, carried out).
    pub plan: Option<&'a Plan<'a>>,
    /// How many consumers there are.
    pub consumers: usize,
}

/// The status an AppConfig should have.
pub fn status(app: &AppConfig, observed: Observed<'_>, now: Timestamp) -> AppConfigStatus {
    let generation = app.meta().generation;
    let previous = app.status.clone().unwrap_or_default();
    let mut s = AppConfigStatus { observed_generation: generation, conditions: vec![], ..previous.clone() };
    let cm = config_map_name(&app.spec.application);
    let ready = match (observed.refusal, observed.hash) {
        (Some(r), _) => Desired::new(types::READY, false, r.reason(), r.message()),
        (None, None) => Desired::new(types::READY, false, reasons::PENDING, "the ConfigMap has not been published yet"),
        (None, Some(hash)) => {
            s.config_map_name = Some(cm.clone());
            s.config_changed_time = changed_time(&previous, hash, now);
            s.config_hash = Some(hash.to_owned());
            match observed.plan {
                Some(Plan::Roll(rolled)) => {
                    s.rolled_out = rolled.iter().map(|c| c.id()).collect();
                    s.last_rollout_time = Some(Time(now));
                    s.rollout_pending_since = None;
                    configured(&cm, observed.consumers)
                }
                Some(Plan::Wait(wait)) => {
                    s.rollout_pending_since = previous.rollout_pending_since.clone().or(Some(Time(now)));
                    Desired::new(
                        types::READY,
                        false,
                        reasons::ROLLOUT_PENDING,
                        format!(
                            "{cm} changed: consumers roll in {:.1}s (settle time, minimum interval)",
                            wait.as_secs_f64()
                        ),
                    )
                }
                Some(Plan::Nothing) | None => {
                    s.rollout_pending_since = None;
                    configured(&cm, observed.consumers)
                }
            }
        }
    };
    s.conditions = conditions::merge(&previous.conditions, vec![ready], generation, now);
    s
}

fn configured(cm: &str, consumers: usize) -> Desired {
    Desired::new(
        types::READY,
        true,
        reasons::CONFIGURED,
        format!("{cm} is published and its {consumers} consumer(s) run its current data"),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Container;
    use serde_json::json;

    use super::*;

    fn app(config: serde_json::Value) -> AppConfig {
        serde_json::from_value(json!({
            "apiVersion": "config.example.com/v1", "kind": "AppConfig",
            "metadata": {"name": "cfg", "namespace": "shop", "uid": "u", "generation": 1},
            "spec": {"application": "myapp", "environment": "staging", "config": config},
        }))
        .expect("appconfig")
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).expect("time")
    }

    #[test]
    fn values_render_with_the_four_variables() {
        let a = app(
            json!({"DB_HOST": "db.{{ environment }}.internal", "APP_ID": "{{ application }}-{{ namespace }}", "N": "{{ name }}"}),
        );
        let data = render(&a).expect("renders");
        assert_eq!(data["DB_HOST"], "db.staging.internal");
        assert_eq!(data["APP_ID"], "myapp-shop");
        assert_eq!(data["N"], "cfg");
        let cm = desired_config_map(&a, data);
        assert_eq!(cm.metadata.name.as_deref(), Some("myapp-config"));
    }

    #[test]
    fn template_errors_name_the_key() {
        for (template, what) in [("{{ nosuchvar }}", "undefined"), ("{{ unclosed", "syntax")] {
            let Err(Refusal::Template(message)) = render(&app(json!({"OK": "x", "BAD": template}))) else {
                panic!("{template} rendered")
            };
            assert!(message.starts_with("spec.config.BAD:"), "{message}");
            assert!(message.to_lowercase().contains(what), "{message}");
        }
    }

    #[test]
    fn the_hash_follows_the_data_only() {
        let a: BTreeMap<String, String> = [("A".into(), "1".into()), ("B".into(), "2".into())].into();
        let b: BTreeMap<String, String> = [("A".into(), "12".into()), ("B".into(), "".into())].into();
        assert_eq!(hash(&a), hash(&a.clone()));
        assert_ne!(hash(&a), hash(&b), "length-prefixed: no two data alike");
        assert_eq!(hash(&a).len(), 64);
    }

    #[test]
    fn every_way_of_consuming_a_config_map_is_found() {
        let spec: PodSpec = serde_json::from_value(json!({
            "initContainers": [{"name": "i", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "by-init-env", "key": "k"}}}]}],
            "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "by-env-from"}}, {"secretRef": {"name": "not-a-cm"}}]}],
            "volumes": [
                {"name": "v", "configMap": {"name": "by-volume"}},
                {"name": "p", "projected": {"sources": [{"configMap": {"name": "by-projected"}}, {"secret": {"name": "s"}}]}},
            ],
        }))
        .expect("pod spec");
        let found: Vec<_> = references(&spec).into_iter().collect();
        assert_eq!(found, ["by-env-from", "by-init-env", "by-projected", "by-volume"]);
        assert!(references(&PodSpec { containers: vec![Container::default()], ..Default::default() }).is_empty());
    }

    fn consumer(hash: Option<&str>, created: i64) -> Consumer {
        Consumer {
            kind: "Deployment",
            name: "web".into(),
            uid: "w".into(),
            created: Some(at(created)),
            hash: hash.map(Into::into),
        }
    }

    #[test]
    fn staleness_is_decided_from_what_is_stored() {
        assert!(!consumer(Some("h1"), 0).stale("h1", None));
        assert!(consumer(Some("h0"), 0).stale("h1", None));
        // No annotation: stale only if it existed when the data last changed.
        assert!(!consumer(None, 0).stale("h1", None), "the first rendering rolls nothing");
        assert!(consumer(None, 10).stale("h1", Some(&Time(at(20)))));
        assert!(!consumer(None, 30).stale("h1", Some(&Time(at(20)))), "made since: it runs the current data");
        assert!(consumer(None, 20).stale("h1", Some(&Time(at(20)))), "made within the second of the change");
    }

    const PACE: Pace = Pace { settle: Duration::from_secs(2), min_interval: Duration::from_secs(10) };

    #[test]
    fn changes_settle_and_rollouts_keep_their_distance() {
        let consumers = [consumer(Some("old"), 0)];
        let mut s = AppConfigStatus::default();
        assert_eq!(plan(&s, &consumers, "old", None, PACE, at(100)), Plan::Nothing);
        // A change waits for the settle time from when it was first seen…
        assert_eq!(plan(&s, &consumers, "new", None, PACE, at(100)), Plan::Wait(Duration::from_secs(2)));
        // (Status times have whole seconds: the wait counts from the end of that second.)
        s.rollout_pending_since = Some(Time(at(100)));
        assert_eq!(plan(&s, &consumers, "newer", None, PACE, at(101)), Plan::Wait(Duration::from_secs(2)));
        // …then rolls once, with whatever is current.
        assert!(matches!(plan(&s, &consumers, "newest", None, PACE, at(103)), Plan::Roll(r) if r.len() == 1));
        // The next change waits for the minimum interval after that rollout.
        s.rollout_pending_since = Some(Time(at(103)));
        s.last_rollout_time = Some(Time(at(103)));
        assert_eq!(plan(&s, &consumers, "again", None, PACE, at(105)), Plan::Wait(Duration::from_secs(9)));
        assert!(matches!(plan(&s, &consumers, "again", None, PACE, at(114)), Plan::Roll(_)));
    }

    #[test]
    fn status_tells_the_hash_the_rollout_and_when_data_changed() {
        let mut a = app(json!({"A": "1"}));
        let now = at(500);
        let s = status(&a, Observed { hash: Some("h1"), consumers: 2, ..Default::default() }, now);
        assert_eq!((s.config_hash.as_deref(), s.config_map_name.as_deref()), (Some("h1"), Some("myapp-config")));
        assert_eq!(s.config_changed_time, None);
        assert_eq!(s.conditions[0].status, "True");
        a.status = Some(s);
        let waiting = Plan::Wait(Duration::from_secs(2));
        let s = status(
            &a,
            Observed { hash: Some("h2"), plan: Some(&waiting), consumers: 2, ..Default::default() },
            at(600),
        );
        assert_eq!(s.config_changed_time, Some(Time(at(600))));
        assert_eq!(s.rollout_pending_since, Some(Time(at(600))));
        assert_eq!(s.conditions[0].reason, "RolloutPending");
        a.status = Some(s);
        let c = consumer(Some("h1"), 0);
        let roll = Plan::Roll(vec![&c]);
        let s =
            status(&a, Observed { hash: Some("h2"), plan: Some(&roll), consumers: 2, ..Default::default() }, at(602));
        assert_eq!(s.rolled_out, ["Deployment/web"]);
        assert_eq!((s.last_rollout_time.clone(), s.rollout_pending_since.clone()), (Some(Time(at(602))), None));
        assert_eq!(s.config_changed_time, Some(Time(at(600))), "the change time stays");
        let refused = Refusal::Template("spec.config.A: syntax error".into());
        a.status = Some(s.clone());
        let r = status(&a, Observed { refusal: Some(&refused), ..Default::default() }, at(700));
        assert_eq!(r.config_hash, s.config_hash, "a refusal keeps what is published");
        assert_eq!((r.conditions[0].status.as_str(), r.conditions[0].reason.as_str()), ("False", "TemplateError"));
    }
}

#[cfg(test)]
mod chain {
    use super::*;

    #[test]
    fn a_wait_written_to_status_holds_the_next_reconcile() {
        let mut a: AppConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "config.example.com/v1", "kind": "AppConfig",
            "metadata": {"name": "cfg", "namespace": "shop", "generation": 3},
            "spec": {"application": "myapp", "environment": "staging", "config": {}},
        }))
        .unwrap();
        let t = |ms: i64| Timestamp::from_millisecond(ms).unwrap();
        a.status = Some(AppConfigStatus {
            config_hash: Some("h2".into()),
            last_rollout_time: Some(Time(t(10_000))),
            ..Default::default()
        });
        let consumers = [Consumer {
            kind: "Deployment",
            name: "w".into(),
            uid: "u".into(),
            created: Some(t(0)),
            hash: Some("h2".into()),
        }];
        let pace = Pace { settle: Duration::from_secs(1), min_interval: Duration::from_secs(2) };
        let prev = a.status.clone().unwrap();
        let p = plan(&prev, &consumers, "h3", changed_time(&prev, "h3", t(25_000)).as_ref(), pace, t(25_000));
        assert!(matches!(p, Plan::Wait(_)), "{p:?}");
        a.status =
            Some(status(&a, Observed { hash: Some("h3"), plan: Some(&p), consumers: 1, refusal: None }, t(25_000)));
        let prev = a.status.clone().unwrap();
        let p = plan(&prev, &consumers, "h3", changed_time(&prev, "h3", t(25_200)).as_ref(), pace, t(25_200));
        assert!(matches!(p, Plan::Wait(_)), "{p:?} {prev:?}");
    }
}
