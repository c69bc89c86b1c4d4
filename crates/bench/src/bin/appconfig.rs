//! `make bench-appconfig`: N Deployments (default 50) consume one AppConfig's
//! ConfigMap on the local control plane; change one value and measure how long until
//! the last consumer carries the new hash, and what bosun sent for it.
//!
//! Measured:
//! * change → last consumer rolled (wall time; it includes `--appconfig-settle`, which
//!   is reported beside it);
//! * bosun's requests for the change, by method (its own client counter);
//! * requests during 10 s of quiet after it (goal: zero).
//!
//! Prints a table and writes JSON to `target/bench/appconfig-<N>.json`.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bosun_api::appconfig::AppConfig;
use bosun_testing::node::NODES_LABEL;
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// How many consuming Deployments.
    #[arg(long, default_value_t = 50)]
    consumers: usize,
    /// `--appconfig-settle` for bosun.
    #[arg(long, default_value = "2s")]
    settle: String,
    /// The bosun binary to measure.
    #[arg(long, default_value = "target/release/bosun")]
    bosun: std::path::PathBuf,
}

const ANNOTATION: &str = "config.example.com/bench-config-hash";

fn requests(metrics: &str) -> std::collections::BTreeMap<String, f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with("bosun_kube_requests_total{"))
        .filter_map(|l| {
            let method = l.split("method=\"").nth(1)?.split('"').next()?.to_owned();
            Some((method, l.split_whitespace().last()?.parse().ok()?))
        })
        .collect()
}

fn appconfig(value: &str) -> anyhow::Result<AppConfig> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "config.example.com/v1", "kind": "AppConfig", "metadata": {"name": "bench"},
        "spec": {"application": "bench", "environment": "dev", "config": {"VALUE": value, "WHERE": "{{ namespace }}"}},
    }))?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.bosun.exists() {
        bail!("{} does not exist: build it with `cargo build --release -p bosun`", args.bosun.display());
    }
    let cluster = bosun_testing::cluster().await;
    let ns = format!("bench-appconfig-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let namespace = json!({"metadata": {"name": ns, "labels": {NODES_LABEL: "fake"}}});
    namespaces.create(&PostParams::default(), &serde_json::from_value(namespace)?).await?;
    let result = run(&args, &cluster, &ns).await;
    let _ = namespaces.delete(&ns, &DeleteParams::background()).await;
    result
}

async fn run(args: &Args, cluster: &bosun_testing::Cluster, ns: &str) -> anyhow::Result<()> {
    let client = cluster.client.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let apply = PatchParams::apply("bench").force();
    for i in 0..args.consumers {
        let name = format!("consumer-{i}");
        let d: Deployment = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.25", "envFrom": [{"configMapRef": {"name": "bench-config"}}]}]},
            }},
        }))?;
        deployments.patch(&name, &apply, &Patch::Apply(&d)).await?;
    }
    let settle = format!("--appconfig-settle={}", args.settle);
    let log = std::path::PathBuf::from(format!("target/bench/bosun-{ns}.log"));
    let ns_arg = format!("--namespaces={ns}");
    let bosun_args = [
        ns_arg.as_str(),
        "--controllers=appconfig",
        "--metrics-bind-address=127.0.0.1:0",
        "--leader-elect=false",
        settle.as_str(),
    ];
    let bosun = bosun_testing::Bosun::start(&args.bosun, &cluster.kubeconfig, &bosun_args, log);
    let configs: Api<AppConfig> = Api::namespaced(client.clone(), ns);
    configs.patch("bench", &apply, &Patch::Apply(&appconfig("one")?)).await?;
    let ready = |a: &AppConfig| {
        a.status.as_ref().is_some_and(|s| {
            s.observed_generation == a.metadata.generation
                && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
        })
    };
    let wait_start = Instant::now();
    while !ready(&configs.get("bench").await?) {
        if wait_start.elapsed() > Duration::from_secs(60) {
            bail!("the AppConfig is not Ready after 60 s:\n{}", bosun.log_tail(20));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, before) = bosun.http_get("/metrics").await;

    let changed = Instant::now();
    configs.patch("bench", &apply, &Patch::Apply(&appconfig("two")?)).await?;
    let hash = loop {
        let a = configs.get("bench").await?;
        if a.metadata.generation == Some(2) && ready(&a) {
            break a.status.and_then(|s| s.config_hash).context("no hash")?;
        }
        if changed.elapsed() > Duration::from_secs(120) {
            bail!("no rollout after 120 s:\n{}", bosun.log_tail(20));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let last_rolled = loop {
        let list = deployments.list(&Default::default()).await?;
        let rolled = list
            .items
            .iter()
            .filter(|d| {
                let t = d.spec.as_ref().and_then(|s| s.template.metadata.as_ref());
                t.and_then(|m| m.annotations.as_ref()?.get(ANNOTATION)) == Some(&hash)
            })
            .count();
        if rolled == args.consumers {
            break changed.elapsed();
        }
        if changed.elapsed() > Duration::from_secs(120) {
            bail!("{rolled} of {} consumers rolled after 120 s", args.consumers);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, after) = bosun.http_get("/metrics").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (_, idle) = bosun.http_get("/metrics").await;

    let delta = |a: &str, b: &str| -> std::collections::BTreeMap<String, f64> {
        let (a, b) = (requests(a), requests(b));
        b.iter().map(|(m, v)| (m.clone(), v - a.get(m).copied().unwrap_or(0.0))).filter(|(_, v)| *v > 0.0).collect()
    };
    let for_change = delta(&before, &after);
    let report = json!({
        "consumers": args.consumers,
        "settle": args.settle,
        "change_to_last_rollout_s": last_rolled.as_secs_f64(),
        "requests_for_the_change": for_change,
        "requests_for_the_change_total": for_change.values().sum::<f64>(),
        "requests_in_10s_quiet": delta(&after, &idle).values().sum::<f64>(),
        "bosun": args.bosun.display().to_string(),
    });
    for (key, value) in report.as_object().into_iter().flatten() {
        println!("{key:<32} {value}");
    }
    std::fs::create_dir_all("target/bench")?;
    let path = format!("target/bench/appconfig-{}.json", args.consumers);
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {path}");
    Ok(())
}
