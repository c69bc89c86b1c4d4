//! What one cached object costs bosun's memory, per kind a WebApp brings: N copies of
//! a real object (as the apiserver sends it: `cache_size/*.json`, one WebApp and its
//! Deployment and Service) decoded into a kube reflector store, once as decoded (the
//! full `k8s_openapi` kind) and once as bosun's caches keep it (the slim type its cache
//! reads, [`bosun_resources::slim`], slimmed by [`Child::slim`]). Memory is measured as the growth of the
//! process's anonymous RSS, so allocator overhead counts as it does in bosun.
//!
//! `cargo run --release -p bosun-controller --example cache_size [N]` (default 10000)

use std::mem::size_of;

use bosun_api::webapp::apps_v1::WebApp;
use bosun_controller::children::{Child, slim_parent_meta};
use bosun_controller::guard::Guarded;
use bosun_resources::slim::{SlimDeployment, SlimService};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;

const WEBAPP: &str = include_str!("webapp.json");
const DEPLOYMENT: &str = include_str!("deployment.json");
const SERVICE: &str = include_str!("service.json");
/// The name every fixture's objects carry, replaced by a unique one per copy.
const NAME: &str = "bench-00042";

fn anon_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

/// Bytes per object of a store of `n` copies of `fixture`, each passed through `slim`.
fn per_object<K>(fixture: &str, n: usize, slim: impl Fn(&mut K)) -> Result<f64, serde_json::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let texts: Vec<String> = (0..n).map(|i| fixture.replace(NAME, &format!("bench-{i:05}"))).collect();
    let before = anon_kib();
    let (reader, mut writer): (_, Writer<K>) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for text in &texts {
        let mut obj: K = serde_json::from_str(text)?;
        slim(&mut obj);
        writer.apply_watcher_event(&watcher::Event::InitApply(obj));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let grown = anon_kib() - before;
    let cached = reader.state().len();
    // Kept, not freed: freeing would leave reusable holes under the next measurement.
    std::mem::forget((reader, writer, texts));
    Ok(grown as f64 * 1024.0 / cached as f64)
}

fn main() -> Result<(), serde_json::Error> {
    let n: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(10_000);
    println!("{n} copies of each object; bytes of anonymous RSS per object in a reflector store");
    println!("{:<12} {:>12} {:>12} {:>14} {:>12}", "kind", "inline size", "as decoded", "cached inline", "as cached");
    let row = |kind: &str, (inline, decoded): (usize, f64), (cached_inline, cached): (usize, f64)| {
        println!("{kind:<12} {inline:>12} {decoded:>12.0} {cached_inline:>14} {cached:>12.0}");
    };
    let webapp = size_of::<Guarded<WebApp>>();
    row(
        "WebApp",
        (webapp, per_object::<Guarded<WebApp>>(WEBAPP, n, |_| {})?),
        (webapp, per_object::<Guarded<WebApp>>(WEBAPP, n, |w| slim_parent_meta(kube::Resource::meta_mut(w)))?),
    );
    row(
        "Deployment",
        (size_of::<Deployment>(), per_object::<Deployment>(DEPLOYMENT, n, |_| {})?),
        (size_of::<SlimDeployment>(), per_object::<SlimDeployment>(DEPLOYMENT, n, Child::slim)?),
    );
    row(
        "Service",
        (size_of::<Service>(), per_object::<Service>(SERVICE, n, |_| {})?),
        (size_of::<SlimService>(), per_object::<SlimService>(SERVICE, n, Child::slim)?),
    );
    Ok(())
}
