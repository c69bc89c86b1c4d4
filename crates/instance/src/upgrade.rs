//! `bosun upgrade`: a major upgrade of one PostgreSQL data directory with
//! `pg_upgrade --link`, in the pod of the upgrade Job bosun makes
//! (`crates/resources/src/upgrade.rs`).
//!
//! ```text
//! copy  in the old major's image (an init container): its server programs, their
//!       share directory and the libraries they load, into --old (an emptyDir), laid
//!       out as under / so that the old server finds share/ and lib/ beside its bin/.
//! run   in the new major's image, on the primary's data (stopped):
//!       Check    what the data is; a clean shutdown of the old server, which also
//!                tells the encoding, locales and checksums initdb must repeat
//!       Prepare  initdb of the new cluster beside the data
//!       Check    pg_upgrade --check
//!       Upgrade  pg_upgrade --link
//!       Switch   the new directory takes the data's place; the old one is kept as
//!                <pgdata>.v<from>
//! ```
//!
//! Until Switch the data directory is the old cluster, whole: `pg_upgrade --link`
//! only sets its control file aside while it links, and that is put back on a failure
//! and on the next start after a kill ([`crate::data::restore_control`]). A failure
//! ends the pod with `<step> failed: <why>` as its termination message, which bosun
//! quotes in the PostgreSQL's status. Run again, it finishes or finds the work done.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tracing::{info, warn};

use crate::data::{self, DataState};
use crate::settings::{defaults, env};

/// `bosun upgrade`.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum UpgradeCommand {
    /// Copy this image's PostgreSQL (the data's major) where the new image's
    /// `pg_upgrade` finds it.
    Copy(CopyArgs),
    /// Upgrade the data directory to this image's major.
    Run(RunArgs),
}

#[derive(clap::Args, Clone, Debug)]
pub struct CopyArgs {
    /// The data's major: the old one.
    #[arg(long, env = env::UPGRADE_FROM)]
    pub from: u32,
    /// Where the old major's programs are copied (and found).
    #[arg(long, env = env::UPGRADE_OLD, default_value = defaults::UPGRADE_OLD)]
    pub old: PathBuf,
    #[arg(long, env = env::TERMINATION_LOG, default_value = defaults::TERMINATION_LOG)]
    pub termination_log: PathBuf,
    /// Where the images' PostgreSQL lives (`/usr/lib/postgresql/<major>`, ...).
    #[arg(long, default_value = "/", hide = true)]
    pub root: PathBuf,
}

#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub copy: CopyArgs,
    /// The new major: this image's.
    #[arg(long, env = env::UPGRADE_TO)]
    pub to: u32,
    #[arg(long, env = env::PGDATA)]
    pub pgdata: PathBuf,
    #[arg(long, env = env::SUPERUSER, default_value = "postgres")]
    pub superuser: String,
    /// The superuser's password, which the new cluster's initdb sets.
    #[arg(long, env = env::PASSWORD, hide_env_values = true)]
    pub password: String,
}

/// `bosun upgrade copy|run`: the container's exit status.
pub fn main(command: &UpgradeCommand) -> std::process::ExitCode {
    let (outcome, log) = match command {
        UpgradeCommand::Copy(args) => (
            copy(args).map_err(|why| format!("Copy failed: copying PostgreSQL {}'s programs: {why}", args.from)),
            &args.termination_log,
        ),
        UpgradeCommand::Run(args) => {
            let layout = Layout::of(args);
            let outcome = run(&layout, &Programs { args, layout: &layout });
            (outcome.map(|done| info!("{done}")).map_err(|f| f.to_string()), &args.copy.termination_log)
        }
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            // What the kubelet shows as the termination message (at most 4 KiB).
            let message = crate::commands::head(&message, 3500);
            if let Err(e) = std::fs::write(log, format!("{message}\n")) {
                warn!(path = %log.display(), "the termination message cannot be written: {e}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------
// copy

/// The C library's own, which the new image has, newer and compatible.
const SYSTEM_LIBRARIES: [&str; 7] =
    ["libc.so.", "libm.so.", "libpthread.so.", "libdl.so.", "librt.so.", "ld-linux", "libresolv.so."];

fn copy(args: &CopyArgs) -> Result<(), String> {
    let major = args.from.to_string();
    let lib = args.old.join("lib");
    let programs = Path::new("usr/lib/postgresql").join(&major);
    for dir in [Path::new("usr/lib/postgresql").join(&major), Path::new("usr/share/postgresql").join(&major)] {
        copy_tree(&args.root.join(&dir), &args.old.join(&dir))?;
    }
    std::fs::create_dir_all(&lib).map_err(|e| format!("creating {}: {e}", lib.display()))?;
    let mut loaded = Vec::new();
    files(&args.old.join(&programs), &mut loaded).map_err(|e| format!("listing {}: {e}", programs.display()))?;
    let ldd = Command::new("ldd").args(&loaded).stdin(Stdio::null()).stderr(Stdio::null()).output();
    // ldd fails for the files that are not programs: what it says of the others counts.
    let ldd = ldd.map_err(|e| format!("ldd could not run: {e}"))?;
    let needed = libraries(&String::from_utf8_lossy(&ldd.stdout));
    for (soname, path) in &needed {
        std::fs::copy(path, lib.join(soname)).map_err(|e| format!("copying {}: {e}", path.display()))?;
    }
    info!("PostgreSQL {major}'s programs and {} libraries copied to {}", needed.len(), args.old.display());
    Ok(())
}

/// `from` copied to `to` as `cp -a` would: directories, files with their modes,
/// symbolic links as links.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let err = |what: &str, path: &Path, e: std::io::Error| format!("{what} {}: {e}", path.display());
    std::fs::create_dir_all(to).map_err(|e| err("creating", to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| err("reading", from, e))? {
        let entry = entry.map_err(|e| err("reading", from, e))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(|e| err("reading", &source, e))?;
        if kind.is_symlink() {
            let link = std::fs::read_link(&source).map_err(|e| err("reading", &source, e))?;
            std::os::unix::fs::symlink(link, &target).map_err(|e| err("linking", &target, e))?;
        } else if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else {
            std::fs::copy(&source, &target).map_err(|e| err("copying", &source, e))?;
        }
    }
    Ok(())
}

/// The programs and shared objects under `dir`: what loads libraries.
fn files(dir: &Path, into: &mut Vec<PathBuf>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            files(&entry.path(), into)?;
        } else if kind.is_file() {
            let executable = entry.metadata()?.permissions().mode() & 0o100 != 0;
            if executable || entry.file_name().to_string_lossy().ends_with(".so") {
                into.push(entry.path());
            }
        }
    }
    Ok(())
}

/// The libraries `ldd`'s output names with a path, by soname, the C library's left out.
fn libraries(ldd: &str) -> std::collections::BTreeMap<String, PathBuf> {
    ldd.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (soname, arrow, path) = (words.next()?, words.next()?, words.next()?);
            (arrow == "=>" && path.starts_with('/')).then(|| (soname.to_owned(), PathBuf::from(path)))
        })
        .filter(|(soname, _)| !SYSTEM_LIBRARIES.iter().any(|system| soname.starts_with(system)))
        .collect()
}

/// The library names of `ldconfig -p`: what this image has of its own.
fn cached_libraries(ldconfig: &str) -> BTreeSet<String> {
    ldconfig
        .lines()
        .filter(|line| line.starts_with(char::is_whitespace))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------
// run

/// Where everything of one upgrade is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub from: u32,
    pub to: u32,
    pub pgdata: PathBuf,
    /// The new cluster, made beside the data.
    pub new: PathBuf,
    /// Where the old data directory is kept after the switch.
    pub kept: PathBuf,
    /// pg_upgrade's working directory (its logs and reports).
    pub work: PathBuf,
    /// The old major's copied libraries (those the image has not).
    pub old_lib: PathBuf,
    pub old_bin: PathBuf,
    pub new_bin: PathBuf,
}

/// What `pg_upgrade` leaves in the new directory once it is done.
const UPGRADED_MARKER: &str = "bosun-upgraded";
/// The old server's private socket and ports (no TCP).
const SOCKET: &str = "/tmp/bosun-upgrade";
const OLD_PORT: &str = "50432";
const NEW_PORT: &str = "50433";

impl Layout {
    pub fn of(args: &RunArgs) -> Layout {
        let (from, to, pgdata) = (args.copy.from, args.to, args.pgdata.clone());
        let beside = |suffix: String| {
            let mut name = pgdata.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        let parent = pgdata.parent().map(Path::to_path_buf).unwrap_or_default();
        Layout {
            from,
            to,
            new: beside(format!(".upgrade-{to}")),
            kept: beside(format!(".v{from}")),
            work: parent.join(format!("upgrade-{to}")),
            old_lib: args.copy.old.join("lib"),
            old_bin: args.copy.old.join(format!("usr/lib/postgresql/{from}/bin")),
            new_bin: args.copy.root.join(format!("usr/lib/postgresql/{to}/bin")),
            pgdata,
        }
    }
}

/// The steps, as the termination message names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Check,
    Prepare,
    Upgrade,
    Switch,
}

/// Why an upgrade stopped, in which step.
#[derive(Debug, PartialEq, Eq)]
pub struct Failure {
    pub step: Step,
    pub why: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} failed: {}", self.step, self.why)
    }
}

/// How an upgrade ended well.
#[derive(Debug, PartialEq, Eq)]
pub enum Done {
    /// The data was of the new major already.
    Already,
    /// Upgraded (or the switch of an earlier run finished).
    Upgraded { kept: PathBuf },
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Done::Already => write!(f, "the data already holds the new major: nothing to do"),
            Done::Upgraded { kept } => write!(
                f,
                "upgraded; the old data directory is kept as {} (hard links: it costs its catalog only; it can no \
                 longer be started once the new server has run)",
                kept.display()
            ),
        }
    }
}

/// The PostgreSQL programs an upgrade runs (faked in the tests).
pub trait Upgrader {
    /// The old server started on the data, on the private socket.
    fn start_old(&self) -> Result<(), String>;
    /// One value from the old server.
    fn old_sql(&self, sql: &str) -> Result<String, String>;
    /// The old server stopped (a fast shutdown: a clean one is recorded).
    fn stop_old(&self) -> Result<(), String>;
    /// `initdb` of the new cluster with `args` and the superuser's password.
    fn initdb(&self, args: &[String]) -> Result<(), String>;
    /// `pg_upgrade --check`, or `--link`: what it printed, or what failed (named).
    fn pg_upgrade(&self, link: bool) -> Result<String, String>;
    /// The libraries the image has of its own (`ldconfig -p`).
    fn image_libraries(&self) -> Result<BTreeSet<String>, String>;
}

/// Upgrade the data in `layout`, or finish an upgrade an earlier run began.
pub fn run(layout: &Layout, programs: &impl Upgrader) -> Result<Done, Failure> {
    let mut run = Run { l: layout, p: programs, step: Step::Check, old_running: false };
    let outcome = run.upgrade();
    outcome.map_err(|why| {
        run.undo();
        Failure { step: run.step, why }
    })
}

struct Run<'a, P> {
    l: &'a Layout,
    p: &'a P,
    step: Step,
    old_running: bool,
}

impl<P: Upgrader> Run<'_, P> {
    fn upgrade(&mut self) -> Result<Done, String> {
        let l = self.l;
        mkdir(&l.work)?;
        if l.new.join(UPGRADED_MARKER).exists() {
            // pg_upgrade ended; only the switch may be left.
            return self.switch();
        }
        // A run killed while pg_upgrade linked: nothing of the new cluster is used.
        if data::restore_control(&l.pgdata).map_err(|e| format!("restoring the control file: {e}"))? {
            warn!("an earlier run stopped while pg_upgrade linked: the old control file is back");
        }
        let data = DataState::read(&l.pgdata);
        let have = data.major.as_deref().unwrap_or("nothing");
        if have == l.to.to_string() {
            return Ok(Done::Already);
        }
        if have != l.from.to_string() {
            return Err(format!("{} holds PostgreSQL '{have}', not {}", l.pgdata.display(), l.from));
        }
        if data.standby {
            return Err(format!(
                "{} is a standby's ({}): bosun upgrades the primary's",
                l.pgdata.display(),
                data::files::STANDBY
            ));
        }
        if !l.old_bin.join("postgres").exists() {
            return Err(format!("PostgreSQL {}'s programs were not copied to {}", l.from, l.old_bin.display()));
        }
        self.keep_only_missing_libraries();

        // A clean shutdown (the instance may have been killed), and what initdb repeats.
        self.p.start_old()?;
        self.old_running = true;
        let template1 = |column: &str| format!("SELECT {column} FROM pg_database WHERE datname = 'template1'");
        let read = |what: &str, sql: &str| self.p.old_sql(sql).map_err(|e| format!("cannot read the {what}: {e}"));
        let encoding = read("encoding", &template1("pg_encoding_to_char(encoding)"))?;
        let collate = read("collation", &template1("datcollate"))?;
        let ctype = read("ctype", &template1("datctype"))?;
        let checksums = read("data_checksums", "SHOW data_checksums")?;
        self.stop_old()?;

        self.step = Step::Prepare;
        remove_dir(&l.new)?;
        let mut initdb = vec![
            "-D".to_owned(),
            l.new.display().to_string(),
            format!("--encoding={encoding}"),
            format!("--lc-collate={collate}"),
            format!("--lc-ctype={ctype}"),
            "--auth-local=trust".to_owned(),
            "--auth-host=scram-sha-256".to_owned(),
        ];
        if checksums == "on" {
            initdb.push("--data-checksums".to_owned());
        }
        self.p.initdb(&initdb).map_err(|e| format!("initdb of PostgreSQL {}: {e}", l.to))?;

        self.step = Step::Check;
        self.p.pg_upgrade(false)?;
        info!("pg_upgrade --check passed");

        self.step = Step::Upgrade;
        let said = self.p.pg_upgrade(true)?;
        info!("{}", last_lines(&said, 8));
        // The old cluster's access rules and identity map; its settings are the
        // server's command line, not its files.
        for file in ["pg_hba.conf", "pg_ident.conf"] {
            std::fs::copy(l.pgdata.join(file), l.new.join(file)).map_err(|e| format!("copying {file}: {e}"))?;
        }
        for marker in [crate::setup::ANALYZE_MARKER, UPGRADED_MARKER] {
            std::fs::write(l.new.join(marker), "").map_err(|e| format!("marking {}: {e}", l.new.display()))?;
        }
        self.switch()
    }

    /// The old programs load, from the copied libraries, only what this image has no
    /// library of.
    fn keep_only_missing_libraries(&self) {
        let own = match self.p.image_libraries() {
            Ok(own) => own,
            Err(e) => return warn!("the image's libraries are not known ({e}): the old major's copies are all used"),
        };
        let Ok(entries) = std::fs::read_dir(&self.l.old_lib) else { return };
        for entry in entries.flatten() {
            if own.contains(entry.file_name().to_string_lossy().as_ref()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    fn stop_old(&mut self) -> Result<(), String> {
        self.old_running = false;
        self.p.stop_old()
    }

    fn switch(&mut self) -> Result<Done, String> {
        self.step = Step::Switch;
        let l = self.l;
        // An earlier upgrade's old directory: its files were linked into the data
        // directory that has run since, so it is no longer a database of its own.
        for earlier in earlier_upgrades(&l.pgdata).into_iter().filter(|d| *d != l.kept) {
            remove_dir(&earlier)?;
            info!("removed {}, left by an earlier upgrade", earlier.display());
        }
        if l.pgdata.exists() {
            if l.kept.exists() {
                return Err(format!("{} exists already", l.kept.display()));
            }
            rename(&l.pgdata, &l.kept)?;
        }
        rename(&l.new, &l.pgdata)?;
        let _ = std::fs::remove_dir_all(&l.work);
        Ok(Done::Upgraded { kept: l.kept.clone() })
    }

    /// After a failure: the old server stopped and the old cluster as it was; nothing
    /// of the new one is kept (after the switch began, the new directory is the one to
    /// finish with).
    fn undo(&mut self) {
        if self.old_running
            && let Err(e) = self.stop_old()
        {
            warn!("stopping the old server failed: {e}");
        }
        match data::restore_control(&self.l.pgdata) {
            Ok(true) => info!("the old cluster's control file is back"),
            Ok(false) => {}
            Err(e) => warn!("restoring the old cluster's control file failed: {e}"),
        }
        if self.step != Step::Switch
            && let Err(e) = remove_dir(&self.l.new)
        {
            warn!("{e}");
        }
    }
}

/// The `<pgdata>.v<major>` directories beside the data.
fn earlier_upgrades(pgdata: &Path) -> Vec<PathBuf> {
    let (Some(parent), Some(name)) = (pgdata.parent(), pgdata.file_name()) else { return Vec::new() };
    let prefix = format!("{}.v", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(parent) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().strip_prefix(&prefix).is_some_and(|v| v.parse::<u32>().is_ok()))
        .map(|e| e.path())
        .collect()
}

fn mkdir(path: &Path) -> Result<(), String> {
    std::fs::create_dir_all(path).map_err(|e| format!("cannot create {}: {e}", path.display()))
}

fn remove_dir(path: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("cannot remove {}: {e}", path.display())),
        _ => Ok(()),
    }
}

fn rename(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::rename(from, to).map_err(|e| format!("cannot move {} to {}: {e}", from.display(), to.display()))
}

/// The last `n` lines of `text` that are not blank.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What pg_upgrade said when it failed: its last lines, and the first lines of each
/// report file it points to (which name the tables and columns at fault).
fn details(said: &str) -> String {
    let mut out = last_lines(said, 12);
    let reports: BTreeSet<&str> =
        said.split_whitespace().filter(|word| word.starts_with('/') && word.ends_with(".txt")).collect();
    for report in reports {
        if let Ok(text) = std::fs::read_to_string(report) {
            out.push('\n');
            out.push_str(&text.lines().take(5).collect::<Vec<_>>().join("\n"));
        }
    }
    out
}

/// The real programs: the old major's from its copy, the new one's from this image.
#[derive(Debug)]
pub struct Programs<'a> {
    pub args: &'a RunArgs,
    pub layout: &'a Layout,
}

impl Programs<'_> {
    fn command(&self, bin: &Path, program: &str) -> Command {
        let mut command = Command::new(bin.join(program));
        command.env("LD_LIBRARY_PATH", &self.layout.old_lib).current_dir(&self.layout.work).stdin(Stdio::null());
        command
    }

    fn pg_ctl(&self) -> Command {
        let mut command = self.command(&self.layout.old_bin, "pg_ctl");
        command.arg("-D").arg(&self.layout.pgdata);
        command
    }
}

/// Run `command`: its standard output (a warning on its standard error is not part
/// of an answer), or why it failed, from both.
fn said(command: &mut Command, what: &str) -> Result<String, String> {
    let out = command.output().map_err(|e| format!("{what} could not run: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let both = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    Err(format!("{what} failed ({}): {}", out.status, details(&both)))
}

impl Upgrader for Programs<'_> {
    fn start_old(&self) -> Result<(), String> {
        mkdir(Path::new(SOCKET))?;
        let log = self.layout.work.join("old-server.log");
        let options = format!(
            "-c listen_addresses='' -c unix_socket_directories={SOCKET} -c port={OLD_PORT} -c archive_mode=off"
        );
        let mut command = self.pg_ctl();
        command.args(["-w", "-t", "3600", "-l"]).arg(&log).args(["-o", &options, "start"]);
        said(&mut command, "pg_ctl start").map(drop).map_err(|_| {
            let server = std::fs::read_to_string(&log).unwrap_or_default();
            format!("the old PostgreSQL {} server did not start: {}", self.layout.from, last_lines(&server, 5))
        })
    }

    fn old_sql(&self, sql: &str) -> Result<String, String> {
        let mut command = self.command(&self.layout.old_bin, "psql");
        command.args(["-X", "-h", SOCKET, "-p", OLD_PORT, "-U", &self.args.superuser, "-d", "template1", "-tAc", sql]);
        said(&mut command, "psql").map(|out| out.trim().to_owned())
    }

    fn stop_old(&self) -> Result<(), String> {
        said(self.pg_ctl().args(["-w", "-t", "300", "stop", "-m", "fast"]), "pg_ctl stop").map(drop)
    }

    fn initdb(&self, args: &[String]) -> Result<(), String> {
        let mut command = self.command(&self.layout.new_bin, "initdb");
        // The password on initdb's input, never on a command line.
        command.args(args).args(["--username", &self.args.superuser, "--pwfile=/dev/stdin"]);
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("initdb could not run: {e}"))?;
        if let Some(mut input) = child.stdin.take() {
            input.write_all(format!("{}\n", self.args.password).as_bytes()).map_err(|e| format!("initdb: {e}"))?;
        }
        let out = child.wait_with_output().map_err(|e| format!("initdb: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(last_lines(&format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)), 5))
    }

    fn pg_upgrade(&self, link: bool) -> Result<String, String> {
        let l = self.layout;
        let mut command = self.command(&l.new_bin, "pg_upgrade");
        command.arg(if link { "--link" } else { "--check" });
        command.arg("-b").arg(&l.old_bin).arg("-B").arg(&l.new_bin).arg("-d").arg(&l.pgdata).arg("-D").arg(&l.new);
        command.args(["-U", &self.args.superuser, "-s", SOCKET, "-p", OLD_PORT, "-P", NEW_PORT]);
        said(&mut command, if link { "pg_upgrade --link" } else { "pg_upgrade --check" })
    }

    fn image_libraries(&self) -> Result<BTreeSet<String>, String> {
        let mut command = Command::new("/sbin/ldconfig");
        command.arg("-p").stdin(Stdio::null());
        said(&mut command, "ldconfig -p").map(|out| cached_libraries(&out))
    }
}

#[cfg(test)]
mod tests;
