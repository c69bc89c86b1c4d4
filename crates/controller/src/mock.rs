//! A Kubernetes API in memory, for reconcile-level unit tests: kube's own client over a
//! tower service that records every request and answers it with `respond`. The
//! decisions of a reconcile (what it writes, in what order, what it refuses) are
//! checked here in milliseconds; the end-to-end tests prove the same against the real
//! control plane.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use kube::client::Body;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::Value;

use crate::children::{Child, Owned};
use crate::context::Context;
use crate::metrics::Metrics;

/// One request the reconcile made.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    /// Path and query, e.g. `/apis/apps/v1/namespaces/shop/deployments/web?fieldManager=…`.
    pub path: String,
    pub body: Value,
}

impl Call {
    /// `METHOD /path` without the query, e.g. `PATCH /apis/apps/v1/namespaces/shop/deployments/web`.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path.split('?').next().unwrap_or_default())
    }

    fn is_event(&self) -> bool {
        self.path.contains("/events")
    }
}

/// The requests seen so far.
#[derive(Clone, Debug, Default)]
pub struct Calls(Arc<Mutex<Vec<Call>>>);

impl Calls {
    /// Every request but events (published in the background), as [`Call::line`]s.
    pub fn writes(&self) -> Vec<String> {
        self.lock().iter().filter(|c| !c.is_event()).map(Call::line).collect()
    }

    /// The body of the first request whose line ends with `suffix`.
    pub fn body(&self, suffix: &str) -> Option<Value> {
        self.lock().iter().find(|c| c.line().ends_with(suffix)).map(|c| c.body.clone())
    }

    /// The bodies of every request whose line ends with `suffix`, in order.
    pub fn bodies(&self, suffix: &str) -> Vec<Value> {
        self.lock().iter().filter(|c| c.line().ends_with(suffix)).map(|c| c.body.clone()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Call>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A context whose client answers every request with `respond(call)`: a status code
/// and a JSON body.
pub fn context(respond: impl Fn(&Call) -> (u16, Value) + Send + Sync + 'static) -> (Arc<Context>, Calls) {
    let calls = Calls::default();
    let (seen, respond) = (calls.clone(), Arc::new(respond));
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let (seen, respond) = (seen.clone(), respond.clone());
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let call = Call {
                method: parts.method.to_string(),
                path: parts.uri.path_and_query().map(|p| p.to_string()).unwrap_or_default(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (status, answer) = respond(&call);
            seen.lock().push(call);
            let response = http::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).unwrap_or_default()));
            Ok::<_, Infallible>(response.expect("a status code and a JSON body make a response"))
        }
    });
    let client = kube::Client::new(service, "default");
    let ctx = Context::new(client, "test", Arc::new(Metrics::default()));
    (Arc::new(ctx), calls)
}

/// What the apiserver answers to a server-side apply that creates or changes the
/// object: the applied object, now with a uid and a resourceVersion.
pub fn stored(applied: &Value) -> Value {
    let mut stored = applied.clone();
    let name = stored["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    stored["metadata"]["uid"] = Value::String(format!("uid-{name}"));
    stored["metadata"]["resourceVersion"] = Value::String("7".to_owned());
    stored
}

/// A cache of `C` holding `objects`, as a watch would have filled it.
pub fn cache<C: Child>(objects: impl IntoIterator<Item = C>) -> Owned<C> {
    let (reader, mut writer): (_, Writer<C>) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    Owned::new(reader)
}

/// The apiserver's refusal: a `Status` of `code` and `reason`.
pub fn refused(code: u16, reason: &str, message: &str) -> (u16, Value) {
    let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                                    "code": code, "message": message});
    (code, status)
}

/// The apiserver's answer that `what` does not exist.
pub fn not_found(what: &str) -> (u16, Value) {
    refused(404, "NotFound", &format!("{what} not found"))
}

/// The apiserver as most tests want it: nothing to read (an empty list, a 404); a
/// status write returns `owner` with that status; creates (201) and applies (200)
/// return the object as [`stored`].
pub fn answer<K: serde::Serialize>(owner: &K) -> impl Fn(&Call) -> (u16, Value) + Send + Sync + use<K> {
    let owner = serde_json::to_value(owner).unwrap_or_default();
    move |call| {
        let path = call.path.split('?').next().unwrap_or_default();
        if call.method == "GET" {
            // `/…/namespaces/NS/RESOURCE` lists; one segment more names an object.
            let segments: Vec<&str> = path.split('/').collect();
            let after_namespace = segments.iter().position(|s| *s == "namespaces").map(|i| segments.len() - i - 2);
            return match after_namespace {
                Some(1) => (200, serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []})),
                _ => not_found(path),
            };
        }
        if path.ends_with("/status") {
            let mut stored = owner.clone();
            stored["status"] = call.body["status"].clone();
            (200, stored)
        } else {
            (if call.method == "POST" { 201 } else { 200 }, stored(&call.body))
        }
    }
}

/// The `status`/`reason` of condition `type_` in the first status write.
pub fn condition(calls: &Calls, type_: &str) -> String {
    let status = calls.body("/status").unwrap_or_default();
    let conditions = status["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conditions
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| format!("{}/{}", c["status"].as_str().unwrap_or_default(), c["reason"].as_str().unwrap_or_default()))
        .unwrap_or_default()
}
