//! Tightening applied to every generated CRD schema, so that whatever the apiserver
//! accepts also deserializes into the Rust types.
//!
//! kube-derive emits `format: int32` / `format: int64` for integers but no bounds, and
//! the apiserver does not enforce formats: `2147483648` would be stored in an `i32`
//! field and then fail to decode in the operator. [`crd`] therefore:
//!
//! * gives every integer (spec and status, including the Kubernetes types embedded in
//!   our specs) a `minimum` and `maximum` matching its Rust type, keeping any tighter
//!   bound the type declares (e.g. `replicas ≥ 1`, `port` 1–65535);
//! * gives every [`Quantity`] the Kubernetes quantity `pattern`, so `memory: 1.5.5Gi`
//!   is refused at admission instead of failing when the Deployment is applied (the
//!   pattern only constrains the string form of these `x-kubernetes-int-or-string`
//!   values);
//! * gives `status` the default `{observedGeneration: 0}`: the apiserver applies a
//!   default when it reads an object from storage, and drops the status a create
//!   carries, so an object bosun has not looked at yet reads as generation 1,
//!   observed 0 — which kstatus (Flux, Argo CD, Helm 4's `--wait`) reads as
//!   InProgress. Without it, an object with no status at all is Current to kstatus,
//!   and a GitOps rollout that created it would end before bosun began.
//!
//! Quantities are found by type, not by field name: the CRD's root type is generated a
//! second time without inlining, where each Quantity is a `$ref` to its definition,
//! and that tree is walked in step with the CRD's inlined schema.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResourceExt, Resource};
use schemars::JsonSchema;
use serde_json::{Map, Value};

/// The syntax of a Kubernetes resource quantity, as the apiserver's own OpenAPI has it.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// The CRD of `K` with the schema tightened as described in the module docs.
pub fn crd<K>() -> CustomResourceDefinition
where
    K: CustomResourceExt + Resource<DynamicType = ()> + JsonSchema,
{
    let mut crd = K::crd();
    let version = K::version(&());
    for v in &mut crd.spec.versions {
        let Some(schema) = v.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else { continue };
        bound_integers(schema);
        unobserved_until_reconciled(schema);
        if v.name == version {
            mark_quantities::<K>(schema);
        }
    }
    crd
}

/// `status` defaults to "generation 0 observed" (see the module docs), when the
/// schema has a `status.observedGeneration`.
fn unobserved_until_reconciled(schema: &mut JSONSchemaProps) {
    let Some(status) = schema.properties.as_mut().and_then(|p| p.get_mut("status")) else { return };
    if status.properties.as_ref().is_some_and(|p| p.contains_key("observedGeneration")) {
        status.default = Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSON(
            serde_json::json!({"observedGeneration": 0}),
        ));
    }
}

/// The `maximum` of an int64: the largest f64 below 2^63, i.e. `i64::MAX - 1023`.
///
/// A schema bound is a float64. `i64::MAX` is not one, and its nearest float64, 2^63,
/// overflows when the apiserver converts it to int64 to compare an integer with it:
/// `maximum: 2^63` refuses every value (seen on kube-apiserver 1.34). The last 1023
/// values of i64 are given up instead; nothing bosun stores comes near them.
pub const INT64_MAXIMUM: i64 = i64::MAX - 1023;
/// The `maximum` of a uint64, for the same reason: the largest f64 below 2^64.
pub const UINT64_MAXIMUM: u64 = u64::MAX - 2047;

/// The bounds of an OpenAPI integer `format`, as the Rust types that produce it have them.
pub fn integer_bounds(format: &str) -> Option<(f64, f64)> {
    Some(match format {
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        // Both exact as f64: i64::MIN is -2^63.
        "int64" => (i64::MIN as f64, INT64_MAXIMUM as f64),
        "uint8" => (0.0, u8::MAX.into()),
        "uint16" => (0.0, u16::MAX.into()),
        "uint32" => (0.0, u32::MAX.into()),
        "uint64" => (0.0, UINT64_MAXIMUM as f64),
        _ => return None,
    })
}

/// Every integer in `schema` gets `minimum` and `maximum` from its format; a bound the
/// schema already has is kept when it is tighter.
pub fn bound_integers(schema: &mut JSONSchemaProps) {
    visit_mut(schema, &mut |s| {
        if s.type_.as_deref() != Some("integer") {
            return;
        }
        let Some((min, max)) = s.format.as_deref().and_then(integer_bounds) else { return };
        s.minimum = Some(s.minimum.map_or(min, |m| m.max(min)));
        s.maximum = Some(s.maximum.map_or(max, |m| m.min(max)));
    });
}

/// Call `f` on `schema` and every schema nested in it.
pub fn visit_mut(schema: &mut JSONSchemaProps, f: &mut impl FnMut(&mut JSONSchemaProps)) {
    f(schema);
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        visit_mut(child, f);
    }
    match &mut schema.items {
        Some(JSONSchemaPropsOrArray::Schema(s)) => visit_mut(s, f),
        Some(JSONSchemaPropsOrArray::Schemas(list)) => list.iter_mut().for_each(|s| visit_mut(s, f)),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(s)) = &mut schema.additional_properties {
        visit_mut(s, f);
    }
    for list in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of] {
        list.iter_mut().flatten().for_each(|s| visit_mut(s, f));
    }
    if let Some(s) = &mut schema.not {
        visit_mut(s, f);
    }
}

/// Call `f` on `schema` and every schema nested in it, with the path to it
/// (`spec.env[].name`, `spec.resources.limits.*`).
pub fn visit(schema: &JSONSchemaProps, path: &str, f: &mut impl FnMut(&str, &JSONSchemaProps)) {
    f(path, schema);
    for (name, child) in schema.properties.iter().flatten() {
        let path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        visit(child, &path, f);
    }
    match &schema.items {
        Some(JSONSchemaPropsOrArray::Schema(s)) => visit(s, &format!("{path}[]"), f),
        Some(JSONSchemaPropsOrArray::Schemas(list)) => list.iter().for_each(|s| visit(s, &format!("{path}[]"), f)),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(s)) = &schema.additional_properties {
        visit(s, &format!("{path}.*"), f);
    }
    for list in [&schema.all_of, &schema.any_of, &schema.one_of] {
        list.iter().flatten().for_each(|s| visit(s, path, f));
    }
    if let Some(s) = &schema.not {
        visit(s, path, f);
    }
}

/// Put [`QUANTITY_PATTERN`] on every schema in `crd_schema` that is a [`Quantity`] in `K`.
fn mark_quantities<K: JsonSchema>(crd_schema: &mut JSONSchemaProps) {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = false;
            s.meta_schema = None;
        })
        .into_generator();
    let root = generator.into_root_schema_for::<K>().to_value();
    let definitions = definitions(&root);
    let quantity = Quantity::schema_name();
    let mut in_progress = Vec::new();
    walk_refs(&root, &definitions, &quantity, crd_schema, &mut in_progress);
}

/// The definitions of a root schema, wherever the settings put them.
fn definitions(root: &Value) -> Map<String, Value> {
    let mut all = Map::new();
    for pointer in ["/components/schemas", "/definitions", "/$defs"] {
        if let Some(Value::Object(defs)) = root.pointer(pointer) {
            all.extend(defs.clone());
        }
    }
    all
}

/// Walk `raw` (with `$ref`s) and `out` (inlined) in step; mark where `raw` refers to `target`.
fn walk_refs(
    raw: &Value,
    definitions: &Map<String, Value>,
    target: &str,
    out: &mut JSONSchemaProps,
    in_progress: &mut Vec<String>,
) {
    let Value::Object(raw) = raw else { return };
    if let Some(Value::String(reference)) = raw.get("$ref") {
        let name = reference.rsplit('/').next().unwrap_or_default().replace("~1", "/").replace("~0", "~");
        if name == target {
            out.pattern = Some(QUANTITY_PATTERN.to_owned());
        } else if !in_progress.contains(&name)
            && let Some(definition) = definitions.get(&name)
        {
            in_progress.push(name);
            walk_refs(definition, definitions, target, out, in_progress);
            in_progress.pop();
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = raw.get(key) {
            for branch in branches {
                walk_refs(branch, definitions, target, out, in_progress);
            }
        }
    }
    if let Some(Value::Object(properties)) = raw.get("properties") {
        for (name, raw_child) in properties {
            if let Some(child) = out.properties.as_mut().and_then(|p| p.get_mut(name)) {
                walk_refs(raw_child, definitions, target, child, in_progress);
            }
        }
    }
    if let (Some(raw_items), Some(JSONSchemaPropsOrArray::Schema(items))) = (raw.get("items"), &mut out.items) {
        walk_refs(raw_items, definitions, target, items, in_progress);
    }
    if let (Some(raw_values), Some(JSONSchemaPropsOrBool::Schema(values))) =
        (raw.get("additionalProperties"), &mut out.additional_properties)
    {
        walk_refs(raw_values, definitions, target, values, in_progress);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Every CRD's schema, by `<kind>.<group>`.
    fn schemas() -> BTreeMap<String, JSONSchemaProps> {
        let mut all = BTreeMap::new();
        // The types of this crate (bosun-controller's registry serves them; it sits above).
        let crds = [
            crd::<crate::webapp::apps_v1::WebApp>(),
            crd::<crate::webapp::example_v1::WebApp>(),
            crd::<crate::voteconfig::VoteConfig>(),
            crd::<crate::demovolume::DemoVolume>(),
            crd::<crate::appconfig::AppConfig>(),
            crd::<crate::backup::Backup>(),
            crd::<crate::backup::Restore>(),
            crd::<crate::postgresql::PostgreSQL>(),
            crd::<crate::stack::AppStack>(),
            crd::<crate::stack::EcommercePlatform>(),
        ];
        for crd in crds {
            for version in crd.spec.versions {
                let schema = version.schema.and_then(|s| s.open_api_v3_schema).expect("a schema");
                all.insert(format!("{}.{}/{}", crd.spec.names.kind, crd.spec.group, version.name), schema);
            }
        }
        assert_eq!(all.len(), 10, "{:?}", all.keys());
        all
    }

    /// The schema at `path`, spelled as [`visit`] spells it (`a.b[].c`, `a.*`).
    fn at<'a>(schema: &'a JSONSchemaProps, path: &str) -> &'a JSONSchemaProps {
        let mut node = schema;
        for part in path.split('.') {
            let (name, items) = part.strip_suffix("[]").map_or((part, false), |n| (n, true));
            node = if name == "*" {
                match &node.additional_properties {
                    Some(JSONSchemaPropsOrBool::Schema(s)) => s,
                    _ => panic!("{path}: no additionalProperties"),
                }
            } else {
                node.properties.as_ref().and_then(|p| p.get(name)).unwrap_or_else(|| panic!("{path}: no {name}"))
            };
            if items {
                node = match &node.items {
                    Some(JSONSchemaPropsOrArray::Schema(s)) => s,
                    _ => panic!("{path}: {name} has no items"),
                };
            }
        }
        node
    }

    #[test]
    fn an_unobserved_object_reads_generation_0_observed_and_its_status_type_decodes_that() {
        let default = serde_json::json!({"observedGeneration": 0});
        for (name, schema) in schemas() {
            let status = &schema.properties.as_ref().expect("properties")["status"];
            assert_eq!(status.default.as_ref().map(|d| &d.0), Some(&default), "{name}");
        }
        // What bosun's watches decode from an object it has not reconciled yet.
        fn decodes<T: serde::de::DeserializeOwned>(value: &Value) {
            serde_json::from_value::<T>(value.clone())
                .unwrap_or_else(|e| panic!("{}: {e}", std::any::type_name::<T>()));
        }
        decodes::<crate::webapp::WebAppStatus>(&default);
        decodes::<crate::voteconfig::VoteConfigStatus>(&default);
        decodes::<crate::demovolume::DemoVolumeStatus>(&default);
        decodes::<crate::appconfig::AppConfigStatus>(&default);
        decodes::<crate::backup::BackupStatus>(&default);
        decodes::<crate::backup::RestoreStatus>(&default);
        decodes::<crate::postgresql::PostgreSQLStatus>(&default);
        decodes::<crate::stack::StackStatus>(&default);
    }

    #[test]
    fn every_integer_has_both_bounds_within_its_rust_type() {
        for (crd, schema) in schemas() {
            let mut integers = 0;
            visit(&schema, "", &mut |path, s| {
                if s.type_.as_deref() != Some("integer") {
                    return;
                }
                integers += 1;
                let format = s.format.as_deref().unwrap_or_else(|| panic!("{crd} {path}: integer without a format"));
                let (min, max) =
                    integer_bounds(format).unwrap_or_else(|| panic!("{crd} {path}: unknown integer format {format}"));
                let (Some(lo), Some(hi)) = (s.minimum, s.maximum) else {
                    panic!("{crd} {path}: {format} without both bounds: {:?}..{:?}", s.minimum, s.maximum)
                };
                assert!(min <= lo && lo <= hi && hi <= max, "{crd} {path}: {lo}..{hi} is not within {format}");
                assert!(s.exclusive_minimum.is_none() && s.exclusive_maximum.is_none(), "{crd} {path}");
            });
            assert!(integers > 0, "{crd} has no integers at all");
        }
    }

    #[test]
    fn tighter_bounds_of_the_types_are_kept_and_the_rest_are_the_types_own() {
        let schemas = schemas();
        let bounds = |crd: &str, path: &str| {
            let s = at(&schemas[crd], path);
            (s.minimum.expect("minimum"), s.maximum.expect("maximum"))
        };
        let int32 = (f64::from(i32::MIN), f64::from(i32::MAX));
        let int64 = (i64::MIN as f64, INT64_MAXIMUM as f64);
        for crd in ["WebApp.apps.example.com/v1", "WebApp.example.com/v1"] {
            assert_eq!(bounds(crd, "spec.port"), (1.0, 65535.0));
            assert_eq!(bounds(crd, "status.availableReplicas"), int32);
            assert_eq!(bounds(crd, "status.readyReplicas"), int32);
            assert_eq!(bounds(crd, "status.observedGeneration"), int64);
            assert_eq!(bounds(crd, "status.conditions[].observedGeneration"), int64);
            assert_eq!(bounds(crd, "spec.securityContext.runAsUser"), int64);
            assert_eq!(bounds(crd, "spec.securityContext.runAsGroup"), int64);
        }
        assert_eq!(bounds("WebApp.apps.example.com/v1", "spec.replicas"), (1.0, int32.1));
        assert_eq!(bounds("WebApp.example.com/v1", "spec.replicas"), (1.0, 10.0));
        let size = bounds("DemoVolume.demo.example.com/v1", "spec.size");
        assert_eq!(size, (1.0, f64::from(crate::demovolume::MAX_SIZE_GIB)));
        assert_eq!(size.1, 1_048_576.0, "1 PiB in GiB");
    }

    #[test]
    fn bounds_are_clipped_to_the_type_and_tighter_ones_kept() {
        let mut schema: JSONSchemaProps = serde_json::from_value(serde_json::json!({
            "type": "object",
            "properties": {
                "loose": {"type": "integer", "format": "int32", "minimum": -1e12, "maximum": 1e12},
                "tight": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 10},
                "open": {"type": "array", "items": {"type": "integer", "format": "int64"}},
            },
        }))
        .unwrap();
        bound_integers(&mut schema);
        let props = schema.properties.as_ref().unwrap();
        assert_eq!((props["loose"].minimum, props["loose"].maximum), (Some(-2147483648.0), Some(2147483647.0)));
        assert_eq!((props["tight"].minimum, props["tight"].maximum), (Some(1.0), Some(10.0)));
        let Some(JSONSchemaPropsOrArray::Schema(item)) = &props["open"].items else { panic!("items") };
        assert_eq!((item.minimum, item.maximum), (Some(i64::MIN as f64), Some(INT64_MAXIMUM as f64)));
    }

    #[test]
    fn the_64_bit_maxima_are_exact_floats_just_below_the_overflow() {
        let max = INT64_MAXIMUM as f64;
        assert_eq!(max as i64, INT64_MAXIMUM, "not exact as f64");
        assert_eq!(max.next_up(), 2f64.powi(63), "not the largest f64 below 2^63");
        assert_eq!(i64::MIN as f64 as i64, i64::MIN);
        let max = UINT64_MAXIMUM as f64;
        assert_eq!(max as u64, UINT64_MAXIMUM, "not exact as f64");
        assert_eq!(max.next_up(), 2f64.powi(64), "not the largest f64 below 2^64");
    }

    #[test]
    fn webapp_env_is_a_list_map_keyed_by_name() {
        let schemas = schemas();
        for crd in ["WebApp.apps.example.com/v1", "WebApp.example.com/v1"] {
            let env = at(&schemas[crd], "spec.env");
            assert_eq!(env.x_kubernetes_list_type.as_deref(), Some("map"), "{crd}");
            assert_eq!(env.x_kubernetes_list_map_keys, Some(vec!["name".to_owned()]), "{crd}");
            // A list-map key must be required (or defaulted) in the items.
            let item = at(&schemas[crd], "spec.env[]");
            assert!(item.required.iter().flatten().any(|r| r == "name"), "{crd}: env[].name is not required");
        }
    }

    #[test]
    fn every_quantity_has_the_quantity_pattern() {
        let schemas = schemas();
        for crd in ["WebApp.apps.example.com/v1", "WebApp.example.com/v1"] {
            for path in [
                "spec.resources.limits.*",
                "spec.resources.requests.*",
                "spec.env[].valueFrom.resourceFieldRef.divisor",
            ] {
                let s = at(&schemas[crd], path);
                assert_eq!(s.x_kubernetes_int_or_string, Some(true), "{crd} {path}");
                assert_eq!(s.pattern.as_deref(), Some(QUANTITY_PATTERN), "{crd} {path}");
            }
        }
        // bosun's CRDs hold no IntOrString, so every int-or-string is a Quantity. If an
        // IntOrString field is ever added, exempt it here: it must not get this pattern.
        for (crd, schema) in &schemas {
            visit(schema, "", &mut |path, s| {
                if s.x_kubernetes_int_or_string == Some(true) {
                    assert_eq!(
                        s.pattern.as_deref(),
                        Some(QUANTITY_PATTERN),
                        "{crd} {path}: a quantity without the pattern"
                    );
                }
            });
        }
    }

    #[test]
    fn names_are_limited_to_63_characters_with_a_reason() {
        for (crd, schema) in schemas() {
            let rules = schema.x_kubernetes_validations.unwrap_or_default();
            // 63, or less where a child's name adds a suffix (`<name>-cronjob` ≤ 52).
            let (rule, limit) = rules
                .iter()
                .find_map(|r| {
                    let limit: u32 = r.rule.split("size(self.metadata.name) <= ").nth(1)?.get(..2)?.parse().ok()?;
                    Some((r, limit))
                })
                .unwrap_or_else(|| panic!("{crd}: no rule limiting the length of metadata.name: {rules:?}"));
            assert!(limit <= 63, "{crd}: {limit}");
            let message = rule.message.as_deref().unwrap_or_default();
            assert!(message.contains("metadata.name") && message.contains(&limit.to_string()), "{crd}: {message}");
            assert!(!rules.iter().any(|r| r.rule.contains("246")), "{crd}: the old 246-character rule is still there");
            if !crd.starts_with("WebApp") && limit == 63 {
                assert!(
                    message.contains("app.kubernetes.io/instance"),
                    "{crd}: the message does not say why: {message}"
                );
            }
        }
    }
}
