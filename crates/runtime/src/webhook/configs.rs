//! The Validating- and MutatingWebhookConfiguration bosun serves, as pure builders:
//! shipped in `config/webhook/` (pointing at the webhook Service) and, on a cluster
//! where the apiserver cannot reach a Service (the local control plane), created by
//! bosun itself pointing at `--webhook-url`. Either way: `failurePolicy: Fail`,
//! `sideEffects: None`, bosun's own namespace excluded.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};

/// The groups whose WebApps are admitted, with the path of each webhook.
pub const GROUPS: [&str; 2] = ["apps.example.com", "example.com"];

/// How long the apiserver waits for an answer.
pub const TIMEOUT_SECONDS: i32 = 10;

/// `/validate-apps-example-com-v1-webapp` (kubebuilder's path scheme).
pub fn path(verb: &str, group: &str) -> String {
    format!("/{verb}-{}-v1-webapp", group.replace('.', "-"))
}

/// Where the apiserver sends reviews: the conversion webhook's target type, one for
/// every webhook bosun serves.
pub use bosun_api::conversion::Target;

/// What the configurations are built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// `<prefix>validating-webhook-configuration`, `<prefix>mutating-webhook-configuration`.
    pub prefix: String,
    pub target: Target,
    /// bosun's own namespace: never admitted by bosun (it must be able to start).
    pub own_namespace: String,
    /// Only these namespaces (bosun's `--namespaces`), when not empty.
    pub namespaces: Vec<String>,
}

impl Shape {
    pub fn validating_name(&self) -> String {
        format!("{}validating-webhook-configuration", self.prefix)
    }

    pub fn mutating_name(&self) -> String {
        format!("{}mutating-webhook-configuration", self.prefix)
    }

    fn client(&self, verb: &str, group: &str, bundle: Option<&str>) -> WebhookClientConfig {
        let path = path(verb, group);
        let (service, url) = match &self.target {
            Target::Service { namespace, name } => (
                Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path),
                    port: Some(443),
                }),
                None,
            ),
            Target::Url(base) => (None, Some(format!("{}{path}", base.trim_end_matches('/')))),
        };
        WebhookClientConfig { service, url, ca_bundle: bundle.map(|b| ByteString(b.as_bytes().to_vec())) }
    }

    fn namespace_selector(&self) -> LabelSelector {
        let requirement = |operator: &str, values: Vec<String>| LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".to_owned(),
            operator: operator.to_owned(),
            values: Some(values),
        };
        let mut expressions = vec![requirement("NotIn", vec![self.own_namespace.clone()])];
        if !self.namespaces.is_empty() {
            expressions.push(requirement("In", self.namespaces.clone()));
        }
        LabelSelector { match_expressions: Some(expressions), match_labels: None }
    }

    fn rules(group: &str) -> Vec<RuleWithOperations> {
        vec![RuleWithOperations {
            api_groups: Some(vec![group.to_owned()]),
            api_versions: Some(vec!["v1".to_owned()]),
            operations: Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]),
            resources: Some(vec!["webapps".to_owned()]),
            scope: Some("Namespaced".to_owned()),
        }]
    }

    fn meta(name: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            labels: Some(bosun_resources::meta::standard_labels("bosun", "webhook")),
            ..ObjectMeta::default()
        }
    }

    /// One webhook per group, `<letter>webapp.<group>` calling `/<verb>-…`: the rules
    /// both configurations share.
    fn webhooks(&self, verb: &str, bundle: Option<&str>) -> Vec<ValidatingWebhook> {
        GROUPS
            .iter()
            .map(|group| ValidatingWebhook {
                name: format!("{}webapp.{group}", &verb[..1]),
                client_config: self.client(verb, group, bundle),
                rules: Some(Self::rules(group)),
                failure_policy: Some("Fail".to_owned()),
                side_effects: "None".to_owned(),
                admission_review_versions: vec!["v1".to_owned()],
                timeout_seconds: Some(TIMEOUT_SECONDS),
                namespace_selector: Some(self.namespace_selector()),
                match_policy: Some("Equivalent".to_owned()),
                ..ValidatingWebhook::default()
            })
            .collect()
    }

    /// The validating configuration, with `bundle` as every webhook's CA bundle.
    pub fn validating(&self, bundle: Option<&str>) -> ValidatingWebhookConfiguration {
        let webhooks = self.webhooks("validate", bundle);
        ValidatingWebhookConfiguration { metadata: Self::meta(self.validating_name()), webhooks: Some(webhooks) }
    }

    /// The mutating configuration, with `bundle` as every webhook's CA bundle: the same
    /// webhooks, calling the mutating paths, never re-invoked.
    pub fn mutating(&self, bundle: Option<&str>) -> MutatingWebhookConfiguration {
        let webhooks = self
            .webhooks("mutate", bundle)
            .into_iter()
            .map(|w| MutatingWebhook {
                name: w.name,
                client_config: w.client_config,
                rules: w.rules,
                failure_policy: w.failure_policy,
                side_effects: w.side_effects,
                admission_review_versions: w.admission_review_versions,
                timeout_seconds: w.timeout_seconds,
                namespace_selector: w.namespace_selector,
                match_policy: w.match_policy,
                reinvocation_policy: Some("Never".to_owned()),
                ..MutatingWebhook::default()
            })
            .collect();
        MutatingWebhookConfiguration { metadata: Self::meta(self.mutating_name()), webhooks: Some(webhooks) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_fail_closed_without_side_effects_and_skip_bosuns_namespace() {
        let shape = Shape {
            prefix: "bosun-".into(),
            target: Target::Service { namespace: "bosun-system".into(), name: "bosun-webhook-service".into() },
            own_namespace: "bosun-system".into(),
            namespaces: vec![],
        };
        let v = shape.validating(None);
        assert_eq!(v.metadata.name.as_deref(), Some("bosun-validating-webhook-configuration"));
        let hooks = v.webhooks.unwrap();
        assert_eq!(hooks.len(), 2);
        for h in &hooks {
            assert_eq!((h.failure_policy.as_deref(), h.side_effects.as_str()), (Some("Fail"), "None"));
            let sel = h.namespace_selector.as_ref().unwrap().match_expressions.as_ref().unwrap();
            assert_eq!(
                (sel[0].operator.as_str(), sel[0].values.as_deref()),
                ("NotIn", Some(&["bosun-system".to_owned()][..]))
            );
            assert!(h.client_config.ca_bundle.is_none(), "bosun injects the bundle");
        }
        let service = hooks[0].client_config.service.as_ref().unwrap();
        assert_eq!(service.path.as_deref(), Some("/validate-apps-example-com-v1-webapp"));
        let url =
            Shape { target: Target::Url("https://127.0.0.1:9443/".into()), namespaces: vec!["a".into()], ..shape };
        let m = url.mutating(Some("PEM"));
        let h = &m.webhooks.unwrap()[1];
        assert_eq!(h.client_config.url.as_deref(), Some("https://127.0.0.1:9443/mutate-example-com-v1-webapp"));
        assert_eq!(h.client_config.ca_bundle.as_ref().unwrap().0, b"PEM");
        assert_eq!(h.namespace_selector.as_ref().unwrap().match_expressions.as_ref().unwrap()[1].operator, "In");
    }
}
