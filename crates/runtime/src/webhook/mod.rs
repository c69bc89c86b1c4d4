//! Admission webhooks for WebApps of both groups (`../shared/spec/operators.md`, the
//! admission policy; `runtime.md`, "Admission webhooks").
//!
//! ```text
//!  every replica: TLS server :9443 ─▶ decode (bosun's types) ─▶ policy (pure) ─▶ allow | deny | JSON Patch
//!                 certificates: self (Secret, CAS, renew, rotate) | files (cert-manager)
//!  the leader:    CA bundle ─▶ configurations (created with --webhook-url, else injected)
//! ```

pub use bosun_resources::pki as certs;
pub mod configs;
pub mod conversion;
pub mod server;
pub mod sync;
pub mod withdraw;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, RwLock};

use bosun_controller::Context;
use bosun_resources::admission::Policy;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::args::RunArgs;
use configs::{Shape, Target};
use server::{Admission, Certificate, Metrics};

/// Whether `bosun run` serves webhooks: as asked, else in a cluster or with a URL.
pub fn enabled(args: &RunArgs) -> bool {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    args.enable_webhooks.unwrap_or(in_cluster || args.webhook_url.is_some())
}

/// The host of `url` (`https://HOST:PORT/...`), for the certificate's names.
fn url_host(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_owned())
}

/// Load the admission policy of `--admission-policy`: a bad file is an error naming the key.
pub fn load_policy(args: &RunArgs) -> Result<Policy, String> {
    match &args.admission_policy {
        None => Ok(Policy::default()),
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("--admission-policy {}: {e}", path.display()))?;
            Policy::parse(&text).map_err(|e| format!("--admission-policy {}: {e}", path.display()))
        }
    }
}

/// What the webhook server serves with: its certificate (empty until the first is
/// loaded, which `/readyz` waits for) and its metrics.
#[derive(Debug)]
pub struct Serving {
    pub certificate: Arc<Certificate>,
    pub metrics: Arc<Metrics>,
}

/// Start the webhook server with `policy` (loaded by [`load_policy`]) and its
/// certificate and policy keepers; returns the bound address, and what to withdraw at
/// exit with `--webhook-remove-on-exit` and a URL.
pub async fn start(
    args: &RunArgs,
    policy: Policy,
    client: Client,
    own_namespace: String,
    ctx: Arc<Context>,
    Serving { certificate, metrics }: Serving,
    shutdown: CancellationToken,
) -> Result<(SocketAddr, Option<withdraw::Withdraw>), String> {
    if let Some(url) = &args.webhook_url
        && url_host(url).is_none()
    {
        return Err(format!("--webhook-url {url}: expected https://HOST:PORT"));
    }
    let policy = Arc::new(RwLock::new(Arc::new(policy)));
    if let Some(path) = args.admission_policy.clone() {
        tokio::spawn(sync::policy_file(path, policy.clone(), shutdown.clone()));
    }
    // Namespaces' labels, for productionNamespaceSelector: metadata only.
    let (namespaces, writer) = reflector::store();
    let watch = watcher(Api::<PartialObjectMeta<Namespace>>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .for_each(|_| std::future::ready(()));
    tokio::spawn(watch);

    let local = args.webhook_url.as_deref().and_then(url_host).is_some_and(|h| h == "127.0.0.1" || h == "localhost");
    let host = args.webhook_host.unwrap_or(if local {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    });
    // The kinds this bosun reconciles are the kinds whose conversion it keeps.
    let enabled = args.enabled_controllers();
    let converted: Vec<_> = bosun_controller::kinds::converted()
        .into_iter()
        .filter(|c| c.controllers.iter().any(|n| enabled.contains(n)))
        .collect();
    let converted_names: Vec<String> = converted.iter().map(bosun_controller::kinds::Converted::name).collect();
    let admission = Arc::new(Admission { policy, namespaces, metrics: metrics.clone(), converted });
    let bound =
        server::serve(SocketAddr::new(host, args.webhook_port), certificate.clone(), admission, shutdown.clone())
            .await
            .map_err(|e| format!("webhook server on {host}:{}: {e}", args.webhook_port))?;

    let service = &args.webhook_service_name;
    let shape = Shape {
        prefix: args.webhook_configuration_prefix.clone(),
        target: match &args.webhook_url {
            Some(url) => Target::Url(url.clone()),
            None => Target::Service { namespace: own_namespace.clone(), name: service.clone() },
        },
        own_namespace: own_namespace.clone(),
        namespaces: args.namespaces.clone(),
    };
    let mut withdraw = match &args.webhook_url {
        Some(url) if args.webhook_remove_on_exit => Some(withdraw::Withdraw {
            keeper: None,
            client: client.clone(),
            url: url.trim_end_matches('/').to_owned(),
            validating: shape.validating_name(),
            mutating: shape.mutating_name(),
            converted: converted_names.clone(),
        }),
        _ => None,
    };
    if args.webhook_cert_mode == "files" {
        let dir = &args.webhook_cert_dir;
        tokio::spawn(sync::files(dir.join("tls.crt"), dir.join("tls.key"), certificate, metrics, shutdown));
    } else {
        let mut names =
            vec![format!("{service}.{own_namespace}.svc"), format!("{service}.{own_namespace}.svc.cluster.local")];
        names.extend(args.webhook_url.as_deref().and_then(url_host));
        let cfg = sync::SelfManaged {
            client,
            namespace: own_namespace,
            secret: args.webhook_secret_name.clone(),
            names,
            lifetimes: certs::Lifetimes {
                serving: args.webhook_cert_validity,
                serving_renew_before: args.webhook_cert_renew_before,
                ca: args.webhook_ca_validity,
                ca_renew_before: args.webhook_ca_renew_before,
                overlap: args.webhook_ca_overlap,
            },
            shape,
            create_configurations: args.webhook_url.is_some(),
            converted: converted_names,
        };
        let keeper = tokio::spawn(sync::self_managed(cfg, certificate, metrics, ctx, shutdown));
        // Withdrawn only once the keeper has stopped: it would put them back.
        withdraw =
            withdraw.map(|w| withdraw::Withdraw { keeper: Some(std::sync::Arc::new(keeper.abort_handle())), ..w });
    }
    info!(addr = %bound, "serving admission webhooks");
    Ok((bound, withdraw))
}

/// The files of `config/webhook/` (kubebuilder's layout): the two configurations,
/// pointing at the webhook Service with no CA bundle (bosun injects it), the Service,
/// and the kustomization listing them. Paths are relative to `config/webhook/`.
pub fn files() -> Result<Vec<(String, String)>, serde_yaml_ng::Error> {
    const HEADER: &str = "# Generated from the code by `make manifests`. Do not edit.\n";
    const NAMESPACE: &str = bosun_controller::rbac::NAMESPACE;
    let shape = Shape {
        prefix: "bosun-".to_owned(),
        target: Target::Service { namespace: NAMESPACE.to_owned(), name: SERVICE.to_owned() },
        own_namespace: NAMESPACE.to_owned(),
        namespaces: Vec::new(),
    };
    let manifests = format!(
        "{HEADER}---\n{}---\n{}",
        serde_yaml_ng::to_string(&shape.validating(None))?,
        serde_yaml_ng::to_string(&shape.mutating(None))?
    );
    let service = {
        use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        Service {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(SERVICE.to_owned()),
                namespace: Some(NAMESPACE.to_owned()),
                labels: Some(bosun_resources::meta::standard_labels("bosun", "webhook")),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(
                    [("app.kubernetes.io/name", "bosun"), ("control-plane", "controller-manager")]
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .into(),
                ),
                // Every bosun pod that runs, Ready or not: a leader whose caches wait for a
                // conversion (objects of a kind stored in an older version) is not Ready
                // until it is served one, and may be the only pod that serves it.
                publish_not_ready_addresses: Some(true),
                ports: Some(vec![ServicePort {
                    name: Some("webhook".to_owned()),
                    port: 443,
                    target_port: Some(IntOrString::Int(9443)),
                    protocol: Some("TCP".to_owned()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    };
    let kustomization = format!(
        "{HEADER}apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- manifests.yaml\n- service.yaml\n"
    );
    Ok(vec![
        ("manifests.yaml".to_owned(), manifests),
        ("service.yaml".to_owned(), format!("{HEADER}{}", serde_yaml_ng::to_string(&service)?)),
        ("kustomization.yaml".to_owned(), kustomization),
    ])
}

/// The webhook Service `config/webhook/` ships (`--webhook-service-name`'s default).
pub const SERVICE: &str = bosun_api::conversion::SERVICE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_host_names_the_certificate() {
        assert_eq!(url_host("https://127.0.0.1:9443").as_deref(), Some("127.0.0.1"));
        assert_eq!(url_host("https://bosun.example.com/x").as_deref(), Some("bosun.example.com"));
        assert_eq!(url_host("https://[::1]:9443").as_deref(), Some("::1"));
        assert_eq!(url_host("http://127.0.0.1:9443"), None);
    }
}
