//! Process supervision: a state directory of one set of processes, its lock, and
//! starting, finding, stopping and reaping the processes it runs.
//!
//! A set's processes outlive whoever started them (a `make` target, a test binary):
//! each runs in a session of its own (`setsid`, so Ctrl-C on the caller leaves it
//! alone), inherits no descriptor but its log, and is found again by its pid file
//! **and** its executable (a pid reused after a crash or reboot is not taken for
//! it). Processes of the set that no pid file names any more (a killed `up`) are
//! found by the state directory in their command line.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// One kind of process of a set: its name (pid file, log) and how a live one is
/// told from any other process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Component {
    pub name: &'static str,
    /// The file name of the executable it runs as (after any `exec` of a wrapper).
    pub exe: &'static str,
    /// A word its command line must hold, for interpreters (`node … azurite`).
    pub cmdline_has: Option<&'static str>,
}

impl Component {
    pub const fn named(name: &'static str) -> Component {
        Component { name, exe: name, cmdline_has: None }
    }
}

/// How a component was started, kept so that it can be started again exactly so.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Set on top of the caller's environment (secrets go here, not into `args`,
    /// which `ps` shows).
    pub env: Vec<(String, String)>,
}

/// The state directory of a set: everything the set writes lives there, and only
/// a directory holding the set's marker file is ever removed.
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
    marker: &'static str,
}

/// The lock of a state directory, held until dropped.
#[derive(Debug)]
pub struct Lock(#[allow(dead_code)] File);

impl StateDir {
    /// `path` made absolute (a relative one is taken from the current directory).
    pub fn new(path: &Path, marker: &'static str) -> Result<StateDir> {
        let path = std::path::absolute(path).with_context(|| format!("{}", path.display()))?;
        Ok(StateDir { path, marker })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    pub fn log(&self, name: &str) -> PathBuf {
        self.join("logs").join(format!("{name}.log"))
    }

    fn pid_file(&self, name: &str) -> PathBuf {
        self.join("pids").join(format!("{name}.pid"))
    }

    fn launch_file(&self, name: &str) -> PathBuf {
        self.join("launches").join(format!("{name}.json"))
    }

    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Serialises `up` and `down` of this directory (concurrent test processes
    /// start one set, not several fighting over one directory), while sets in other
    /// directories do not wait for each other. The lock file cannot live in the
    /// directory (`down` removes it), so it goes to the runtime directory.
    pub fn lock(&self) -> Result<Lock> {
        let runtime = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|d| d.is_dir() && !d.metadata().is_ok_and(|m| m.permissions().readonly()))
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let digest = Sha256::digest(self.path.as_os_str().as_encoded_bytes());
        let key: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let file = runtime.join(format!("{}-{key}.lock", self.marker));
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .with_context(|| format!("opening the lock {}", file.display()))?;
        f.lock().with_context(|| format!("locking {}", file.display()))?;
        Ok(Lock(f))
    }

    /// A fresh directory with the marker, `logs/`, `pids/` and `launches/`.
    pub fn create(&self) -> Result<()> {
        for d in ["logs", "pids", "launches"] {
            std::fs::create_dir_all(self.join(d)).with_context(|| format!("creating {}", self.join(d).display()))?;
        }
        File::create(self.join(self.marker)).context("the state directory's marker")?;
        Ok(())
    }

    /// Removes the directory, but only when it is the set's: a mistyped
    /// `BOSUN_*_DIR` pointing at someone's home must not be emptied.
    pub fn remove(&self) -> Result<()> {
        if !self.path.exists() {
            return Ok(());
        }
        let empty = std::fs::read_dir(&self.path)?.next().is_none();
        if !self.join(self.marker).exists() && !empty {
            bail!(
                "{} exists but is not a directory of this set (no {} marker); not removing it",
                self.path.display(),
                self.marker
            );
        }
        std::fs::remove_dir_all(&self.path).with_context(|| format!("removing {}", self.path.display()))
    }

    /// The pid of `c` if it is alive and runs `c`'s executable.
    pub fn pid(&self, c: &Component) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.pid_file(c.name)).ok()?.trim().parse().ok()?;
        is(pid, c).then_some(pid)
    }

    /// Starts `c` detached (see the module's docs) in the state directory, its
    /// output appended to its log, and returns once the pid is `c`'s executable
    /// (or the process is gone: the caller's health check then reports it).
    pub fn start(&self, c: &Component, launch: &Launch) -> Result<u32> {
        let log_path = self.log(c.name);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        // setsid(1) execs in place (the pid stays) as its parent is no group leader.
        let mut child = Command::new("setsid")
            .arg(&launch.program)
            .args(&launch.args)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} ({})", c.name, launch.program.display()))?;
        let pid = child.id();
        std::fs::write(self.pid_file(c.name), format!("{pid}\n"))?;
        write_private(&self.launch_file(c.name), &serde_json::to_vec(launch)?)?;
        // Reaped here when it exits while the caller still runs; once the caller
        // exits, init adopts and reaps it.
        std::thread::spawn(move || child.wait());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is(pid, c) && running(pid) {
            if Instant::now() > deadline {
                bail!("{} (pid {pid}) has not started 10 s after launch", c.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(pid)
    }

    /// Starts `c` again exactly as it was last started (after a test killed it).
    pub fn restart(&self, c: &Component) -> Result<u32> {
        let raw = std::fs::read(self.launch_file(c.name))
            .with_context(|| format!("no record of how {} was started in {}", c.name, self.path.display()))?;
        let launch: Launch = serde_json::from_slice(&raw)?;
        self.start(c, &launch)
    }

    /// Processes of `components` that still run from this directory although no
    /// pid file names them (a killed `up`, a lost pid file); told from e.g. a
    /// `tail -f` of a log by their executable.
    pub fn strays(&self, components: &[Component]) -> Vec<u32> {
        let needle = format!("{}/", self.path.display());
        processes(|_, cmdline| cmdline.contains(&needle))
            .into_iter()
            .filter(|pid| components.iter().any(|c| is(*pid, c)))
            .collect()
    }

    /// Stops every live process of `components` and every stray: each gets its
    /// component's signal (`signal_of`, SIGTERM by default) at once, SIGKILL after
    /// `grace`; returns once they are gone and reaped (best effort for the reaping:
    /// an init that reaps late must not fail a `down`).
    pub fn stop(
        &self,
        components: &[Component],
        signal_of: impl Fn(&Component) -> Signal,
        grace: Duration,
    ) -> Result<()> {
        let mut pids: Vec<(u32, Signal)> =
            components.iter().filter_map(|c| Some((self.pid(c)?, signal_of(c)))).collect();
        for pid in self.strays(components) {
            if !pids.iter().any(|(p, _)| *p == pid) {
                pids.push((pid, Signal::SIGTERM));
            }
        }
        for (pid, signal) in &pids {
            signal_pid(*pid, *signal);
        }
        let all: Vec<u32> = pids.iter().map(|(p, _)| *p).collect();
        if !await_exit(&all, grace) {
            let left: Vec<u32> = all.iter().copied().filter(|p| running(*p)).collect();
            let names: Vec<String> = left.iter().map(|p| format!("{}[{p}]", exe_name(*p))).collect();
            eprintln!("localcluster: still running {grace:?} after the signal, sending SIGKILL: {}", names.join(" "));
            for pid in &left {
                signal_pid(*pid, Signal::SIGKILL);
            }
            if !await_exit(&left, Duration::from_secs(3)) {
                bail!("could not stop processes: {}", names.join(" "));
            }
        }
        await_reaped(&all, Duration::from_secs(5));
        Ok(())
    }

    /// How many of `components` are alive.
    pub fn alive(&self, components: &[Component]) -> usize {
        components.iter().filter(|c| self.pid(c).is_some()).count()
    }

    /// Before a fresh start: stops what still runs of the set (a partial or unhealthy
    /// one; `stop_all` knows its order and signals) and removes the old directory.
    pub fn clear(
        &self,
        components: &[Component],
        stop_all: impl FnOnce(&StateDir) -> Result<()>,
        say: impl Fn(&str),
    ) -> Result<()> {
        let n = self.alive(components);
        if n > 0 {
            say(&format!("found {n} processes alive (a partial or unhealthy set); restarting them"));
        } else if self.exists() {
            say(&format!("removing stale state in {} (nothing running)", self.path.display()));
        }
        stop_all(self)?;
        self.remove()
    }

    /// `down`: under the lock, stops the set (`stop_all`, which knows its order and
    /// signals), makes sure none of `components` is left, and removes the directory.
    pub fn tear_down(
        &self,
        components: &[Component],
        stop_all: impl FnOnce(&StateDir) -> Result<()>,
        say: impl Fn(&str),
    ) -> Result<()> {
        let _lock = self.lock()?;
        if !self.exists() {
            say(&format!("nothing to stop in {}", self.path.display()));
            return Ok(());
        }
        stop_all(self)?;
        let left = self.strays(components);
        if !left.is_empty() {
            bail!("processes still running: {left:?}");
        }
        self.remove()?;
        say(&format!("stopped; removed {}", self.path.display()));
        Ok(())
    }

    /// The last `n` lines of a log, for a failure message.
    pub fn log_tail(&self, name: &str, n: usize) -> String {
        let text = std::fs::read_to_string(self.log(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// What a set is still waiting for, and the process whose log explains it.
#[derive(Debug)]
pub struct Waiting {
    pub what: String,
    pub culprit: &'static str,
}

pub fn waiting(what: impl Into<String>, culprit: &'static str) -> Waiting {
    Waiting { what: what.into(), culprit }
}

/// How long a step may run without saying anything.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// Run `work`, saying every [`HEARTBEAT`] that `what` is still under way, with the
/// newest line of `log` when it has one (a build's or an import's own progress): no
/// step of a cold start is silent for long. Quick work says nothing.
pub fn speaking<T>(what: &str, log: Option<&Path>, say: impl Fn(&str) + Sync, work: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let say = &say;
        scope.spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(HEARTBEAT) {
                let newest = log.and_then(|l| std::fs::read_to_string(l).ok()).and_then(|text| {
                    text.lines().rev().find(|l| !l.trim().is_empty()).map(|l| format!(": {}", l.trim()))
                });
                say(&format!("still {what} ({}s){}", started.elapsed().as_secs(), newest.unwrap_or_default()));
            }
        });
        let out = work();
        drop(done);
        out
    })
}

/// Why waiting for health ended without it.
#[derive(Debug)]
pub enum Unhealthy {
    /// A process exited (its log's last lines).
    Exited { name: &'static str, log: String },
    /// Not healthy in time: what it waited for, the culprit's log.
    TimedOut(String),
}

impl Unhealthy {
    /// The exit was a port taken between picking it and binding it (worth one more
    /// try with other ports).
    pub fn port_conflict(&self) -> bool {
        let Unhealthy::Exited { log, .. } = self else { return false };
        let log = log.to_lowercase();
        ["address already in use", "eaddrinuse", "do you already have another server running"]
            .iter()
            .any(|m| log.contains(m))
    }
}

impl std::fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unhealthy::Exited { name, log } => write!(f, "{name} exited; its log's last lines:\n{log}"),
            Unhealthy::TimedOut(why) => f.write_str(why),
        }
    }
}

impl StateDir {
    /// Runs `check` every 200 ms until it passes, logging each new thing it waits
    /// for (which also shows where start-up time goes). Fails at once when one of
    /// `components()` (asked anew each round: some start during the checks) exits,
    /// and after `timeout` with the culprit's log (and `explain`'s words on it).
    pub fn wait_healthy(
        &self,
        components: impl Fn() -> Vec<Component>,
        mut check: impl FnMut() -> std::result::Result<(), Waiting>,
        started: Instant,
        timeout: Duration,
        say: impl Fn(&str),
        explain: impl Fn(&Waiting) -> String,
    ) -> std::result::Result<(), Unhealthy> {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        let mut said = Instant::now();
        loop {
            if let Some(c) = components().into_iter().find(|c| self.pid(c).is_none()) {
                return Err(Unhealthy::Exited { name: c.name, log: self.log_tail(c.name, 30) });
            }
            let Err(w) = check() else { return Ok(()) };
            // Said when it changes, and again every HEARTBEAT while it does not.
            if w.what != last || said.elapsed() >= HEARTBEAT {
                say(&format!("{:.1}s: waiting for {}", started.elapsed().as_secs_f64(), w.what));
                last.clone_from(&w.what);
                said = Instant::now();
            }
            if Instant::now() > deadline {
                return Err(Unhealthy::TimedOut(format!(
                    "not healthy after {}s: waiting for {}; last lines of {}:\n{}{}",
                    timeout.as_secs(),
                    w.what,
                    self.log(w.culprit).display(),
                    self.log_tail(w.culprit, 30),
                    explain(&w)
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The HTTP status of a plain-HTTP GET on this machine, or None when nothing answers.
pub fn http_status(url: &str) -> Option<u16> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(3)))
        .http_status_as_error(false)
        .build()
        .into();
    agent.get(url).call().ok().map(|r| r.status().as_u16())
}

/// The live processes whose executable's file name and command line (its words
/// joined by spaces) `matching` accepts.
pub fn processes(matching: impl Fn(&str, &str) -> bool) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| matching(&exe_name(*pid), &cmdline(*pid)) && running(*pid))
        .collect()
}

/// Sends `signal` to `pid`; one already gone is not an error.
pub fn signal_pid(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// Alive: exists and is no zombie (`kill -0` succeeds for zombies, and a process
/// adopted by an init that reaps late stays one for a while).
pub fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the parenthesised command name, which may hold anything.
    stat.rsplit_once(") ").and_then(|(_, rest)| rest.split(' ').next()).is_some_and(|state| state != "Z")
}

fn exe_name(pid: u32) -> String {
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else { return String::new() };
    let exe = exe.to_string_lossy();
    let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
    exe.rsplit('/').next().unwrap_or_default().to_owned()
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .unwrap_or_default()
}

/// `pid` is a live process of `c`.
fn is(pid: u32, c: &Component) -> bool {
    exe_name(pid) == c.exe && c.cmdline_has.is_none_or(|word| cmdline(pid).contains(word)) && running(pid)
}

/// Waits until none of `pids` runs; false if some still do after `limit`.
fn await_exit(pids: &[u32], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !pids.iter().any(|p| running(*p)) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits (at most `limit`) until the exited `pids` are reaped, so that right after
/// a `down` no process of the set shows in `ps` at all.
pub fn await_reaped(pids: &[u32], limit: Duration) {
    let deadline = Instant::now() + limit;
    while pids.iter().any(|p| Path::new(&format!("/proc/{p}")).exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes a file only its owner may read (credentials, launch records).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(bytes)?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn temp(name: &str) -> StateDir {
        let dir = std::env::temp_dir().join(format!("localcluster-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        StateDir::new(&dir, "bosun-test-set").unwrap()
    }

    const SLEEP: Component = Component::named("sleep");

    #[test]
    fn a_started_process_is_found_stopped_reaped_and_started_again() {
        let dir = temp("cycle");
        dir.create().unwrap();
        let launch = Launch { program: "sleep".into(), args: vec!["300".into()], env: vec![] };
        let pid = dir.start(&SLEEP, &launch).unwrap();
        assert_eq!(dir.pid(&SLEEP), Some(pid));
        // Another component's name over the same pid file is not taken for it.
        assert_eq!(dir.pid(&Component { name: "sleep", exe: "bash", cmdline_has: None }), None);
        dir.stop(&[SLEEP], |_| Signal::SIGTERM, Duration::from_secs(5)).unwrap();
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "stopped and reaped");
        assert_eq!(dir.pid(&SLEEP), None);
        let again = dir.restart(&SLEEP).unwrap();
        assert_ne!(again, pid);
        assert!(cmdline(again).contains("sleep 300"), "{}", cmdline(again));
        dir.stop(&[SLEEP], |_| Signal::SIGTERM, Duration::from_secs(5)).unwrap();
        dir.remove().unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn a_stray_without_a_pid_file_is_found_by_its_directory_and_stopped() {
        let dir = temp("stray");
        dir.create().unwrap();
        // tail -f of the set's own log: its command line names the directory.
        let tail = Component::named("tail");
        let launch = Launch {
            program: "tail".into(),
            args: vec!["-f".into(), dir.log("tail").display().to_string()],
            env: vec![],
        };
        let pid = dir.start(&tail, &launch).unwrap();
        std::fs::remove_file(dir.pid_file("tail")).unwrap();
        assert_eq!(dir.pid(&tail), None);
        assert_eq!(dir.strays(&[tail]), vec![pid]);
        assert!(dir.strays(&[SLEEP]).is_empty(), "another executable is no stray of the set");
        dir.stop(&[tail], |_| Signal::SIGTERM, Duration::from_secs(5)).unwrap();
        assert!(!running(pid));
        dir.remove().unwrap();
    }

    #[test]
    fn a_directory_without_the_marker_is_not_removed() {
        let dir = temp("foreign");
        std::fs::create_dir_all(dir.path()).unwrap();
        std::fs::write(dir.join("precious"), "x").unwrap();
        let err = dir.remove().unwrap_err().to_string();
        assert!(err.contains("not a directory of this set"), "{err}");
        assert!(dir.join("precious").exists());
        std::fs::remove_dir_all(dir.path()).unwrap();
    }

    #[test]
    fn the_lock_is_held_until_dropped() {
        let dir = temp("lock");
        let held = dir.lock().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let other = dir.clone();
        std::thread::spawn(move || {
            let _lock = other.lock().unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "a second up waits");
        drop(held);
        rx.recv_timeout(Duration::from_secs(5)).expect("and goes on once the first is done");
    }
}
