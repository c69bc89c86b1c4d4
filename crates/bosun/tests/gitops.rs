//! GitOps tools judge bosun's resources by kstatus (sigs.k8s.io/cli-utils): here
//! Helm 4, whose `--wait` is kstatus's watcher, as Flux and Argo CD use it. A change
//! is InProgress until bosun observed it, Current once converged, and Failed at once
//! when bosun refuses it — not at the end of the wait's timeout.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)] // a test fails loudly

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bosun_api::webapp::apps_v1;
use bosun_testing::{Env, built_tool, e2e};

/// A chart of one WebApp (with `spec`) and one VoteConfig, in `dir`.
fn chart(dir: &Path, webapp_spec: &str) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(dir.join("Chart.yaml"), "apiVersion: v2\nname: shop\nversion: 0.1.0\n").unwrap();
    let templates = format!(
        "apiVersion: apps.example.com/v1\nkind: WebApp\nmetadata: {{name: web}}\nspec: {webapp_spec}\n---\n\
         apiVersion: voting.schoolofdevops.com/v1\nkind: VoteConfig\nmetadata: {{name: pets}}\n\
         spec: {{options: [{{id: a, label: Cats}}, {{id: b, label: Dogs}}]}}\n"
    );
    std::fs::write(dir.join("templates/resources.yaml"), templates).unwrap();
}

/// `helm4 VERB shop DIR --wait` in the test's namespace: whether it succeeded, its
/// output, and how long it took.
fn helm4(env: &Env, verb: &str, dir: &PathBuf, timeout: Duration) -> (bool, String, Duration) {
    let started = Instant::now();
    let out = Command::new(built_tool("helm4"))
        .args([verb, "shop"])
        .arg(dir)
        .args(["--namespace", &env.ns, "--wait", "--timeout", &format!("{}s", timeout.as_secs()), "--kubeconfig"])
        .arg(bosun_testing::kubeconfig_path())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text, started.elapsed())
}

#[tokio::test]
async fn helm_4_waits_until_bosun_converged_and_fails_at_once_on_a_refused_spec() {
    e2e("gitops", |env| async move {
        let _bosun = env.start_bosun(&["--controllers=webapp,voteconfig"]).await;
        let dir = std::env::temp_dir().join(format!("{}-chart", env.ns));
        chart(&dir, "{image: nginx, replicas: 1, port: 80}");
        let (ok, out, _) = helm4(&env, "install", &dir, Duration::from_secs(120));
        assert!(ok, "helm4 install --wait: {out}");

        // A spec change: the new generation is InProgress until bosun observed it, and
        // the wait ends when the WebApp is Ready at that generation (Current).
        chart(&dir, "{image: nginx, replicas: 2, port: 80}");
        let (ok, out, _) = helm4(&env, "upgrade", &dir, Duration::from_secs(120));
        assert!(ok, "helm4 upgrade --wait: {out}");
        let w = env.api::<apps_v1::WebApp>().get("web").await.unwrap();
        let status = w.status.as_ref().expect("a status");
        assert_eq!(status.observed_generation, w.metadata.generation, "Helm returned before bosun observed the change");
        assert!(status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"), "{:?}", status.conditions);

        // A spec only the apiserver's Deployment validation refuses: Stalled, so the
        // wait fails as soon as bosun says so, far inside its timeout.
        let timeout = Duration::from_secs(240);
        chart(&dir, "{image: nginx, replicas: 1, port: 80, env: [{name: NOT=VALID, value: x}]}");
        let (ok, out, took) = helm4(&env, "upgrade", &dir, timeout);
        assert!(!ok, "helm4 upgrade --wait accepted a refused spec: {out}");
        assert!(out.contains("Failed") && out.contains("web"), "{out}");
        assert!(took < timeout / 4, "the wait ran {took:?} of its {timeout:?}: not failed fast\n{out}");
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}
