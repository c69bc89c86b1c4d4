//! A server certificate the user provides (`spec.certificates`, e.g. cert-manager's
//! Secret), checked before any instance sees it: bosun copies it into the instance
//! Secret only when it parses, its key matches, the CA verifies it for the Service's
//! name and it has not expired. Anything else is refused with a message naming the
//! field and the Secret, and the instances keep the certificate they have.
//!
//! ```text
//!  PostgreSQL + its Secrets (as read) + now ──check──▶ Provided | why not, naming the field
//! ```

use std::sync::Arc;

use bosun_api::postgresql::PostgreSQL;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::ServerCertVerifier;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{CertificateError, Error as TlsError, RootCertStore};

use crate::pki::keys;

pub const TLS_FIELD: &str = "spec.certificates.serverTLSSecret";
pub const CA_FIELD: &str = "spec.certificates.serverCASecret";

/// The user's certificate, checked: the chain, its key, the CAs that verify it, and
/// when it expires.
#[derive(Clone, PartialEq, Eq)]
pub struct Provided {
    pub secret: String,
    pub cert: String,
    pub key: String,
    pub ca: String,
    pub not_after: Timestamp,
}

impl std::fmt::Debug for Provided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provided").field("secret", &self.secret).field("not_after", &self.not_after).finish()
    }
}

/// The Secrets `db`'s `spec.certificates` names: (the TLS Secret's, the CA's), the CA's
/// only when it names one.
pub fn secret_names(db: &PostgreSQL) -> Option<(String, Option<String>)> {
    let certificates = db.spec.certificates.as_ref()?;
    Some((certificates.server_tls_secret.clone(), certificates.server_ca_secret.clone()))
}

/// Check the Secrets `spec.certificates` names, as read (`None`: not found), at `now`.
pub fn check(db: &PostgreSQL, tls: Option<&Secret>, ca: Option<&Secret>, now: Timestamp) -> Result<Provided, String> {
    let Some((tls_name, ca_name)) = secret_names(db) else {
        return Err("spec.certificates is not set".to_owned());
    };
    let ns = db.namespace().unwrap_or_default();
    let at = |field: &str, secret: &str| format!("{field}: Secret {ns}/{secret}");
    let tls_at = at(TLS_FIELD, &tls_name);
    let tls = tls.ok_or_else(|| {
        format!("{tls_at} does not exist: create it (type kubernetes.io/tls, with tls.crt and tls.key), e.g. with cert-manager")
    })?;
    let cert = text(tls, keys::TLS_CERT).ok_or_else(|| format!("{tls_at} has no (or an empty) key tls.crt"))?;
    let key = text(tls, keys::TLS_KEY).ok_or_else(|| format!("{tls_at} has no (or an empty) key tls.key"))?;
    let (ca, ca_at) = match &ca_name {
        Some(name) => {
            let ca_at = at(CA_FIELD, name);
            let secret = ca.ok_or_else(|| format!("{ca_at} does not exist: create it with the CA's certificate as ca.crt"))?;
            (text(secret, keys::CA_CERT).ok_or_else(|| format!("{ca_at} has no (or an empty) key ca.crt"))?, ca_at)
        }
        None => (
            text(tls, keys::CA_CERT).ok_or_else(|| {
                format!("{tls_at} has no ca.crt, the CA that signs tls.crt: add it, or name a Secret holding it in {CA_FIELD}")
            })?,
            tls_at.clone(),
        ),
    };
    let chain = certificates(&cert).map_err(|why| format!("{tls_at}: tls.crt {why}"))?;
    let roots = certificates(&ca).map_err(|why| format!("{ca_at}: ca.crt {why}"))?;
    let private = PrivateKeyDer::from_pem_slice(key.as_bytes())
        .map_err(|_| format!("{tls_at}: tls.key holds no PEM private key (PKCS#8, PKCS#1 or SEC1)"))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let signing = provider
        .key_provider
        .load_private_key(private)
        .map_err(|why| format!("{tls_at}: tls.key is not a key PostgreSQL can serve with: {why}"))?;
    CertifiedKey::new(chain.clone(), signing)
        .keys_match()
        .map_err(|_| format!("{tls_at}: tls.key is not the key of tls.crt's certificate"))?;
    let not_after = crate::pki::not_after(&cert).ok_or_else(|| format!("{tls_at}: tls.crt cannot be read"))?;
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add(root).map_err(|why| format!("{ca_at}: ca.crt is not a CA certificate: {why}"))?;
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
        .build()
        .map_err(|why| format!("{ca_at}: ca.crt: {why}"))?;
    let service = db.name_any();
    let name = ServerName::try_from(service.clone()).map_err(|e| e.to_string())?;
    let when = UnixTime::since_unix_epoch(std::time::Duration::from_secs(u64::try_from(now.as_second()).unwrap_or(0)));
    let (end, intermediates) = chain.split_first().ok_or_else(|| format!("{tls_at}: tls.crt is empty"))?;
    verifier.verify_server_cert(end, intermediates, &name, &[], when).map_err(|why| match why {
        TlsError::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
            format!("{tls_at}: the certificate expired at {not_after}: clients that verify it fail; renew it")
        }
        TlsError::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "{tls_at}: the certificate does not name {service}, the Service the standbys verify the primary by: add \
             it to its DNS names (with the names clients use: {service}-ro, {service}.{ns}.svc, …)"
        ),
        TlsError::InvalidCertificate(
            CertificateError::UnknownIssuer
            | CertificateError::BadSignature
            | CertificateError::UnhandledCriticalExtension,
        ) => format!("{tls_at}: tls.crt is not signed by the CA of {ca_at}'s ca.crt"),
        other => format!("{tls_at}: the certificate does not verify with the CA of {ca_at}'s ca.crt: {other}"),
    })?;
    Ok(Provided { secret: tls_name, cert, key, ca, not_after })
}

/// A key's value as text, when it has some.
fn text(secret: &Secret, key: &str) -> Option<String> {
    let value = secret.data.as_ref()?.get(key)?;
    String::from_utf8(value.0.clone()).ok().filter(|v| !v.trim().is_empty())
}

/// The PEM certificates of `pem`, at least one.
fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "is not PEM certificates".to_owned())?;
    if certs.is_empty() { Err("holds no PEM certificate".to_owned()) } else { Ok(certs) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use k8s_openapi::ByteString;
    use serde_json::json;

    use super::*;

    fn db(ca: Option<&str>) -> PostgreSQL {
        let mut certificates = json!({"serverTLSSecret": "orders-tls"});
        if let Some(ca) = ca {
            certificates["serverCASecret"] = json!(ca);
        }
        serde_json::from_value(json!({
            "apiVersion": "database.example.com/v1", "kind": "PostgreSQL",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "u1"},
            "spec": {"version": "15", "storage": "1Gi", "certificates": certificates},
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-11-28T12:00:00Z".parse().unwrap()
    }

    fn secret(data: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(data.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec()))).collect()),
            ..Secret::default()
        }
    }

    /// A CA, and a certificate it signs for `names` valid for `days` from `now()`.
    fn issued(names: &[&str], days: u64) -> (String, String, String) {
        let (ca, ca_key) = crate::pki::new_ca(now(), Duration::from_secs(3650 * 86400)).unwrap();
        let (cert, key) = signed(&ca, &ca_key, names, days);
        (ca, cert, key)
    }

    fn signed(ca: &str, ca_key: &str, names: &[&str], days: u64) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        crate::pki::new_serving(ca, ca_key, &names, now(), Duration::from_secs(days * 86400)).unwrap()
    }

    #[test]
    fn a_good_certificate_from_a_cert_manager_secret_or_with_a_ca_secret_is_taken() {
        let (ca, cert, key) = issued(&["orders", "orders-ro", "orders.shop.svc"], 90);
        let tls = secret(&[("tls.crt", &cert), ("tls.key", &key), ("ca.crt", &ca)]);
        let provided = check(&db(None), Some(&tls), None, now()).unwrap();
        assert_eq!(
            (provided.secret.as_str(), provided.ca.as_str(), provided.cert.as_str()),
            ("orders-tls", ca.as_str(), cert.as_str())
        );
        assert_eq!(provided.not_after, crate::pki::not_after(&cert).unwrap());
        assert!(!format!("{provided:?}").contains("PRIVATE"), "the key is not printed");
        let tls = secret(&[("tls.crt", &cert), ("tls.key", &key)]);
        let ca_secret = secret(&[("ca.crt", &ca)]);
        assert!(check(&db(Some("orders-ca-src")), Some(&tls), Some(&ca_secret), now()).is_ok());
    }

    #[test]
    fn each_fault_names_the_field_and_the_secret() {
        let (ca, ca_key) = crate::pki::new_ca(now(), Duration::from_secs(3650 * 86400)).unwrap();
        let (cert, key) = signed(&ca, &ca_key, &["orders"], 90);
        let (other_ca, other_cert, other_key) = issued(&["orders"], 90);
        let (unnamed, unnamed_key) = signed(&ca, &ca_key, &["elsewhere", "orders.shop.svc"], 90);
        let good = [("tls.crt", cert.as_str()), ("tls.key", key.as_str()), ("ca.crt", ca.as_str())];
        let with = |replaced: &[(&str, &str)]| {
            let mut data: Vec<(&str, &str)> =
                good.iter().filter(|(k, _)| !replaced.iter().any(|(r, _)| r == k)).copied().collect();
            data.extend(replaced.iter().filter(|(_, v)| !v.is_empty()).copied());
            secret(&data)
        };
        let cases: Vec<(Option<Secret>, &str)> = vec![
            (None, "spec.certificates.serverTLSSecret: Secret shop/orders-tls does not exist"),
            (Some(with(&[("tls.crt", "")])), "Secret shop/orders-tls has no (or an empty) key tls.crt"),
            (Some(with(&[("tls.key", "")])), "Secret shop/orders-tls has no (or an empty) key tls.key"),
            (Some(with(&[("ca.crt", "")])), "Secret shop/orders-tls has no ca.crt"),
            (Some(with(&[("tls.crt", "not a certificate")])), "orders-tls: tls.crt holds no PEM certificate"),
            (Some(with(&[("tls.key", "garbage")])), "tls.key holds no PEM private key"),
            (Some(with(&[("tls.key", &other_key)])), "tls.key is not the key of tls.crt's certificate"),
            (Some(with(&[("ca.crt", &other_ca)])), "tls.crt is not signed by the CA of"),
            (Some(with(&[("tls.crt", &unnamed), ("tls.key", &unnamed_key)])), "does not name orders, the Service"),
            (Some(with(&[("tls.crt", &other_cert), ("tls.key", &other_key)])), "is not signed by the CA"),
        ];
        for (tls, expected) in cases {
            let why = check(&db(None), tls.as_ref(), None, now()).unwrap_err();
            assert!(why.starts_with("spec.certificates.serverTLSSecret: Secret shop/orders-tls"), "{why}");
            assert!(why.contains(expected), "{expected:?} in {why}");
            assert!(!why.contains("PRIVATE KEY"), "{why}");
        }
        let tls = secret(&[("tls.crt", &cert), ("tls.key", &key)]);
        let why = check(&db(Some("orders-ca-src")), Some(&tls), None, now()).unwrap_err();
        assert!(why.starts_with("spec.certificates.serverCASecret: Secret shop/orders-ca-src does not exist"), "{why}");
        let why = check(&db(Some("orders-ca-src")), Some(&tls), Some(&secret(&[])), now()).unwrap_err();
        assert!(why.contains("orders-ca-src has no (or an empty) key ca.crt"), "{why}");
    }

    #[test]
    fn an_expired_certificate_is_refused_with_its_date() {
        let (ca, cert, key) = issued(&["orders"], 2);
        let tls = secret(&[("tls.crt", &cert), ("tls.key", &key), ("ca.crt", &ca)]);
        assert!(check(&db(None), Some(&tls), None, now()).is_ok());
        let later = now().checked_add(jiff::SignedDuration::from_hours(24 * 3)).unwrap();
        let why = check(&db(None), Some(&tls), None, later).unwrap_err();
        let expired = crate::pki::not_after(&cert).unwrap();
        assert!(why.contains(&format!("the certificate expired at {expired}")), "{why}");
    }
}
