//! `bosun render`: the children a custom resource would produce, without a cluster.
//!
//! Documents are matched on `apiVersion` and `kind` and run through the same builders
//! the controllers use, so what is printed is what would be applied (minus the
//! ownerReference, which needs the uid the apiserver assigns).

use bosun_api::appconfig::AppConfig;
use bosun_api::backup::Backup;
use bosun_api::demovolume::DemoVolume;
use bosun_api::postgresql::PostgreSQL;
use bosun_api::stack::{AppStack, EcommercePlatform};
use bosun_api::voteconfig::VoteConfig;
use bosun_api::webapp::{WebAppKind, apps_v1, example_v1};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{appconfig, backup, demovolume, postgresql, stack, voteconfig, webapp};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RenderError {
    #[error("document {index}: {kind} in {api_version} is not served by bosun")]
    Unsupported { index: usize, api_version: String, kind: String },
    #[error("document {index} ({kind} {name:?}): {message}")]
    Invalid { index: usize, kind: String, name: String, message: String },
}

/// A stack's children, every component at once (in the cluster each waits for what it
/// depends on). No MySQL Secret: its passwords are generated in the cluster, once.
fn stack_children<K: kube::Resource<DynamicType = ()>>(owner: &K, plan: &stack::Plan) -> Vec<Value> {
    let images = stack::Images::default();
    let mut out: Vec<Option<Value>> = vec![
        stack::desired_postgresql(owner, plan).and_then(|p| serde_json::to_value(p).ok()),
        stack::desired_mysql_statefulset(owner, plan, &images).and_then(|s| serde_json::to_value(s).ok()),
        stack::desired_mysql_service(owner, plan).and_then(|s| serde_json::to_value(s).ok()),
    ];
    if let Some((deployment, service)) = stack::desired_cache(owner, plan, &images) {
        out.extend([serde_json::to_value(deployment).ok(), serde_json::to_value(service).ok()]);
    }
    for component in [stack::BACKEND_COMPONENT, stack::FRONTEND_COMPONENT] {
        let (deployment, service) = stack::desired_tier(owner, plan, component);
        out.extend([serde_json::to_value(deployment).ok(), serde_json::to_value(service).ok()]);
    }
    out.push(stack::desired_ingress(owner, plan).and_then(|i| serde_json::to_value(i).ok()));
    out.push(stack::desired_service_monitor(owner, plan));
    out.into_iter().flatten().collect()
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
            ("database.example.com/v1", "PostgreSQL") => {
                // No Secret: its passwords are generated in the cluster, once.
                let db = parse::<PostgreSQL>(index, doc)?;
                let settings = postgresql::Settings::default();
                out.extend(serde_json::to_value(postgresql::desired_statefulset(&db, &settings, None, "")));
                out.extend(postgresql::desired_services(&db).iter().filter_map(|s| serde_json::to_value(s).ok()));
                out.extend(postgresql::desired_backup(&db).and_then(|b| serde_json::to_value(b).ok()));
            }
            ("app.example.com/v1", "AppStack") => {
                let stack = parse::<AppStack>(index, doc)?;
                out.extend(stack_children(&stack, &stack::app_stack(&stack)));
            }
            ("platform.example.com/v1", "EcommercePlatform") => {
                let platform = parse::<EcommercePlatform>(index, doc)?;
                out.extend(stack_children(&platform, &stack::platform(&platform)));
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
    fn renders_a_postgresqls_statefulset_services_and_backup_but_no_password() {
        let db = json!({"apiVersion": "database.example.com/v1", "kind": "PostgreSQL", "metadata": {"name": "test-db"},
                        "spec": {"version": "14", "storage": "1Gi", "replicas": 2, "backup": {"enabled": true}}});
        let out = render(&[db]).unwrap();
        let kinds: Vec<_> = out.iter().map(|o| o["kind"].as_str().unwrap_or_default()).collect();
        assert_eq!(kinds, ["StatefulSet", "Service", "Service", "Service", "Backup"]);
        assert_eq!(out[0]["spec"]["template"]["spec"]["containers"][0]["image"], "postgres:14");
        assert_eq!(out[3]["metadata"]["name"], "test-db-ro");
        let bad = json!({"apiVersion": "database.example.com/v1", "kind": "PostgreSQL", "metadata": {"name": "x"},
                         "spec": {"version": "11", "storage": "1Gi"}});
        assert!(render(&[bad]).unwrap_err().to_string().contains("unknown variant `11`"));
    }

    #[test]
    fn renders_every_component_of_the_stack_samples() {
        let read = |f: &str| -> Value {
            let path = format!("{}/../../config/samples/{f}", env!("CARGO_MANIFEST_DIR"));
            serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
        };
        let kinds = |out: &[Value]| -> Vec<String> {
            out.iter()
                .map(|o| format!("{}/{}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap()))
                .collect()
        };
        let out = render(&[read("app.example.com_v1_appstack.yaml")]).unwrap();
        assert_eq!(
            kinds(&out),
            [
                "PostgreSQL/shop-db",
                "Deployment/shop-cache",
                "Service/shop-cache",
                "Deployment/shop-backend",
                "Service/shop-backend",
                "Deployment/shop-frontend",
                "Service/shop-frontend"
            ]
        );
        let mut platform = read("platform.example.com_v1_ecommerceplatform.yaml");
        platform["spec"]["database"]["type"] = "mysql".into();
        platform["spec"]["database"]["version"] = "8.0".into();
        let out = render(&[platform]).unwrap();
        assert_eq!(kinds(&out)[..2], ["StatefulSet/production-store-db", "Service/production-store-db"]);
        assert_eq!(out[0]["spec"]["template"]["spec"]["containers"][0]["image"], "mysql:8.0");
        assert_eq!(kinds(&out)[8..], ["Ingress/production-store", "ServiceMonitor/production-store"]);
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
