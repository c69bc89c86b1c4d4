//! What ships under `config/`, checked by the tools that consume it: `kubectl kustomize`
//! renders the install (`config/default`) and the Prometheus overlay, and the real
//! apiserver accepts every sample (the samples the pages under `docs/` show).
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::path::{Path, PathBuf};

use bosun_testing::{built_tool, e2e};
use kube::ResourceExt;
use serde_json::Value;

fn config(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config").join(dir)
}

/// `kubectl kustomize DIR`, as objects.
fn kustomize(dir: &str) -> Vec<Value> {
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(config(dir))
        .output()
        .unwrap_or_else(|e| panic!("running kubectl kustomize: {e}"));
    assert!(out.status.success(), "kubectl kustomize config/{dir}: {}", String::from_utf8_lossy(&out.stderr));
    documents(&out.stdout)
}

/// The objects of a rendered multi-document YAML stream (kustomize's, helm's).
fn documents(rendered: &[u8]) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(std::str::from_utf8(rendered).expect("UTF-8"))
        .map(|doc| serde::Deserialize::deserialize(doc).expect("rendered YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered install"))
}

fn selects(selector: &Value, labels: &Value) -> bool {
    selector.as_object().unwrap().iter().all(|(k, v)| labels[k] == *v)
}

const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

/// The manager container of a rendered install.
fn manager(objects: &[Value]) -> &Value {
    &find(objects, "Deployment", "bosun-controller-manager")["spec"]["template"]["spec"]["containers"][0]
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str()
}

/// `hack/deploy.sh render` (what `make deploy` applies) with these variables.
fn deploy_render(vars: &[(&str, &str)]) -> Vec<Value> {
    let dir =
        std::env::temp_dir().join(format!("bosun-deploy-render-{}-{}", std::process::id(), rand::random::<u32>()));
    let out = std::process::Command::new(bosun_testing::repo_root().join("hack/deploy.sh"))
        .arg("render")
        .env("DEPLOY_DIR", &dir)
        .envs(vars.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running hack/deploy.sh render: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "hack/deploy.sh render {vars:?}: {}", String::from_utf8_lossy(&out.stderr));
    documents(&out.stdout)
}

#[test]
fn make_deploy_sets_the_images_and_the_local_overlay_pins_bosun_to_the_real_node() {
    // The local cluster: bosun-system's pods to the real node, the local database images.
    let objects = kustomize("local");
    let annotations = &find(&objects, "Namespace", "bosun-system")["metadata"]["annotations"];
    assert_eq!(annotations["scheduler.alpha.kubernetes.io/node-selector"], "bosun.dev/real-node=true");
    assert!(
        annotations["scheduler.alpha.kubernetes.io/defaultTolerations"]
            .as_str()
            .unwrap()
            .contains("bosun.dev/real-node")
    );
    assert_eq!(env_value(manager(&objects), "BOSUN_POSTGRES_IMAGE"), Some("localhost/postgres:{version}"));
    assert_eq!(env_value(manager(&objects), "BOSUN_REDIS_IMAGE"), Some("localhost/redis:7"));

    // Another cluster: config/default as it is, with IMG (a registry with a port, a
    // tag) and RUNNER_IMG (by digest) in the manager.
    let digest = format!("sha256:{}", "ab".repeat(32));
    let runner = format!("registry.example.com:5000/team/bosun-runner@{digest}");
    let objects = deploy_render(&[
        ("LOCAL", "false"),
        ("IMG", "registry.example.com:5000/team/bosun:v1.2"),
        ("RUNNER_IMG", &runner),
    ]);
    assert_eq!(manager(&objects)["image"], "registry.example.com:5000/team/bosun:v1.2");
    assert_eq!(env_value(manager(&objects), "BOSUN_RUNNER_IMAGE"), Some(runner.as_str()));
    assert!(find(&objects, "Namespace", "bosun-system")["metadata"]["annotations"].is_null(), "no real node elsewhere");

    // Defaults: the local images, and the runner image bosun defaults to (no variable).
    let objects = deploy_render(&[("LOCAL", "true"), ("IMG", "localhost/bosun:dev")]);
    assert_eq!(manager(&objects)["image"], "localhost/bosun:dev");
    assert_eq!(env_value(manager(&objects), "BOSUN_RUNNER_IMAGE"), None);
    let by_digest = format!("localhost/bosun@{digest}");
    let objects = deploy_render(&[("IMG", &by_digest)]);
    assert_eq!(manager(&objects)["image"], by_digest.as_str());
}

#[test]
fn the_default_install_renders_with_everything_in_bosun_system() {
    let objects = kustomize("default");
    for o in &objects {
        let kind = o["kind"].as_str().unwrap();
        let ns = &o["metadata"]["namespace"];
        if CLUSTER_SCOPED.contains(&kind) {
            assert!(ns.is_null(), "{kind} {} is cluster-scoped but has a namespace", o["metadata"]["name"]);
        } else {
            assert_eq!(ns, "bosun-system", "{kind} {} is not in bosun-system", o["metadata"]["name"]);
        }
    }
    let crds = objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition").count();
    assert_eq!(crds, bosun_controller::kinds::crds().len(), "every CRD is installed");

    // The manager as the spec describes it.
    let deployment = find(&objects, "Deployment", "bosun-controller-manager");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    let spec = &pod["spec"];
    let container = &spec["containers"][0];
    assert_eq!(container["image"], "localhost/bosun:dev", "kustomize sets the image");
    let env: Vec<(&str, &str)> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap_or("")))
        .collect();
    assert!(env.contains(&("POD_NAME", "metadata.name")) && env.contains(&("POD_NAMESPACE", "metadata.namespace")));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["resources"]["requests"], serde_json::json!({"cpu": "100m", "memory": "128Mi"}));
    assert_eq!(container["resources"]["limits"], serde_json::json!({"cpu": "500m", "memory": "512Mi"}));
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    let anti = &spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["podAffinityTerm"]["topologyKey"], "kubernetes.io/hostname");
    assert!(selects(&anti["podAffinityTerm"]["labelSelector"]["matchLabels"], labels));

    // It runs as the ServiceAccount the bindings grant, and the Services reach it.
    let account = spec["serviceAccountName"].as_str().unwrap();
    find(&objects, "ServiceAccount", account);
    for (kind, name) in
        [("ClusterRoleBinding", "bosun-manager-rolebinding"), ("RoleBinding", "bosun-leader-election-rolebinding")]
    {
        let subject = &find(&objects, kind, name)["subjects"][0];
        assert_eq!((subject["name"].as_str(), subject["namespace"].as_str()), (Some(account), Some("bosun-system")));
    }
    for service in ["bosun-webhook-service", "bosun-metrics-service"] {
        assert!(selects(&find(&objects, "Service", service)["spec"]["selector"], labels), "{service} selects the pods");
    }
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        for webhook in objects.iter().filter(|o| o["kind"] == kind).flat_map(|o| o["webhooks"].as_array().unwrap()) {
            let service = &webhook["clientConfig"]["service"];
            assert_eq!(
                (service["name"].as_str(), service["namespace"].as_str()),
                (Some("bosun-webhook-service"), Some("bosun-system"))
            );
        }
    }
}

#[test]
fn the_prometheus_overlay_scrapes_the_metrics_service() {
    let monitor =
        kustomize("prometheus").into_iter().find(|o| o["kind"] == "ServiceMonitor").expect("a ServiceMonitor");
    let install = kustomize("default");
    let service = find(&install, "Service", "bosun-metrics-service");
    assert!(selects(&monitor["spec"]["selector"]["matchLabels"], &service["metadata"]["labels"]));
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
    assert!(service["spec"]["ports"].as_array().unwrap().iter().any(|p| p["name"] == port), "port {port}");
}

#[tokio::test]
async fn the_apiserver_accepts_every_sample() {
    e2e("samples", |env| async move {
        let dir = config("samples");
        let (ok, out) = env.kubectl(&["apply", "--server-side", "-k", dir.to_str().unwrap()]);
        assert!(ok, "kubectl apply -k config/samples: {out}");
        let files = std::fs::read_dir(&dir).unwrap().filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name != "kustomization.yaml"
        });
        let applied = out.lines().filter(|l| l.contains("serverside-applied")).count();
        assert_eq!(applied, files.count(), "one object per sample file: {out}");
    })
    .await;
}

/// Every image a sample names (at any depth: `image:` keys), as the container runtime
/// resolves it: `nginx:1.25` is `docker.io/library/nginx:1.25`.
fn sample_images() -> Vec<(String, String)> {
    fn walk(v: &Value, file: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match v.as_str() {
                        Some(image) if k == "image" => out.push((file.to_owned(), image.to_owned())),
                        _ => walk(v, file, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, file, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(config("samples")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        for doc in documents(&std::fs::read(&path).unwrap()) {
            walk(&doc, &file, &mut out);
        }
    }
    let full = |image: &str| match image.split_once('/') {
        Some((host, _)) if host.contains('.') || host.contains(':') || host == "localhost" => image.to_owned(),
        Some(_) => format!("docker.io/{image}"),
        None => format!("docker.io/library/{image}"),
    };
    out.into_iter().map(|(file, image)| (file, full(&image))).collect()
}

/// The tutorials' pods really run on the local cluster's real node (which pulls
/// nothing): every image a sample names is one `hack/images.sh` builds or tags.
#[test]
fn every_image_a_sample_names_is_on_the_local_real_node() {
    let out = std::process::Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/images.sh"))
        .arg("list")
        .output()
        .unwrap();
    assert!(out.status.success(), "images.sh list: {}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8(out.stdout).unwrap();
    let listed: Vec<&str> = listed.lines().collect();
    let images = sample_images();
    assert!(images.iter().any(|(_, i)| i == "docker.io/library/nginx:1.25"), "the WebApp sample's: {images:?}");
    for (file, image) in &images {
        assert!(
            listed.contains(&image.as_str()),
            "config/samples/{file} names {image}, which images.sh has not: {listed:?}"
        );
    }
}

/// The metric names a PromQL expression reads (`bosun_…` and `process_…`).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut token = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            token.push(c);
        } else {
            if token.starts_with("bosun_") || token.starts_with("process_") {
                names.push(std::mem::take(&mut token));
            }
            token.clear();
        }
    }
    names
}

#[tokio::test]
async fn the_dashboard_reads_only_metrics_bosun_exports() {
    e2e("dashboard", |env| async move {
        let path = config("grafana").join("bosun-dashboard.json");
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let exprs: Vec<String> = dashboard["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["targets"].as_array().unwrap().iter().map(|t| t["expr"].as_str().unwrap().to_owned()))
            .collect();
        assert!(exprs.len() >= 10, "a panel per concern: {exprs:?}");

        // bosun with every controller and its webhooks; one admission so that the
        // webhook families have samples.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let prefix = format!("{}-", env.ns);
        // bosun's own namespace (the test's) is exempt from its webhooks: the probe goes elsewhere.
        let apps = env.extra_namespace("apps").await;
        let bosun = env
            .start_bosun(&[
                &format!("--namespaces={apps}"),
                &format!("--webhook-port={port}"),
                &format!("--webhook-url=https://127.0.0.1:{port}"),
                &format!("--webhook-configuration-prefix={prefix}"),
            ])
            .await;
        // Admitted by bosun = mutated (the managed-by label only its webhook adds);
        // a dry run goes through admission and stores nothing.
        let probe: bosun_api::webapp::apps_v1::WebApp = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": "probe"},
            "spec": {"image": "nginx:1.25", "replicas": 1, "port": 80}}))
        .unwrap();
        let params = kube::api::PostParams { dry_run: true, ..Default::default() };
        let (mut admitted, mut last) = (false, String::new());
        for _ in 0..120 {
            let api = kube::Api::<bosun_api::webapp::apps_v1::WebApp>::namespaced(env.client.clone(), &apps);
            match api.create(&params, &probe).await {
                Ok(app) if app.labels().get("app.kubernetes.io/managed-by").is_some_and(|v| v == "bosun") => {
                    admitted = true;
                    break;
                }
                other => last = format!("{other:?}"),
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
        // A Backup that has succeeded, so that the per-Backup families have samples.
        let sample = config("samples").join("backup.example.com_v1_backup.yaml");
        let (ok, out) = env.kubectl(&["apply", "-f", sample.to_str().unwrap()]);
        assert!(ok, "{out}");
        let good = r#"{"status": {"lastSuccessfulBackup": {"time": "2026-01-01T02:00:00Z", "key": "k", "size": 1}}}"#;
        let (ok, out) =
            env.kubectl(&["patch", "backup", "nightly", "--subresource=status", "--type=merge", "-p", good]);
        assert!(ok, "{out}");
        let mut metrics = String::new();
        for _ in 0..60 {
            metrics = bosun.http_get("/metrics").await.1;
            if metrics.contains("bosun_backup_last_success_timestamp_seconds{") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        // Stopped first: a running bosun puts its configurations back.
        drop(bosun);
        for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
            let name = format!("{prefix}{}-webhook-configuration", &kind[..kind.find("webhook").unwrap()]);
            let _ = env.kubectl(&["delete", kind, &name, "--ignore-not-found"]);
        }
        assert!(admitted, "no WebApp was admitted through bosun's webhooks: {last}");
        // What bosun exports: the series it has samples of, and the families it
        // declares (a scrape shows a family only once it has a sample: a standby's lag
        // only where a real standby streams).
        let mut exported: Vec<String> = metrics
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .map(str::to_owned)
            .collect();
        let declared = bosun_controller::metrics::Metrics::declared();
        for declared in declared.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let (name, kind) = declared.split_once(' ').unwrap();
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            exported.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        }
        let read: Vec<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
        for expr in &exprs {
            for name in metric_names(expr) {
                assert!(exported.contains(&name), "the dashboard reads {name}, which bosun does not export ({expr})");
            }
        }
        // The PostgreSQL side says what `kubectl bosun status` says.
        for family in [
            "bosun_postgresql_primary_changes_total",
            "bosun_postgresql_replication_lag_bytes",
            "bosun_postgresql_replication_lag_seconds",
            "bosun_postgresql_instances_ready",
            "bosun_postgresql_wal_last_archived_timestamp_seconds",
            "bosun_postgresql_server_certificate_expiry_timestamp_seconds",
            "bosun_backup_verification_failing",
        ] {
            assert!(read.iter().any(|n| n == family), "no panel reads {family}");
        }
        // Every expression parses as Prometheus reads it: promtool checks each as a
        // recording rule (Grafana's $namespace as any namespace).
        let rules = serde_json::json!({"groups": [{"name": "dashboard", "rules": exprs.iter().enumerate().map(|(i, e)| {
            serde_json::json!({"record": format!("dashboard:expr_{i}"), "expr": e.replace("$namespace", ".*")})
        }).collect::<Vec<_>>()}]});
        let file = std::env::temp_dir().join(format!("bosun-dashboard-{}.yaml", std::process::id()));
        std::fs::write(&file, serde_yaml_ng::to_string(&rules).unwrap()).unwrap();
        let out =
            std::process::Command::new(built_tool("promtool")).args(["check", "rules"]).arg(&file).output().unwrap();
        let _ = std::fs::remove_file(&file);
        assert!(
            out.status.success(),
            "promtool check rules of the dashboard's expressions: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    })
    .await;
}

/// `promtool test rules` on `config/prometheus/alerts_test.yaml`: every alert of
/// `alerts.yaml` fires, and does not fire, where the synthetic series say. promtool
/// is built from the Go module proxy into the cache (`hack/backends/build.sh`).
#[test]
fn every_alert_fires_when_it_should_and_only_then() {
    let promtool = built_tool("promtool");

    // promtool reads plain rule files: the PrometheusRule's groups, beside the tests.
    let rule: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(config("prometheus/alerts.yaml")).unwrap()).unwrap();
    let alerts: Vec<&str> = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter().filter_map(|r| r["alert"].as_str()))
        .collect();
    let dir = std::env::temp_dir().join(format!("bosun-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rules.yaml"), serde_yaml_ng::to_string(&rule["spec"]).unwrap()).unwrap();
    let tests = std::fs::read_to_string(config("prometheus/alerts_test.yaml")).unwrap();
    std::fs::write(dir.join("alerts_test.yaml"), &tests).unwrap();

    let out =
        std::process::Command::new(&promtool).args(["check", "rules"]).arg(dir.join("rules.yaml")).output().unwrap();
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new(&promtool)
        .args(["test", "rules"])
        .arg(dir.join("alerts_test.yaml"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Each alert is tested both ways: an expectation with alerts and one without.
    let cases: Value = serde_yaml_ng::from_str(&tests).unwrap();
    for alert in alerts {
        let expectations: Vec<&Value> = cases["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().unwrap())
            .filter(|e| e["alertname"] == alert)
            .collect();
        let fires = expectations.iter().any(|e| !e["exp_alerts"].as_array().unwrap().is_empty());
        let quiet = expectations.iter().any(|e| e["exp_alerts"].as_array().unwrap().is_empty());
        assert!(fires && quiet, "{alert} needs a test where it fires and one where it does not");
    }
}

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/bosun")
}

/// `helm template` of the chart in namespace `ops` with `values` (YAML), as objects.
fn helm_template(values: &str) -> Vec<Value> {
    let file = std::env::temp_dir().join(format!("bosun-values-{}-{}.yaml", std::process::id(), rand::random::<u32>()));
    std::fs::write(&file, values).unwrap();
    let out = std::process::Command::new(built_tool("helm"))
        // The local control plane's version (a helm built from source assumes 1.20).
        .args(["template", "bosun", "--namespace", "ops", "--include-crds", "--kube-version", "1.34.4", "-f"])
        .arg(&file)
        .arg(chart())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
    documents(&out.stdout)
}

fn args(objects: &[Value]) -> Vec<String> {
    find(objects, "Deployment", "bosun-controller-manager")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_chart_ships_the_generated_crds_rbac_and_webhooks() {
    let root = bosun_testing::repo_root();
    let same = |committed: &Path, shipped: &Path| {
        let a = std::fs::read_to_string(committed).unwrap();
        let b = std::fs::read_to_string(shipped)
            .unwrap_or_else(|e| panic!("{} is missing ({e}): run `make manifests`", shipped.display()));
        assert!(a == b, "{} differs from {}: run `make manifests`", shipped.display(), committed.display());
    };
    let crds: Vec<_> =
        std::fs::read_dir(root.join("config/crd/bases")).unwrap().map(|e| e.unwrap().file_name()).collect();
    for name in &crds {
        same(&root.join("config/crd/bases").join(name), &chart().join("crds").join(name));
    }
    assert_eq!(std::fs::read_dir(chart().join("crds")).unwrap().count(), crds.len(), "a CRD the types no longer make");
    for name in ["service_account", "role", "role_binding", "leader_election_role", "leader_election_role_binding"] {
        same(&root.join(format!("config/rbac/{name}.yaml")), &chart().join(format!("files/rbac/{name}.yaml")));
    }
    for name in ["manifests", "service"] {
        same(&root.join(format!("config/webhook/{name}.yaml")), &chart().join(format!("files/webhook/{name}.yaml")));
    }
}

/// Rendered where GitOps tools render it (no cluster, no flags: Helm assumes
/// Kubernetes 1.20), the chart renders; where a cluster answers, one older than 1.30
/// is refused by name.
#[tokio::test]
async fn the_chart_renders_without_a_cluster_and_refuses_a_cluster_too_old() {
    let helm = || std::process::Command::new(built_tool("helm"));
    let plain = helm().args(["template", "bosun"]).arg(chart()).output().unwrap();
    assert!(plain.status.success(), "helm template: {}", String::from_utf8_lossy(&plain.stderr));
    find(&documents(&plain.stdout), "Deployment", "bosun-controller-manager");

    bosun_testing::cluster().await;
    let kubeconfig = bosun_testing::kubeconfig_path();
    for (version, renders) in [("1.29.0", false), ("1.34.4", true)] {
        let out = helm()
            .args(["template", "bosun", "--dry-run=server", "--kube-version", version, "--kubeconfig"])
            .arg(&kubeconfig)
            .arg(chart())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), renders, "Kubernetes {version}: {stderr}");
        if !renders {
            assert!(stderr.contains("bosun needs Kubernetes 1.30 or newer") && stderr.contains(version), "{stderr}");
        }
    }
}

#[test]
fn helm_lints_and_renders_the_chart_for_each_mode() {
    let out = std::process::Command::new(built_tool("helm")).args(["lint", "--strict"]).arg(chart()).output().unwrap();
    assert!(
        out.status.success(),
        "helm lint: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Defaults: 2 replicas as the spec says, self-managed certificates, everything in the release namespace.
    let objects = helm_template("{}");
    let deployment = find(&objects, "Deployment", "bosun-controller-manager");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["resources"]["requests"], serde_json::json!({"cpu": "100m", "memory": "128Mi"}));
    assert_eq!(container["resources"]["limits"], serde_json::json!({"cpu": "500m", "memory": "512Mi"}));
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    let anti = &deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    assert!(anti["preferredDuringSchedulingIgnoredDuringExecution"].is_array(), "{anti}");
    let a = args(&objects);
    for want in [
        "--leader-elect=true",
        "--enable-webhooks=true",
        "--webhook-cert-mode=self",
        "--leader-elect-lease-duration=15s",
    ] {
        assert!(a.contains(&want.to_owned()), "{want} in {a:?}");
    }
    assert_eq!(
        objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition").count(),
        bosun_controller::kinds::crds().len()
    );
    let binding = find(&objects, "ClusterRoleBinding", "bosun-manager-rolebinding");
    assert_eq!(binding["subjects"][0]["namespace"], "ops");
    for o in objects.iter().filter(|o| !CLUSTER_SCOPED.contains(&o["kind"].as_str().unwrap())) {
        assert_eq!(o["metadata"]["namespace"], "ops", "{} {}", o["kind"], o["metadata"]["name"]);
    }
    let validating = find(&objects, "ValidatingWebhookConfiguration", "bosun-validating-webhook-configuration");
    for hook in validating["webhooks"].as_array().unwrap() {
        assert_eq!(hook["clientConfig"]["service"]["namespace"], "ops");
        assert_eq!(
            hook["namespaceSelector"]["matchExpressions"][0]["values"],
            serde_json::json!(["ops"]),
            "its own namespace exempt"
        );
    }
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "Certificate" || o["kind"] == "ServiceMonitor" || o["kind"] == "ConfigMap")
    );

    // Webhooks off.
    let objects = helm_template("webhook: {enabled: false}");
    assert!(args(&objects).contains(&"--enable-webhooks=false".to_owned()));
    assert!(!objects.iter().any(|o| o["kind"].as_str().unwrap().ends_with("WebhookConfiguration")));

    // cert-manager: a Certificate mounted as files, and cert-manager injects the bundle.
    let objects = helm_template("webhook: {certificates: cert-manager}");
    assert!(args(&objects).contains(&"--webhook-cert-mode=files".to_owned()));
    let certificate = find(&objects, "Certificate", "bosun-serving-cert");
    assert_eq!(certificate["spec"]["dnsNames"][0], "bosun-webhook-service.ops.svc");
    find(&objects, "Issuer", "bosun-selfsigned-issuer");
    let validating = find(&objects, "ValidatingWebhookConfiguration", "bosun-validating-webhook-configuration");
    assert_eq!(validating["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "ops/bosun-serving-cert");
    let pod = &find(&objects, "Deployment", "bosun-controller-manager")["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], certificate["spec"]["secretName"]);
    assert_eq!(pod["containers"][0]["volumeMounts"][0]["mountPath"], "/tmp/k8s-webhook-server/serving-certs");

    // The ServiceMonitor, and a custom admission policy mounted as the file bosun reads.
    let objects = helm_template(
        "metrics: {serviceMonitor: {enabled: true}}\nadmissionPolicy: {maxReplicas: 5, allowedRegistries: [registry.company.com/]}",
    );
    let monitor = find(&objects, "ServiceMonitor", "bosun-controller-manager-metrics-monitor");
    let service = find(&objects, "Service", "bosun-metrics-service");
    assert!(selects(&monitor["spec"]["selector"]["matchLabels"], &service["metadata"]["labels"]));
    let policy = find(&objects, "ConfigMap", "bosun-admission-policy");
    let text: Value = serde_yaml_ng::from_str(policy["data"]["policy.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(text["maxReplicas"], 5);
    assert!(args(&objects).contains(&"--admission-policy=/etc/bosun/policy/policy.yaml".to_owned()));
}
