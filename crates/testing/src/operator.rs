//! The `bosun` binary as a child process of a test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `bosun run`; killed when dropped.
#[derive(Debug)]
pub struct Bosun {
    child: Child,
    pub log: PathBuf,
}

impl Bosun {
    /// Start `binary run <args>` with `kubeconfig`, logging to `log` at the level of
    /// `BOSUN_E2E_LOG` (default: info).
    pub fn start(binary: &Path, kubeconfig: &Path, args: &[&str], log: PathBuf) -> Bosun {
        let filter = std::env::var("BOSUN_E2E_LOG").unwrap_or_else(|_| "info,kube=warn".into());
        Bosun::start_logging(binary, kubeconfig, args, log, &filter)
    }

    /// [`Bosun::start`] with the log filter `filter` (`RUST_LOG` syntax).
    pub fn start_logging(binary: &Path, kubeconfig: &Path, args: &[&str], log: PathBuf, filter: &str) -> Bosun {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).expect("log directory");
        }
        let file = std::fs::File::create(&log).expect("operator log file");
        let child = Command::new(binary)
            .arg("run")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", filter)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        Bosun { child, log }
    }

    /// The process id, for signalling it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last `n` lines of the operator's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<_> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The address of /metrics, /healthz and /readyz, from the log line bosun writes
    /// once it listens; waits up to 30 s for it.
    pub async fn http_addr(&self) -> std::net::SocketAddr {
        for _ in 0..300 {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let found = text.lines().filter(|l| l.contains("serving /metrics")).find_map(|l| {
                l.split("addr=")
                    .nth(1)
                    .and_then(|a| a.split_whitespace().next())
                    .and_then(|a| a.trim_matches('"').parse().ok())
            });
            if let Some(addr) = found {
                return addr;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("bosun did not report its metrics address within 30s; log:\n{}", self.log_tail(30))
    }

    /// GET `path` on bosun's metrics and health listener: (status code, body).
    pub async fn http_get(&self, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.http_addr().await;
        let mut stream =
            tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("sending request");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("reading response");
        let status = response.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        (status, body)
    }

    /// Send `signal` (e.g. `TERM`, `KILL`) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status().expect("kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Wait up to `timeout` for the process to exit; its exit status.
    pub async fn wait_exit(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        let start = std::time::Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        None
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Bosun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
