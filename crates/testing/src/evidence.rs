//! What a failed test leaves to be told by: the logs of its namespace's pods, kept
//! before the namespace goes, and the warnings of its pods and of its bosuns printed
//! with the failure, so that a failure on CI (where only the test's output is seen)
//! says what the instances and bosun decided.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use kube::{Api, Client, ResourceExt};

use crate::cluster::repo_root;

/// How long one log may take to read (a pod on a node cut off answers never).
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How many of the last warnings of each log are printed.
const WARNINGS: usize = 15;

/// Keep the logs of `ns`'s pods (each container's, and its previous one's) under
/// `target/e2e-logs/<ns>/`, and print the last warnings of them and of the bosun logs
/// of the namespace.
pub async fn keep(client: &Client, ns: &str) {
    let dir = repo_root().join("target/e2e-logs").join(ns);
    let _ = std::fs::create_dir_all(&dir);
    let pods = match Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            eprintln!("evidence: the pods of {ns} could not be listed: {e}");
            Vec::new()
        }
    };
    let mut kept = 0;
    for pod in &pods {
        for (container, previous) in containers(pod) {
            let Some(log) = read(client, ns, &pod.name_any(), &container, previous).await else { continue };
            let name = format!("{}.{container}{}.log", pod.name_any(), if previous { ".previous" } else { "" });
            if std::fs::write(dir.join(&name), &log).is_ok() {
                kept += 1;
            }
            print_warnings(&name, &log);
        }
    }
    eprintln!("evidence: the logs of {kept} containers of {ns} kept in {}", dir.display());
    for bosun in bosun_logs(&repo_root().join("target/e2e-logs"), ns) {
        let log = std::fs::read_to_string(&bosun).unwrap_or_default();
        print_warnings(&bosun.display().to_string(), &log);
    }
}

/// Each container of `pod` (init containers too), and whether its previous run is
/// there too: (name, previous).
fn containers(pod: &Pod) -> Vec<(String, bool)> {
    let status = pod.status.as_ref();
    let statuses = status
        .into_iter()
        .flat_map(|s| s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten()));
    let mut all = Vec::new();
    for s in statuses {
        all.push((s.name.clone(), false));
        if s.restart_count > 0 {
            all.push((s.name.clone(), true));
        }
    }
    all
}

async fn read(client: &Client, ns: &str, pod: &str, container: &str, previous: bool) -> Option<String> {
    let params =
        LogParams { container: Some(container.to_owned()), previous, timestamps: true, ..LogParams::default() };
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    tokio::time::timeout(READ_TIMEOUT, pods.logs(pod, &params)).await.ok()?.ok()
}

/// bosun's logs of the tests of `ns` (`<ns>-<n>.log`, [`crate::Env::start_bosun`]'s).
fn bosun_logs(dir: &Path, ns: &str) -> Vec<std::path::PathBuf> {
    let prefix = format!("{ns}-");
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.starts_with(&prefix) && name.ends_with(".log")
        })
        .collect();
    logs.sort();
    logs
}

/// The last [`WARNINGS`] warnings and errors of `log`, under its `name`.
fn print_warnings(name: &str, log: &str) {
    let warnings = last_warnings(log, WARNINGS);
    if warnings.is_empty() {
        return;
    }
    eprintln!("evidence: the last warnings of {name}:");
    for line in warnings {
        eprintln!("  {line}");
    }
}

/// The last `n` lines of `log` at WARN or ERROR (tracing's levels, or JSON's
/// `"level":"WARN"`).
fn last_warnings(log: &str, n: usize) -> Vec<&str> {
    let warns = |l: &&str| {
        [" WARN ", " ERROR ", "\"level\":\"WARN\"", "\"level\":\"ERROR\""].iter().any(|level| l.contains(level))
    };
    let all: Vec<&str> = log.lines().filter(warns).collect();
    all[all.len().saturating_sub(n)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_warnings_are_picked_in_both_formats() {
        let log = "a INFO x\nb  WARN y\nc ERROR z\n{\"level\":\"WARN\",\"m\":1}\nd INFO w\n";
        assert_eq!(last_warnings(log, 2), vec!["c ERROR z", "{\"level\":\"WARN\",\"m\":1}"]);
        assert_eq!(last_warnings("only INFO here", 5), Vec::<&str>::new());
    }
}
