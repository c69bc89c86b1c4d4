//! The local cluster's certificates and keys: one CA, the apiserver's serving
//! certificate, a client certificate per identity, and the ServiceAccount token
//! signing key pair. ECDSA P-256 throughout (etcd, the apiserver, kubelet, curl and
//! rustls all take it), valid for a year, the keys readable by their owner only.
//!
//! Layout of the directory (as the components' flags name the files):
//! `ca.crt`/`ca.key`, `<name>.crt`/`<name>.key` per identity, `sa.key`/`sa.pub`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use crate::supervise::write_private;

/// Who a client certificate says it is: the common name is the user, the
/// organisations are its groups.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The file name (`<name>.crt`, `<name>.key`) and the kubeconfig's user.
    pub name: &'static str,
    pub user: String,
    pub groups: &'static [&'static str],
}

fn identity(name: &'static str, user: &str, groups: &'static [&'static str]) -> Identity {
    Identity { name, user: user.to_owned(), groups }
}

/// The control plane's identities. `system:masters` bypasses RBAC; the
/// controller-manager and the scheduler get the user names the built-in RBAC policy
/// grants exactly their permissions.
pub fn control_plane() -> [Identity; 3] {
    [
        identity("admin", "bosun-admin", &["system:masters"]),
        identity("kube-controller-manager", "system:kube-controller-manager", &[]),
        identity("kube-scheduler", "system:kube-scheduler", &[]),
    ]
}

/// A kubelet's identity: its node's user, `system:node:<name>` in `system:nodes` (the
/// Node authorizer and NodeRestriction then let it touch its own node's objects only).
pub fn kubelet(name: &'static str, node_name: &str) -> Identity {
    identity(name, &format!("system:node:{node_name}"), &["system:nodes"])
}

/// The first real node's identities: its kubelet's, and those of the cluster-wide
/// components that run beside it.
pub fn node(node_name: &str) -> [Identity; 4] {
    [
        kubelet("node", node_name),
        identity("kube-proxy", "system:kube-proxy", &[]),
        identity("coredns", "bosun:coredns", &[]),
        // The apiserver's own client certificate for calling kubelets (logs, exec).
        identity("kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client", &[]),
    ]
}

/// A directory of certificates.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
}

fn validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    // A minute of slack for clocks a little behind.
    params.not_before = now - time::Duration::minutes(1);
    params.not_after = now + time::Duration::days(365);
}

fn write_pair(dir: &Path, name: &str, cert_pem: &str, key: &KeyPair) -> Result<()> {
    std::fs::write(dir.join(format!("{name}.crt")), cert_pem).with_context(|| format!("writing {name}.crt"))?;
    write_private(&dir.join(format!("{name}.key")), key.serialize_pem().as_bytes())
}

impl Pki {
    pub fn at(dir: &Path) -> Pki {
        Pki { dir: dir.to_owned() }
    }

    pub fn cert(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.crt"))
    }

    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.key"))
    }

    /// A new CA, the apiserver's serving certificate for `names` (IP addresses and
    /// DNS names: every address clients use, the `kubernetes` Service's included),
    /// the control plane's client certificates and the ServiceAccount key pair.
    pub fn create(dir: &Path, apiserver_names: &[String]) -> Result<Pki> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name.push(DnType::CommonName, "bosun-local-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut ca);
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        write_pair(dir, "ca", &ca_cert.pem(), &ca_key)?;
        let pki = Pki::at(dir);
        let issuer = Issuer::new(ca, ca_key);
        pki.issue(&issuer, "apiserver", "kube-apiserver", &[], apiserver_names, ExtendedKeyUsagePurpose::ServerAuth)?;
        pki.issue_clients(&issuer, &control_plane())?;
        // Signs ServiceAccount tokens (the controller-manager its legacy token Secrets too).
        let sa = KeyPair::generate()?;
        write_private(&dir.join("sa.key"), sa.serialize_pem().as_bytes())?;
        std::fs::write(dir.join("sa.pub"), sa.public_key_pem())?;
        Ok(pki)
    }

    /// Client certificates for `identities`, signed by the directory's CA.
    pub fn clients(&self, identities: &[Identity]) -> Result<()> {
        let ca_key = KeyPair::from_pem(&std::fs::read_to_string(self.key("ca")).context("the CA's key")?)?;
        let ca_pem = std::fs::read_to_string(self.cert("ca")).context("the CA's certificate")?;
        self.issue_clients(&Issuer::from_ca_cert_pem(&ca_pem, ca_key)?, identities)
    }

    fn issue_clients(&self, issuer: &Issuer<'_, KeyPair>, identities: &[Identity]) -> Result<()> {
        for id in identities {
            self.issue(issuer, id.name, &id.user, id.groups, &[], ExtendedKeyUsagePurpose::ClientAuth)?;
        }
        Ok(())
    }

    fn issue(
        &self,
        issuer: &Issuer<'_, KeyPair>,
        name: &str,
        common_name: &str,
        organisations: &[&str],
        alt_names: &[String],
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<()> {
        // IP addresses among the names become IP SANs.
        let mut params = CertificateParams::new(alt_names.to_vec())?;
        for o in organisations {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, issuer).with_context(|| format!("signing {name}'s certificate"))?;
        write_pair(&self.dir, name, &cert.pem(), &key)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::process::Command;

    fn openssl(args: &[&str]) -> (bool, String) {
        let out = Command::new("openssl").args(args).output().expect("openssl");
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    }

    #[test]
    fn every_certificate_verifies_against_the_ca_with_its_names_and_groups() {
        let dir = std::env::temp_dir().join(format!("localcluster-pki-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let names = vec!["127.0.0.1".to_owned(), "10.96.0.1".to_owned(), "kubernetes.default.svc".to_owned()];
        let pki = Pki::create(&dir, &names).unwrap();
        pki.clients(&node("bosun-node")).unwrap();
        let ca = pki.cert("ca").display().to_string();
        for name in ["apiserver", "admin", "kube-controller-manager", "kube-scheduler", "node", "kube-proxy", "coredns"]
        {
            let (ok, out) = openssl(&["verify", "-CAfile", &ca, &pki.cert(name).display().to_string()]);
            assert!(ok, "{name}: {out}");
            let mode = std::fs::metadata(pki.key(name)).unwrap().permissions();
            assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o077, 0, "{name}.key is private");
        }
        let (_, text) = openssl(&["x509", "-noout", "-text", "-in", &pki.cert("apiserver").display().to_string()]);
        for want in [
            "IP Address:127.0.0.1",
            "IP Address:10.96.0.1",
            "DNS:kubernetes.default.svc",
            "TLS Web Server Authentication",
        ] {
            assert!(text.contains(want), "apiserver certificate lacks {want}:\n{text}");
        }
        let subject_of = |name: &str| {
            openssl(&["x509", "-noout", "-subject", "-in", &pki.cert(name).display().to_string()]).1.replace(' ', "")
        };
        let subject = subject_of("admin");
        assert!(subject.contains("O=system:masters") && subject.contains("CN=bosun-admin"), "{subject}");
        let subject = subject_of("node");
        assert!(subject.contains("O=system:nodes") && subject.contains("CN=system:node:bosun-node"), "{subject}");
        let (_, text) = openssl(&["x509", "-noout", "-text", "-in", &pki.cert("kube-proxy").display().to_string()]);
        assert!(text.contains("TLS Web Client Authentication") && !text.contains("CA:TRUE"), "{text}");
        // The ServiceAccount key pair: the public key is the private key's.
        let (ok, public) = openssl(&["pkey", "-pubout", "-in", &dir.join("sa.key").display().to_string()]);
        assert!(ok, "{public}");
        assert_eq!(public.trim(), std::fs::read_to_string(dir.join("sa.pub")).unwrap().trim());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
