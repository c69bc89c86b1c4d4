//! `kubectl bosun` end to end, on the real node: a two-instance database on one screen
//! (what its instance managers say, through port-forwards), a switchover that waits for
//! the new primary, psql and the interleaved logs, a report that holds no secret value,
//! and the bad input an on-call person types at 3 a.m.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bosun_api::postgresql::PostgreSQL;
use bosun_testing::{Env, e2e};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use serde_json::Value;

const REAL_NODE: &[&str] =
    &["--controllers=postgresql,backup", "--postgres-image=localhost/postgres:15", "--postgres-volume-permissions"];

const DB: &str = r#"apiVersion: database.example.com/v1
kind: PostgreSQL
metadata: {name: plug-db}
spec: {version: "15", storage: 1Gi, replicas: 2}
"#;

fn plugin(env: &Env, args: &[&str]) -> (bool, String, String) {
    env.kubectl_bosun(args)
}

fn status(env: &Env, name: &str) -> (Value, Duration) {
    let started = Instant::now();
    let (ok, out, err) = plugin(env, &["status", name, "-o", "json"]);
    let took = started.elapsed();
    assert!(ok, "status failed: {err}");
    (serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")), took)
}

fn instance<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["instances"].as_array().unwrap().iter().find(|i| i["name"] == name).unwrap_or_else(|| panic!("{view}"))
}

/// Every secret value of the namespace's Secrets: passwords, tokens, private keys.
async fn secret_values(env: &Env) -> Vec<String> {
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let mut values = Vec::new();
    for secret in secrets.list(&ListParams::default()).await.unwrap() {
        for (key, value) in secret.data.unwrap_or_default() {
            let secret_key = key.contains("password") || key == "token" || key.ends_with(".key") || key == "pgpass";
            if secret_key && let Ok(text) = String::from_utf8(value.0) {
                values.push(text.trim().to_owned());
            }
        }
    }
    values
}

fn extracted(tarball: &Path, into: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::create_dir_all(into).unwrap();
    let out = Command::new("tar").arg("-xzf").arg(tarball).arg("-C").arg(into).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut files = BTreeMap::new();
    let mut dirs = vec![into.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let name = path.strip_prefix(into).unwrap().display().to_string();
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// Wait until bosun's /metrics has `standby`'s replication lag and not `primary`'s.
async fn lag_series(bosun: &bosun_testing::Bosun, ns: &str, standby: &str, primary: &str) {
    let series = |instance: &str| {
        format!(
            r#"bosun_postgresql_replication_lag_bytes{{database_namespace="{ns}",database="plug-db",instance="{instance}"}}"#
        )
    };
    // bosun asks the primary every 30 s; a rejoining standby streams within seconds.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let metrics = bosun.http_get("/metrics").await.1;
        if metrics.contains(&series(standby)) && !metrics.contains(&series(primary)) {
            return;
        }
        let lag: Vec<&str> = metrics.lines().filter(|l| l.contains("replication_lag")).collect();
        assert!(Instant::now() < deadline, "no lag series of {standby} alone: {lag:#?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn the_plugin_shows_switches_over_and_reports_a_real_database_without_a_secret() {
    e2e("plugin", |env| async move {
        env.use_real_node().await;
        let bosun = env.start_bosun(REAL_NODE).await;

        // Bad input first: one line each, a non-zero exit, no trace.
        for (args, said) in [
            (vec!["status", "no-such-db"], "postgresql"),
            (vec!["status", "deployment/web"], "bosun knows no kind \"deployment\""),
            (vec!["status", "webapp/none"], "not found"),
            (vec!["report", "appstack", "none"], "not found"),
            (vec!["logs", "no-such-db"], "not found"),
        ] {
            let (ok, out, err) = plugin(&env, &args);
            assert!(!ok && out.is_empty(), "{args:?} succeeded: {out}");
            assert!(
                err.starts_with("error: ") && err.contains(said) && err.trim().lines().count() == 1,
                "{args:?}: {err}"
            );
        }

        // No cluster: no kubeconfig at all, and an apiserver that does not answer.
        let dir = std::env::temp_dir().join(format!("bosun-plugin-nocluster-{}", env.ns));
        std::fs::create_dir_all(&dir).unwrap();
        let down = dir.join("kubeconfig");
        std::fs::write(
            &down,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
             users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
        )
        .unwrap();
        for (kubeconfig, said) in [(dir.join("none"), "no cluster access"), (down, "the cluster's API could not be reached")] {
            let out = Command::new(bosun_testing::backends::bosun_binary())
                .args(["kubectl", "status", "plug-db"])
                .env("KUBECONFIG", &kubeconfig)
                .env("HOME", &dir)
                .env_remove("KUBERNETES_SERVICE_HOST")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success() && err.starts_with("error: ") && err.contains(said), "{err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
        }
        let _ = std::fs::remove_dir_all(&dir);

        let (ok, out) = env.kubectl_apply(DB);
        assert!(ok, "{out}");
        env.wait_for_within::<PostgreSQL>("plug-db", "Ready with 2 replicas", Duration::from_secs(300), |db| {
            db.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
        })
        .await;

        // One screen: the roles, the nodes, the timeline, the standby's lag, as the
        // instances say it (the standby's replication from its primary).
        let deadline = Instant::now() + Duration::from_secs(60);
        let view = loop {
            let (view, took) = status(&env, "plug-db");
            let standby = instance(&view, "plug-db-1");
            if standby["replication"] == "streaming" {
                eprintln!("plugin: status of a 2-instance database in {} ms (the command: {took:?})", view["tookMs"]);
                break view;
            }
            assert!(Instant::now() < deadline, "the standby never showed streaming: {view:#}\n{}", bosun.log_tail(20));
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let (primary, standby) = (instance(&view, "plug-db-0"), instance(&view, "plug-db-1"));
        assert_eq!(
            (primary["role"].as_str(), standby["role"].as_str()),
            (Some("primary"), Some("replica")),
            "{view:#}"
        );
        assert_eq!((primary["ready"].as_bool(), standby["ready"].as_bool()), (Some(true), Some(true)));
        assert_eq!((primary["timeline"].as_u64(), standby["timeline"].as_u64()), (Some(1), Some(1)), "{view:#}");
        assert!(primary["node"].as_str().is_some_and(|n| !n.is_empty()), "{view:#}");
        assert_eq!(standby["syncState"], "async", "{view:#}");
        assert!(standby["lagBytes"].as_u64().is_some(), "{view:#}");
        assert!(primary["lsn"].as_str().is_some_and(|l| l.contains('/')), "{view:#}");
        assert!(primary["problem"].is_null() && standby["problem"].is_null(), "{view:#}");
        assert_eq!(view["currentPrimary"], "plug-db-0");
        assert!(view["serverCertificate"]["notAfter"].is_string(), "{view:#}");
        let (ok, screen, err) = plugin(&env, &["status", "plug-db"]);
        assert!(ok, "{err}");
        assert!(screen.contains("plug-db-1") && screen.contains("streaming, async"), "{screen}");
        assert!(!screen.contains('\x1b'), "colour on a pipe: {screen}");
        eprintln!("{screen}");

        // The dashboard's lag is the same: bosun asks the primary and exports it per standby.
        lag_series(&bosun, &env.ns, "plug-db-1", "plug-db-0").await;

        // psql on the primary and on a standby, through kubectl exec.
        let (ok, out, err) = plugin(&env, &["psql", "plug-db", "--", "-tAc", "SELECT pg_is_in_recovery()"]);
        assert!(ok && out.trim() == "f", "{out}{err}");
        let (ok, out, err) =
            plugin(&env, &["psql", "plug-db", "--replica", "--", "-tAc", "SELECT pg_is_in_recovery()"]);
        assert!(ok && out.trim() == "t", "{out}{err}");

        // A switchover: asked, waited for, then on the screen.
        let (ok, out, err) = plugin(&env, &["switchover", "plug-db", "plug-db-9"]);
        assert!(!ok && err.contains("plug-db-9 is not an instance") && err.trim().lines().count() == 1, "{out}{err}");
        let started = Instant::now();
        let (ok, out, err) = plugin(&env, &["switchover", "plug-db", "plug-db-1", "--timeout", "120s"]);
        assert!(ok, "switchover: {out}{err}\n{}", bosun.log_tail(30));
        assert!(out.contains("plug-db-1 is the primary of plug-db"), "{out}");
        eprintln!("plugin: switchover asked and waited for in {:.1} s", started.elapsed().as_secs_f64());
        let (view, _) = status(&env, "plug-db");
        assert_eq!(view["currentPrimary"], "plug-db-1", "{view:#}");
        assert_eq!(instance(&view, "plug-db-1")["role"], "primary", "{view:#}");
        assert_eq!(instance(&view, "plug-db-1")["timeline"].as_u64(), Some(2), "{view:#}");
        assert_eq!(view["lastPrimaryChange"]["to"], "plug-db-1", "{view:#}");
        lag_series(&bosun, &env.ns, "plug-db-0", "plug-db-1").await;

        // Both instances' logs, in one stream.
        let (ok, out, err) = plugin(&env, &["logs", "plug-db", "--tail", "50"]);
        assert!(ok, "{err}");
        for pod in ["plug-db-0", "plug-db-1"] {
            assert!(out.lines().any(|l| l.split_whitespace().nth(1) == Some(pod)), "no line of {pod}: {out}");
        }

        // The report: everything, and not one password, token or private key.
        let dir = std::env::temp_dir().join(format!("bosun-plugin-report-{}", env.ns));
        let tarball = dir.join("report.tar.gz");
        std::fs::create_dir_all(&dir).unwrap();
        let (ok, out, err) = plugin(&env, &["report", "postgresql/plug-db", "-f", tarball.to_str().unwrap()]);
        assert!(ok, "report: {out}{err}");
        let files = extracted(&tarball, &dir.join("x"));
        let names: Vec<&String> = files.keys().collect();
        for wanted in [
            "postgresql-plug-db.yaml",
            "children/statefulset-plug-db.yaml",
            "logs/plug-db-0/postgres.log",
            "events.yaml",
            "postgresql-status.json",
        ] {
            assert!(names.iter().any(|n| n.ends_with(wanted)), "no {wanted} in {names:?}");
        }
        let secrets: Vec<&String> = names.iter().copied().filter(|n| n.contains("children/secret-")).collect();
        assert!(secrets.len() >= 2, "the database's Secrets are not in the report: {names:?}");
        for name in &secrets {
            let text = String::from_utf8_lossy(&files[*name]);
            assert!(text.contains("<redacted: "), "{name}: {text}");
        }
        let values = secret_values(&env).await;
        assert!(values.len() >= 4, "too few secret values to look for: {}", values.len());
        let mut found = Vec::new();
        for (name, content) in &files {
            for value in &values {
                if content.windows(value.len()).any(|w| w == value.as_bytes()) {
                    found.push(name.clone());
                }
            }
        }
        eprintln!(
            "plugin: report of {} files; {} secret values looked for, found {}",
            files.len(),
            values.len(),
            found.len()
        );
        assert!(found.is_empty(), "secret values in the report: {found:?}");
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

/// Any other kind: its conditions, what it waits for, its children with their state,
/// its events; and its report (on the fake nodes: nothing of it runs for real).
#[tokio::test]
async fn the_plugin_shows_and_reports_any_kind_with_its_children() {
    e2e("plugin-kinds", |env| async move {
        let _bosun = env.start_bosun(&[]).await;
        let sample = bosun_testing::repo_root().join("config/samples/apps.example.com_v1_webapp.yaml");
        let (ok, out) = env.kubectl(&["apply", "-f", sample.to_str().unwrap()]);
        assert!(ok, "{out}");
        let (ok, out) =
            env.kubectl(&["wait", "--for=condition=Ready", "webapp.apps.example.com/demo-app", "--timeout=60s"]);
        assert!(ok, "{out}");

        let (ok, out, err) = plugin(&env, &["status", "webapp/demo-app", "-o", "json"]);
        assert!(ok, "{err}");
        let view: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(view["kind"], "WebApp");
        let ready = view["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["status"], "True", "{view:#}");
        assert_eq!(view["waitingFor"].as_array().map(Vec::len), Some(0), "{view:#}");
        let children: Vec<(String, String)> = view["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["kind"].as_str().unwrap().to_owned(), c["name"].as_str().unwrap().to_owned()))
            .collect();
        for wanted in [("Deployment", "demo-app"), ("Service", "demo-app")] {
            assert!(children.contains(&(wanted.0.to_owned(), wanted.1.to_owned())), "{wanted:?} not in {children:?}");
        }
        let deployment = view["children"].as_array().unwrap().iter().find(|c| c["kind"] == "Deployment").unwrap();
        assert!(deployment["state"].as_str().is_some_and(|s| s.contains("Available=True")), "{deployment}");
        let (ok, screen, _) = plugin(&env, &["status", "webapps.apps.example.com", "demo-app"]);
        assert!(ok && screen.contains("Children") && screen.contains("Deployment"), "{screen}");

        let dir = std::env::temp_dir().join(format!("bosun-plugin-report-{}", env.ns));
        std::fs::create_dir_all(&dir).unwrap();
        let tarball = dir.join("webapp.tar.gz");
        let (ok, out, err) = plugin(&env, &["report", "webapp/demo-app", "--file", tarball.to_str().unwrap()]);
        assert!(ok, "{out}{err}");
        let files = extracted(&tarball, &dir.join("x"));
        for wanted in [
            "webapp-demo-app.yaml",
            "children/deployment-demo-app.yaml",
            "children/service-demo-app.yaml",
            "README.txt",
        ] {
            assert!(files.keys().any(|n| n.ends_with(wanted)), "no {wanted} in {:?}", files.keys());
        }
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}
