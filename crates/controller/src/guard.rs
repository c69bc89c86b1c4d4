//! Objects the Rust types cannot read are an error for that object only.
//!
//! The schema should refuse everything the types cannot hold, but a watch must not
//! depend on it: one undecodable object in a list would otherwise fail the whole list,
//! leave the cache unsynced and stop the controller in every namespace. [`Guarded`]
//! decodes each object on its own; a failure keeps the object's metadata and the path
//! of the offending field, and never its values (a WebApp's `env` may hold a password).

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// Bounds of a resource kind bosun reconciles or owns.
pub trait Reconciled:
    Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
}
impl<K> Reconciled for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// The event reason and error label of an object bosun cannot read.
pub const UNREADABLE: &str = "InvalidObject";

/// A `K`, or why this stored object cannot be read as one.
#[derive(Clone, Debug)]
pub struct Guarded<K>(pub Result<K, Unreadable>);

/// An object that does not decode as its Rust type.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    pub metadata: ObjectMeta,
    /// Where decoding failed, e.g. `status.availableReplicas`.
    pub field: String,
    /// What was wrong there, with the values left out.
    pub problem: String,
}

impl Unreadable {
    /// One line for a user: the field and the problem, no values.
    pub fn message(&self, kind: &str) -> String {
        format!(
            "bosun cannot read this {kind}: {}: {}; it is not reconciled until the field is fixed",
            self.field, self.problem
        )
    }
}

impl<'de, K> Deserialize<'de> for Guarded<K>
where
    K: DeserializeOwned + Resource,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        match serde_path_to_error::deserialize::<_, K>(&value) {
            Ok(obj) => Ok(Guarded(Ok(obj))),
            Err(err) => {
                let metadata = value
                    .get("metadata")
                    .map(ObjectMeta::deserialize)
                    .transpose()
                    .map_err(serde::de::Error::custom)?
                    .unwrap_or_default();
                let field = err.path().to_string();
                Ok(Guarded(Err(Unreadable { metadata, field, problem: redact(&err.into_inner().to_string()) })))
            }
        }
    }
}

impl<K: Resource> Resource for Guarded<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match &self.0 {
            Ok(obj) => obj.meta(),
            Err(bad) => &bad.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(obj) => obj.meta_mut(),
            Err(bad) => &mut bad.metadata,
        }
    }
}

/// `serde`'s message without the values it quotes (`` `3000000000` ``, `"hunter2"`).
pub fn redact(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quote: Option<char> = None;
    for c in message.chars() {
        match (quote, c) {
            (None, '`' | '"') => {
                quote = Some(c);
                out.push('…');
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, c) => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use bosun_api::demovolume::DemoVolume;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_readable_object_is_read() {
        let v: Guarded<DemoVolume> = serde_json::from_value(json!({
            "apiVersion": "demo.example.com/v1", "kind": "DemoVolume",
            "metadata": {"name": "data", "namespace": "ns"}, "spec": {"name": "data", "size": 1}
        }))
        .unwrap();
        assert_eq!(v.0.unwrap().spec.size, 1);
    }

    #[test]
    fn an_unreadable_object_names_the_field_and_keeps_its_metadata_but_no_values() {
        let v: Guarded<DemoVolume> = serde_json::from_value(json!({
            "apiVersion": "demo.example.com/v1", "kind": "DemoVolume",
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
            "spec": {"name": "data", "size": 2147483648u64}
        }))
        .unwrap();
        let bad = v.0.unwrap_err();
        assert_eq!(bad.field, "spec.size");
        assert_eq!(bad.metadata.uid.as_deref(), Some("u1"));
        assert!(!bad.problem.contains("2147483648"), "{}", bad.problem);
        assert!(bad.message("DemoVolume").contains("spec.size"));
    }

    #[test]
    fn a_list_with_one_bad_item_still_decodes() {
        let items: Vec<Guarded<DemoVolume>> = serde_json::from_value(json!([
            {"metadata": {"name": "bad"}, "spec": {"name": "x", "size": "secret-value"}},
            {"metadata": {"name": "good"}, "spec": {"name": "y", "size": 2}},
        ]))
        .unwrap();
        assert!(items[0].0.is_err() && items[1].0.is_ok());
        assert!(!items[0].0.as_ref().unwrap_err().problem.contains("secret-value"));
    }

    #[test]
    fn redaction_drops_quoted_values() {
        assert_eq!(
            redact("invalid value: integer `3000000000`, expected i32"),
            "invalid value: integer …, expected i32"
        );
        assert_eq!(redact(r#"invalid type: string "hunter2", expected i32"#), "invalid type: string …, expected i32");
    }
}
