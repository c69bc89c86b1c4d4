//! Proofs that the local control plane is a working Kubernetes: each test drives a
//! feature the operator's tests rely on and asserts what the real kube-apiserver and
//! controllers did with it, so that a cluster lacking the feature fails here first,
//! with a clear name, rather than somewhere inside an operator test.
//!
//! Run with a cluster up: `hack/controlplane/cluster.sh up`, then
//! `cargo test -p bosun-testing --test controlplane`.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // tests: failing loudly is the point

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bosun_testing::{Env, e2e};
use futures::FutureExt;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A typed object from a JSON manifest.
fn object<K: DeserializeOwned>(manifest: Value) -> K {
    serde_json::from_value(manifest).unwrap_or_else(|e| panic!("manifest: {e}"))
}

/// A pod template for the fake nodes: kwok runs nothing, so the image is never pulled.
fn pod_template(app: &str, restart_policy: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    })
}

fn pods_of<'a>(pods: &'a [Pod], app: &str) -> Vec<&'a Pod> {
    pods.iter().filter(|p| p.labels().get("app").map(String::as_str) == Some(app)).collect()
}

fn node_of(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
}

/// Poll `attempt` until it returns `Some`, or panic after `timeout` describing what was awaited.
async fn poll<T, Fut>(what: &str, timeout: Duration, mut attempt: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = attempt().await {
            return value;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// --- 1. Deployment ------------------------------------------------------------------

/// The scheduler places the pods on the kwok nodes, kwok makes them Ready, and the
/// Deployment and ReplicaSet controllers count them as available.
#[tokio::test]
async fn deployment_becomes_available_on_fake_nodes() {
    e2e("cp-deployment", |env| async move {
        env.apply(&object::<Deployment>(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": pod_template("web", "Always"),
            },
        })))
        .await;

        env.wait_for::<Deployment>("web", "status.availableReplicas == 2", |d| {
            d.status.as_ref().and_then(|s| s.available_replicas) == Some(2)
        })
        .await;

        let pods = env.api::<Pod>().list(&ListParams::default().labels("app=web")).await.expect("list pods");
        let pods = pods_of(&pods.items, "web");
        assert_eq!(pods.len(), 2, "the Deployment's pods");
        for pod in pods {
            assert!(
                node_of(pod).starts_with("kwok-node-"),
                "pod {} scheduled to a fake node: {:?}",
                pod.name_any(),
                pod.spec
            );
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            assert_eq!(phase, Some("Running"), "pod {} phase", pod.name_any());
        }
    })
    .await;
}

// --- 2. StatefulSet with a volume claim ---------------------------------------------

/// The StatefulSet controller creates the claim from the template, the DefaultStorageClass
/// admission plugin gives it `kwok-volume`, kwok binds it to a volume, and the pod that
/// uses it becomes ready.
#[tokio::test]
async fn statefulset_claim_binds_and_pod_becomes_ready() {
    e2e("cp-statefulset", |env| async move {
        env.apply(&object::<StatefulSet>(json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 1,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": pod_template("db", "Always"),
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }],
            },
        })))
        .await;

        let claim = env
            .wait_for::<PersistentVolumeClaim>("data-db-0", "phase Bound", |c| {
                c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
            })
            .await;
        let spec = claim.spec.as_ref().expect("claim spec");
        assert_eq!(spec.storage_class_name.as_deref(), Some("kwok-volume"), "default StorageClass assigned");
        let volume_name = spec.volume_name.clone().expect("a bound claim names its volume");
        let volume =
            Api::<PersistentVolume>::all(env.client.clone()).get(&volume_name).await.expect("the bound volume");
        let claim_ref = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).expect("volume claimRef");
        assert_eq!(claim_ref.name.as_deref(), Some("data-db-0"));
        assert_eq!(claim_ref.namespace.as_deref(), Some(env.ns.as_str()));

        env.wait_for::<StatefulSet>("db", "status.readyReplicas == 1", |s| {
            s.status.as_ref().and_then(|s| s.ready_replicas) == Some(1)
        })
        .await;
        let pod = env.api::<Pod>().get("db-0").await.expect("pod db-0");
        let uses_claim = pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).is_some_and(|vs| {
            vs.iter().any(|v| v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == "data-db-0"))
        });
        assert!(uses_claim, "pod db-0 mounts claim data-db-0: {:?}", pod.spec);
        assert!(node_of(&pod).starts_with("kwok-node-"), "pod db-0 on a fake node");
    })
    .await;
}

// --- 3. Job and CronJob ---------------------------------------------------------------

/// kwok makes Job pods succeed, so the Job controller completes the Job; the CronJob
/// controller creates Jobs on schedule (at the next full minute, so up to ~60 s).
#[tokio::test]
async fn job_completes_and_cronjob_creates_jobs() {
    e2e("cp-jobs", |env| async move {
        // The CronJob first: its first run is at the next full minute, the Job runs meanwhile.
        let cronjob = env
            .apply(&object::<CronJob>(json!({
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": "tick"},
                "spec": {
                    "schedule": "*/1 * * * *",
                    "concurrencyPolicy": "Forbid",
                    "jobTemplate": {"spec": {"backoffLimit": 0, "template": pod_template("tick", "Never")}},
                },
            })))
            .await;
        let cronjob_uid = cronjob.uid().expect("CronJob uid");

        env.apply(&object::<Job>(json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "once"},
            "spec": {"backoffLimit": 0, "template": pod_template("once", "Never")},
        })))
        .await;
        let job = env
            .wait_for::<Job>("once", "status.succeeded == 1 and condition Complete=True", |j| {
                j.status.as_ref().is_some_and(|s| {
                    s.succeeded == Some(1)
                        && s.conditions.iter().flatten().any(|c| c.type_ == "Complete" && c.status == "True")
                })
            })
            .await;
        assert!(job.status.as_ref().and_then(|s| s.completion_time.as_ref()).is_some(), "completionTime set");

        let jobs = env.api::<Job>();
        let scheduled = poll("a Job owned by CronJob tick", Duration::from_secs(90), || async {
            let list = jobs.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|j| {
                j.owner_references().iter().any(|o| {
                    o.kind == "CronJob" && o.name == "tick" && o.uid == cronjob_uid && o.controller == Some(true)
                })
            })
        })
        .await;
        assert!(scheduled.name_any().starts_with("tick-"), "scheduled Job name: {}", scheduled.name_any());
    })
    .await;
}

// --- 4. Garbage collection --------------------------------------------------------------

/// The garbage collector deletes an object whose owner is gone, and only that one.
#[tokio::test]
async fn deleting_owner_collects_owned_configmap() {
    e2e("cp-gc", |env| async move {
        let parent = env.apply(&object::<ConfigMap>(json!({"metadata": {"name": "parent"}}))).await;
        let owner = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "parent",
            "uid": parent.uid().expect("parent uid"),
        });
        env.apply(&object::<ConfigMap>(json!({"metadata": {"name": "child", "ownerReferences": [owner]}}))).await;
        env.apply(&object::<ConfigMap>(json!({"metadata": {"name": "bystander"}}))).await;

        env.api::<ConfigMap>().delete("parent", &DeleteParams::background()).await.expect("delete parent");
        let took = env.wait_gone::<ConfigMap>("child").await;
        eprintln!("child collected {took:?} after its owner was deleted");
        assert!(
            env.api::<ConfigMap>().get_opt("bystander").await.expect("get bystander").is_some(),
            "an unowned ConfigMap is left alone"
        );
    })
    .await;
}

// --- 5. Validating admission webhook -------------------------------------------------------

/// What the test's webhook server saw: the (name, operation) of each AdmissionReview.
type Reviews = Arc<Mutex<Vec<(String, String)>>>;

/// The label that makes the test's webhook deny a ConfigMap.
const DENY_LABEL: &str = "e2e.bosun.dev/verdict";

/// A test CA and a serving certificate it signed for 127.0.0.1 and localhost:
/// (CA PEM, serving certificate DER, serving key DER).
fn test_pki() -> (String, CertificateDer<'static>, PrivateKeyDer<'static>) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.distinguished_name.push(DnType::CommonName, "bosun e2e webhook CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key")).expect("CA certificate");

    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("serving params");
    params.distinguished_name.push(DnType::CommonName, "bosun e2e webhook");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().expect("serving key");
    let cert = params.signed_by(&key, &ca).expect("serving certificate");
    (ca.pem(), cert.der().clone(), PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())))
}

/// The AdmissionReview response to `review`: deny ConfigMaps labelled `DENY_LABEL=deny`
/// with a message carrying `nonce`, allow everything else.
fn verdict(review: &Value, nonce: &str) -> Value {
    let request = &review["request"];
    let denied = request["object"]["metadata"]["labels"][DENY_LABEL] == "deny";
    let mut response = json!({"uid": request["uid"], "allowed": !denied});
    if denied {
        let name = request["name"].as_str().unwrap_or_default();
        response["status"] =
            json!({"code": 403, "message": format!("bosun e2e webhook {nonce} refuses ConfigMap {name}")});
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

async fn handle(
    req: Request<Incoming>,
    nonce: Arc<str>,
    reviews: Reviews,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, body: Vec<u8>| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, "application/json".parse().expect("header"));
        Ok(response)
    };
    if req.uri().path() != "/validate" {
        return reply(StatusCode::NOT_FOUND, b"{}".to_vec());
    }
    let review: Value = match req.into_body().collect().await.map(|b| serde_json::from_slice(&b.to_bytes())) {
        Ok(Ok(review)) => review,
        _ => return reply(StatusCode::BAD_REQUEST, b"{}".to_vec()),
    };
    let request = &review["request"];
    let seen = (
        request["name"].as_str().unwrap_or_default().to_owned(),
        request["operation"].as_str().unwrap_or_default().to_owned(),
    );
    reviews.lock().expect("reviews").push(seen);
    reply(StatusCode::OK, serde_json::to_vec(&verdict(&review, &nonce)).expect("response JSON"))
}

/// Serve the webhook over TLS on 127.0.0.1 (a free port) until the task is aborted.
async fn serve_webhook(nonce: &str, reviews: Reviews) -> (SocketAddr, String, tokio::task::JoinHandle<()>) {
    let (ca_pem, cert, key) = test_pki();
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("TLS server config");
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    let nonce: Arc<str> = nonce.into();
    let server = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let (acceptor, nonce, reviews) = (acceptor.clone(), nonce.clone(), reviews.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(move |req| handle(req, nonce.clone(), reviews.clone()));
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (addr, ca_pem, server)
}

/// The apiserver calls a webhook served by the test itself over TLS (trusting the test's
/// CA from `caBundle`), and the webhook's denial reaches the client.
#[tokio::test]
async fn validating_webhook_denial_reaches_client() {
    e2e("cp-webhook", |env| async move {
        let nonce = format!("{:08x}", rand::random::<u32>());
        let reviews: Reviews = Arc::default();
        let (addr, ca_pem, server) = serve_webhook(&nonce, reviews.clone()).await;

        let name = format!("{}-configmaps", env.ns);
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
        let config = object::<ValidatingWebhookConfiguration>(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name, "labels": {"bosun.dev/e2e": "true"}},
            "webhooks": [{
                "name": "configmaps.e2e.bosun.dev",
                "clientConfig": {
                    "url": format!("https://{addr}/validate"),
                    "caBundle": k8s_openapi::ByteString(ca_pem.into_bytes()),
                },
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}],
                // Only this test's namespace: the webhook must not affect anything else.
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.ns}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }],
        }));
        configs.create(&PostParams::default(), &config).await.expect("create ValidatingWebhookConfiguration");

        // Exercise it, then remove the configuration and stop the server before asserting.
        let outcome = AssertUnwindSafe(exercise_webhook(&env, &nonce, &reviews)).catch_unwind().await;
        let cleanup = configs.delete(&name, &DeleteParams::default()).await;
        server.abort();
        let (denial, allowed) = match outcome {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        cleanup.unwrap_or_else(|e| panic!("deleting ValidatingWebhookConfiguration {name}: {e}"));

        assert_eq!(denial.code, 403, "denial status: {denial:?}");
        assert!(
            denial.message.contains(&format!("bosun e2e webhook {nonce} refuses ConfigMap refused")),
            "the webhook's message reaches the client: {denial:?}"
        );
        assert!(denial.message.contains("configmaps.e2e.bosun.dev"), "names the webhook: {denial:?}");
        assert!(allowed.labels().is_empty(), "the allowed ConfigMap was created as sent");
        let seen = reviews.lock().expect("reviews").clone();
        let count = |n: &str| seen.iter().filter(|(name, op)| name == n && op == "CREATE").count();
        assert!(count("refused") >= 1, "the webhook received the AdmissionReview for refused: {seen:?}");
        assert_eq!(count("allowed"), 1, "the webhook received the AdmissionReview for allowed: {seen:?}");
        eprintln!("client got: {}; webhook received {} AdmissionReviews: {seen:?}", denial.message, seen.len());
    })
    .await;
}

/// Create ConfigMap `refused` (labelled to be denied) until the webhook is in effect and
/// denies it, then ConfigMap `allowed`; returns the denial and the allowed ConfigMap.
async fn exercise_webhook(env: &Env, nonce: &str, reviews: &Reviews) -> (kube::core::Status, ConfigMap) {
    let configmaps = env.api::<ConfigMap>();
    let refused = object::<ConfigMap>(json!({"metadata": {"name": "refused", "labels": {DENY_LABEL: "deny"}}}));
    // The apiserver picks up a new webhook configuration from its informer, a moment later.
    let denial = poll("the webhook to deny ConfigMap refused", Duration::from_secs(30), || async {
        match configmaps.create(&PostParams::default(), &refused).await {
            Err(kube::Error::Api(status)) if status.message.contains(nonce) => Some(*status),
            Err(e) => panic!("creating ConfigMap refused failed otherwise than by the webhook: {e}"),
            Ok(_) => {
                configmaps.delete("refused", &DeleteParams::default()).await.expect("delete refused");
                None
            }
        }
    })
    .await;
    assert!(configmaps.get_opt("refused").await.expect("get refused").is_none(), "a denied ConfigMap is not stored");

    let before = reviews.lock().expect("reviews").len();
    let allowed = configmaps
        .create(&PostParams::default(), &object::<ConfigMap>(json!({"metadata": {"name": "allowed"}})))
        .await
        .expect("the webhook allows an unlabelled ConfigMap");
    assert!(reviews.lock().expect("reviews").len() > before, "the allowed create was reviewed too");
    (denial, allowed)
}

// --- 6. RBAC with a ServiceAccount token -----------------------------------------------------

/// A client for the cluster of the admin kubeconfig that authenticates with `token` only.
async fn client_with_token(env: &Env, token: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(&env.cluster.kubeconfig).expect("admin kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("config");
    // Drop the admin's client certificate: the bearer token is the only credential.
    config.auth_info = object(json!({"token": token}));
    Client::try_from(config).expect("token client")
}

/// A ServiceAccount's token (from the TokenRequest API) authenticates it; RBAC forbids
/// it everything until a Role and RoleBinding allow listing pods, in that namespace only.
#[tokio::test]
async fn serviceaccount_needs_rolebinding_to_list_pods() {
    e2e("cp-rbac", |env| async move {
        env.apply(&object::<ServiceAccount>(json!({"metadata": {"name": "reader"}}))).await;
        let request = object::<TokenRequest>(json!({"spec": {"audiences": [], "expirationSeconds": 600}}));
        let token = env
            .api::<ServiceAccount>()
            .create_token_request("reader", &PostParams::default(), &request)
            .await
            .expect("TokenRequest for reader")
            .status
            .expect("TokenRequest status")
            .token;
        let client = client_with_token(&env, &token).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &env.ns);
        let username = format!("system:serviceaccount:{}:reader", env.ns);

        match pods.list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 403, "forbidden, not unauthenticated: {status:?}");
                assert!(status.message.contains(&username), "the apiserver knows who asked: {status:?}");
            }
            other => panic!("expected 403 Forbidden before the RoleBinding, got {other:?}"),
        }

        env.apply(&object::<Role>(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        })))
        .await;
        env.apply(&object::<RoleBinding>(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": env.ns}],
        })))
        .await;

        // The RBAC authorizer sees new bindings through its informers, a moment later.
        let started = Instant::now();
        poll("the RoleBinding to allow listing pods", Duration::from_secs(15), || async {
            match pods.list(&ListParams::default()).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(status)) if status.code == 403 => None,
                Err(e) => panic!("listing pods as {username}: {e}"),
            }
        })
        .await;
        eprintln!("RoleBinding effective after {:?}", started.elapsed());

        // The Role grants nothing elsewhere.
        let elsewhere: Api<Pod> = Api::namespaced(client, "default");
        match elsewhere.list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "pods in default: {status:?}"),
            other => panic!("expected 403 Forbidden for pods in namespace default, got {other:?}"),
        }
    })
    .await;
}
