//! `logs NAME`: every instance's log (the instance manager's and its server's lines),
//! interleaved by the time the kubelet stamped on each, after the pod's name.

use std::process::ExitCode;
use std::time::Duration;

use bosun_resources::postgresql::CONTAINER;
use futures::{AsyncBufReadExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, LogParams};

use crate::status::brief;
use crate::{Session, postgres};

fn params(follow: bool, since: Option<Duration>, tail: Option<i64>) -> LogParams {
    LogParams {
        container: Some(CONTAINER.to_owned()),
        follow,
        since_seconds: since.map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
        tail_lines: tail,
        timestamps: true,
        ..LogParams::default()
    }
}

/// `(time, pod, line)` of a line the kubelet stamped (`TIME TEXT`).
fn stamped(pod: &str, line: &str) -> (String, String, String) {
    let (time, text) = line.split_once(' ').unwrap_or(("", line));
    (time.to_owned(), pod.to_owned(), text.to_owned())
}

/// Lines of several pods in one order: by time, then by pod (a stable merge).
pub fn interleave(mut lines: Vec<(String, String, String)>) -> Vec<(String, String, String)> {
    lines.sort_by(|a, b| (a.0.as_str(), a.1.as_str()).cmp(&(b.0.as_str(), b.1.as_str())));
    lines
}

pub async fn run(
    session: &Session,
    name: &str,
    follow: bool,
    since: Option<Duration>,
    tail: Option<i64>,
) -> anyhow::Result<ExitCode> {
    let db = postgres::get(session, name).await?;
    let pods: Vec<String> = postgres::instance_pods(session, &db).await?.iter().map(ResourceExt::name_any).collect();
    if pods.is_empty() {
        anyhow::bail!("postgresql {}/{name} has no instances yet", session.namespace);
    }
    let api: Api<Pod> = Api::namespaced(session.client.clone(), &session.namespace);
    let width = pods.iter().map(String::len).max().unwrap_or(0);
    if !follow {
        let fetched = futures::future::join_all(pods.iter().map(|pod| {
            let api = api.clone();
            async move { (pod.clone(), api.logs(pod, &params(false, since, tail)).await) }
        }))
        .await;
        let mut lines = Vec::new();
        for (pod, log) in fetched {
            match log {
                Ok(log) => lines.extend(log.lines().map(|l| stamped(&pod, l))),
                Err(e) => eprintln!("{pod}: no log: {}", brief(&e)),
            }
        }
        for (time, pod, text) in interleave(lines) {
            println!("{time} {pod:<width$} {text}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut streams = Vec::new();
    for pod in &pods {
        match api.log_stream(pod, &params(true, since, tail)).await {
            Ok(stream) => {
                let pod = pod.clone();
                streams.push(stream.lines().map(move |l| (pod.clone(), l)).boxed());
            }
            Err(e) => eprintln!("{pod}: no log: {}", brief(&e)),
        }
    }
    let mut merged = futures::stream::select_all(streams);
    while let Some((pod, line)) = merged.next().await {
        match line {
            Ok(line) => {
                let (time, pod, text) = stamped(&pod, &line);
                println!("{time} {pod:<width$} {text}");
            }
            Err(e) => eprintln!("{pod}: {e}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_several_pods_are_put_in_time_order() {
        let a = "2026-11-28T10:00:01.000000000Z started\n2026-11-28T10:00:03.000000000Z promoted";
        let b = "2026-11-28T10:00:02.000000000Z streaming";
        let mut lines: Vec<_> = a.lines().map(|l| stamped("db-0", l)).collect();
        lines.extend(b.lines().map(|l| stamped("db-1", l)));
        let order: Vec<String> = interleave(lines).into_iter().map(|(_, pod, text)| format!("{pod} {text}")).collect();
        assert_eq!(order, ["db-0 started", "db-1 streaming", "db-0 promoted"]);
    }
}
