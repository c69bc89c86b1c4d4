//! VoteConfig: the options of a voting app, published as a ConfigMap the app consumes.
//!
//! Two versions are served. `v1` is stored and is what bosun reconciles; `v1alpha1`,
//! the voting-app tutorial's, stays served, deprecated, and is converted by bosun's
//! conversion webhook ([`convert`]), both ways and losslessly:
//!
//! | `v1alpha1`              | `v1`                         |
//! |-------------------------|------------------------------|
//! | `spec.title`            | `spec.question`              |
//! | —                       | `spec.options[].description` |
//!
//! `v1` names the text for what it is (the question of the vote; the ConfigMap key
//! stays `TITLE`, which the app reads) and lets an option carry a longer description,
//! published in `options.json`. A `v1` object read as `v1alpha1` keeps its
//! descriptions in the annotation [`DESCRIPTIONS_ANNOTATION`], so a `v1alpha1` client
//! that writes it back loses nothing.
//!
//! ```yaml
//! apiVersion: voting.schoolofdevops.com/v1
//! kind: VoteConfig
//! metadata: {name: pets}
//! spec:
//!   question: Cats or dogs?
//!   options: [{id: a, label: Cats, description: Independent and quiet}, {id: b, label: Dogs}]
//! ```

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::conditions::Condition;

/// The most options a VoteConfig may have: one per letter of `OPTION_A` … `OPTION_Z`.
pub const MAX_OPTIONS: usize = 26;
/// The API group of VoteConfigs.
pub const GROUP: &str = "voting.schoolofdevops.com";
/// `apiVersion` of the stored version.
pub const V1: &str = "voting.schoolofdevops.com/v1";
/// `apiVersion` of the deprecated version.
pub const V1ALPHA1: &str = "voting.schoolofdevops.com/v1alpha1";
/// On a VoteConfig read as `v1alpha1`: the options' `v1` descriptions, a JSON object
/// from option id to description. Converting back to `v1` moves them onto the options
/// again (an option whose id is gone loses its description) and drops the annotation.
pub const DESCRIPTIONS_ANNOTATION: &str = "voting.schoolofdevops.com/v1-option-descriptions";
/// The warning the apiserver gives every client of `v1alpha1`.
pub const DEPRECATION_WARNING: &str = "voting.schoolofdevops.com/v1alpha1 VoteConfig is deprecated: use voting.schoolofdevops.com/v1 (spec.title is spec.question there)";

/// The options of a vote.
//
// The ConfigMap is named `<name>-config` and labelled `app.kubernetes.io/instance:
// <name>`; a label value has at most 63 characters, so the name rule says so up front
// (which also leaves room for the suffix within the 253 characters of an object name).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "voting.schoolofdevops.com",
    version = "v1",
    kind = "VoteConfig",
    plural = "voteconfigs",
    namespaced,
    status = "VoteConfigStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Question","type":"string","jsonPath":".spec.question"}"#,
    printcolumn = r#"{"name":"ConfigMap","type":"string","jsonPath":".status.configMapName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Updated","type":"date","jsonPath":".status.lastUpdated"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = kube::core::Rule::new("size(self.metadata.name) <= 63")
        .message("metadata.name may have at most 63 characters: the app.kubernetes.io/instance label of the ConfigMap holds the name, and a label value has at most 63 characters")
)]
#[serde(rename_all = "camelCase")]
pub struct VoteConfigSpec {
    /// The question shown above the options; published as `TITLE` (`spec.title` in
    /// `v1alpha1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The choices, in the order the app shows them: the 1st is published as
    /// `OPTION_A`, the 2nd as `OPTION_B`, and so on.
    #[schemars(length(min = 2, max = 26))]
    #[x_kube(validation = kube::core::Rule::new("self.all(o, self.exists_one(p, p.id == o.id))")
        .message("option ids in spec.options must be unique"))]
    pub options: Vec<VoteOption>,
}

/// One choice of a vote.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct VoteOption {
    /// Stable identifier of the option, a lowercase DNS label (e.g. `a`, `cats`).
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub id: String,
    /// What voters see.
    #[schemars(length(min = 1))]
    pub label: String,
    /// A longer text about the option, published in `options.json` (new in `v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub description: Option<String>,
}

/// The tutorial's version, served and deprecated: what `v1` calls `question` is
/// `title` here, and an option has no description.
pub mod v1alpha1 {
    use kube::{CustomResource, KubeSchema};
    use serde::{Deserialize, Serialize};

    pub use super::VoteConfigStatus;

    /// The options of a vote (deprecated version: use `v1`).
    #[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
    #[kube(
        group = "voting.schoolofdevops.com",
        version = "v1alpha1",
        kind = "VoteConfig",
        plural = "voteconfigs",
        namespaced,
        status = "VoteConfigStatus",
        derive = "PartialEq",
        printcolumn = r#"{"name":"Title","type":"string","jsonPath":".spec.title"}"#,
        printcolumn = r#"{"name":"ConfigMap","type":"string","jsonPath":".status.configMapName"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Updated","type":"date","jsonPath":".status.lastUpdated"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
        validation = kube::core::Rule::new("size(self.metadata.name) <= 63")
            .message("metadata.name may have at most 63 characters: the app.kubernetes.io/instance label of the ConfigMap holds the name, and a label value has at most 63 characters")
    )]
    #[serde(rename_all = "camelCase")]
    pub struct VoteConfigSpec {
        /// The question shown above the options; published as `TITLE`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub title: Option<String>,
        /// The choices, in the order the app shows them: the 1st is published as
        /// `OPTION_A`, the 2nd as `OPTION_B`, and so on.
        #[schemars(length(min = 2, max = 26))]
        #[x_kube(validation = kube::core::Rule::new("self.all(o, self.exists_one(p, p.id == o.id))")
            .message("option ids in spec.options must be unique"))]
        pub options: Vec<VoteOption>,
    }

    /// One choice of a vote.
    #[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
    pub struct VoteOption {
        /// Stable identifier of the option, a lowercase DNS label (e.g. `a`, `cats`).
        #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
        pub id: String,
        /// What voters see.
        #[schemars(length(min = 1))]
        pub label: String,
    }
}

/// The CRD serving both versions: `v1` stored, `v1alpha1` deprecated, converted by
/// bosun's webhook at [`crate::conversion::PATH`] (bosun keeps the client
/// configuration and CA bundle right at runtime; the Service here is what
/// `config/default` installs).
pub fn crd() -> CustomResourceDefinition {
    let mut crd = crate::schema::crd::<VoteConfig>();
    let old = crate::schema::crd::<v1alpha1::VoteConfig>();
    for mut version in old.spec.versions {
        version.storage = false;
        version.deprecated = Some(true);
        version.deprecation_warning = Some(DEPRECATION_WARNING.to_owned());
        crd.spec.versions.push(version);
    }
    crd.spec.conversion = Some(crate::conversion::webhook());
    crd
}

/// Convert a VoteConfig (any served version, as JSON) to `desired` (`apiVersion`);
/// see the module docs for what changes. Fails only on what is not a VoteConfig of a
/// known version.
pub fn convert(object: &Value, desired: &str) -> Result<Value, String> {
    let from = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let mut out = object.clone();
    match (from, desired) {
        (a, b) if a == b => return Ok(out),
        (V1ALPHA1, V1) => up(&mut out),
        (V1, V1ALPHA1) => down(&mut out),
        _ => return Err(format!("cannot convert a VoteConfig from {from:?} to {desired:?}")),
    }
    out["apiVersion"] = Value::String(desired.to_owned());
    Ok(out)
}

/// Rename `from` to `to` in `object`, when it is there.
fn rename(object: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(value) = object.remove(from) {
        object.insert(to.to_owned(), value);
    }
}

fn annotations(object: &mut Value) -> Option<&mut Map<String, Value>> {
    object.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut)
}

fn options(object: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    object
        .pointer_mut("/spec/options")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// `v1alpha1` → `v1`.
fn up(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        rename(spec, "title", "question");
    }
    let kept = annotations(object)
        .and_then(|a| a.get(DESCRIPTIONS_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str::<BTreeMap<String, String>>(text).ok());
    // An annotation that does not parse is not bosun's: it stays as it is.
    let Some(descriptions) = kept else { return };
    for option in options(object) {
        let id = option.get("id").and_then(Value::as_str).unwrap_or_default();
        if let Some(description) = descriptions.get(id) {
            option.insert("description".to_owned(), Value::String(description.clone()));
        }
    }
    if let Some(annotations) = annotations(object) {
        annotations.remove(DESCRIPTIONS_ANNOTATION);
        if annotations.is_empty()
            && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("annotations");
        }
    }
}

/// `v1` → `v1alpha1`.
fn down(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        rename(spec, "question", "title");
    }
    let mut descriptions = BTreeMap::new();
    for option in options(object) {
        if let Some(description) = option.remove("description") {
            let id = option.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
            descriptions.insert(id, description);
        }
    }
    if descriptions.is_empty() {
        if let Some(annotations) = annotations(object) {
            annotations.remove(DESCRIPTIONS_ANNOTATION);
        }
        return;
    }
    let text = Value::Object(descriptions.into_iter().collect()).to_string();
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let annotations = meta.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(DESCRIPTIONS_ANNOTATION.to_owned(), Value::String(text));
    }
}

/// Observed state, computed from the ConfigMap bosun applied.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct VoteConfigStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The ConfigMap holding the options (`<name>-config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    /// When the ConfigMap's data last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl crate::conditions::Conditioned for VoteConfigStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn v1() -> Value {
        json!({
            "apiVersion": V1, "kind": "VoteConfig",
            "metadata": {"name": "pets", "namespace": "polls", "uid": "u", "resourceVersion": "7",
                         "annotations": {"team": "pets"}},
            "spec": {"question": "Cats or dogs?",
                     "options": [{"id": "a", "label": "Cats", "description": "Quiet"}, {"id": "b", "label": "Dogs"}]},
            "status": {"observedGeneration": 1, "configMapName": "pets-config", "conditions": []},
        })
    }

    #[test]
    fn v1_to_v1alpha1_and_back_is_the_same_object() {
        let old = convert(&v1(), V1ALPHA1).unwrap();
        assert_eq!(old["apiVersion"], V1ALPHA1);
        assert_eq!(old["spec"]["title"], "Cats or dogs?");
        assert!(old["spec"].get("question").is_none());
        assert_eq!(old["spec"]["options"], json!([{"id": "a", "label": "Cats"}, {"id": "b", "label": "Dogs"}]));
        assert_eq!(old["metadata"]["annotations"][DESCRIPTIONS_ANNOTATION], r#"{"a":"Quiet"}"#);
        assert_eq!(old["metadata"]["annotations"]["team"], "pets");
        // It parses as the v1alpha1 type (nothing v1 is left in its spec)…
        let typed: v1alpha1::VoteConfig = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(typed.spec.title.as_deref(), Some("Cats or dogs?"));
        // …and comes back whole.
        assert_eq!(convert(&old, V1).unwrap(), v1());
    }

    #[test]
    fn v1alpha1_to_v1_and_back_is_the_same_object() {
        let old = json!({
            "apiVersion": V1ALPHA1, "kind": "VoteConfig", "metadata": {"name": "pets"},
            "spec": {"title": "Tabs or spaces?", "options": [{"id": "t", "label": "Tabs"}, {"id": "s", "label": "Spaces"}]},
        });
        let new = convert(&old, V1).unwrap();
        let typed: VoteConfig = serde_json::from_value(new.clone()).unwrap();
        assert_eq!(typed.spec.question.as_deref(), Some("Tabs or spaces?"));
        assert!(typed.spec.options.iter().all(|o| o.description.is_none()));
        assert!(new["metadata"].get("annotations").is_none(), "{new}");
        assert_eq!(convert(&new, V1ALPHA1).unwrap(), old);
        // No title: none either way.
        let untitled = json!({"apiVersion": V1ALPHA1, "kind": "VoteConfig", "metadata": {"name": "x"},
                              "spec": {"options": [{"id": "a", "label": "A"}]}});
        assert_eq!(convert(&convert(&untitled, V1).unwrap(), V1ALPHA1).unwrap(), untitled);
    }

    #[test]
    fn a_v1alpha1_client_editing_the_object_keeps_the_v1_descriptions() {
        let mut old = convert(&v1(), V1ALPHA1).unwrap();
        // The old client relabels b, reorders, and adds an option: a's description
        // follows its id; b never had one; the removed option would lose its own.
        old["spec"]["options"] = json!([{"id": "b", "label": "Puppies"}, {"id": "a", "label": "Kittens"},
                                        {"id": "c", "label": "Fish"}]);
        old["spec"]["title"] = json!("Pets?");
        let new: VoteConfig = serde_json::from_value(convert(&old, V1).unwrap()).unwrap();
        assert_eq!(new.spec.question.as_deref(), Some("Pets?"));
        let described: Vec<_> = new.spec.options.iter().map(|o| (o.id.as_str(), o.description.as_deref())).collect();
        assert_eq!(described, [("b", None), ("a", Some("Quiet")), ("c", None)]);
        let annotations = new.metadata.annotations.unwrap();
        assert_eq!(annotations.keys().collect::<Vec<_>>(), ["team"], "the descriptions moved back onto the options");
    }

    #[test]
    fn an_annotation_bosun_cannot_read_stays_and_unknown_versions_are_refused() {
        let mut old = json!({"apiVersion": V1ALPHA1, "kind": "VoteConfig",
                             "metadata": {"name": "x", "annotations": {DESCRIPTIONS_ANNOTATION: "not json"}},
                             "spec": {"options": [{"id": "a", "label": "A"}]}});
        let new = convert(&old, V1).unwrap();
        assert_eq!(new["metadata"]["annotations"][DESCRIPTIONS_ANNOTATION], "not json");
        assert!(new["spec"]["options"][0].get("description").is_none());
        old["apiVersion"] = json!("voting.schoolofdevops.com/v2");
        let err = convert(&old, V1).unwrap_err();
        assert!(err.contains("v2"), "{err}");
        assert!(convert(&v1(), "voting.schoolofdevops.com/v3").is_err());
        assert_eq!(convert(&v1(), V1).unwrap(), v1(), "the same version is the same object");
    }

    #[test]
    fn the_crd_stores_v1_serves_v1alpha1_deprecated_and_converts_by_webhook() {
        let crd = crd();
        let versions: Vec<_> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage, v.deprecated.unwrap_or(false)))
            .collect();
        assert_eq!(versions, [("v1", true, true, false), ("v1alpha1", true, false, true)]);
        assert!(crate::conversion::by_webhook(&crd));
        let webhook = crd.spec.conversion.unwrap().webhook.unwrap();
        assert_eq!(webhook.conversion_review_versions, ["v1"]);
        let service = webhook.client_config.unwrap().service.unwrap();
        assert_eq!((service.name.as_str(), service.path.as_deref()), ("bosun-webhook-service", Some("/convert")));
        // Both schemas are the tightened ones, each with its own field names.
        let schema = |name: &str| {
            let v = crd.spec.versions.iter().find(|v| v.name == name).unwrap();
            serde_json::to_value(v.schema.as_ref().unwrap()).unwrap()
        };
        assert!(schema("v1")["openAPIV3Schema"]["properties"]["spec"]["properties"].get("question").is_some());
        assert!(schema("v1alpha1")["openAPIV3Schema"]["properties"]["spec"]["properties"].get("title").is_some());
    }
}
