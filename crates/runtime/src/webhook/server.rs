//! The webhook server: TLS on `--webhook-port` with the certificate of the moment
//! (swapped in place when it is renewed), and the handlers of both WebApp groups.
//!
//! A review is decoded with bosun's own WebApp types; one that does not decode is
//! denied with the path of the field and the problem — never a panic, never an allow.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::post;
use bosun_api::webapp::{WebAppKind, apps_v1, example_v1};
use bosun_resources::admission::{self, Policy, Subject};
use hyper_util::rt::TokioIo;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::{debug, warn};

/// The serving certificate of the moment; `None` until the first is loaded (a
/// handshake before that fails, and the apiserver retries).
#[derive(Debug, Default)]
pub struct Certificate {
    current: RwLock<Option<(Arc<CertifiedKey>, String)>>,
}

impl Certificate {
    /// Serve `cert_pem`/`key_pem` from now on (no-op when they are already served).
    pub fn load(&self, cert_pem: &str, key_pem: &str) -> Result<bool, String> {
        if self.current.read().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|(_, pem)| pem == cert_pem) {
            return Ok(false);
        }
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("the serving certificate: {e}"))?;
        if certs.is_empty() {
            return Err("the serving certificate holds no PEM certificate".to_owned());
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| format!("the serving key: {e}"))?;
        let signing = aws_lc_rs::sign::any_supported_type(&key).map_err(|e| format!("the serving key: {e}"))?;
        let certified = CertifiedKey::new(certs, signing);
        certified.keys_match().map_err(|e| format!("the serving key does not match the certificate: {e}"))?;
        let certified = Arc::new(certified);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some((certified, cert_pem.to_owned()));
        Ok(true)
    }

    /// The PEM of the certificate being served.
    pub fn serving(&self) -> Option<String> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(_, pem)| pem.clone())
    }
}

#[derive(Debug)]
struct Resolver(Arc<Certificate>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.current.read().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(k, _)| k.clone())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub webhook: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    pub webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabel {
    pub certificate: &'static str,
}

/// Admissions and certificates, for `/metrics`.
#[derive(Debug)]
pub struct Metrics {
    pub admissions: Family<AdmissionLabels, Counter>,
    pub duration: Family<WebhookLabel, Histogram>,
    pub expiry: Family<CertificateLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            admissions: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0])
            }),
            expiry: Family::default(),
        }
    }
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "bosun_webhook_admissions",
            "Admission reviews answered, by webhook (validating, mutating) and result (allowed, denied, errored)",
            self.admissions.clone(),
        );
        registry.register(
            "bosun_webhook_admission_duration_seconds",
            "Time to answer an admission review, by webhook",
            self.duration.clone(),
        );
        registry.register(
            "bosun_webhook_certificate_expiry_timestamp_seconds",
            "When the webhook's certificates expire (Unix time), by certificate (serving, ca)",
            self.expiry.clone(),
        );
    }
}

/// What the handlers decide with.
pub struct Admission {
    pub policy: Arc<RwLock<Arc<Policy>>>,
    /// Namespaces' labels, for `productionNamespaceSelector`.
    pub namespaces: Store<PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>,
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission").finish_non_exhaustive()
    }
}

impl Admission {
    fn production(&self, namespace: &str) -> bool {
        let policy = self.policy();
        let meta = self.namespaces.get(&ObjectRef::new(namespace));
        let labels: BTreeMap<String, String> = meta.and_then(|m| m.metadata.labels.clone()).unwrap_or_default();
        policy.is_production(namespace, &labels)
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.policy.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    Validate,
    Mutate,
}

impl Hook {
    fn label(self) -> &'static str {
        match self {
            Hook::Validate => "validating",
            Hook::Mutate => "mutating",
        }
    }
}

/// Answer one review of a WebApp of kind `K`.
fn review<K: WebAppKind>(
    hook: Hook,
    admission: &Admission,
    req: &AdmissionRequest<DynamicObject>,
) -> (AdmissionResponse, &'static str) {
    let response = AdmissionResponse::from(req);
    if req.operation == Operation::Delete || req.operation == Operation::Connect {
        return (response, "allowed");
    }
    let Some(object) = req.object.as_ref() else { return (response, "allowed") };
    let webapp: K = match serde_json::to_value(object)
        .map_err(|e| e.to_string())
        .and_then(|v| serde_path_to_error::deserialize(v).map_err(|e| format!("{}: {}", e.path(), e.inner())))
    {
        Ok(w) => w,
        Err(problem) => {
            return (
                response.deny(format!("bosun cannot read this WebApp ({problem}); it is not admitted")),
                "errored",
            );
        }
    };
    let namespace = req.namespace.clone().unwrap_or_default();
    let subject = Subject { settings: webapp.settings(), production: admission.production(&namespace) };
    let policy = admission.policy();
    match hook {
        Hook::Validate => match admission::validate(subject, &policy) {
            Ok(()) => (response, "allowed"),
            Err(denial) => (response.deny(denial), "denied"),
        },
        Hook::Mutate => {
            let ops = admission::mutate(subject, object.metadata.labels.as_ref(), &policy);
            if ops.is_empty() {
                return (response, "allowed");
            }
            match serde_json::from_value::<json_patch::Patch>(serde_json::Value::Array(ops))
                .map_err(|e| e.to_string())
                .and_then(|p| response.clone().with_patch(p).map_err(|e| e.to_string()))
            {
                Ok(patched) => (patched, "allowed"),
                Err(e) => (response.deny(format!("bosun could not build its patch: {e}")), "errored"),
            }
        }
    }
}

async fn handle<K: WebAppKind>(
    hook: Hook,
    admission: Arc<Admission>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let started = Instant::now();
    let (response, result) =
        match serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body).map_err(|e| e.to_string()).and_then(|r| {
            let req: Result<AdmissionRequest<DynamicObject>, _> = r.try_into();
            req.map_err(|e| e.to_string())
        }) {
            Ok(req) => review::<K>(hook, &admission, &req),
            Err(problem) => {
                (AdmissionResponse::invalid(format!("bosun cannot read this admission review: {problem}")), "errored")
            }
        };
    if result != "allowed" {
        debug!(webhook = hook.label(), result, message = %response.result.message, "admission");
    }
    admission.metrics.admissions.get_or_create(&AdmissionLabels { webhook: hook.label(), result }).inc();
    admission
        .metrics
        .duration
        .get_or_create(&WebhookLabel { webhook: hook.label() })
        .observe(started.elapsed().as_secs_f64());
    let review: AdmissionReview<DynamicObject> = response.into_review();
    let body = serde_json::to_vec(&review).unwrap_or_default();
    ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn router(admission: Arc<Admission>) -> Router {
    use super::configs::path;
    let route = |hook: Hook, group: &str| {
        let verb = if hook == Hook::Validate { "validate" } else { "mutate" };
        (path(verb, group), hook)
    };
    let mut app = Router::new();
    for (group, apps) in [("apps.example.com", true), ("example.com", false)] {
        for hook in [Hook::Validate, Hook::Mutate] {
            let (path, hook) = route(hook, group);
            app = if apps {
                app.route(
                    &path,
                    post(move |State(a): State<Arc<Admission>>, body: axum::body::Bytes| {
                        handle::<apps_v1::WebApp>(hook, a, body)
                    }),
                )
            } else {
                app.route(
                    &path,
                    post(move |State(a): State<Arc<Admission>>, body: axum::body::Bytes| {
                        handle::<example_v1::WebApp>(hook, a, body)
                    }),
                )
            };
        }
    }
    app.with_state(admission)
}

/// Bind `addr` and serve the webhooks over TLS with `certificate` until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    certificate: Arc<Certificate>,
    admission: Arc<Admission>,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let provider = Arc::new(aws_lc_rs::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver(certificate)));
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(admission);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(err) => { warn!(%err, "webhook accept failed"); continue; }
                },
                () = shutdown.cancelled() => return,
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(err) => {
                        debug!(%err, %peer, "webhook TLS handshake failed");
                        return;
                    }
                };
                let service = hyper::service::service_fn(move |req| app.clone().oneshot(req));
                if let Err(err) =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await
                {
                    debug!(%err, %peer, "webhook connection ended");
                }
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn admission() -> Admission {
        let (namespaces, _writer) = kube::runtime::reflector::store();
        Admission { policy: Arc::new(RwLock::new(Arc::new(Policy::default()))), namespaces, metrics: Arc::default() }
    }

    fn request(object: serde_json::Value) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "apps.example.com", "version": "v1", "kind": "WebApp"},
                "resource": {"group": "apps.example.com", "version": "v1", "resource": "webapps"},
                "namespace": "production",
                "operation": "CREATE",
                "userInfo": {},
                "object": object,
            }
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    #[test]
    fn an_object_bosun_cannot_read_is_denied_naming_the_field() {
        // Mutating webhooks see the object before the apiserver checks its schema.
        let bad = json!({"apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": "w"},
                         "spec": {"image": "nginx", "replicas": "twelve"}});
        for hook in [Hook::Mutate, Hook::Validate] {
            let (response, result) = review::<apps_v1::WebApp>(hook, &admission(), &request(bad.clone()));
            assert!(!response.allowed);
            assert_eq!(result, "errored");
            assert!(response.result.message.contains("spec.replicas"), "{}", response.result.message);
        }
        let good = json!({"apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": "w"},
                          "spec": {"image": "nginx", "replicas": 12}});
        let (response, result) = review::<apps_v1::WebApp>(Hook::Validate, &admission(), &request(good));
        assert_eq!(result, "denied");
        assert!(response.result.message.contains("spec.replicas: 12 exceeds the maximum of 10"));
    }
}
