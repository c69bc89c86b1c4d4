//! `make bench`: create N WebApps on the local control plane with bosun running, and
//! report what it cost.
//!
//! Measured, in one run so the ratios compare on a noisy machine:
//! * startup: process start → `/readyz` 200, and bosun's RSS at rest;
//! * convergence: time until every WebApp is Ready; per object, create → Deployment
//!   present and create → Ready (p50/p99);
//! * API requests bosun sent per WebApp (its own client counter);
//! * writes bosun sent during an idle minute after convergence (goal: zero);
//! * bosun's peak RSS (VmHWM) and settled RSS; the peak's anonymous part (heap,
//!   stacks) and file-backed part (the binary's pages), per replica with several; RSS per 1,000 WebApps over
//!   bosun at rest, and the binary's size — the guard against memory creeping back;
//! * a restart over the N WebApps in place: time to ready, to the first reconcile and
//!   to every WebApp reconciled once; the requests and writes (goal: none) it cost.
//! * with `--bosun-replicas N --kill-one`: one replica `kill -9`ed mid-run and a sample of
//!   WebApps changed at once: when the survivors held every shard again, and how long
//!   after the kill the changes in the killed replica's shards reached their Deployments
//!   (goal: the lease duration + 10 s), beside those in the other shards.
//!
//! Prints a table and writes JSON to `target/bench/webapp-<N>.json`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bosun_api::webapp::{WebAppKind, apps_v1};
use bosun_testing::node::NODES_LABEL;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

#[derive(Parser, Debug)]
struct Args {
    /// How many WebApps to create.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Replicas of each WebApp.
    #[arg(long, default_value_t = 1)]
    replicas: i32,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 32)]
    parallel: usize,
    /// Seconds of idle observation after convergence.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Extra flags for `bosun run` (repeatable), e.g. `--bosun-arg=--concurrency=32`.
    #[arg(long = "bosun-arg", allow_hyphen_values = true)]
    bosun_args: Vec<String>,
    /// The bosun binary to measure.
    #[arg(long, default_value = "target/release/bosun")]
    bosun: std::path::PathBuf,
    /// Replicas of bosun: more than one runs them with `--shards` of that many, each
    /// with its own peak RSS (issue 48); the restart is then not measured.
    #[arg(long, default_value_t = 1)]
    bosun_replicas: usize,
    /// With replicas: `kill -9` the one holding the most shards once half the WebApps
    /// are Ready, change the image of every `--kill-sample`th WebApp at once, and report
    /// how long after the kill those of the killed replica's shards (and, beside them,
    /// of the others) reached their Deployments; and how long the rest took.
    #[arg(long)]
    kill_one: bool,
    /// With `--kill-one`: every how many WebApps one is changed after the kill.
    #[arg(long, default_value_t = 30)]
    kill_sample: usize,
}

/// The image the WebApps are created with, and the one `--kill-one` changes to.
const IMAGE: &str = "nginx:1.25";
const CHANGED_IMAGE: &str = "nginx:1.26";

/// The replicas of bosun measured, and each one's peak RSS.
struct Replicas {
    running: Vec<Option<bosun_testing::Bosun>>,
    peaks: Vec<u64>,
    /// Each replica's highest RSS sampled, and what it was made of: (RSS, anonymous —
    /// heap and stacks —, file — the binary's pages, shared by replicas on one node).
    splits: Vec<(u64, u64, u64)>,
}

impl Replicas {
    fn sample(&mut self) {
        for ((r, peak), split) in self.running.iter().zip(self.peaks.iter_mut()).zip(self.splits.iter_mut()) {
            if let Some(r) = r {
                let rss = rss_kib(r.pid(), "VmRSS:");
                *peak = (*peak).max(rss).max(rss_kib(r.pid(), "VmHWM:"));
                if rss > split.0 {
                    *split = (rss, rss_kib(r.pid(), "RssAnon:"), rss_kib(r.pid(), "RssFile:"));
                }
            }
        }
    }

    /// The metrics of every running replica, one after the other (sums add up).
    async fn metrics(&self) -> String {
        let mut all = String::new();
        for r in self.running.iter().flatten() {
            all.push_str(&r.http_get("/metrics").await.1);
        }
        all
    }

    async fn gauges(&self, name: &str) -> Vec<f64> {
        let mut values = Vec::new();
        for r in &self.running {
            let value = match r {
                Some(r) => r
                    .http_get("/metrics")
                    .await
                    .1
                    .lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.split_whitespace().last().and_then(|v| v.parse().ok())),
                None => None,
            };
            values.push(value.unwrap_or(0.0));
        }
        values
    }
}

#[derive(Default)]
struct Seen {
    created: HashMap<String, Instant>,
    children: HashMap<String, Instant>,
    ready: HashMap<String, Instant>,
    /// When a Deployment first had [`CHANGED_IMAGE`].
    changed: HashMap<String, Instant>,
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Every request method bosun's client counter tells apart, and those that write.
const ALL_METHODS: [&str; 6] = ["GET", "POST", "PATCH", "PUT", "DELETE", "other"];
const WRITE_METHODS: [&str; 4] = ["POST", "PATCH", "PUT", "DELETE"];

fn requests(metrics: &str, methods: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("bosun_kube_requests_total{"))
        .filter(|l| methods.iter().any(|m| l.contains(&format!("method=\"{m}\""))))
        .filter_map(|l| l.split_whitespace().last().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.bosun.exists() {
        bail!("{} does not exist: build it with `cargo build --release -p bosun`", args.bosun.display());
    }
    let cluster = bosun_testing::cluster().await;
    let client = cluster.client.clone();
    let ns = format!("bench-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": ns, "labels": {NODES_LABEL: "fake"}}}))?,
        )
        .await?;
    let result = run(&args, &cluster, &ns).await;
    let _ = namespaces.delete(&ns, &DeleteParams::background()).await;
    result
}

async fn run(args: &Args, cluster: &bosun_testing::Cluster, ns: &str) -> anyhow::Result<()> {
    let client = cluster.client.clone();
    let log = std::path::PathBuf::from(format!("target/bench/bosun-{ns}.log"));
    let started = Instant::now();
    let ns_arg = format!("--namespaces={ns}");
    let sharded = args.bosun_replicas > 1;
    let shards_arg = format!("--shards={}", args.bosun_replicas);
    let lease_ns = format!("--leader-elect-namespace={ns}");
    let mut bosun_args = vec![ns_arg.as_str(), "--metrics-bind-address=127.0.0.1:0"];
    if sharded {
        bosun_args.extend(["--leader-elect=true", shards_arg.as_str(), lease_ns.as_str()]);
    } else {
        bosun_args.push("--leader-elect=false");
    }
    bosun_args.extend(args.bosun_args.iter().map(String::as_str));
    let mut replicas = Replicas {
        running: Vec::new(),
        peaks: vec![0; args.bosun_replicas],
        splits: vec![(0, 0, 0); args.bosun_replicas],
    };
    for i in 0..args.bosun_replicas {
        let log = if sharded { log.with_extension(format!("{i}.log")) } else { log.clone() };
        let identity = format!("--identity=bench-{i}");
        let mut own = bosun_args.clone();
        if sharded {
            own.push(identity.as_str());
        }
        replicas.running.push(Some(bosun_testing::Bosun::start(&args.bosun, &cluster.kubeconfig, &own, log)));
    }
    for r in replicas.running.iter().flatten() {
        loop {
            if r.http_get("/readyz").await.0 == 200 {
                break;
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!("bosun not ready after 60 s:\n{}", r.log_tail(20));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let startup = started.elapsed();
    // Sharded: every shard held before the WebApps come (the first replica takes them
    // all until it sees the others, then hands them over).
    while sharded && replicas.gauges("bosun_shards_held ").await.iter().sum::<f64>() < args.bosun_replicas as f64 {
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the shards were not all held after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_rest = replicas.running.iter().flatten().map(|r| rss_kib(r.pid(), "VmRSS:")).max().unwrap_or(0);
    let before = replicas.metrics().await;

    // Watch WebApps and Deployments from the start, stamping first sightings.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let webapps: Api<apps_v1::WebApp> = Api::namespaced(client.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let s1 = seen.clone();
    let watch_ready =
        tokio::spawn(watcher(webapps.clone(), watcher::Config::default()).applied_objects().try_for_each(move |w| {
            let ready = w
                .current_status()
                .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if let (true, Ok(mut s)) = (ready, s1.lock()) {
                s.ready.entry(w.name_any()).or_insert_with(Instant::now);
            }
            futures::future::ready(Ok(()))
        }));
    let s2 = seen.clone();
    let watch_children =
        tokio::spawn(watcher(deployments, watcher::Config::default()).applied_objects().try_for_each(move |d| {
            let image = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| p.containers.first())
                .and_then(|c| c.image.as_deref());
            if let Ok(mut s) = s2.lock() {
                s.children.entry(d.name_any()).or_insert_with(Instant::now);
                if image == Some(CHANGED_IMAGE) {
                    s.changed.entry(d.name_any()).or_insert_with(Instant::now);
                }
            }
            futures::future::ready(Ok(()))
        }));
    tokio::time::sleep(Duration::from_millis(500)).await;

    let create_start = Instant::now();
    let names: Vec<String> = (0..args.count).map(|i| format!("bench-{i:05}")).collect();
    futures::stream::iter(names.clone())
        .map(|name| {
            let (webapps, seen) = (webapps.clone(), seen.clone());
            let replicas = args.replicas;
            async move {
                let w: apps_v1::WebApp = serde_json::from_value(serde_json::json!({
                    "apiVersion": "apps.example.com/v1", "kind": "WebApp", "metadata": {"name": name},
                    "spec": {"image": IMAGE, "replicas": replicas}
                }))?;
                webapps.create(&PostParams::default(), &w).await.with_context(|| format!("creating {name}"))?;
                if let Ok(mut s) = seen.lock() {
                    s.created.insert(name, Instant::now());
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.parallel)
        .try_collect::<Vec<_>>()
        .await?;
    let created_in = create_start.elapsed();

    let mut killed: Option<Killed> = None;
    // After the kill: when the survivors hold every shard again.
    let mut taken_over: Option<f64> = None;
    loop {
        replicas.sample();
        if let Some(k) = &killed
            && taken_over.is_none()
            && replicas.gauges("bosun_shards_held ").await.iter().sum::<f64>() >= args.bosun_replicas as f64
        {
            taken_over = Some(k.at.elapsed().as_secs_f64());
        }
        let (ready, changed) = seen.lock().map(|s| (s.ready.len(), s.changed.len())).unwrap_or_default();
        if ready >= args.count && killed.as_ref().is_none_or(|k| changed >= k.sample.len()) {
            break;
        }
        if args.kill_one && sharded && killed.is_none() && ready >= args.count / 2 {
            killed = Some(kill_one(args, &mut replicas, &client, ns, &names).await?);
            println!("{}", killed.as_ref().map(|k| k.said.as_str()).unwrap_or_default());
        }
        // 30 minutes, and more for the largest counts (10,000 take the local cluster's
        // controller manager alone most of half an hour on two cores).
        let limit = Duration::from_secs(1800.max(args.count as u64 / 4));
        if create_start.elapsed() > limit {
            bail!(
                "only {ready} of {} WebApps Ready ({changed} changed) after {} minutes",
                args.count,
                limit.as_secs() / 60
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converged = create_start.elapsed();
    let after_kill = killed.as_ref().map(|k| k.at.elapsed().as_secs_f64());
    let after = replicas.metrics().await;
    let per_object = (requests(&after, &ALL_METHODS) - requests(&before, &ALL_METHODS)) / args.count as f64;
    let writes_per_object = (requests(&after, &WRITE_METHODS) - requests(&before, &WRITE_METHODS)) / args.count as f64;

    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let idle = replicas.metrics().await;
    let idle_writes = requests(&idle, &WRITE_METHODS) - requests(&after, &WRITE_METHODS);
    let idle_requests = requests(&idle, &ALL_METHODS) - requests(&after, &ALL_METHODS);
    let settled_rss = replicas.running.iter().flatten().map(|r| rss_kib(r.pid(), "VmRSS:")).max().unwrap_or(0);
    replicas.sample();
    let mib = |kib: &u64| *kib as f64 / 1024.0;
    let peaks_mib: Vec<f64> = replicas.peaks.iter().map(mib).collect();
    let anon_mib: Vec<f64> = replicas.splits.iter().map(|s| mib(&s.1)).collect();
    let peak_rss = replicas.peaks.iter().copied().max().unwrap_or(0);
    // What the highest replica's peak is made of.
    let peak_split = replicas.splits.iter().max_by_key(|s| s.0).map(|s| (s.1, s.2)).unwrap_or_default();
    watch_ready.abort();
    watch_children.abort();
    let restart = match replicas.running.pop() {
        Some(Some(bosun)) if !sharded => restart(args, cluster, ns, bosun, &bosun_args).await?,
        _ => serde_json::Value::Null,
    };
    let conflicts = replicas
        .running
        .iter()
        .flatten()
        .map(|r| r.log.clone())
        .chain((0..args.bosun_replicas).map(|i| log.with_extension(format!("{i}.log"))));
    let conflicts: usize = conflicts
        .collect::<std::collections::BTreeSet<_>>()
        .iter()
        // A write refused because another writer changed the object first.
        .map(|p| std::fs::read_to_string(p).unwrap_or_default().lines().filter(|l| l.contains("code: 409")).count())
        .sum();

    let (to_children, to_ready) = {
        let s = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let since = |m: &HashMap<String, Instant>| -> Vec<f64> {
            names
                .iter()
                .filter_map(|n| Some(m.get(n)?.saturating_duration_since(*s.created.get(n)?).as_secs_f64() * 1000.0))
                .collect()
        };
        (since(&s.children), since(&s.ready))
    };
    let report = serde_json::json!({
        "count": args.count,
        "replicas": args.replicas,
        "bosun_args": args.bosun_args,
        "startup_to_ready_ms": startup.as_millis() as u64,
        "rss_at_rest_mib": rss_rest as f64 / 1024.0,
        "created_all_s": created_in.as_secs_f64(),
        "converged_all_s": converged.as_secs_f64(),
        "api_requests_per_webapp": per_object,
        "api_writes_per_webapp": writes_per_object,
        "create_to_children_ms": {"p50": percentile(to_children.clone(), 50.0), "p99": percentile(to_children, 99.0)},
        "create_to_ready_ms": {"p50": percentile(to_ready.clone(), 50.0), "p99": percentile(to_ready, 99.0)},
        "idle_seconds": args.idle_seconds,
        "idle_requests": idle_requests,
        "idle_writes": idle_writes,
        "peak_rss_mib": peak_rss as f64 / 1024.0,
        "peak_rss_anon_mib": peak_split.0 as f64 / 1024.0,
        "peak_rss_file_mib": peak_split.1 as f64 / 1024.0,
        // The guard against creep: what 1,000 objects cost over bosun at rest, and the
        // binary that is loaded.
        "rss_per_1000_webapps_mib": (peak_rss.saturating_sub(rss_rest)) as f64 / 1024.0 * 1000.0 / args.count as f64,
        "binary_mb": std::fs::metadata(&args.bosun).map(|m| m.len() as f64 / 1e6).unwrap_or(0.0),
        "settled_rss_mib": settled_rss as f64 / 1024.0,
        "restart": restart,
        "bosun_replicas": args.bosun_replicas,
        "peak_rss_per_replica_mib": peaks_mib,
        "peak_rss_anon_per_replica_mib": anon_mib,
        "killed_one": killed.as_ref().map(|k| {
            let s = seen.lock().ok();
            let changed = |of_killed: bool| {
                let after: Vec<f64> = k
                    .sample
                    .iter()
                    .filter(|(_, killed)| *killed == of_killed)
                    .filter_map(|(n, _)| Some(s.as_ref()?.changed.get(n)?.saturating_duration_since(k.at).as_secs_f64()))
                    .collect();
                let n = after.len();
                serde_json::json!({"webapps": n, "p50_s": percentile(after.clone(), 50.0), "max_s": percentile(after, 100.0)})
            };
            serde_json::json!({
                "shards_held_before": k.held,
                "killed_shards": k.shards,
                "every_shard_held_again_after_s": taken_over,
                "changed_after_kill_in_killed_shards": changed(true),
                "changed_after_kill_in_other_shards": changed(false),
                "converged_after_kill_s": after_kill,
            })
        }),
        "conflicts_in_logs": conflicts,
    });
    for (key, value) in report.as_object().into_iter().flatten() {
        println!("{key:<26} {value}");
    }
    std::fs::create_dir_all("target/bench")?;
    let path = match (sharded, args.kill_one) {
        (false, _) => format!("target/bench/webapp-{}.json", args.count),
        (true, false) => format!("target/bench/webapp-{}-shards-{}.json", args.count, args.bosun_replicas),
        (true, true) => format!("target/bench/webapp-{}-shards-{}-kill.json", args.count, args.bosun_replicas),
    };
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {path}");
    Ok(())
}

/// A replica killed mid-run (`--kill-one`).
struct Killed {
    at: Instant,
    /// Shards held by each replica just before.
    held: Vec<f64>,
    /// The shards the killed replica held.
    shards: Vec<u16>,
    /// The WebApps whose image was changed after the kill, and whether each is in one of
    /// the killed replica's shards.
    sample: Vec<(String, bool)>,
    said: String,
}

/// `kill -9` the replica holding the most shards, then change the image of every
/// `--kill-sample`th WebApp: until the survivors take the killed replica's shards, the
/// changes in them reach no Deployment.
async fn kill_one(
    args: &Args,
    replicas: &mut Replicas,
    client: &kube::Client,
    ns: &str,
    names: &[String],
) -> anyhow::Result<Killed> {
    let held = replicas.gauges("bosun_shards_held ").await;
    let most = (0..held.len()).max_by(|a, b| held[*a].total_cmp(&held[*b])).unwrap_or(0);
    let shards = bosun_resources::shard::Shards::new(args.bosun_replicas as u16).map_err(anyhow::Error::msg)?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), ns);
    let identity = format!("bench-{most}");
    let mut theirs: Vec<u16> = leases
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|l| l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(identity.as_str()))
        .filter_map(|l| bosun_resources::shard::parse_lease("bosun-leader", &l.name_any()))
        .filter(|(_, count)| *count == shards.count())
        .map(|(shard, _)| shard)
        .collect();
    theirs.sort_unstable();
    let Some(victim) = replicas.running[most].take() else { bail!("bench-{most} is not running") };
    victim.signal("KILL");
    let at = Instant::now();
    drop(victim);
    let sample: Vec<(String, bool)> = names
        .iter()
        .step_by(args.kill_sample.max(1))
        .map(|n| {
            let bucket = bosun_resources::shard::bucket(Some(ns), n);
            (n.clone(), theirs.contains(&shards.of_bucket(bucket)))
        })
        .collect();
    let webapps: Api<apps_v1::WebApp> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"spec": {"image": CHANGED_IMAGE}});
    futures::stream::iter(&sample)
        .map(|(name, _)| {
            let (webapps, patch) = (webapps.clone(), &patch);
            async move {
                webapps
                    .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
                    .await
                    .with_context(|| format!("changing {name}"))
            }
        })
        .buffer_unordered(args.parallel)
        .try_collect::<Vec<_>>()
        .await?;
    let said = format!(
        "killed bench-{most} (shards held: {held:?}; its shards {theirs:?}); changed the image of {} WebApps ({} in its shards) in {:.1} s",
        sample.len(),
        sample.iter().filter(|(_, k)| *k).count(),
        at.elapsed().as_secs_f64()
    );
    Ok(Killed { at, held, shards: theirs, sample, said })
}

/// Reconciles the `webapp` controller counted, whatever their result.
fn reconciles(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("bosun_reconciles_total{") && l.contains(r#"controller="webapp""#))
        .filter_map(|l| l.split_whitespace().last().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// bosun killed and started again over the `count` WebApps, all in place: the time to
/// `/readyz`, to its first reconcile and to every WebApp reconciled once ("everything
/// checked"); the requests it sent until then and over the 10 s after, and the writes
/// (none is the goal: nothing changed); its peak RSS through the restart.
async fn restart(
    args: &Args,
    cluster: &bosun_testing::Cluster,
    ns: &str,
    old: bosun_testing::Bosun,
    bosun_args: &[&str],
) -> anyhow::Result<serde_json::Value> {
    // Every stored change to the WebApps and their children from here on: an unchanged
    // world restarted over should see none (a no-op apply stores nothing).
    let client = cluster.client.clone();
    let rewritten = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watches = [
        count_changes(Api::<apps_v1::WebApp>::namespaced(client.clone(), ns), rewritten.clone()),
        count_changes(Api::<Deployment>::namespaced(client.clone(), ns), rewritten.clone()),
        count_changes(Api::<k8s_openapi::api::core::v1::Service>::namespaced(client, ns), rewritten.clone()),
    ];
    tokio::time::sleep(Duration::from_secs(3)).await; // the watches have listed
    drop(old);
    let log = std::path::PathBuf::from(format!("target/bench/bosun-{ns}-restart.log"));
    let started = Instant::now();
    let bosun = bosun_testing::Bosun::start(&args.bosun, &cluster.kubeconfig, bosun_args, log);
    let (mut ready, mut first, mut peak) = (None, None, 0);
    let checked = loop {
        peak = peak.max(rss_kib(bosun.pid(), "VmRSS:"));
        if ready.is_none() && bosun.http_get("/readyz").await.0 == 200 {
            ready = Some(started.elapsed());
        }
        let (_, metrics) = bosun.http_get("/metrics").await;
        let reconciled = reconciles(&metrics);
        if first.is_none() && reconciled > 0.0 {
            first = Some(started.elapsed());
        }
        if reconciled >= args.count as f64 {
            break (started.elapsed(), metrics);
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!(
                "restarted, bosun reconciled {reconciled} of {} WebApps in 10 minutes:\n{}",
                args.count,
                bosun.log_tail(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (checked_in, at_checked) = checked;
    // Every WebApp may be checked before the last cache (another kind's) has synced.
    while ready.is_none() && started.elapsed() < Duration::from_secs(600) {
        if bosun.http_get("/readyz").await.0 == 200 {
            ready = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (_, settled) = bosun.http_get("/metrics").await;
    peak = peak.max(rss_kib(bosun.pid(), "VmHWM:"));
    for watch in watches {
        watch.abort();
    }
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    Ok(serde_json::json!({
        "to_ready_s": secs(ready),
        "to_first_reconcile_s": secs(first),
        "to_all_checked_s": checked_in.as_secs_f64(),
        "requests_until_checked": requests(&at_checked, &ALL_METHODS),
        "writes_until_checked": requests(&at_checked, &WRITE_METHODS),
        "requests_10s_after": requests(&settled, &ALL_METHODS) - requests(&at_checked, &ALL_METHODS),
        "writes_10s_after": requests(&settled, &WRITE_METHODS) - requests(&at_checked, &WRITE_METHODS),
        "requests_by_method": ALL_METHODS.iter().map(|m| (m.to_string(), serde_json::json!(requests(&settled, &[m])))).collect::<serde_json::Map<_, _>>(),
        "objects_rewritten": rewritten.load(std::sync::atomic::Ordering::SeqCst),
        "peak_rss_mib": peak as f64 / 1024.0,
    }))
}

/// Count into `changes` every change the watch of `api` delivers after its first list.
fn count_changes<K>(api: Api<K>, changes: Arc<std::sync::atomic::AtomicU64>) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + for<'de> k8s_openapi::serde::Deserialize<'de> + Send + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) = event {
                changes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    })
}
