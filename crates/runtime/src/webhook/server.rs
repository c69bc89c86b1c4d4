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
use bosun_controller::kinds::Converted;
use bosun_resources::admission::{self, Policy, Subject};
use hyper_util::rt::TokioIo;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
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

/// The serving certificate of the moment; `None` until the first is loaded (no
/// connection is accepted before that, and `/readyz` says not ready).
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

    /// Whether a certificate is loaded (the server accepts connections, the replica
    /// may be Ready).
    pub fn loaded(&self) -> bool {
        self.current.read().unwrap_or_else(|e| e.into_inner()).is_some()
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
            "Admission and conversion reviews answered, by webhook (validating, mutating, converting) and result (allowed, denied, errored)",
            self.admissions.clone(),
        );
        registry.register(
            "bosun_webhook_admission_duration_seconds",
            "Time to answer an admission or conversion review, by webhook",
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
    /// The kinds served in more than one version, for `/convert`.
    pub converted: Vec<Converted>,
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

/// Answer one ConversionReview: every object converted to the version asked, in order,
/// or the whole review failed naming the first object that could not be (the
/// apiserver then refuses the request that needed it; nothing is stored half-converted).
fn convert(converted: &[Converted], body: &[u8]) -> (ConversionReview, &'static str) {
    let request = match serde_json::from_slice::<ConversionReview>(body)
        .map_err(|e| e.to_string())
        .and_then(|r| ConversionRequest::from_review(r).map_err(|e| e.to_string()))
    {
        Ok(request) => request,
        Err(problem) => {
            let status = kube::core::Status::failure(
                &format!("bosun cannot read this ConversionReview: {problem}"),
                "BadRequest",
            );
            return (ConversionResponse::invalid(status).into_review(), "errored");
        }
    };
    let desired = request.desired_api_version.clone();
    let group = desired.split_once('/').map_or("", |(g, _)| g);
    let objects: Result<Vec<_>, String> = request
        .objects
        .iter()
        .map(|object| {
            let kind = object.get("kind").and_then(serde_json::Value::as_str).unwrap_or_default();
            let name = object.pointer("/metadata/name").and_then(serde_json::Value::as_str).unwrap_or_default();
            let converter = converted
                .iter()
                .find(|c| c.crd.spec.group == group && c.crd.spec.names.kind == kind)
                .ok_or_else(|| format!("bosun converts no {kind} of {group}"))?;
            (converter.convert)(object, &desired).map_err(|e| format!("{kind} {name}: {e}"))
        })
        .collect();
    let response = ConversionResponse::for_request(request);
    match objects {
        Ok(objects) => (response.success(objects).into_review(), "allowed"),
        Err(problem) => (response.failure(kube::core::Status::failure(&problem, "Invalid")).into_review(), "errored"),
    }
}

async fn handle_conversion(admission: Arc<Admission>, body: axum::body::Bytes) -> axum::response::Response {
    let started = Instant::now();
    let (review, result) = convert(&admission.converted, &body);
    if result != "allowed" {
        warn!(message = ?review.response.as_ref().map(|r| &r.result.message), "conversion failed");
    }
    admission.metrics.admissions.get_or_create(&AdmissionLabels { webhook: CONVERTING, result }).inc();
    admission
        .metrics
        .duration
        .get_or_create(&WebhookLabel { webhook: CONVERTING })
        .observe(started.elapsed().as_secs_f64());
    let body = serde_json::to_vec(&review).unwrap_or_default();
    ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The `webhook` label of conversions in the admission metrics.
const CONVERTING: &str = "converting";

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
    app = app.route(
        bosun_api::conversion::PATH,
        post(|State(a): State<Arc<Admission>>, body: axum::body::Bytes| handle_conversion(a, body)),
    );
    app.with_state(admission)
}

/// Bind `addr` (at once: a port in use fails the start) and serve the webhooks over TLS
/// with `certificate` until `shutdown`. No connection is accepted before the first
/// certificate is loaded: one made earlier waits in the listen queue and is served
/// then, instead of failing its handshake (`tls: access denied`) as it did.
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
        .with_cert_resolver(Arc::new(Resolver(certificate.clone())));
    let acceptor_certificate = certificate;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(admission);
    tokio::spawn(async move {
        while !acceptor_certificate.loaded() {
            tokio::select! {
                () = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
                () = shutdown.cancelled() => return,
            }
        }
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

    pub(super) fn admission() -> Admission {
        let (namespaces, _writer) = kube::runtime::reflector::store();
        Admission {
            policy: Arc::new(RwLock::new(Arc::new(Policy::default()))),
            namespaces,
            metrics: Arc::default(),
            converted: bosun_controller::kinds::converted(),
        }
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

#[cfg(test)]
mod conversion_tests {
    use serde_json::json;

    use super::*;

    fn review(desired: &str, objects: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "r1", "desiredAPIVersion": desired, "objects": objects},
        }))
        .unwrap()
    }

    #[test]
    fn a_review_converts_every_object_in_order_or_fails_naming_the_object() {
        let converted = bosun_controller::kinds::converted();
        let old = |name: &str, title: &str| {
            json!({"apiVersion": "voting.schoolofdevops.com/v1alpha1", "kind": "VoteConfig", "metadata": {"name": name},
                   "spec": {"title": title, "options": [{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]}})
        };
        let (answer, result) =
            convert(&converted, &review("voting.schoolofdevops.com/v1", json!([old("x", "X?"), old("y", "Y?")])));
        assert_eq!(result, "allowed");
        let response = answer.response.unwrap();
        assert_eq!(response.uid, "r1");
        let questions: Vec<_> = response.converted_objects.iter().map(|o| o["spec"]["question"].clone()).collect();
        assert_eq!(questions, [json!("X?"), json!("Y?")]);
        let serialized = serde_json::to_value(&response).unwrap();
        assert_eq!(serialized["result"]["status"], "Success", "{serialized}");

        let strange =
            json!({"apiVersion": "voting.schoolofdevops.com/v0", "kind": "VoteConfig", "metadata": {"name": "z"}});
        let (answer, result) =
            convert(&converted, &review("voting.schoolofdevops.com/v1", json!([old("x", "X?"), strange])));
        assert_eq!(result, "errored");
        let response = answer.response.unwrap();
        assert!(response.converted_objects.is_empty());
        assert!(response.result.message.contains("VoteConfig z"), "{}", response.result.message);
        let (answer, result) = convert(&converted, b"{not json");
        assert_eq!(result, "errored");
        assert!(answer.response.unwrap().result.message.contains("cannot read"));
    }

    #[tokio::test]
    async fn a_connection_before_the_certificate_waits_for_it_instead_of_failing_its_handshake() {
        use std::time::Duration;
        use tokio_rustls::TlsConnector;
        use tokio_rustls::rustls::pki_types::ServerName;
        use tokio_rustls::rustls::{ClientConfig, RootCertStore};

        let (now, hour) = (jiff::Timestamp::now(), Duration::from_secs(3600));
        let (ca, ca_key) = bosun_resources::pki::new_ca(now, hour).unwrap();
        let (cert, key) = bosun_resources::pki::new_serving(&ca, &ca_key, &["127.0.0.1".into()], now, hour).unwrap();
        let certificate = Arc::new(Certificate::default());
        let shutdown = CancellationToken::new();
        let addr = serve(
            "127.0.0.1:0".parse().unwrap(),
            certificate.clone(),
            Arc::new(super::tests::admission()),
            shutdown.clone(),
        )
        .await
        .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap()).unwrap();
        let config = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = TlsConnector::from(Arc::new(config));
        let handshake = tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await.map(drop)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!handshake.is_finished(), "answered before a certificate was loaded: {handshake:?}");
        assert!(!certificate.loaded());
        certificate.load(&cert, &key).unwrap();
        let done = tokio::time::timeout(Duration::from_secs(5), handshake).await.unwrap().unwrap();
        assert!(done.is_ok(), "the waiting connection's handshake: {done:?}");
        shutdown.cancel();
    }
}
