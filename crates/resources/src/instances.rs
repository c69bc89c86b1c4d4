//! The credentials of a PostgreSQL's instance API (`bosun_instance::api`): the Secret
//! `<name>-instance`, made and kept by bosun, holding a CA, a serving certificate it
//! signs for every instance's name under the headless Service and for the database's
//! Services (PostgreSQL serves its clients with the same certificate), the CAs to
//! trust, and a token. The pods mount the certificate, its key, the CAs and the token
//! only (never the CA's key); bosun reads the CA and the token, so only a holder of
//! that Secret can ask or tell an instance anything. The certificates are renewed and
//! the CA rotated by [`crate::pki`]'s plan, in place (the API re-reads its files, the
//! instance manager reloads the server); the token is made once and kept. The CAs to
//! trust are published for clients in `<name>-ca` (`ca.crt`).
//!
//! ```text
//!  PostgreSQL + Secret (or none) + now ──desired_data──▶ None (kept) | the Secret's new data
//! ```

use bosun_api::postgresql::PostgreSQL;
use bosun_instance::api::keys;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{KeyToPath, Secret, SecretVolumeSource, Volume, VolumeMount};
use kube::ResourceExt;

use crate::meta::child_meta;
use crate::pki::{self, Data, Lifetimes, Plan};
use crate::provided::Provided;

/// The key of the token in the Secret (and the file in the pod).
pub const TOKEN: &str = keys::TOKEN;
/// Where the pods mount it.
/// Where the pods mount it (beside, not inside, the role label's volume at
/// `/etc/bosun`: a downward-API volume is read-only).
pub const MOUNT: &str = "/etc/bosun-instance";
const VOLUME: &str = "instance-api";

pub fn secret_name(db: &PostgreSQL) -> String {
    format!("{}-instance", db.name_any())
}

/// The key of the CAs to trust, in the Secret and in the pod (the current CA, and
/// the next or previous one while a rotation overlaps).
pub const BUNDLE: &str = keys::BUNDLE;

/// The names the serving certificate is for: the Services' (`<name>`, `<name>-ro`,
/// each also with its namespace and cluster domain: a client with
/// `sslmode=verify-full` may use any), and every instance's under the headless
/// Service (a wildcard: instances come and go with `spec.replicas`).
pub fn names(db: &PostgreSQL) -> Vec<String> {
    let (headless, ns) = (crate::postgresql::headless_name(db), db.namespace().unwrap_or_default());
    let mut names = Vec::new();
    for service in [db.name_any(), crate::postgresql::read_only_name(db)] {
        names.extend([format!("{service}.{ns}.svc"), format!("{service}.{ns}.svc.cluster.local"), service]);
    }
    names.extend([format!("*.{headless}.{ns}.svc"), format!("*.{headless}.{ns}.svc.cluster.local")]);
    // The pooler's Services (`spec.pooler`): its pods serve clients and bosun with
    // this certificate too.
    names.extend(crate::postgresql::pooler_names(db));
    names
}

/// The Secret that publishes the CAs a client verifies the database with.
pub fn ca_secret_name(db: &PostgreSQL) -> String {
    format!("{}-ca", db.name_any())
}

/// `<name>-ca`, owned by `db`: `ca.crt`, the CAs to trust (`bundle`).
pub fn desired_ca_secret(db: &PostgreSQL, bundle: &str) -> Secret {
    let labels = crate::meta::standard_labels(crate::postgresql::APP_NAME, &db.name_any());
    Secret {
        metadata: child_meta(db, ca_secret_name(db), labels),
        data: Some([(pki::keys::CA_CERT.to_owned(), ByteString(bundle.as_bytes().to_vec()))].into()),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// The name bosun checks the certificate of instance `pod` against.
/// Whether `pod` serves the instance API: its postgres container has the port. A pod of
/// a release before the API (its instance manager was a shell script) has not, and
/// cannot be asked anything until it restarts on the new pod template.
pub fn serves_api(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    containers
        .flat_map(|c| c.ports.iter().flatten())
        .any(|p| p.name.as_deref() == Some(crate::postgresql::API_PORT_NAME))
}

pub fn server_name(db: &PostgreSQL, pod: &str) -> String {
    format!("{pod}.{}.{}.svc", crate::postgresql::headless_name(db), db.namespace().unwrap_or_default())
}

/// The Secret's data as text; `None` when it is not a Secret of ours to read.
pub fn data(secret: &Secret) -> Data {
    secret.data.iter().flatten().filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.0.clone()).ok()?))).collect()
}

/// What PostgreSQL serves clients with.
#[derive(Clone, Copy, Debug)]
pub enum Server<'a> {
    /// bosun's certificate (the API's).
    Own,
    /// The one the user provides, checked.
    Provided(&'a Provided),
    /// Whatever the Secret has (a provided one that can no longer be checked is kept);
    /// bosun's when it has none.
    Kept,
}

/// What the Secret needs at `now` (`existing`: its data, none when there is no
/// Secret): `Ok(None)` when it is kept as it is; else its new data, the token kept
/// when there is one (`token` makes one when there is none), and the server's files
/// as `server` says.
pub fn desired_data(
    db: &PostgreSQL,
    existing: Option<&Data>,
    now: jiff::Timestamp,
    life: &Lifetimes,
    token: impl FnOnce() -> String,
    server: Server<'_>,
) -> Result<Option<Data>, String> {
    let names = names(db);
    let plan = pki::plan(existing, &names, now, life);
    let kept = existing.and_then(|d| d.get(TOKEN)).filter(|t| !t.trim().is_empty()).cloned();
    let bundled = existing.is_some_and(|d| d.get(BUNDLE).is_some_and(|b| *b == pki::bundle(d)));
    let mut data = if plan == Plan::Keep && kept.is_some() && bundled {
        existing.cloned().unwrap_or_default()
    } else {
        let mut data = pki::apply(&plan, &existing.cloned().unwrap_or_default(), &names, now, life)?;
        data.insert(TOKEN.to_owned(), kept.unwrap_or_else(token));
        data.insert(BUNDLE.to_owned(), pki::bundle(&data));
        data
    };
    let own = |data: &Data, key: &str| data.get(key).cloned().unwrap_or_default();
    let files = match server {
        // bosun's CAs stay trusted beside the user's (they sign only this database's
        // certificates): a standby or client that sees the new CAs before the server
        // reloads still verifies it.
        Server::Provided(p) => [
            p.cert.clone(),
            p.key.clone(),
            format!("{}\n{}", p.ca.trim_end(), own(&data, BUNDLE).trim_start()),
            p.secret.clone(),
        ],
        Server::Kept if data.contains_key(keys::SERVER_CERT) => return Ok(Some(data).filter(|d| Some(d) != existing)),
        Server::Own | Server::Kept => {
            [own(&data, keys::CERT), own(&data, keys::KEY), own(&data, BUNDLE), secret_name(db)]
        }
    };
    for (key, value) in [keys::SERVER_CERT, keys::SERVER_KEY, keys::SERVER_CA, SERVER_SOURCE].into_iter().zip(files) {
        data.insert(key.to_owned(), value);
    }
    Ok(Some(data).filter(|d| Some(d) != existing))
}

/// The key of the Secret the server's certificate comes from (this one, or the user's);
/// not mounted in the pods.
pub const SERVER_SOURCE: &str = "server-source";

/// The Secret the server's certificate in the Secret's `data` comes from.
pub fn server_source(data: &Data) -> Option<&String> {
    data.get(SERVER_SOURCE)
}

/// When the server's certificate in the Secret's `data` expires.
pub fn server_not_after(data: &Data) -> Option<jiff::Timestamp> {
    pki::not_after(data.get(keys::SERVER_CERT)?)
}

/// The CAs that verify the server's certificate, for clients (`<name>-ca`).
pub fn server_ca(data: &Data) -> Option<&String> {
    data.get(keys::SERVER_CA).filter(|ca| !ca.trim().is_empty())
}

/// The Secret with `data`, owned by `db`.
pub fn desired_secret(db: &PostgreSQL, data: &Data) -> Secret {
    let labels = crate::meta::standard_labels(crate::postgresql::APP_NAME, &db.name_any());
    Secret {
        metadata: child_meta(db, secret_name(db), labels),
        data: Some(data.iter().map(|(k, v)| (k.clone(), ByteString(v.as_bytes().to_vec()))).collect()),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// What bosun calls an instance with: the CAs to trust (the current one, and the
/// next or previous one while a rotation overlaps) and the token.
#[derive(Clone, PartialEq, Eq)]
pub struct Access {
    pub ca_bundle: String,
    pub token: String,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access").field("token", &"<redacted>").finish_non_exhaustive()
    }
}

/// The access the Secret gives; none when it is incomplete.
pub fn access(secret: &Secret) -> Option<Access> {
    let data = data(secret);
    let token = data.get(TOKEN).map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())?;
    let ca_bundle = pki::bundle(&data);
    (!ca_bundle.is_empty()).then_some(Access { ca_bundle, token })
}

/// The pod's volume of the Secret: the certificate, its key, the CAs to trust and the
/// token, and the server's certificate, key and CAs, readable by the server's group
/// only (owned by root, as PostgreSQL accepts a key); never the CA's key.
pub fn volume(db: &PostgreSQL) -> Volume {
    let item = |key: &str| KeyToPath { key: key.to_owned(), path: key.to_owned(), mode: None };
    Volume {
        name: VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret_name(db)),
            items: Some(
                [keys::CERT, keys::KEY, BUNDLE, TOKEN, keys::SERVER_CERT, keys::SERVER_KEY, keys::SERVER_CA]
                    .map(item)
                    .to_vec(),
            ),
            default_mode: Some(0o440),
            optional: None,
        }),
        ..Volume::default()
    }
}

pub fn mount() -> VolumeMount {
    VolumeMount {
        name: VOLUME.to_owned(),
        mount_path: MOUNT.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn db() -> PostgreSQL {
        serde_json::from_value(json!({
            "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "u1"},
            "spec": {"version": "15", "storage": "1Gi"},
        }))
        .unwrap()
    }

    #[test]
    fn made_once_kept_and_renewed_in_place_with_its_token() {
        let now: jiff::Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
        let made =
            desired_data(&db(), None, now, &Lifetimes::default(), || "t0k3n".into(), Server::Own).unwrap().unwrap();
        let keys_made: Vec<&str> = made.keys().map(String::as_str).collect();
        for key in ["ca.crt", "ca.key", "ca-bundle.crt", "tls.crt", "tls.key", "token", "server.crt", "server.key"] {
            assert!(keys_made.contains(&key), "{key}: {keys_made:?}");
        }
        assert_eq!(
            made["names"],
            "orders.shop.svc,orders.shop.svc.cluster.local,orders,\
             orders-ro.shop.svc,orders-ro.shop.svc.cluster.local,orders-ro,\
             *.orders-headless.shop.svc,*.orders-headless.shop.svc.cluster.local"
        );
        assert_eq!(made["ca-bundle.crt"], made["ca.crt"].trim_end().to_owned() + "\n");
        assert_eq!(
            desired_data(&db(), Some(&made), now, &Lifetimes::default(), || unreachable!(), Server::Own).unwrap(),
            None,
            "kept"
        );
        // Near the end of the serving certificate's life: a new one, the same CA and token.
        let later = now.checked_add(jiff::SignedDuration::from_hours(24 * 70)).unwrap();
        let renewed = desired_data(&db(), Some(&made), later, &Lifetimes::default(), || unreachable!(), Server::Own)
            .unwrap()
            .unwrap();
        assert_ne!(renewed["tls.crt"], made["tls.crt"]);
        assert_eq!((renewed["ca.crt"].as_str(), renewed["token"].as_str()), (made["ca.crt"].as_str(), "t0k3n"));
        // A Secret someone emptied of its certificates: new ones, the token kept.
        let mut broken = made.clone();
        broken.remove("ca.crt");
        let remade = desired_data(&db(), Some(&broken), now, &Lifetimes::default(), || unreachable!(), Server::Own)
            .unwrap()
            .unwrap();
        assert_eq!(remade["token"], "t0k3n");
        assert_ne!(remade["ca.key"], made["ca.key"]);
        // A Secret of a release before the bundle: the bundle added, nothing else changed.
        let mut older = made.clone();
        older.remove("ca-bundle.crt");
        let bundled = desired_data(&db(), Some(&older), now, &Lifetimes::default(), || unreachable!(), Server::Own)
            .unwrap()
            .unwrap();
        assert_eq!(bundled, made);
        // While the CA rotates, both are trusted, in the bundle and in `<name>-ca`.
        let rotating = later.checked_add(jiff::SignedDuration::from_hours(24 * 365 * 9)).unwrap();
        let next = desired_data(&db(), Some(&renewed), rotating, &Lifetimes::default(), || unreachable!(), Server::Own)
            .unwrap()
            .unwrap();
        assert!(next.contains_key("next-ca.crt"));
        assert_eq!(next["ca-bundle.crt"].matches("BEGIN CERTIFICATE").count(), 2);
        let published = desired_ca_secret(&db(), &next["ca-bundle.crt"]);
        assert_eq!(published.metadata.name.as_deref(), Some("orders-ca"));
        assert_eq!(published.data.unwrap()["ca.crt"].0, next["ca-bundle.crt"].as_bytes());
    }

    #[test]
    fn the_server_serves_bosuns_certificate_or_the_users_and_keeps_it_when_it_cannot_be_checked() {
        let now: jiff::Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
        let life = Lifetimes::default();
        let made = desired_data(&db(), None, now, &life, || "t".into(), Server::Own).unwrap().unwrap();
        assert_eq!((&made["server.crt"], &made["server.key"]), (&made["tls.crt"], &made["tls.key"]));
        assert_eq!(server_ca(&made), Some(&made["ca-bundle.crt"]));
        assert_eq!(server_not_after(&made), pki::not_after(&made["tls.crt"]));
        assert_eq!(server_source(&made).map(String::as_str), Some("orders-instance"));
        let (ca, ca_key) = pki::new_ca(now, std::time::Duration::from_secs(86400 * 365)).unwrap();
        let (cert, key) =
            pki::new_serving(&ca, &ca_key, &["orders".into()], now, std::time::Duration::from_secs(86400 * 30))
                .unwrap();
        let not_after = pki::not_after(&cert).unwrap();
        let provided =
            Provided { secret: "orders-tls".into(), cert: cert.clone(), key: key.clone(), ca: ca.clone(), not_after };
        let switched = desired_data(&db(), Some(&made), now, &life, || unreachable!(), Server::Provided(&provided))
            .unwrap()
            .unwrap();
        assert_eq!((&switched["server.crt"], &switched["server.key"]), (&cert, &key));
        assert_eq!(switched["server-ca.crt"], format!("{}\n{}", ca.trim_end(), made["ca-bundle.crt"]), "both trusted");
        assert_eq!((&switched["tls.crt"], &switched["token"]), (&made["tls.crt"], &made["token"]), "the API's kept");
        assert_eq!(server_source(&switched).map(String::as_str), Some("orders-tls"));
        assert_eq!(
            desired_data(&db(), Some(&switched), now, &life, || unreachable!(), Server::Provided(&provided)).unwrap(),
            None
        );
        // A provided certificate that no longer checks out: the instances keep it.
        assert_eq!(desired_data(&db(), Some(&switched), now, &life, || unreachable!(), Server::Kept).unwrap(), None);
        // Back to bosun's own.
        let back = desired_data(&db(), Some(&switched), now, &life, || unreachable!(), Server::Own).unwrap().unwrap();
        assert_eq!(back["server.crt"], made["tls.crt"]);
        assert_eq!(server_source(&back).map(String::as_str), Some("orders-instance"));
        // A Secret of a release before the server's files: bosun's added.
        let mut older = made.clone();
        for key in ["server.crt", "server.key", "server-ca.crt", "server-source"] {
            older.remove(key);
        }
        assert_eq!(desired_data(&db(), Some(&older), now, &life, || unreachable!(), Server::Kept).unwrap(), Some(made));
    }

    #[test]
    fn the_pods_get_the_certificate_and_token_never_the_cas_key() {
        let volume = volume(&db());
        let secret = volume.secret.unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("orders-instance"));
        let items: Vec<String> = secret.items.unwrap().into_iter().map(|i| i.key).collect();
        assert_eq!(
            items,
            ["tls.crt", "tls.key", "ca-bundle.crt", "token", "server.crt", "server.key", "server-ca.crt"]
        );
        assert_eq!(server_name(&db(), "orders-1"), "orders-1.orders-headless.shop.svc");
        let now: jiff::Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
        let data = desired_data(&db(), None, now, &Lifetimes::default(), || "t".into(), Server::Own).unwrap().unwrap();
        let access = access(&desired_secret(&db(), &data)).unwrap();
        assert_eq!(access.token, "t");
        assert!(access.ca_bundle.starts_with("-----BEGIN CERTIFICATE-----"));
        let printed = format!("{access:?}");
        assert!(printed.contains("<redacted>") && !printed.contains("BEGIN"), "{printed}");
    }
}
