//! CRD version conversion by bosun's webhook: where the apiserver sends its
//! ConversionReviews. The CRDs ship pointing at the webhook Service `config/default`
//! installs; at runtime bosun (its leader) points them at the Service of its own
//! namespace, or at `--webhook-url`, with the CA bundle of the certificate it serves.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig, WebhookConversion,
};

/// The path of the conversion webhook, for every kind.
pub const PATH: &str = "/convert";
/// The webhook Service `config/webhook` ships (`--webhook-service-name`'s default).
pub const SERVICE: &str = "bosun-webhook-service";
/// The namespace `config/default` installs bosun into.
pub const NAMESPACE: &str = "bosun-system";

/// Where the apiserver reaches the conversion webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A Service (port 443) in a namespace.
    Service { namespace: String, name: String },
    /// `https://host:port`, when no Service routes to bosun.
    Url(String),
}

/// The client configuration for `target`, with `bundle` (PEM) when known.
pub fn client_config(target: &Target, bundle: Option<&str>) -> WebhookClientConfig {
    let (service, url) = match target {
        Target::Service { namespace, name } => (
            Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(PATH.to_owned()),
                port: Some(443),
            }),
            None,
        ),
        Target::Url(base) => (None, Some(format!("{}{PATH}", base.trim_end_matches('/')))),
    };
    WebhookClientConfig { service, url, ca_bundle: bundle.map(|b| k8s_openapi::ByteString(b.as_bytes().to_vec())) }
}

/// The conversion of a shipped CRD: by webhook, at the Service `config/default` installs.
pub fn webhook() -> CustomResourceConversion {
    let target = Target::Service { namespace: NAMESPACE.to_owned(), name: SERVICE.to_owned() };
    CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(WebhookConversion {
            client_config: Some(client_config(&target, None)),
            conversion_review_versions: vec!["v1".to_owned()],
        }),
    }
}

/// Whether the apiserver asks bosun to convert objects of `crd`.
pub fn by_webhook(crd: &CustomResourceDefinition) -> bool {
    crd.spec.conversion.as_ref().is_some_and(|c| c.strategy == "Webhook")
}
