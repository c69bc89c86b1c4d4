//! The admission policy for WebApps of both groups, as pure functions: the policy file
//! (parsed and checked once, naming the key that is wrong), whether a namespace is a
//! production namespace, the validation verdict and the mutation patch.
//!
//! ```text
//!  policy.yaml ──Policy::parse──▶ Policy (or an error naming the key)
//!  WebApp + namespace (+ its labels) + Policy ──validate──▶ Ok | Denial("spec.replicas: 12 exceeds …")
//!                                             ──mutate────▶ JSON Patch (labels; securityContext in production)
//! ```

use std::collections::BTreeMap;

use bosun_api::webapp::WebAppSettings;
use k8s_openapi::api::core::v1::SecurityContext;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::Deserialize;
use serde_json::{Value, json};

/// The labels every WebApp gets.
pub const LABELS: [(&str, &str); 2] = [("app.kubernetes.io/managed-by", "bosun"), ("app.kubernetes.io/version", "v1")];

/// The policy file's keys (`bosun run --admission-policy FILE`). Every key is optional;
/// an unknown key is an error (a typo must not silently switch a rule off).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// Namespaces that are production by name. Default: `[production]`.
    #[serde(default = "default_production")]
    pub production_namespaces: Vec<String>,
    /// Namespaces that are production by their labels.
    #[serde(default)]
    pub production_namespace_selector: Option<LabelSelector>,
    /// The most replicas a WebApp may have in a production namespace. Default: 10.
    #[serde(default = "default_max_replicas")]
    pub max_replicas: i32,
    /// Image prefixes allowed everywhere (e.g. `registry.company.com/`); empty: any.
    #[serde(default)]
    pub allowed_registries: Vec<String>,
    /// Deny WebApps without CPU and memory limits in production namespaces. Default: true.
    #[serde(default = "yes")]
    pub require_limits_in_production: bool,
    /// The container securityContext given to WebApps in production namespaces that set
    /// none. Default: runAsNonRoot, runAsUser 65532, no privilege escalation.
    #[serde(default = "default_security_context")]
    pub default_security_context: SecurityContext,
}

fn default_production() -> Vec<String> {
    vec!["production".to_owned()]
}

fn default_max_replicas() -> i32 {
    10
}

fn yes() -> bool {
    true
}

fn default_security_context() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(65532),
        allow_privilege_escalation: Some(false),
        ..SecurityContext::default()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            production_namespaces: default_production(),
            production_namespace_selector: None,
            max_replicas: default_max_replicas(),
            allowed_registries: Vec::new(),
            require_limits_in_production: true,
            default_security_context: default_security_context(),
        }
    }
}

impl Policy {
    /// Parse and check a policy file's text; the error names the key.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let policy: Policy = if text.trim().is_empty() {
            Policy::default()
        } else {
            let de = serde_yaml_ng::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let path = e.path().to_string();
                if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) }
            })?
        };
        policy.check()?;
        policy.check_security_context_keys(text)?;
        Ok(policy)
    }

    /// Kubernetes' types ignore fields they do not know; a misspelt key of the
    /// securityContext would silently leave a default out, so it is an error here.
    fn check_security_context_keys(&self, text: &str) -> Result<(), String> {
        let raw: Value = serde_yaml_ng::from_str(text).unwrap_or(Value::Null);
        let Some(given) = raw.get("defaultSecurityContext").and_then(Value::as_object) else { return Ok(()) };
        let known = serde_json::to_value(&self.default_security_context).unwrap_or(Value::Null);
        match given.keys().find(|k| known.get(k.as_str()).is_none()) {
            Some(key) => {
                Err(format!("defaultSecurityContext.{key}: not a field of a container securityContext (or empty)"))
            }
            None => Ok(()),
        }
    }

    fn check(&self) -> Result<(), String> {
        if self.max_replicas < 1 {
            return Err(format!("maxReplicas: {} must be at least 1", self.max_replicas));
        }
        if let Some((i, _)) = self.allowed_registries.iter().enumerate().find(|(_, r)| r.trim().is_empty()) {
            return Err(format!("allowedRegistries[{i}]: an empty prefix would allow every image"));
        }
        if let Some((i, _)) = self.production_namespaces.iter().enumerate().find(|(_, n)| n.trim().is_empty()) {
            return Err(format!("productionNamespaces[{i}]: empty"));
        }
        for (i, r) in
            self.production_namespace_selector.iter().flat_map(|s| s.match_expressions.iter().flatten()).enumerate()
        {
            let values = r.values.as_ref().map_or(0, Vec::len);
            match r.operator.as_str() {
                "In" | "NotIn" if values == 0 => {
                    return Err(format!(
                        "productionNamespaceSelector.matchExpressions[{i}].values: {} needs values",
                        r.operator
                    ));
                }
                "Exists" | "DoesNotExist" if values > 0 => {
                    return Err(format!(
                        "productionNamespaceSelector.matchExpressions[{i}].values: {} takes none",
                        r.operator
                    ));
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => {
                    return Err(format!(
                        "productionNamespaceSelector.matchExpressions[{i}].operator: {other:?} is not In, NotIn, Exists or DoesNotExist"
                    ));
                }
            }
        }
        let sc = &self.default_security_context;
        if sc.run_as_user == Some(0) && sc.run_as_non_root == Some(true) {
            return Err("defaultSecurityContext.runAsUser: 0 contradicts runAsNonRoot".to_owned());
        }
        Ok(())
    }

    /// Whether the namespace `name` with `labels` is a production namespace.
    pub fn is_production(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.production_namespaces.iter().any(|n| n == name)
            || self.production_namespace_selector.as_ref().is_some_and(|s| selects(s, labels))
    }
}

/// Whether `selector` selects an object with `labels` (an empty selector selects all).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_match = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    labels_match && selector.match_expressions.iter().flatten().all(|r| requirement(r, labels))
}

fn requirement(r: &LabelSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let listed = || value.is_some_and(|v| r.values.iter().flatten().any(|x| x == v));
    match r.operator.as_str() {
        "In" => listed(),
        "NotIn" => !listed(),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

/// The WebApp under review and where it is.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    pub settings: WebAppSettings<'a>,
    /// Whether its namespace is a production namespace.
    pub production: bool,
}

/// Why a WebApp is denied: every rule it breaks, each naming the field and the rule.
pub fn validate(subject: Subject<'_>, policy: &Policy) -> Result<(), String> {
    let s = subject.settings;
    let mut denials = Vec::new();
    if !policy.allowed_registries.is_empty()
        && !policy.allowed_registries.iter().any(|r| s.image.starts_with(r.as_str()))
    {
        denials.push(format!(
            "spec.image: {} is not from an allowed registry ({})",
            s.image,
            policy.allowed_registries.join(", ")
        ));
    }
    if subject.production {
        if s.replicas > policy.max_replicas {
            denials.push(format!(
                "spec.replicas: {} exceeds the maximum of {} in production namespaces",
                s.replicas, policy.max_replicas
            ));
        }
        if policy.require_limits_in_production {
            let limits = s.resources.and_then(|r| r.limits.as_ref());
            let missing: Vec<&str> =
                ["cpu", "memory"].into_iter().filter(|k| !limits.is_some_and(|l| l.contains_key(*k))).collect();
            if !missing.is_empty() {
                denials.push(format!(
                    "spec.resources.limits: {} limit required in production namespaces",
                    missing.join(" and ")
                ));
            }
        }
    }
    if denials.is_empty() { Ok(()) } else { Err(denials.join("; ")) }
}

/// The JSON Patch that brings a WebApp in line: the two labels (only those missing or
/// different), and in production the default securityContext unless one is set.
/// Empty when nothing is to change.
pub fn mutate(subject: Subject<'_>, labels: Option<&BTreeMap<String, String>>, policy: &Policy) -> Vec<Value> {
    let mut ops = Vec::new();
    match labels {
        None => ops.push(json!({"op": "add", "path": "/metadata/labels", "value": LABELS.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()})),
        Some(labels) => {
            for (k, v) in LABELS {
                if labels.get(k).map(String::as_str) != Some(v) {
                    let op = if labels.contains_key(k) { "replace" } else { "add" };
                    ops.push(json!({"op": op, "path": format!("/metadata/labels/{}", k.replace('~', "~0").replace('/', "~1")), "value": v}));
                }
            }
        }
    }
    if subject.production && subject.settings.security_context.is_none() {
        ops.push(json!({"op": "add", "path": "/spec/securityContext", "value": policy.default_security_context}));
    }
    ops
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    fn settings<'a>(image: &'a str, replicas: i32, resources: Option<&'a ResourceRequirements>) -> WebAppSettings<'a> {
        WebAppSettings { image, replicas, port: 80, env: None, resources, security_context: None }
    }

    fn limits() -> ResourceRequirements {
        ResourceRequirements {
            limits: Some(BTreeMap::from([
                ("cpu".into(), Quantity("1".into())),
                ("memory".into(), Quantity("1Gi".into())),
            ])),
            ..Default::default()
        }
    }

    #[test]
    fn production_denies_too_many_replicas_and_missing_limits_naming_the_field() {
        let p = Policy::default();
        let r = limits();
        let prod = |s| Subject { settings: s, production: true };
        let err = validate(prod(settings("nginx:1.25", 12, Some(&r))), &p).unwrap_err();
        assert_eq!(err, "spec.replicas: 12 exceeds the maximum of 10 in production namespaces");
        let err = validate(prod(settings("nginx:1.25", 3, None)), &p).unwrap_err();
        assert!(err.starts_with("spec.resources.limits: cpu and memory limit required"), "{err}");
        assert_eq!(validate(prod(settings("nginx:1.25", 3, Some(&r))), &p), Ok(()));
        // Elsewhere neither rule applies.
        assert_eq!(validate(Subject { settings: settings("nginx:1.25", 12, None), production: false }, &p), Ok(()));
    }

    #[test]
    fn registries_are_checked_everywhere_when_listed() {
        let p = Policy::parse("allowedRegistries: [registry.company.com/]").unwrap();
        let dev = |image| Subject { settings: settings(image, 1, None), production: false };
        let err = validate(dev("nginx:1.25"), &p).unwrap_err();
        assert_eq!(err, "spec.image: nginx:1.25 is not from an allowed registry (registry.company.com/)");
        assert_eq!(validate(dev("registry.company.com/shop/web:1.0"), &p), Ok(()));
    }

    #[test]
    fn production_is_by_name_or_by_selector() {
        let p = Policy::parse("productionNamespaces: [prod-a]\nproductionNamespaceSelector: {matchLabels: {env: prod}, matchExpressions: [{key: tier, operator: NotIn, values: [scratch]}]}").unwrap();
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(p.is_production("prod-a", &BTreeMap::new()));
        assert!(!p.is_production("production", &BTreeMap::new()), "the list replaces the default");
        assert!(p.is_production("shop", &labels(&[("env", "prod")])));
        assert!(!p.is_production("shop", &labels(&[("env", "prod"), ("tier", "scratch")])));
        assert!(Policy::default().is_production("production", &BTreeMap::new()));
    }

    #[test]
    fn a_bad_policy_names_the_key() {
        for (text, key) in [
            ("maxReplica: 5", "maxReplica"),
            ("maxReplicas: many", "maxReplicas"),
            ("maxReplicas: 0", "maxReplicas"),
            ("allowedRegistries: [\"\"]", "allowedRegistries[0]"),
            ("productionNamespaceSelector: {matchExpressions: [{key: a, operator: Is}]}", "operator"),
            ("defaultSecurityContext: {runAsUser: 0, runAsNonRoot: true}", "defaultSecurityContext.runAsUser"),
            ("defaultSecurityContext: {runAsUsr: 1}", "runAsUsr"),
        ] {
            let err = Policy::parse(text).unwrap_err();
            assert!(err.contains(key), "{text}: {err}");
        }
        assert_eq!(Policy::parse("").unwrap(), Policy::default());
    }

    #[test]
    fn mutation_adds_only_what_is_missing() {
        let p = Policy::default();
        let prod = Subject { settings: settings("nginx", 1, None), production: true };
        let ops = mutate(prod, None, &p);
        assert_eq!(ops[0]["path"], "/metadata/labels");
        assert_eq!(ops[0]["value"]["app.kubernetes.io/version"], "v1");
        assert_eq!(ops[1]["path"], "/spec/securityContext");
        assert_eq!(ops[1]["value"]["runAsNonRoot"], true);
        assert_eq!(ops[1]["value"]["allowPrivilegeEscalation"], false);
        let have: BTreeMap<String, String> =
            LABELS.iter().map(|(k, v)| (k.to_string(), v.to_string())).chain([("team".into(), "a".into())]).collect();
        let dev = Subject { settings: settings("nginx", 1, None), production: false };
        assert!(mutate(dev, Some(&have), &p).is_empty(), "a WebApp already in line gets no patch");
        let partial: BTreeMap<String, String> = [("app.kubernetes.io/version".to_owned(), "v0".to_owned())].into();
        let ops = mutate(dev, Some(&partial), &p);
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0]["path"], "/metadata/labels/app.kubernetes.io~1managed-by");
        assert_eq!(
            (ops[1]["op"].as_str(), ops[1]["path"].as_str()),
            (Some("replace"), Some("/metadata/labels/app.kubernetes.io~1version"))
        );
        // A securityContext the user set is theirs.
        let sc = SecurityContext { run_as_user: Some(7), ..Default::default() };
        let own = Subject {
            settings: WebAppSettings { security_context: Some(&sc), ..settings("nginx", 1, None) },
            production: true,
        };
        assert!(mutate(own, Some(&have), &p).is_empty());
    }
}
