//! `report KIND/NAME`: a tarball to attach to a bug report: the object, its children,
//! their events, the pods' logs, and for a PostgreSQL what its instances say of
//! themselves. Every Secret's values are replaced by their length, its
//! last-applied annotation dropped, and an environment variable whose name says it
//! holds a secret is blanked wherever it appears. Before anything is written, every
//! file is searched for each Secret value read on the way (and the token and keys of
//! a database's instance Secret): a report that would hold one is not written.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, LogParams};
use serde_json::Value;

use crate::Session;
use crate::children::{self, Child};
use crate::kinds::Target;
use crate::status::{brief, events, get};
use bosun_resources::postgresql::keys as pg;

/// The most of one container's log kept.
const LOG_LIMIT: i64 = 4 * 1024 * 1024;

/// Names of environment variables whose literal values are blanked.
const SENSITIVE: [&str; 6] = ["PASSWORD", "SECRET", "TOKEN", "KEY", "CREDENTIAL", "PASSPHRASE"];

/// Keys of bosun's Secrets whose values are not secret (names, addresses, times, the
/// names of other Secrets, which show in pod specs, events and logs): redacted like
/// the others, not searched for.
const PUBLIC_KEYS: [&str; 10] = [
    pg::USERNAME,
    pg::HOST,
    pg::PORT,
    pg::DATABASE,
    pg::DBNAME,
    pg::CA_SECRET,
    bosun_resources::instances::SERVER_SOURCE,
    bosun_resources::pki::keys::PHASE_SINCE,
    bosun_resources::pki::keys::NAMES,
    "user",
];

/// Certificates only (no key): public, as the CA ConfigMaps publish them.
fn is_certificate(text: &str) -> bool {
    let text = text.trim();
    text.starts_with("-----BEGIN CERTIFICATE-----") && !text.contains("PRIVATE KEY")
}

/// `object` with nothing secret left in it; the values taken out are added to `found`.
pub fn redact(mut object: Value, found: &mut Vec<Found>) -> Value {
    let is_secret = object.get("kind").and_then(Value::as_str) == Some("Secret");
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
        if is_secret && let Some(annotations) = metadata.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    if is_secret {
        for field in ["data", "stringData"] {
            if let Some(values) = object.get_mut(field).and_then(Value::as_object_mut) {
                for (key, value) in values.iter_mut() {
                    let text = value.as_str().unwrap_or_default().to_owned();
                    let decoded = if field == "data" { base64_decode(&text) } else { text.clone().into_bytes() };
                    *value = Value::String(format!("<redacted: {} bytes>", decoded.len()));
                    let decoded = String::from_utf8(decoded).unwrap_or_default();
                    if !PUBLIC_KEYS.contains(&key.as_str()) && !is_certificate(&decoded) {
                        let origin = format!("Secret {name} {field}.{key}");
                        found.push(Found { origin: origin.clone(), value: text });
                        found.push(Found { origin, value: decoded });
                    }
                }
            }
        }
    }
    blank_sensitive_env(&mut object);
    object
}

/// A secret value taken out, and where it was.
#[derive(Clone, Debug)]
pub struct Found {
    pub origin: String,
    pub value: String,
}

fn blank_sensitive_env(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(env)) = map.get_mut("env") {
                for var in env {
                    let name = var.get("name").and_then(Value::as_str).unwrap_or_default().to_uppercase();
                    // A file's or a directory's name is a reference, not a secret.
                    let reference = ["_FILE", "_DIR", "_PATH", "_REF"].iter().any(|r| name.ends_with(r));
                    if SENSITIVE.iter().any(|s| name.contains(s))
                        && !reference
                        && let Some(v) = var.get_mut("value")
                    {
                        *v = Value::String("<redacted>".into());
                    }
                }
            }
            map.values_mut().for_each(blank_sensitive_env);
        }
        Value::Array(items) => items.iter_mut().for_each(blank_sensitive_env),
        _ => {}
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    // Through serde, as k8s-openapi reads `data`.
    serde_json::from_value::<k8s_openapi::ByteString>(Value::String(text.to_owned())).map(|b| b.0).unwrap_or_default()
}

/// Which secret values (of at least 6 characters: shorter ones are words, ports,
/// flags) `files` hold: `file: where the value was`, never the value.
pub fn leaks(files: &BTreeMap<String, Vec<u8>>, secrets: &[Found]) -> Vec<String> {
    let secrets: Vec<&Found> = secrets.iter().filter(|s| s.value.trim().len() >= 6).collect();
    let mut leaks = Vec::new();
    for (name, content) in files {
        for secret in &secrets {
            let value = secret.value.trim().as_bytes();
            if content.windows(value.len()).any(|w| w == value) {
                leaks.push(format!("{name}: {}", secret.origin));
            }
        }
    }
    leaks.dedup();
    leaks
}

fn yaml(value: &Value) -> Vec<u8> {
    serde_yaml_ng::to_string(value).unwrap_or_default().into_bytes()
}

fn object_value(resource: &kube::core::ApiResource, object: &DynamicObject) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(resource.api_version.clone()));
        map.insert("kind".into(), Value::String(resource.kind.clone()));
    }
    value
}

async fn pod_logs(session: &Session, pods: &[&Child]) -> Vec<(String, Vec<u8>)> {
    let api: Api<Pod> = Api::namespaced(session.client.clone(), &session.namespace);
    let mut asks = Vec::new();
    for pod in pods {
        let spec = pod.object.data.get("spec");
        for list in ["initContainers", "containers"] {
            let names = spec.and_then(|s| s.get(list)).and_then(Value::as_array).cloned().unwrap_or_default();
            for container in names.iter().filter_map(|c| c.get("name").and_then(Value::as_str)) {
                let (api, pod, container) = (api.clone(), pod.name(), container.to_owned());
                asks.push(async move {
                    let params = LogParams {
                        container: Some(container.clone()),
                        limit_bytes: Some(LOG_LIMIT),
                        timestamps: true,
                        ..LogParams::default()
                    };
                    let log = match api.logs(&pod, &params).await {
                        Ok(log) => log,
                        Err(e) => format!("(no log: {})\n", brief(&e)),
                    };
                    (format!("logs/{pod}/{container}.log"), log.into_bytes())
                });
            }
        }
    }
    join_all(asks).await
}

pub async fn run(session: &Session, target: &Target, file: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let object = get(session, &target.kind, &target.name).await?;
    let (children, unread) = children::of(session, &target.name).await;
    let mut secrets = Vec::new();
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let kind = target.kind.kind.to_lowercase();
    let resource = target.kind.resource();
    files.insert(format!("{kind}-{}.yaml", target.name), yaml(&redact(object_value(&resource, &object), &mut secrets)));
    for child in &children {
        let value = redact(object_value(&child.resource, &child.object), &mut secrets);
        files.insert(format!("children/{}-{}.yaml", child.kind().to_lowercase(), child.name()), yaml(&value));
    }
    let mut names: Vec<String> = children.iter().map(Child::name).collect();
    names.push(target.name.clone());
    let events = events(session, &names, usize::MAX).await?;
    files.insert("events.yaml".into(), yaml(&serde_json::to_value(&events)?));
    let pods: Vec<&Child> = children.iter().filter(|c| c.kind() == "Pod").collect();
    files.extend(pod_logs(session, &pods).await);
    if target.kind.is_postgresql() {
        match crate::postgres::gather(session, &target.name).await {
            Ok(status) => {
                files.insert("postgresql-status.json".into(), serde_json::to_vec_pretty(&status)?);
            }
            Err(e) => {
                files.insert(
                    "postgresql-status.json".into(),
                    format!("{{\"error\": {:?}}}", e.to_string()).into_bytes(),
                );
            }
        }
    }
    let now = jiff::Timestamp::now();
    files.insert(
        "README.txt".into(),
        format!(
            "bosun report of {} {}/{}, made {now} by kubectl-bosun {}.\n\
             Every Secret's values are replaced by their length; environment variables named like\n\
             secrets are blanked; no file holds a value of a Secret read for this report.\n\
             Objects not readable with your rights: {}\n",
            target.kind.display(),
            session.namespace,
            target.name,
            env!("CARGO_PKG_VERSION"),
            if unread.is_empty() { "none".to_owned() } else { unread.join("; ") }
        )
        .into_bytes(),
    );
    let leaked = leaks(&files, &secrets);
    if !leaked.is_empty() {
        anyhow::bail!("the report was not written: a Secret's value showed in {}", leaked.join(", "));
    }
    let stamp = now.strftime("%Y%m%dT%H%M%SZ").to_string();
    let base = format!("bosun-report-{kind}-{}-{stamp}", target.name);
    let path = file.unwrap_or_else(|| PathBuf::from(format!("{base}.tar.gz")));
    write(&path, &base, &files, now.as_second())?;
    println!("{} ({} files: {} objects, {} logs)", path.display(), files.len(), children.len() + 1, pods.len());
    Ok(ExitCode::SUCCESS)
}

fn write(path: &std::path::Path, base: &str, files: &BTreeMap<String, Vec<u8>>, mtime: i64) -> anyhow::Result<()> {
    let out = std::fs::File::create(path).map_err(|e| anyhow::anyhow!("creating {}: {e}", path.display()))?;
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (name, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(u64::try_from(mtime).unwrap_or(0));
        header.set_cksum();
        tar.append_data(&mut header, format!("{base}/{name}"), content.as_slice())?;
    }
    tar.into_inner()?.finish()?.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_secrets_values_and_a_secret_looking_env_value_are_taken_out() {
        let mut found = Vec::new();
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"stringData\":{\"password\":\"hunter2-long\"}}"},
                         "managedFields": [{"manager": "kubectl"}]},
            "data": {"password": "aHVudGVyMi1sb25n"},
            "stringData": {"token": "s3cr3t-token"}
        });
        let redacted = redact(secret, &mut found);
        let text = redacted.to_string();
        assert!(!text.contains("aHVudGVyMi1sb25n") && !text.contains("hunter2") && !text.contains("s3cr3t"), "{text}");
        assert!(text.contains("<redacted: 12 bytes>"), "{text}");
        assert!(!text.contains("managedFields") && !text.contains("last-applied"), "{text}");
        let values: Vec<&str> = found.iter().map(|f| f.value.as_str()).collect();
        assert!(values.contains(&"hunter2-long") && values.contains(&"s3cr3t-token"), "{values:?}");

        let pod = json!({"kind": "Pod", "spec": {"containers": [{"name": "app", "env": [
            {"name": "DB_PASSWORD", "value": "plain-text-pw"}, {"name": "LOG_LEVEL", "value": "debug"},
            {"name": "BOSUN_CREDENTIALS_DIR", "value": "/etc/credentials"},
            {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "x", "key": "y"}}}]}]}});
        let text = redact(pod, &mut found).to_string();
        assert!(!text.contains("plain-text-pw") && text.contains("debug") && text.contains("secretKeyRef"), "{text}");
        assert!(text.contains("/etc/credentials"), "a directory's name is not a secret: {text}");
    }

    #[test]
    fn a_file_holding_a_secret_value_is_found() {
        let files = BTreeMap::from([
            ("logs/db-0/postgres.log".to_owned(), b"password is hunter2-long here".to_vec()),
            ("events.yaml".to_owned(), b"nothing to see".to_vec()),
            ("short.txt".to_owned(), b"5432 true".to_vec()),
        ]);
        let found = |value: &str| Found { origin: format!("Secret db data.{value}"), value: value.to_owned() };
        let secrets = [found("hunter2-long"), found("5432"), found("true")];
        assert_eq!(leaks(&files, &secrets), ["logs/db-0/postgres.log: Secret db data.hunter2-long"]);
    }
}
