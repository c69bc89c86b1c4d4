//! A `bosun` runner process measured from outside (wall time, peak RSS, CPU), and the
//! PostgreSQL of `hack/backends.sh` filled with an order table of a given size.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use bosun_testing::backends::Backends;
use tokio::io::AsyncReadExt;

/// Bytes of `1GiB`, `512MiB`, `100MB`, `1000`.
pub fn parse_size(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.parse().with_context(|| format!("--size {text:?}: not a size like 1GiB"))?;
    let unit = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        other => bail!("--size {text:?}: unknown unit {other:?}"),
    };
    Ok((n * unit as f64) as u64)
}

/// What one bosun run cost, measured from outside.
#[derive(Debug)]
pub struct Run {
    pub result: serde_json::Value,
    pub wall: Duration,
    pub peak_rss_kib: u64,
    pub cpu_seconds: f64,
}

fn proc_status(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0) // USER_HZ
}

/// Run `bosun args…`, polling its VmHWM and CPU time every 100 ms until it exits; its
/// result is the JSON line it prints.
pub async fn measured(b: &Backends, bosun: &std::path::Path, args: &[&str]) -> anyhow::Result<Run> {
    let mut command = b.command(bosun);
    command.args(args);
    let (wall, peak_rss_kib, cpu_seconds, stdout) = measured_command(command, &format!("bosun {args:?}")).await?;
    let result = serde_json::from_str(stdout.trim()).with_context(|| format!("bosun's result line: {stdout}"))?;
    Ok(Run { result, wall, peak_rss_kib, cpu_seconds })
}

/// Run `script` with bash (`pipefail` on) in the backends' environment: the wall time
/// of a pipeline people build by hand.
pub async fn measured_pipeline(b: &Backends, script: &str, env: &[(&str, &str)]) -> anyhow::Result<Duration> {
    let mut command = b.command("bash");
    command.args(["-c", &format!("set -euo pipefail; {script}")]).envs(env.iter().copied());
    Ok(measured_command(command, script).await?.0)
}

/// Run `command` to its end, polling its VmHWM and CPU time every 100 ms: wall time,
/// peak RSS (KiB), CPU seconds and what it printed on stdout.
async fn measured_command(
    mut command: tokio::process::Command,
    what: &str,
) -> anyhow::Result<(Duration, u64, f64, String)> {
    let started = Instant::now();
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let pid = child.id().context("the pid")?;
    // Drain both pipes meanwhile: a full stderr pipe would stall the run.
    let drain = |pipe: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>| {
        tokio::spawn(async move {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text).await;
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let (mut peak, mut cpu) = (0u64, 0f64);
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    let status = loop {
        tokio::select! {
            _ = ticker.tick() => {
                peak = peak.max(proc_status(pid, "VmHWM:").unwrap_or(0));
                cpu = cpu.max(cpu_seconds(pid).unwrap_or(0.0));
            }
            status = child.wait() => break status?,
        }
    };
    let wall = started.elapsed();
    let (stdout, stderr) = (stdout.await?, stderr.await?);
    ensure!(status.success(), "{what} failed: {stdout}{stderr}");
    Ok((wall, peak, cpu, stdout))
}

pub async fn psql(b: &Backends, db: &str, sql: &str) -> anyhow::Result<String> {
    let out = b.run("psql", &["-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql]).await;
    ensure!(out.ok, "psql {sql:?}: {out}");
    Ok(out.stdout.trim().to_owned())
}

/// Rows of a mixed order table, ~160 bytes each in pg_dump's COPY text: numbers, a
/// timestamp, a status from a few values, and a note with repeated and random parts.
pub async fn load(b: &Backends, db: &str, rows: u64) -> anyhow::Result<()> {
    psql(b, "postgres", &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await?;
    psql(b, "postgres", &format!("CREATE DATABASE {db}")).await?;
    psql(
        b,
        db,
        &format!(
            "CREATE TABLE orders (id bigint PRIMARY KEY, at timestamptz, account int, amount numeric(12,2), status text, note text);
             INSERT INTO orders SELECT g, timestamptz '2024-01-01' + g * interval '1 second', (g * 7919) % 100000,
               ((g * 31) % 100000) / 100.0, (ARRAY['new', 'paid', 'shipped', 'delivered', 'refunded'])[1 + g % 5],
               'order ' || g || ' for customer ' || md5((g % 5000)::text) || ': ' || encode(sha256(int8send(g) || float8send(random())), 'base64')
             FROM generate_series(1::bigint, {rows}) g;
             ANALYZE orders;"
        ),
    )
    .await?;
    Ok(())
}

/// Print `report` as a table of its fields and write it as JSON to `path` (under
/// `target/bench/`).
pub fn print_report(report: &serde_json::Value, path: &str) -> anyhow::Result<()> {
    let width = report.as_object().into_iter().flatten().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    for (key, value) in report.as_object().into_iter().flatten() {
        let value = match value.as_f64() {
            Some(f) if !value.is_u64() => format!("{f:.2}"),
            _ => value.to_string(),
        };
        println!("{key:<width$} {value}");
    }
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(report)?)?;
    println!("wrote {path}");
    Ok(())
}
