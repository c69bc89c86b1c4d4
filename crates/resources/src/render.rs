//! `bosun render`: the children a custom resource would produce, without a cluster.
//!
//! Documents are matched on `apiVersion` and `kind` and run through the same builders
//! the controllers use, so what is printed is what would be applied (minus the
//! ownerReference, which needs the uid the apiserver assigns).

use bosun_api::appconfig::AppConfig;
use bosun_api::backup::Backup;
use bosun_api::demovolume::DemoVolume;
use bosun_api::voteconfig::VoteConfig;
use bosun_api::webapp::{WebAppKind, apps_v1, example_v1};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{appconfig, backup, demovolume, voteconfig, webapp};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RenderError {
    #[error("document {index}: {kind} in {api_version} is not served by bosun")]
    Unsupported { index: usize, api_version: String, kind: String },
    #[error("document {index} ({kind} {name:?}): {message}")]
    Invalid { index: usize, kind: String, name: String, message: String },
}

/// Render every document (in order); empty documents are skipped.
pub fn render(documents: &[Value]) -> Result<Vec<Value>, RenderError> {
    let mut out = Vec::new();
    for (index, doc) in documents.iter().enumerate().filter(|(_, d)| !d.is_null()) {
        let field = |f: &str| doc.get(f).and_then(Value::as_str).unwrap_or_default().to_owned();
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        match (api_version.as_str(), kind.as_str()) {
            ("apps.example.com/v1", "WebApp") => out.extend(webapp_children(parse::<apps_v1::WebApp>(index, doc)?)),
            ("example.com/v1", "WebApp") => out.extend(webapp_children(parse::<example_v1::WebApp>(index, doc)?)),
            ("voting.schoolofdevops.com/v1alpha1", "VoteConfig") => {
                let vote = parse::<VoteConfig>(index, doc)?;
                out.extend(serde_json::to_value(voteconfig::desired_config_map(&vote)));
            }
            ("demo.example.com/v1", "DemoVolume") => {
                let volume = parse::<DemoVolume>(index, doc)?;
                out.extend(serde_json::to_value(demovolume::desired_claim(&volume)));
            }
            ("config.example.com/v1", "AppConfig") => {
                // The namespace variable renders as the document's, else `default`.
                let mut app = parse::<AppConfig>(index, doc)?;
                let namespace = app.metadata.namespace.clone();
                app.metadata.namespace.get_or_insert_with(|| "default".to_owned());
                let data = appconfig::render(&app).map_err(|r| RenderError::Invalid {
                    index,
                    kind: "AppConfig".into(),
                    name: app.metadata.name.clone().unwrap_or_default(),
                    message: r.message(),
                })?;
                let mut config_map = appconfig::desired_config_map(&app, data);
                config_map.metadata.namespace = namespace;
                out.extend(serde_json::to_value(config_map));
            }
            ("backup.example.com/v1", "Backup") => {
                let backup = parse::<Backup>(index, doc)?;
                backup::validate(&backup).map_err(|r| RenderError::Invalid {
                    index,
                    kind: "Backup".into(),
                    name: backup.metadata.name.clone().unwrap_or_default(),
                    message: r.message(),
                })?;
                out.extend(serde_json::to_value(backup::desired_cronjob(&backup, backup::DEFAULT_RUNNER_IMAGE)));
            }
            _ => return Err(RenderError::Unsupported { index, api_version, kind }),
        }
    }
    Ok(out)
}

fn parse<K: DeserializeOwned + kube::Resource<DynamicType = ()>>(index: usize, doc: &Value) -> Result<K, RenderError> {
    let name = doc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let invalid =
        |message: String| RenderError::Invalid { index, kind: K::kind(&()).into_owned(), name: name.clone(), message };
    if name.is_empty() {
        return Err(invalid("metadata.name is required".into()));
    }
    serde_json::from_value(doc.clone()).map_err(|e| invalid(e.to_string()))
}

fn webapp_children<K: WebAppKind>(w: K) -> Vec<Value> {
    let values =
        [serde_json::to_value(webapp::desired_deployment(&w)), serde_json::to_value(webapp::desired_service(&w))];
    values.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn renders_a_deployment_and_a_service_per_webapp() {
        let docs = [json!({"apiVersion": "example.com/v1", "kind": "WebApp", "metadata": {"name": "my-webapp"},
                           "spec": {"replicas": 3, "image": "nginx:1.21", "port": 80}})];
        let out = render(&docs).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["kind"], "Deployment");
        assert_eq!(out[0]["spec"]["replicas"], 3);
        assert_eq!(out[1]["kind"], "Service");
        assert_eq!(out[1]["spec"]["ports"][0]["targetPort"], 80);
        assert!(out[0]["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn renders_an_appconfigs_config_map_and_a_backups_cronjob_and_names_what_is_wrong() {
        let app = json!({"apiVersion": "config.example.com/v1", "kind": "AppConfig", "metadata": {"name": "myapp"},
                         "spec": {"application": "myapp", "environment": "prod",
                                  "config": {"DB_HOST": "db.{{ environment }}.internal", "NS": "{{ namespace }}"}}});
        let backup = json!({"apiVersion": "backup.example.com/v1", "kind": "Backup", "metadata": {"name": "nightly"},
                            "spec": {"source": {"type": "postgresql", "connection": {"host": "db", "database": "app", "secretRef": {"name": "s"}}},
                                     "destination": {"type": "s3", "bucket": "backups"}, "schedule": "0 2 * * *"}});
        let out = render(&[app.clone(), backup.clone()]).unwrap();
        assert_eq!(
            (out[0]["kind"].as_str(), out[0]["metadata"]["name"].as_str()),
            (Some("ConfigMap"), Some("myapp-config"))
        );
        assert_eq!(out[0]["data"]["DB_HOST"], "db.prod.internal");
        assert_eq!(out[0]["data"]["NS"], "default");
        assert!(out[0]["metadata"].get("namespace").is_none(), "kubectl apply -n decides");
        assert_eq!(
            (out[1]["kind"].as_str(), out[1]["spec"]["schedule"].as_str()),
            (Some("CronJob"), Some("0 2 * * *"))
        );
        let mut broken = app;
        broken["spec"]["config"]["BAD"] = json!("{{ nosuchvar }}");
        assert!(render(&[broken]).unwrap_err().to_string().contains("spec.config.BAD"));
        let mut late = backup;
        late["spec"]["schedule"] = json!("0 5-1 * * *");
        assert!(render(&[late]).unwrap_err().to_string().contains("spec.schedule"));
    }

    #[test]
    fn renders_a_config_map_per_voteconfig_and_a_claim_per_demovolume() {
        let docs = [
            json!({"apiVersion": "voting.schoolofdevops.com/v1alpha1", "kind": "VoteConfig",
                   "metadata": {"name": "pets"},
                   "spec": {"title": "Cats or dogs?", "options": [{"id": "a", "label": "Cats"}, {"id": "b", "label": "Dogs"}]}}),
            Value::Null,
            json!({"apiVersion": "demo.example.com/v1", "kind": "DemoVolume", "metadata": {"name": "data"},
                   "spec": {"name": "data", "size": 3}}),
        ];
        let out = render(&docs).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[0]["kind"].as_str(), out[0]["metadata"]["name"].as_str()),
            (Some("ConfigMap"), Some("pets-config"))
        );
        assert_eq!(out[0]["data"]["OPTION_B"], "Dogs");
        assert_eq!(out[1]["kind"], "PersistentVolumeClaim");
        assert_eq!(out[1]["spec"]["resources"]["requests"]["storage"], "3Gi");
        let sizeless = [json!({"apiVersion": "demo.example.com/v1", "kind": "DemoVolume", "metadata": {"name": "d"},
                               "spec": {"name": "d"}})];
        assert!(render(&sizeless).unwrap_err().to_string().contains("missing field `size`"));
    }

    #[test]
    fn names_what_is_wrong() {
        let missing_image =
            [json!({"apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": "w"}, "spec": {}})];
        let err = render(&missing_image).unwrap_err().to_string();
        assert!(err.contains("missing field `image`"), "{err}");
        let unknown = [json!({"apiVersion": "v1", "kind": "Pod"})];
        assert_eq!(render(&unknown).unwrap_err().to_string(), "document 0: Pod in v1 is not served by bosun");
        let nameless = [json!({"apiVersion": "apps.example.com/v1", "kind": "WebApp", "spec": {"image": "x"}})];
        assert!(render(&nameless).unwrap_err().to_string().contains("metadata.name is required"));
    }
}
