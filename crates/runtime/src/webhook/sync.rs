//! Keeping the webhook's certificates and configurations right, on every replica.
//!
//! * `self` mode: the certificate Secret in bosun's namespace is created if absent and
//!   renewed or rotated by [`certs::plan`], written only with the resourceVersion read
//!   (compare-and-swap: replicas never fight; the loser re-reads). Every replica serves
//!   the Secret's serving certificate. The leader (or the only replica) writes the CA
//!   bundle into the configurations — and, with `--webhook-url`, the configurations
//!   themselves — and puts it back when someone changes or removes it.
//! * `files` mode: the certificate and key are read from files (cert-manager's
//!   Secret, mounted) and read again when they change.
//!
//! Each loop wakes on a watch event of the Secret or a configuration, or every
//! [`TICK`] for renewals, and reads only then.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use bosun_controller::Context;
use bosun_resources::admission::Policy;

use super::certs::{self, Data, Lifetimes, Plan};
use super::configs::Shape;
use super::conversion;
use super::server::{Certificate, CertificateLabel, Metrics};

/// How often certificates are looked at without any event.
pub const TICK: Duration = Duration::from_secs(10);
/// The field manager of bosun's writes to the configurations.
const MANAGER: &str = "bosun-webhook";

/// The self-managed certificates' settings.
#[derive(Clone)]
pub struct SelfManaged {
    pub client: Client,
    pub namespace: String,
    pub secret: String,
    pub names: Vec<String>,
    pub lifetimes: Lifetimes,
    pub shape: Shape,
    /// Create the configurations (with `--webhook-url`), not only inject the bundle.
    pub create_configurations: bool,
    /// The CRDs whose conversion this bosun keeps (of the kinds it reconciles); the
    /// apiserver reaches it where it reaches the admission webhooks (`shape.target`).
    pub converted: Vec<String>,
}

impl std::fmt::Debug for SelfManaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfManaged")
            .field("namespace", &self.namespace)
            .field("secret", &self.secret)
            .finish_non_exhaustive()
    }
}

/// What the watches hold: the certificate Secret, both configurations and the CRDs
/// bosun converts.
struct Stores {
    secret: Store<Secret>,
    validating: Store<ValidatingWebhookConfiguration>,
    mutating: Store<MutatingWebhookConfiguration>,
    crds: Vec<(String, Store<CustomResourceDefinition>)>,
}

impl Stores {
    fn ready(&self) -> bool {
        ready(&self.secret)
            && ready(&self.validating)
            && ready(&self.mutating)
            && self.crds.iter().all(|(_, s)| ready(s))
    }
}

/// A reflector of the one object `name` of `api`, and its events (each only a wake-up).
fn reflected<K>(api: Api<K>, name: &str) -> (Store<K>, futures::stream::BoxStream<'static, ()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, watcher::Config::default().fields(&format!("metadata.name={name}")))
        .default_backoff()
        .reflect(writer)
        .map(|_| ())
        .boxed();
    (store, events)
}

/// Whether `store` holds its watch's initial list.
fn ready<K: kube::Resource<DynamicType = ()> + Clone>(store: &Store<K>) -> bool {
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|r| r.is_ok())
}

/// Run the self-managed loop until `shutdown`. It reads only the watches' caches: at
/// rest it sends nothing.
pub async fn self_managed(
    cfg: SelfManaged,
    certificate: Arc<Certificate>,
    metrics: Arc<Metrics>,
    ctx: Arc<Context>,
    shutdown: CancellationToken,
) {
    let secrets: Api<Secret> = Api::namespaced(cfg.client.clone(), &cfg.namespace);
    let (secret, a) = reflected(secrets.clone(), &cfg.secret);
    let (validating, b) = reflected(Api::all(cfg.client.clone()), &cfg.shape.validating_name());
    let (mutating, c) = reflected(Api::all(cfg.client.clone()), &cfg.shape.mutating_name());
    let mut watches = vec![a, b, c];
    let mut crds = Vec::new();
    for name in &cfg.converted {
        let (store, events) = reflected(Api::<CustomResourceDefinition>::all(cfg.client.clone()), name);
        crds.push((name.clone(), store));
        watches.push(events);
    }
    let stores = Stores { secret, validating, mutating, crds };
    let events = futures::stream::select_all(watches);
    tokio::pin!(events);
    // Nothing is decided before every cache holds what exists.
    let synced = async {
        while !stores.ready() {
            if events.next().await.is_none() {
                return;
            }
        }
    };
    tokio::select! {
        () = synced => {}
        () = shutdown.cancelled() => return,
    }
    loop {
        if let Err(err) = sync_once(&cfg, &secrets, &stores, &certificate, &metrics, ctx.leader.leading()).await {
            warn!(%err, "webhook certificates: will try again");
        }
        tokio::select! {
            _ = events.next() => {
                // Events come in bursts (a write wakes all three watches): take them all.
                tokio::time::sleep(Duration::from_millis(100)).await;
                if shutdown.is_cancelled() {
                    return;
                }
            }
            () = tokio::time::sleep(TICK) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

fn text(secret: &Secret) -> Data {
    secret.data.iter().flatten().filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.0.clone()).ok()?))).collect()
}

fn bytes(data: &Data) -> BTreeMap<String, ByteString> {
    data.iter().map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes()))).collect()
}

/// One look: the Secret right, served and injected. A write another replica made
/// first (409) ends the look: its watch event starts the next.
async fn sync_once(
    cfg: &SelfManaged,
    secrets: &Api<Secret>,
    stores: &Stores,
    certificate: &Certificate,
    metrics: &Metrics,
    leading: bool,
) -> Result<(), String> {
    let now = Timestamp::now();
    let stored = stores.secret.get(&ObjectRef::new(&cfg.secret).within(&cfg.namespace));
    let data = stored.as_deref().map(text);
    let plan = certs::plan(data.as_ref(), &cfg.names, now, &cfg.lifetimes);
    let data = if plan == Plan::Keep {
        data.unwrap_or_default()
    } else {
        let next = certs::apply(&plan, &data.clone().unwrap_or_default(), &cfg.names, now, &cfg.lifetimes)?;
        let written = match &stored {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(cfg.secret.clone()),
                        labels: Some(bosun_resources::meta::standard_labels("bosun", "webhook")),
                        ..ObjectMeta::default()
                    },
                    type_: Some("Opaque".to_owned()),
                    data: Some(bytes(&next)),
                    ..Secret::default()
                };
                secrets.create(&PostParams::default(), &secret).await
            }
            Some(old) => {
                let mut secret = (**old).clone();
                secret.data = Some(bytes(&next));
                // The resourceVersion read: a replica that wrote first wins, this one re-reads.
                secrets.replace(&cfg.secret, &PostParams::default(), &secret).await
            }
        };
        match written {
            Ok(_) => info!(plan = ?plan, secret = %cfg.secret, "webhook certificates updated"),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(e) => return Err(format!("writing Secret {}: {e}", cfg.secret)),
        }
        next
    };
    let (Some(cert), Some(key)) = (data.get(certs::keys::TLS_CERT), data.get(certs::keys::TLS_KEY)) else {
        return Ok(());
    };
    if certificate.load(cert, key)? {
        info!(expires = ?certs::not_after(cert), "serving a new webhook certificate");
    }
    for (which, key) in [("serving", certs::keys::TLS_CERT), ("ca", certs::keys::CA_CERT)] {
        if let Some(at) = data.get(key).and_then(|p| certs::not_after(p)) {
            metrics.expiry.get_or_create(&CertificateLabel { certificate: which }).set(at.as_second());
        }
    }
    let bundle = certs::bundle(&data);
    if leading {
        inject(cfg, stores, &bundle).await?;
    }
    convert(cfg, stores, &bundle, leading).await
}

/// Point every converted CRD at this bosun with `bundle` — every replica does, since
/// the leader may need a conversion to start (its watches of a kind stored in an older
/// version), and all hold the same bundle; then, once a CRD does, the leader moves
/// objects stored in an older version to the storage version.
async fn convert(cfg: &SelfManaged, stores: &Stores, bundle: &str, leading: bool) -> Result<(), String> {
    let api: Api<CustomResourceDefinition> = Api::all(cfg.client.clone());
    for (name, store) in &stores.crds {
        let Some(crd) = store.get(&ObjectRef::new(name)) else { continue };
        if let Some(patch) = conversion::patch(&crd, &cfg.shape.target, bundle) {
            api.patch(name, &PatchParams::apply(MANAGER), &Patch::Merge(&patch))
                .await
                .map_err(|e| format!("pointing the conversion of CRD {name} at bosun: {e}"))?;
            info!(crd = %name, "conversion webhook configured");
        } else if leading && conversion::needs_migration(&crd, &cfg.shape.target, bundle) {
            conversion::migrate(&cfg.client, &crd, MANAGER).await?;
        }
    }
    Ok(())
}

/// Write `bundle` into every webhook of both configurations (with `--webhook-url`, the
/// whole configurations) where the cached ones do not hold it yet.
async fn inject(cfg: &SelfManaged, stores: &Stores, bundle: &str) -> Result<(), String> {
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(cfg.client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(cfg.client.clone());
    let (v_name, m_name) = (cfg.shape.validating_name(), cfg.shape.mutating_name());
    let v_stored = stores.validating.get(&ObjectRef::new(&v_name));
    let m_stored = stores.mutating.get(&ObjectRef::new(&m_name));
    if cfg.create_configurations {
        ensure(&validating, &v_name, &cfg.shape.validating(Some(bundle)), v_stored.as_deref()).await?;
        return ensure(&mutating, &m_name, &cfg.shape.mutating(Some(bundle)), m_stored.as_deref()).await;
    }
    // Shipped configurations: only each webhook's caBundle is bosun's.
    let bundle_only = |names: Vec<String>, kind: &str| {
        let hooks: Vec<_> =
            names.iter().map(|n| serde_json::json!({"name": n, "clientConfig": {"caBundle": ByteString(bundle.as_bytes().to_vec())}})).collect();
        serde_json::json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "webhooks": hooks})
    };
    if let Some(stored) = v_stored.as_deref() {
        let names = stored.webhooks.iter().flatten().map(|w| w.name.clone()).collect();
        ensure(&validating, &v_name, &bundle_only(names, "ValidatingWebhookConfiguration"), Some(stored)).await?;
    }
    if let Some(stored) = m_stored.as_deref() {
        let names = stored.webhooks.iter().flatten().map(|w| w.name.clone()).collect();
        ensure(&mutating, &m_name, &bundle_only(names, "MutatingWebhookConfiguration"), Some(stored)).await?;
    }
    Ok(())
}

/// Apply `desired` to `name` unless `stored` already holds every field of it.
async fn ensure<K, D>(api: &Api<K>, name: &str, desired: &D, stored: Option<&K>) -> Result<(), String>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
    D: serde::Serialize + std::fmt::Debug,
{
    let want = serde_json::to_value(desired).map_err(|e| e.to_string())?;
    let have = stored.map(serde_json::to_value).transpose().map_err(|e| e.to_string())?;
    if have.is_some_and(|have| holds(&want, &have)) {
        return Ok(());
    }
    api.patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(desired)).await.map_err(|e| e.to_string())?;
    Ok(())
}

/// Whether `have` holds every field of `want` with its value (lists item by item);
/// what the apiserver added (defaults) does not matter.
fn holds(want: &serde_json::Value, have: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w.iter().all(|(k, v)| h.get(k).is_some_and(|hv| holds(v, hv))),
        (Value::Array(w), Value::Array(h)) => w.len() == h.len() && w.iter().zip(h).all(|(a, b)| holds(a, b)),
        _ => want == have,
    }
}

fn modified(path: &PathBuf) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Serve the certificate and key from `cert`/`key` (cert-manager), reading them again
/// whenever either file changes.
pub async fn files(
    cert: PathBuf,
    key: PathBuf,
    certificate: Arc<Certificate>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let mut seen = None;
    loop {
        let now = (modified(&cert), modified(&key));
        if Some(now) != seen {
            match (std::fs::read_to_string(&cert), std::fs::read_to_string(&key)) {
                (Ok(c), Ok(k)) => match certificate.load(&c, &k) {
                    Ok(_) => {
                        seen = Some(now);
                        if let Some(at) = certs::not_after(&c) {
                            metrics
                                .expiry
                                .get_or_create(&CertificateLabel { certificate: "serving" })
                                .set(at.as_second());
                        }
                        info!(cert = %cert.display(), "serving the webhook certificate from files");
                    }
                    Err(err) => warn!(%err, "webhook certificate files: keeping the last good one"),
                },
                (Err(e), _) | (_, Err(e)) => {
                    warn!(err = %e, "webhook certificate files unreadable: keeping the last good one")
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Keep `policy` in step with the file at `path`: read again whenever it changes; a
/// file that does not parse is logged, naming the key, and the last good policy stays.
pub async fn policy_file(path: PathBuf, policy: Arc<RwLock<Arc<Policy>>>, shutdown: CancellationToken) {
    let mut seen = modified(&path);
    let mut last_text = std::fs::read_to_string(&path).ok();
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = shutdown.cancelled() => return,
        }
        let now = modified(&path);
        if now == seen {
            continue;
        }
        seen = now;
        let Ok(text) = std::fs::read_to_string(&path) else {
            warn!(path = %path.display(), "admission policy unreadable: keeping the last good one");
            continue;
        };
        if last_text.as_deref() == Some(text.as_str()) {
            continue;
        }
        match Policy::parse(&text) {
            Ok(p) => {
                *policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(p);
                last_text = Some(text);
                info!(path = %path.display(), "admission policy reloaded");
            }
            Err(err) => warn!(path = %path.display(), %err, "admission policy invalid: keeping the last good one"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(dir: &std::path::Path, host: &str) -> String {
        let life = Lifetimes::default();
        let data = certs::apply(&Plan::Create, &Data::new(), &[host.to_owned()], Timestamp::now(), &life).unwrap();
        // Replaced whole, as a mounted Secret is (a new file, then a rename).
        for (file, key) in [("tls.crt", certs::keys::TLS_CERT), ("tls.key", certs::keys::TLS_KEY)] {
            std::fs::write(dir.join(format!("{file}.new")), &data[key]).unwrap();
            std::fs::rename(dir.join(format!("{file}.new")), dir.join(file)).unwrap();
        }
        data[certs::keys::TLS_CERT].clone()
    }

    #[tokio::test]
    async fn certificate_files_are_served_and_read_again_when_they_change() {
        let dir = std::env::temp_dir().join(format!("bosun-cert-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = issue(&dir, "a.example.com");
        let certificate = Arc::new(Certificate::default());
        let stop = CancellationToken::new();
        let task = tokio::spawn(files(
            dir.join("tls.crt"),
            dir.join("tls.key"),
            certificate.clone(),
            Arc::default(),
            stop.clone(),
        ));
        let until = |pem: String| {
            let certificate = certificate.clone();
            async move {
                for _ in 0..100 {
                    if certificate.serving().as_deref() == Some(pem.as_str()) {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                false
            }
        };
        assert!(until(first.clone()).await, "the first certificate was not served");
        // A broken file keeps the last good certificate.
        std::fs::write(dir.join("tls.crt"), "garbage").unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(certificate.serving(), Some(first));
        let second = issue(&dir, "b.example.com");
        assert!(until(second).await, "the renewed certificate was not served");
        stop.cancel();
        task.await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
