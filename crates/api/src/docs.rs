//! The user documentation's reference parts, generated from the CRDs so they cannot
//! drift: every field of a kind with its type, whether it is required, its default
//! and its rules (from the schema the apiserver enforces), and the kind's printer
//! columns.
//!
//! A page under `docs/` is prose written by hand with generated blocks in it, each
//! between `<!-- generated:NAME -->` and `<!-- end generated -->`. [`update_page`]
//! rewrites the blocks and leaves the prose alone; `make manifests` runs it and a test
//! fails when a committed page differs from what it would write.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

const END: &str = "<!-- end generated -->";

/// The page of `crd` under `docs/`: `<group>_<plural>.md`, as the CRD's file under
/// `config/crd/bases/`.
pub fn page_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.md", crd.spec.group, crd.spec.names.plural)
}

/// The sample of `crd` under `config/samples/`: `<group>_<version>_<kind>.yaml`.
pub fn sample_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}_{}.yaml", crd.spec.group, crd.spec.versions[0].name, crd.spec.names.kind.to_lowercase())
}

/// Every CRD's page as it should be: the page in `docs_dir` with its blocks
/// regenerated (or, for a kind without a page yet, a new page of blocks only, for
/// prose to be written around), with the sample from `samples_dir`.
pub fn pages(
    crds: &[CustomResourceDefinition],
    docs_dir: &Path,
    samples_dir: &Path,
) -> Result<Vec<(PathBuf, String)>, String> {
    let mut pages = Vec::new();
    for crd in crds {
        let sample_path = samples_dir.join(sample_name(crd));
        let sample = std::fs::read_to_string(&sample_path)
            .map_err(|e| format!("{}: the sample of {}: {e}", sample_path.display(), crd.spec.names.kind))?;
        let path = docs_dir.join(page_name(crd));
        let page = match std::fs::read_to_string(&path) {
            Ok(page) => page,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => new_page(crd),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let page = update_page(&page, &blocks(crd, &sample)).map_err(|e| format!("{}: {e}", path.display()))?;
        pages.push((path, page));
    }
    Ok(pages)
}

/// The outline of a new page: the sections every page has (a test checks that the
/// hand-written ones are filled in).
fn new_page(crd: &CustomResourceDefinition) -> String {
    let mut page = format!("# {} (`{}/{}`)\n", crd.spec.names.kind, crd.spec.group, crd.spec.versions[0].name);
    for (title, block) in [
        ("What it does", None),
        ("Fields", Some("fields")),
        ("Status and conditions", Some("status")),
        ("kubectl get", Some("columns")),
        ("Sample", Some("sample")),
    ] {
        let _ = write!(page, "\n## {title}\n");
        if let Some(block) = block {
            let _ = write!(page, "\n<!-- generated:{block} -->\n{END}\n");
        }
    }
    page
}

/// The blocks a page of `crd` holds, by name: `fields` (the spec), `status`,
/// `columns` (what `kubectl get` shows) and `sample` (the YAML of `sample`).
pub fn blocks(crd: &CustomResourceDefinition, sample: &str) -> BTreeMap<&'static str, String> {
    let version = &crd.spec.versions[0];
    let root = version.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref());
    let property = |name: &str| root.and_then(|r| r.properties.as_ref()).and_then(|p| p.get(name));
    let mut blocks = BTreeMap::new();
    let mut fields = String::new();
    if let Some(root) = root {
        for rule in root.x_kubernetes_validations.iter().flatten() {
            let _ = writeln!(fields, "- {}", rule_text(&rule.rule, rule.message.as_deref()));
        }
        if !fields.is_empty() {
            fields.push('\n');
        }
    }
    fields.push_str(&table(property("spec"), "spec"));
    blocks.insert("fields", fields);
    blocks.insert("status", table(property("status"), "status"));
    let mut columns = String::from("| Column | Shows |\n|---|---|\n");
    for c in version.additional_printer_columns.iter().flatten() {
        let _ = writeln!(columns, "| {} | `{}` |", c.name, c.json_path);
    }
    blocks.insert("columns", columns);
    blocks.insert("sample", format!("```yaml\n{}\n```\n", sample.trim_end()));
    blocks
}

/// `page` with each generated block replaced by its content from `blocks`. A page
/// that names a block bosun does not generate, or lacks an end marker, is an error.
pub fn update_page(page: &str, blocks: &BTreeMap<&'static str, String>) -> Result<String, String> {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(start) = rest.find("<!-- generated:") {
        let open_end =
            rest[start..].find("-->").map(|i| start + i + 3).ok_or("an unclosed `<!-- generated:` marker")?;
        let name = rest[start + "<!-- generated:".len()..open_end - 3].trim();
        let content = blocks.get(name).ok_or_else(|| format!("no generated block is called `{name}`"))?;
        let close = rest[open_end..].find(END).ok_or_else(|| format!("block `{name}` has no `{END}`"))? + open_end;
        out.push_str(&rest[..open_end]);
        out.push('\n');
        out.push_str(content);
        out.push_str(END);
        rest = &rest[close + END.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// One row per field under `schema` (at `path`), depth first in name order.
fn table(schema: Option<&JSONSchemaProps>, path: &str) -> String {
    let mut out = String::from("| Field | Type | Required | Rules | Description |\n|---|---|---|---|---|\n");
    if let Some(schema) = schema {
        rows(schema, path, &mut out);
    }
    out
}

fn rows(schema: &JSONSchemaProps, path: &str, out: &mut String) {
    let required: Vec<&String> = schema.required.iter().flatten().collect();
    for (name, field) in schema.properties.iter().flatten() {
        let field_path = format!("{path}.{name}");
        let _ = writeln!(
            out,
            "| `{field_path}` | {} | {} | {} | {} |",
            type_name(field),
            if required.contains(&name) { "yes" } else { "" },
            cell(&rules(field)),
            cell(field.description.as_deref().unwrap_or("")),
        );
        rows(field, &field_path, out);
        match &field.items {
            Some(JSONSchemaPropsOrArray::Schema(items)) => rows(items, &format!("{field_path}[]"), out),
            Some(JSONSchemaPropsOrArray::Schemas(items)) => {
                items.iter().for_each(|items| rows(items, &format!("{field_path}[]"), out))
            }
            None => {}
        }
        if let Some(JSONSchemaPropsOrBool::Schema(values)) = &field.additional_properties {
            rows(values, &format!("{field_path}.<key>"), out);
        }
    }
}

fn type_name(schema: &JSONSchemaProps) -> String {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return "int or string".to_owned();
    }
    match (schema.type_.as_deref(), &schema.items, &schema.additional_properties) {
        (Some("array"), Some(JSONSchemaPropsOrArray::Schema(items)), _) => format!("[]{}", type_name(items)),
        (Some("object"), _, Some(JSONSchemaPropsOrBool::Schema(values))) => {
            format!("map[string]{}", type_name(values))
        }
        (Some(t), _, _) => match schema.format.as_deref() {
            Some(format) => format!("{t} ({format})"),
            None => t.to_owned(),
        },
        (None, _, _) if schema.x_kubernetes_preserve_unknown_fields == Some(true) => "any".to_owned(),
        (None, _, _) => String::new(),
    }
}

/// What the apiserver enforces on one field, in words.
fn rules(schema: &JSONSchemaProps) -> String {
    let mut rules = Vec::new();
    if let Some(values) = &schema.enum_ {
        let values: Vec<String> = values.iter().map(|v| format!("`{}`", json(&v.0))).collect();
        rules.push(format!("one of {}", values.join(", ")));
    }
    if let Some(default) = &schema.default {
        rules.push(format!("default `{}`", json(&default.0)));
    }
    if let Some(pattern) = &schema.pattern {
        rules.push(format!("matches `{pattern}`"));
    }
    // The bounds of the integer type itself say nothing to a reader.
    let bounds = [
        ("≥", schema.minimum.filter(|n| *n > f64::from(i32::MIN)).map(number)),
        ("≤", schema.maximum.filter(|n| *n < f64::from(i32::MAX)).map(number)),
        ("non-empty", schema.min_length.filter(|n| *n == 1).map(|_| String::new())),
        ("at least {} characters", schema.min_length.filter(|n| *n > 1).map(|n| n.to_string())),
        ("at most {} characters", schema.max_length.map(|n| n.to_string())),
        ("at least {} items", schema.min_items.map(|n| n.to_string())),
        ("at most {} items", schema.max_items.map(|n| n.to_string())),
        ("at least {} entries", schema.min_properties.map(|n| n.to_string())),
        ("at most {} entries", schema.max_properties.map(|n| n.to_string())),
    ];
    for (words, value) in bounds {
        if let Some(value) = value {
            rules.push(match (words.contains("{}"), value.is_empty()) {
                (true, _) => words.replace("{}", &value),
                (false, true) => words.to_owned(),
                (false, false) => format!("{words} {value}"),
            });
        }
    }
    for rule in schema.x_kubernetes_validations.iter().flatten() {
        rules.push(rule_text(&rule.rule, rule.message.as_deref()));
    }
    if schema.x_kubernetes_preserve_unknown_fields == Some(true) {
        rules.push("any fields kept as given".to_owned());
    }
    rules.join("; ")
}

/// A CEL rule's message, which says what the rule checks in words, else the rule.
fn rule_text(rule: &str, message: Option<&str>) -> String {
    match message {
        Some(message) => message.to_owned(),
        None => format!("`{rule}`"),
    }
}

fn json(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn number(n: f64) -> String {
    if n.fract() == 0.0 { format!("{}", n as i64) } else { n.to_string() }
}

/// Text fit for one Markdown table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn postgresql() -> CustomResourceDefinition {
        crate::schema::crd::<crate::postgresql::PostgreSQL>()
    }

    #[test]
    fn the_fields_table_carries_each_rule_the_schema_enforces() {
        let fields = &blocks(&postgresql(), "kind: PostgreSQL")["fields"];
        let row = |path: &str| {
            fields.lines().find(|l| l.starts_with(&format!("| `{path}` |"))).unwrap_or_else(|| panic!("{path}"))
        };
        assert!(row("spec.version").contains("yes"), "{}", row("spec.version"));
        assert!(
            row("spec.replicas").contains("≥ 1") && row("spec.replicas").contains("≤ 5"),
            "{}",
            row("spec.replicas")
        );
        assert!(row("spec.storage").contains("matches `"), "{}", row("spec.storage"));
        assert!(row("spec.backup.destination.bucket").contains("at most 253 characters"));
    }

    #[test]
    fn a_page_keeps_its_prose_and_gets_its_blocks() {
        let mut blocks = BTreeMap::new();
        blocks.insert("fields", "| new |\n".to_owned());
        let page = "# Title\n\nProse.\n\n<!-- generated:fields -->\n| old |\n<!-- end generated -->\n\nMore prose.\n";
        let updated = update_page(page, &blocks).unwrap();
        assert_eq!(
            updated,
            "# Title\n\nProse.\n\n<!-- generated:fields -->\n| new |\n<!-- end generated -->\n\nMore prose.\n"
        );
        assert_eq!(update_page(&updated, &blocks).unwrap(), updated, "updating twice changes nothing");
        assert!(update_page("<!-- generated:nope -->\n<!-- end generated -->", &blocks).unwrap_err().contains("nope"));
        assert!(update_page("<!-- generated:fields -->\n", &blocks).unwrap_err().contains("end generated"));
    }
}
