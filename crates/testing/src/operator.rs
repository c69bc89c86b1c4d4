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
    /// Start `binary run <args>` with `kubeconfig`, logging to `log`.
    pub fn start(binary: &Path, kubeconfig: &Path, args: &[&str], log: PathBuf) -> Bosun {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).expect("log directory");
        }
        let file = std::fs::File::create(&log).expect("operator log file");
        let child = Command::new(binary)
            .arg("run")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", std::env::var("BOSUN_E2E_LOG").unwrap_or_else(|_| "info,kube=warn".into()))
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
