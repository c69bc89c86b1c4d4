//! Certificates bosun manages (the webhook's, each PostgreSQL's instances'): a CA and
//! a serving certificate it signs, kept in one Secret, renewed and rotated by a plan
//! that is a pure function of the Secret and the clock.
//!
//! ```text
//!  Secret (or none) + now + Lifetimes ──plan──▶ Keep | Create | RenewServing | TrustNextCa | PromoteNextCa | DropPreviousCa
//! ```
//!
//! CA rotation keeps the old and the new CA trusted together: the next CA joins the
//! bundle first (`TrustNextCa`); only after `overlap` — long enough for the bundle to
//! reach the webhook configurations and for every replica to reload — does it sign the
//! serving certificate (`PromoteNextCa`); and the previous CA leaves the bundle another
//! `overlap` later (`DropPreviousCa`), once every replica serves a certificate of the
//! new one. Replicas agree through the Secret: each writes only with the
//! resourceVersion it read, so one wins and the others re-read.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};

/// Keys of the certificate Secret.
pub mod keys {
    pub const CA_CERT: &str = "ca.crt";
    pub const CA_KEY: &str = "ca.key";
    pub const NEXT_CA_CERT: &str = "next-ca.crt";
    pub const NEXT_CA_KEY: &str = "next-ca.key";
    pub const PREVIOUS_CA_CERT: &str = "previous-ca.crt";
    pub const TLS_CERT: &str = "tls.crt";
    pub const TLS_KEY: &str = "tls.key";
    /// When the current phase began (RFC 3339), for the overlaps.
    pub const PHASE_SINCE: &str = "phase-since";
    /// The names the serving certificate was issued for, comma-separated.
    pub const NAMES: &str = "names";
}

/// How long certificates live and when they are replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    pub serving: Duration,
    /// Renew the serving certificate this long before it expires.
    pub serving_renew_before: Duration,
    pub ca: Duration,
    /// Start rotating the CA this long before it expires (must exceed 2 × overlap).
    pub ca_renew_before: Duration,
    /// How long old and new trust overlap.
    pub overlap: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        Self {
            serving: Duration::from_secs(90 * DAY),
            serving_renew_before: Duration::from_secs(30 * DAY),
            ca: Duration::from_secs(10 * 365 * DAY),
            ca_renew_before: Duration::from_secs(365 * DAY),
            overlap: Duration::from_secs(300),
        }
    }
}

/// The Secret's data, as text.
pub type Data = BTreeMap<String, String>;

/// What to do with the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    Keep,
    /// No usable Secret: a new CA and serving certificate.
    Create,
    /// The serving certificate expires soon (or names other hosts): a new one from the CA.
    RenewServing,
    /// The CA expires soon: a next CA, trusted beside it.
    TrustNextCa,
    /// The next CA has been trusted long enough: it becomes the CA and signs.
    PromoteNextCa,
    /// The previous CA has been kept long enough.
    DropPreviousCa,
}

fn expires(pem: Option<&String>) -> Option<Timestamp> {
    not_after(pem?)
}

/// When the first certificate in `pem` expires.
pub fn not_after(pem: &str) -> Option<Timestamp> {
    let (_, der) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = der.parse_x509().ok()?;
    Timestamp::from_second(cert.validity().not_after.timestamp()).ok()
}

fn since(data: &Data) -> Option<Timestamp> {
    data.get(keys::PHASE_SINCE)?.parse().ok()
}

fn within(at: Timestamp, now: Timestamp, before: Duration) -> bool {
    at.as_second() - now.as_second() <= before.as_secs() as i64
}

/// What the Secret `data` (None: there is none) needs at `now` for `names`.
pub fn plan(data: Option<&Data>, names: &[String], now: Timestamp, life: &Lifetimes) -> Plan {
    let Some(data) = data else { return Plan::Create };
    let (Some(ca), Some(serving)) = (expires(data.get(keys::CA_CERT)), expires(data.get(keys::TLS_CERT))) else {
        return Plan::Create;
    };
    if !data.contains_key(keys::CA_KEY) || !data.contains_key(keys::TLS_KEY) || ca <= now {
        return Plan::Create;
    }
    let overlap_over = since(data).is_none_or(|t| now.as_second() - t.as_second() >= life.overlap.as_secs() as i64);
    if data.contains_key(keys::NEXT_CA_CERT) {
        return if overlap_over { Plan::PromoteNextCa } else { Plan::Keep };
    }
    if data.contains_key(keys::PREVIOUS_CA_CERT) && overlap_over {
        return Plan::DropPreviousCa;
    }
    if !data.contains_key(keys::PREVIOUS_CA_CERT) && within(ca, now, life.ca_renew_before) {
        return Plan::TrustNextCa;
    }
    let issued_for = data.get(keys::NAMES).map(String::as_str).unwrap_or_default();
    if within(serving, now, life.serving_renew_before) || issued_for != names.join(",") {
        return Plan::RenewServing;
    }
    Plan::Keep
}

/// When the Secret `data` next needs a step of [`plan`] (for `names`), if it is
/// usable: the end of an overlap, or the renewal of the serving certificate or the CA.
pub fn next_due(data: &Data, life: &Lifetimes) -> Option<Timestamp> {
    let seconds = |d: Duration| jiff::SignedDuration::from_secs(d.as_secs() as i64);
    let overlap_end = since(data).and_then(|t| t.checked_add(seconds(life.overlap)).ok());
    let ca = expires(data.get(keys::CA_CERT))?.checked_sub(seconds(life.ca_renew_before)).ok();
    let serving = expires(data.get(keys::TLS_CERT))?.checked_sub(seconds(life.serving_renew_before)).ok();
    // As `plan` takes them: a next CA waits for its overlap alone; a previous one is
    // dropped at its overlap's end, and the CA is not replaced again before.
    if data.contains_key(keys::NEXT_CA_CERT) {
        return overlap_end;
    }
    let next = if data.contains_key(keys::PREVIOUS_CA_CERT) { overlap_end } else { ca };
    [next, serving].into_iter().flatten().min()
}

/// Carry out `plan` on `data` (empty for `Create`); returns the new data.
pub fn apply(plan: &Plan, data: &Data, names: &[String], now: Timestamp, life: &Lifetimes) -> Result<Data, String> {
    let mut data = data.clone();
    let stamp = |data: &mut Data| {
        data.insert(keys::PHASE_SINCE.to_owned(), now.to_string());
    };
    match plan {
        Plan::Keep => {}
        Plan::Create => {
            data.clear();
            let (ca, ca_key) = new_ca(now, life.ca)?;
            let (tls, tls_key) = new_serving(&ca, &ca_key, names, now, life.serving)?;
            data.extend([
                (keys::CA_CERT.to_owned(), ca),
                (keys::CA_KEY.to_owned(), ca_key),
                (keys::TLS_CERT.to_owned(), tls),
                (keys::TLS_KEY.to_owned(), tls_key),
            ]);
            stamp(&mut data);
        }
        Plan::RenewServing => {
            let (tls, tls_key) = new_serving(&data[keys::CA_CERT], &data[keys::CA_KEY], names, now, life.serving)?;
            data.insert(keys::TLS_CERT.to_owned(), tls);
            data.insert(keys::TLS_KEY.to_owned(), tls_key);
        }
        Plan::TrustNextCa => {
            let (ca, ca_key) = new_ca(now, life.ca)?;
            data.insert(keys::NEXT_CA_CERT.to_owned(), ca);
            data.insert(keys::NEXT_CA_KEY.to_owned(), ca_key);
            stamp(&mut data);
        }
        Plan::PromoteNextCa => {
            let (Some(next), Some(next_key)) = (data.remove(keys::NEXT_CA_CERT), data.remove(keys::NEXT_CA_KEY)) else {
                return Err("no next CA to promote".to_owned());
            };
            if let Some(old) = data.insert(keys::CA_CERT.to_owned(), next.clone()) {
                data.insert(keys::PREVIOUS_CA_CERT.to_owned(), old);
            }
            data.insert(keys::CA_KEY.to_owned(), next_key.clone());
            let (tls, tls_key) = new_serving(&next, &next_key, names, now, life.serving)?;
            data.insert(keys::TLS_CERT.to_owned(), tls);
            data.insert(keys::TLS_KEY.to_owned(), tls_key);
            stamp(&mut data);
        }
        Plan::DropPreviousCa => {
            data.remove(keys::PREVIOUS_CA_CERT);
            stamp(&mut data);
        }
    }
    if matches!(plan, Plan::Create | Plan::RenewServing | Plan::PromoteNextCa) {
        data.insert(keys::NAMES.to_owned(), names.join(","));
    }
    Ok(data)
}

/// The CAs the apiserver must trust: the current one, and the next or previous one
/// while a rotation overlaps.
pub fn bundle(data: &Data) -> String {
    [keys::CA_CERT, keys::NEXT_CA_CERT, keys::PREVIOUS_CA_CERT]
        .iter()
        .filter_map(|k| data.get(*k))
        .map(|pem| pem.trim_end().to_owned() + "\n")
        .collect()
}

fn offset(t: Timestamp) -> Result<time::OffsetDateTime, String> {
    time::OffsetDateTime::from_unix_timestamp(t.as_second()).map_err(|e| e.to_string())
}

fn validity(params: &mut CertificateParams, now: Timestamp, lifetime: Duration) -> Result<(), String> {
    // A minute of slack before now, for clocks a little behind.
    params.not_before = offset(now)? - time::Duration::minutes(1);
    params.not_after = offset(now)? + time::Duration::seconds(lifetime.as_secs() as i64);
    Ok(())
}

fn ca_params(now: Timestamp, lifetime: Duration) -> Result<CertificateParams, String> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.distinguished_name.push(DnType::CommonName, format!("bosun CA {}", now.as_second()));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    validity(&mut params, now, lifetime)?;
    Ok(params)
}

/// A new self-signed CA: (certificate PEM, key PEM).
pub fn new_ca(now: Timestamp, lifetime: Duration) -> Result<(String, String), String> {
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = ca_params(now, lifetime)?.self_signed(&key).map_err(|e| e.to_string())?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate for `names` (DNS names or IP addresses) signed by the CA.
pub fn new_serving(
    ca_pem: &str,
    ca_key_pem: &str,
    names: &[String],
    now: Timestamp,
    lifetime: Duration,
) -> Result<(String, String), String> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| format!("the CA key: {e}"))?;
    let issuer = Issuer::from_ca_cert_pem(ca_pem, ca_key).map_err(|e| format!("the CA certificate: {e}"))?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(DnType::CommonName, names.first().cloned().unwrap_or_else(|| "bosun-webhook".to_owned()));
    params.subject_alt_names = names
        .iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => n.clone().try_into().map(SanType::DnsName).map_err(|e: rcgen::Error| e.to_string()),
        })
        .collect::<Result<_, _>>()?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    validity(&mut params, now, lifetime)?;
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.signed_by(&key, &issuer).map_err(|e| e.to_string())?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["bosun-webhook-service.bosun-system.svc".into(), "127.0.0.1".into()]
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn short() -> Lifetimes {
        Lifetimes {
            serving: Duration::from_secs(120),
            serving_renew_before: Duration::from_secs(60),
            ca: Duration::from_secs(3600),
            ca_renew_before: Duration::from_secs(600),
            overlap: Duration::from_secs(30),
        }
    }

    #[test]
    fn a_fresh_secret_is_kept_until_the_serving_certificate_is_due() {
        let life = short();
        assert_eq!(plan(None, &names(), at(0), &life), Plan::Create);
        let data = apply(&Plan::Create, &Data::new(), &names(), at(0), &life).unwrap();
        assert_eq!(plan(Some(&data), &names(), at(10), &life), Plan::Keep);
        assert_eq!(plan(Some(&data), &names(), at(61), &life), Plan::RenewServing);
        let other = vec!["elsewhere.svc".to_owned()];
        assert_eq!(plan(Some(&data), &other, at(10), &life), Plan::RenewServing, "new names need a new certificate");
        let renewed = apply(&Plan::RenewServing, &data, &names(), at(61), &life).unwrap();
        assert_eq!(renewed[keys::CA_CERT], data[keys::CA_CERT], "renewal keeps the CA");
        assert_ne!(renewed[keys::TLS_CERT], data[keys::TLS_CERT]);
        assert!(not_after(&renewed[keys::TLS_CERT]).unwrap() > not_after(&data[keys::TLS_CERT]).unwrap());
        assert_eq!(plan(Some(&renewed), &names(), at(62), &life), Plan::Keep);
        assert_eq!(bundle(&renewed), data[keys::CA_CERT].trim_end().to_owned() + "\n");
    }

    #[test]
    fn the_ca_rotates_with_both_trusted_while_it_overlaps() {
        let life = short();
        let data = apply(&Plan::Create, &Data::new(), &names(), at(0), &life).unwrap();
        // Ten minutes before the CA expires: the next CA is trusted, not yet signing.
        let t = 3600 - 600 + 1;
        assert_eq!(plan(Some(&data), &names(), at(t), &life), Plan::TrustNextCa);
        let trusted = apply(&Plan::TrustNextCa, &data, &names(), at(t), &life).unwrap();
        assert_eq!(trusted[keys::TLS_CERT], data[keys::TLS_CERT]);
        assert_eq!(bundle(&trusted).matches("BEGIN CERTIFICATE").count(), 2);
        assert_eq!(plan(Some(&trusted), &names(), at(t + 10), &life), Plan::Keep, "still overlapping");
        assert_eq!(plan(Some(&trusted), &names(), at(t + 31), &life), Plan::PromoteNextCa);
        let promoted = apply(&Plan::PromoteNextCa, &trusted, &names(), at(t + 31), &life).unwrap();
        assert_eq!(promoted[keys::CA_CERT], trusted[keys::NEXT_CA_CERT]);
        assert_eq!(promoted[keys::PREVIOUS_CA_CERT], data[keys::CA_CERT]);
        assert_eq!(bundle(&promoted).matches("BEGIN CERTIFICATE").count(), 2, "the old CA is still trusted");
        assert_eq!(plan(Some(&promoted), &names(), at(t + 40), &life), Plan::Keep);
        assert_eq!(plan(Some(&promoted), &names(), at(t + 62), &life), Plan::DropPreviousCa);
        let dropped = apply(&Plan::DropPreviousCa, &promoted, &names(), at(t + 62), &life).unwrap();
        assert_eq!(bundle(&dropped), promoted[keys::CA_CERT].trim_end().to_owned() + "\n");
    }

    #[test]
    fn the_next_step_is_due_at_the_end_of_an_overlap_or_at_a_renewal() {
        let life = short();
        let data = apply(&Plan::Create, &Data::new(), &names(), at(0), &life).unwrap();
        // Serving: 120 s, renewed 60 s before; the CA's renewal (3000 s) comes later.
        assert_eq!(next_due(&data, &life), Some(at(60)));
        let trusted = apply(&Plan::TrustNextCa, &data, &names(), at(10), &life).unwrap();
        assert_eq!(next_due(&trusted, &life), Some(at(40)), "the overlap ends first");
        assert_eq!(plan(Some(&trusted), &names(), at(40), &life), Plan::PromoteNextCa);
    }

    #[test]
    fn a_secret_that_is_not_usable_is_made_again() {
        let mut data = apply(&Plan::Create, &Data::new(), &names(), at(0), &short()).unwrap();
        data.insert(keys::TLS_CERT.into(), "garbage".into());
        assert_eq!(plan(Some(&data), &names(), at(1), &short()), Plan::Create);
    }

    #[test]
    fn the_serving_certificate_chains_to_the_ca_for_its_names() {
        use tokio_rustls::rustls::RootCertStore;
        use tokio_rustls::rustls::client::WebPkiServerVerifier;
        use tokio_rustls::rustls::client::danger::ServerCertVerifier;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};

        let now = Timestamp::now();
        let data = apply(&Plan::Create, &Data::new(), &names(), now, &Lifetimes::default()).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(data[keys::CA_CERT].as_bytes()).unwrap()).unwrap();
        let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let verifier =
            WebPkiServerVerifier::builder_with_provider(std::sync::Arc::new(roots), provider).build().unwrap();
        let leaf = CertificateDer::from_pem_slice(data[keys::TLS_CERT].as_bytes()).unwrap();
        for name in ["bosun-webhook-service.bosun-system.svc", "127.0.0.1"] {
            let server = ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(&leaf, &[], &server, &[], UnixTime::now())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let elsewhere = ServerName::try_from("other.example.com").unwrap();
        assert!(verifier.verify_server_cert(&leaf, &[], &elsewhere, &[], UnixTime::now()).is_err());
    }
}
