//! `status`: a PostgreSQL on one screen ([`crate::postgres`]), any other bosun object
//! as its conditions, what it waits for, its children and its recent events.

use std::process::ExitCode;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, ListParams};
use serde::Serialize;
use serde_json::Value;

use crate::kinds::{Kind, Target};
use crate::render::{Paint, ago};
use crate::{Output, Session, children};

/// A kube error in a few words: the API's message, or why it could not be reached.
pub fn brief(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if status.code == 404 && status.reason != "NotFound" => {
            "the cluster does not serve this kind: are bosun's CRDs installed (make install)?".to_owned()
        }
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => {
            let mut said = vec![other.to_string()];
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                let text = cause.to_string();
                if !said.iter().any(|s| s.contains(&text)) {
                    said.push(text);
                }
                source = cause.source();
            }
            format!("the cluster's API could not be reached: {}", said.join(": "))
        }
    }
}

/// `kind`'s object `name`, or an error a person reads in one line.
pub async fn get(session: &Session, kind: &Kind, name: &str) -> anyhow::Result<DynamicObject> {
    let api: Api<DynamicObject> = Api::namespaced_with(session.client.clone(), &session.namespace, &kind.resource());
    match api.get_opt(name).await {
        Ok(Some(object)) => Ok(object),
        Ok(None) => anyhow::bail!("{} {}/{name} not found", kind.display(), session.namespace),
        Err(e) => Err(anyhow::anyhow!("reading {} {}/{name}: {}", kind.display(), session.namespace, brief(&e))),
    }
}

/// An event, as the screen and the JSON say it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLine {
    pub time: Option<String>,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub count: i32,
    pub object: String,
}

/// The events of the objects `names` (of any kind) in the namespace, newest last,
/// at most `limit`.
pub async fn events(session: &Session, names: &[String], limit: usize) -> anyhow::Result<Vec<EventLine>> {
    let api: Api<Event> = Api::namespaced(session.client.clone(), &session.namespace);
    // One object's: the apiserver selects them; several: the namespace's, once.
    let params = match names {
        [one] => ListParams::default().fields(&format!("involvedObject.name={one}")),
        _ => ListParams::default(),
    };
    let listed = api.list(&params).await.map_err(|e| anyhow::anyhow!("reading events: {}", brief(&e)))?;
    let mut lines: Vec<(Option<Timestamp>, EventLine)> = listed
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_ref().is_some_and(|n| names.contains(n)))
        .map(|e| {
            let time = e
                .last_timestamp
                .map(|t| t.0)
                .or(e.event_time.map(|t| t.0))
                .or(e.metadata.creation_timestamp.map(|t| t.0));
            let line = EventLine {
                time: time.map(|t| t.to_string()),
                type_: e.type_.unwrap_or_default(),
                reason: e.reason.unwrap_or_default(),
                message: e.message.unwrap_or_default(),
                count: e.count.unwrap_or(1).max(1),
                object: format!(
                    "{}/{}",
                    e.involved_object.kind.unwrap_or_default().to_lowercase(),
                    e.involved_object.name.unwrap_or_default()
                ),
            };
            (time, line)
        })
        .collect();
    lines.sort_by_key(|(t, _)| *t);
    let skip = lines.len().saturating_sub(limit);
    Ok(lines.into_iter().skip(skip).map(|(_, l)| l).collect())
}

/// A condition, as the screen and the JSON say it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionLine {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub since: Option<String>,
}

/// `status.conditions` of any object.
pub fn conditions(status: Option<&Value>) -> Vec<ConditionLine> {
    let text = |c: &Value, key: &str| c.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| ConditionLine {
            type_: text(c, "type"),
            status: text(c, "status"),
            reason: text(c, "reason"),
            message: text(c, "message"),
            since: c.get("lastTransitionTime").and_then(Value::as_str).map(str::to_owned),
        })
        .collect()
}

/// Any bosun object's status, as `-o json` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectStatus {
    kind: String,
    namespace: String,
    name: String,
    generation: Option<i64>,
    observed_generation: Option<i64>,
    conditions: Vec<ConditionLine>,
    /// What the object waits for: Ready when it is not True, and the conditions that
    /// say work is going on or stopped (Reconciling, Progressing, Stalled, Degraded).
    waiting_for: Vec<String>,
    children: Vec<ChildLine>,
    unread: Vec<String>,
    events: Vec<EventLine>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ChildLine {
    kind: String,
    name: String,
    of: String,
    /// The child's own Ready condition or phase, when it has one.
    state: Option<String>,
}

fn child_state(object: &DynamicObject) -> Option<String> {
    let status = object.data.get("status")?;
    if let Some(ready) = conditions(Some(status)).into_iter().find(|c| c.type_ == "Ready" || c.type_ == "Available") {
        return Some(format!("{}={} {}", ready.type_, ready.status, ready.reason).trim().to_owned());
    }
    if let Some(phase) = status.get("phase").and_then(Value::as_str) {
        return Some(phase.to_owned());
    }
    let replicas = status.get("replicas").and_then(Value::as_i64)?;
    let ready = status.get("readyReplicas").and_then(Value::as_i64).unwrap_or(0);
    Some(format!("{ready}/{replicas} ready"))
}

pub async fn run(session: &Session, target: &Target, output: Output) -> anyhow::Result<ExitCode> {
    if target.kind.is_postgresql() {
        return crate::postgres::run(session, &target.name, output).await;
    }
    let object = get(session, &target.kind, &target.name).await?;
    let status = object.data.get("status");
    let conditions = conditions(status);
    let waiting_for = conditions
        .iter()
        .filter(|c| {
            if is_negative_polarity(&c.type_) { c.status == "True" } else { c.type_ == "Ready" && c.status != "True" }
        })
        .map(|c| format!("{}: {} {}", c.type_, c.reason, c.message).trim().to_owned())
        .collect();
    let (children, unread) = children::of(session, &target.name).await;
    let mut names: Vec<String> = children.iter().map(children::Child::name).collect();
    names.push(target.name.clone());
    let view = ObjectStatus {
        kind: target.kind.kind.clone(),
        namespace: session.namespace.clone(),
        name: target.name.clone(),
        generation: object.metadata.generation,
        observed_generation: status.and_then(|s| s.get("observedGeneration")).and_then(Value::as_i64),
        conditions,
        waiting_for,
        children: children
            .iter()
            .map(|c| ChildLine {
                kind: c.kind().to_owned(),
                name: c.name(),
                of: c.of.clone(),
                state: child_state(&c.object),
            })
            .collect(),
        unread,
        events: events(session, &names, 10).await?,
    };
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&view)?),
        Output::Text => print!("{}", text(&view, &Paint::for_stdout())),
    }
    Ok(ExitCode::SUCCESS)
}

/// Conditions whose `True` is work not done, or trouble (kstatus's, and a
/// Deployment's).
fn is_negative_polarity(type_: &str) -> bool {
    matches!(type_, "Stalled" | "Reconciling" | "Degraded" | "Progressing")
}

fn text(view: &ObjectStatus, paint: &Paint) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{} {}/{}", paint.bold(&view.kind), view.namespace, view.name);
    if view.observed_generation.is_some() && view.observed_generation != view.generation {
        let _ = writeln!(
            out,
            "  {}",
            paint.warn(&format!(
                "not yet looked at: generation {} observed {}",
                view.generation.unwrap_or_default(),
                view.observed_generation.unwrap_or_default()
            ))
        );
    }
    crate::render::conditions(&mut out, paint, &view.conditions);
    if !view.waiting_for.is_empty() {
        let _ = writeln!(out, "\n{}", paint.bold("Waiting for"));
        for w in &view.waiting_for {
            let _ = writeln!(out, "  {}", paint.warn(w));
        }
    }
    let _ = writeln!(out, "\n{}", paint.bold("Children"));
    if view.children.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for c in &view.children {
        let of = if c.of == view.name { String::new() } else { format!("  (of {})", c.of) };
        let state = c.state.clone().unwrap_or_default();
        let _ = writeln!(out, "  {:<22} {:<34} {}{of}", c.kind, c.name, paint.state(&state));
    }
    for u in &view.unread {
        let _ = writeln!(out, "  {}", paint.warn(&format!("not readable: {u}")));
    }
    crate::render::events(&mut out, paint, &view.events);
    out
}

/// How long ago an RFC 3339 time was, for a person.
pub fn since(time: Option<&str>) -> String {
    time.and_then(|t| t.parse::<Timestamp>().ok()).map(ago).unwrap_or_default()
}
