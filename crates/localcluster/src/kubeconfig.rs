//! Kubeconfigs for the local apiserver, built from kube's own types: one cluster
//! (`bosun-local`, its CA inline), one user (a client certificate of the PKI, or a
//! token), one context, optionally with a namespace.

use std::path::Path;

use anyhow::{Context as _, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::config::{AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};
use secrecy::SecretString;

use crate::pki::Pki;
use crate::supervise::write_private;

const CLUSTER: &str = "bosun-local";

/// How the kubeconfig's user authenticates.
#[derive(Debug)]
pub enum Credentials {
    /// The PKI's `<name>.crt`/`<name>.key`, inline.
    Certificate(String),
    /// A bearer token (a ServiceAccount's).
    Token(String),
}

/// A kubeconfig for `https://127.0.0.1:<port>` as `user`.
pub fn kubeconfig(
    pki: &Pki,
    port: u16,
    user: &str,
    credentials: &Credentials,
    namespace: Option<&str>,
) -> Result<Kubeconfig> {
    let inline = |path: &Path| -> Result<String> {
        Ok(STANDARD.encode(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?))
    };
    let auth_info = match credentials {
        Credentials::Certificate(name) => AuthInfo {
            client_certificate_data: Some(inline(&pki.cert(name))?),
            client_key_data: Some(SecretString::from(inline(&pki.key(name))?)),
            ..AuthInfo::default()
        },
        Credentials::Token(token) => AuthInfo { token: Some(SecretString::from(token.clone())), ..AuthInfo::default() },
    };
    Ok(Kubeconfig {
        api_version: Some("v1".to_owned()),
        kind: Some("Config".to_owned()),
        clusters: vec![NamedCluster {
            name: CLUSTER.to_owned(),
            cluster: Some(Cluster {
                server: Some(format!("https://127.0.0.1:{port}")),
                certificate_authority_data: Some(inline(&pki.cert("ca"))?),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user.to_owned(),
            auth_info: Some(auth_info),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: CLUSTER.to_owned(),
            context: Some(Context {
                cluster: CLUSTER.to_owned(),
                user: Some(user.to_owned()),
                namespace: namespace.map(str::to_owned),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(CLUSTER.to_owned()),
        ..Kubeconfig::default()
    })
}

/// The kubeconfig as YAML.
pub fn to_yaml(config: &Kubeconfig) -> Result<String> {
    Ok(serde_yaml_ng::to_string(config)?)
}

/// Writes a kubeconfig readable by its owner only.
pub fn write(path: &Path, config: &Kubeconfig) -> Result<()> {
    write_private(path, to_yaml(config)?.as_bytes())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use secrecy::ExposeSecret as _;

    #[test]
    fn a_written_kubeconfig_reads_back_with_its_credentials_and_namespace() {
        let dir = std::env::temp_dir().join(format!("localcluster-kubeconfig-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let pki = Pki::create(&dir, &["127.0.0.1".to_owned()]).unwrap();
        let file = dir.join("admin.kubeconfig");
        write(&file, &kubeconfig(&pki, 6443, "admin", &Credentials::Certificate("admin".into()), None).unwrap())
            .unwrap();
        let back = Kubeconfig::read_from(&file).unwrap();
        let cluster = back.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        let ca = STANDARD.decode(cluster.certificate_authority_data.as_ref().unwrap()).unwrap();
        assert_eq!(ca, std::fs::read(pki.cert("ca")).unwrap());
        let user = back.auth_infos[0].auth_info.as_ref().unwrap();
        let key = STANDARD.decode(user.client_key_data.as_ref().unwrap().expose_secret()).unwrap();
        assert_eq!(key, std::fs::read(pki.key("admin")).unwrap());
        assert_eq!(back.current_context.as_deref(), Some("bosun-local"));
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
        assert_eq!(mode & 0o077, 0);

        let token = kubeconfig(&pki, 6443, "ns-sa", &Credentials::Token("t0k".into()), Some("ns")).unwrap();
        let yaml = to_yaml(&token).unwrap();
        let back: Kubeconfig = serde_yaml_ng::from_str(&yaml).unwrap();
        let ctx = back.contexts[0].context.as_ref().unwrap();
        assert_eq!((ctx.namespace.as_deref(), ctx.user.as_deref()), (Some("ns"), Some("ns-sa")));
        assert_eq!(back.auth_infos[0].auth_info.as_ref().unwrap().token.as_ref().unwrap().expose_secret(), "t0k");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
