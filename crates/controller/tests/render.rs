//! `bosun render` over every kind the registry serves.

use bosun_controller::kinds::render;
use serde_json::{Value, json};

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
    assert_eq!((out[1]["kind"].as_str(), out[1]["spec"]["schedule"].as_str()), (Some("CronJob"), Some("0 2 * * *")));
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
fn renders_a_postgresqls_pooler_on_each_side_it_asks_for() {
    let db = json!({"apiVersion": "database.example.com/v1", "kind": "PostgreSQL", "metadata": {"name": "db"},
                    "spec": {"version": "17", "storage": "1Gi", "replicas": 2,
                             "pooler": {"instances": 3, "mode": "transaction", "readOnly": true}}});
    let out = render(&[db]).unwrap();
    let named: Vec<String> = out
        .iter()
        .map(|o| {
            format!("{}/{}", o["kind"].as_str().unwrap_or_default(), o["metadata"]["name"].as_str().unwrap_or_default())
        })
        .collect();
    assert_eq!(
        named[named.len() - 4..],
        ["Deployment/db-pooler", "Service/db-pooler", "Deployment/db-pooler-ro", "Service/db-pooler-ro"]
    );
    let rw = &out[out.len() - 4];
    assert_eq!(rw["spec"]["replicas"], 3);
    let env = &rw["spec"]["template"]["spec"]["containers"][0]["env"];
    let env: Vec<(&str, &str)> =
        env.as_array().unwrap().iter().filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?))).collect();
    assert!(env.contains(&("BOSUN_POOLER_MODE", "transaction")), "{env:?}");
    assert!(!out.iter().any(|o| o["kind"] == "Secret"), "no password is rendered");
    let bad = json!({"apiVersion": "database.example.com/v1", "kind": "PostgreSQL", "metadata": {"name": "x"},
                     "spec": {"version": "17", "storage": "1Gi", "pooler": {"mode": "statement-ish"}}});
    assert!(render(&[bad]).unwrap_err().to_string().contains("statement-ish"));
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
