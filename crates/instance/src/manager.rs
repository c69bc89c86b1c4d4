//! The instance manager's loop: wait for a role → prepare the data for it
//! ([`crate::data::next_step`], again after each step until the server may start) →
//! start the server, its setup beside it → follow the role while it runs (promote,
//! or stop to rejoin; a primary that hears no one fences itself, [`crate::fence`]) →
//! on a stop asked for by the role, or a fence lifted by bosun, round again. A signal
//! (SIGTERM, SIGINT) stops the server fast and ends the manager; the server ending on
//! its own ends it too, with its status, so the container restarts.

use std::path::Path;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::process::Child;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::access::{self, Tls, ToPrimary};
use crate::api::Shared;
use crate::commands::{Postgres, conninfo};
use crate::data::{self, DataState, Step, WhileRunning};
use crate::fence;
use crate::role::{Role, RoleSource};
use crate::settings::InstanceArgs;

/// How often the role and the data directory are looked at.
pub const LOOK_EVERY: Duration = Duration::from_millis(200);
/// Every how many looks the TLS files and the passwords are compared with the
/// loaded ones (10 s).
const FILES_LOOK_EVERY: u32 = 50;
/// How often the primary is asked for while a standby waits for it.
pub const SOURCE_EVERY: Duration = Duration::from_secs(1);

/// How the manager ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Asked to stop (a signal): the server, if any, stopped.
    Stopped,
    /// The server ended on its own, with this exit status (128 + the signal that
    /// ended it).
    ServerExited(i32),
    /// A step the instance cannot get past without a person: why.
    Failed(String),
}

impl Outcome {
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Stopped => 0,
            Outcome::ServerExited(code) => u8::try_from(*code).unwrap_or(1),
            Outcome::Failed(_) => 1,
        }
    }
}

/// Why preparing the data did not end in a start.
enum Halt {
    Stopped,
    Failed(String),
}

/// Run the instance: `pg` runs the programs, `stop` is cancelled by a signal.
pub async fn run<P: Postgres>(args: &InstanceArgs, pg: &P, shared: &Shared, stop: &CancellationToken) -> Outcome {
    let roles = RoleSource { label_file: args.role_file.clone(), told_file: args.role_told.clone() };
    if let Err(why) = clear_leftovers(args) {
        return Outcome::Failed(why);
    }
    if let Err(e) = write_passfile(args) {
        return Outcome::Failed(format!("writing the passfile {}: {e}", args.passfile.display()));
    }
    // The heartbeat's terms of before this container: a primary that restarts cut off
    // fences itself too.
    if let Some(terms) = fence::read_terms(&fence::terms_path(&args.pgdata)) {
        shared.bosun.lock().unwrap_or_else(std::sync::PoisonError::into_inner).terms.get_or_insert(terms);
    }
    // Whether the fence was just lifted: bosun told the role, so it was heard now.
    let mut unfenced = false;
    loop {
        let Some(role) = wait_for_role(&roles, stop).await else { return Outcome::Stopped };
        // A primary counts its silence from when it last heard anyone, not from this
        // start: one that comes back after its fencing time stays fenced.
        let just_told = std::mem::take(&mut unfenced);
        let silent = match role {
            Role::Primary if !just_told => match start_as_primary(args, shared) {
                fence::AtStart::Serve { silent } => silent,
                fence::AtStart::Fenced { silent } => {
                    warn!(
                        silent_s = silent.as_secs_f64(),
                        "this primary last heard bosun or a standby longer ago than its fencing time: it starts fenced"
                    );
                    let told = shared.fence();
                    if !wait_unfenced(&roles, shared, told, stop).await {
                        return Outcome::Stopped;
                    }
                    unfenced = true;
                    continue;
                }
            },
            Role::Primary | Role::Replica => std::time::Duration::ZERO,
        };
        match prepare(args, pg, role, stop).await {
            Ok(()) => {}
            Err(Halt::Stopped) => return Outcome::Stopped,
            Err(Halt::Failed(why)) => {
                error!("{why}");
                return Outcome::Failed(why);
            }
        }
        if stop.is_cancelled() {
            return Outcome::Stopped;
        }
        if let Err(e) = access::write_hba(args) {
            return Outcome::Failed(format!("writing {}: {e}", args.hba_file.display()));
        }
        let to_primary = match role {
            Role::Replica => access::to_primary(args).await,
            Role::Primary => access::ToPrimary::Prefer,
        };
        let mut server = match pg.start(&server_command(args, Tls::of(args).as_ref(), &to_primary)) {
            Ok(child) => child,
            Err(e) => return Outcome::Failed(format!("the server could not start: {e}")),
        };
        let (status, ended) = serve(args, pg, &roles, &mut server, stop, shared, silent).await;
        shared.demoting.store(false, Ordering::Relaxed);
        if stop.is_cancelled() {
            return Outcome::Stopped;
        }
        match ended {
            Ended::Demoted => {}
            Ended::Fenced { told } => {
                if !wait_unfenced(&roles, shared, told, stop).await {
                    return Outcome::Stopped;
                }
                unfenced = true;
            }
            Ended::Own => {
                warn!(status, "postgres exited");
                return Outcome::ServerExited(status);
            }
        }
    }
}

/// How long a silent primary waits for its standbys to say when they last heard bosun.
const ASK_STANDBYS_TIMEOUT: Duration = Duration::from_millis(500);

/// When the standbys `asked` (they reply to this primary, not all of its standbys do)
/// last heard bosun, the latest of them, on this clock: their API's `/v1/heard`, asked
/// with the instance Secret's CAs and token, their certificate checked for the
/// database's name (every instance serves the same one). None when none says it did,
/// or none answers within [`ASK_STANDBYS_TIMEOUT`].
async fn heard_through(
    args: &InstanceArgs,
    asked: &[fence::Reply],
    now: std::time::Instant,
) -> Option<std::time::Instant> {
    use crate::api::{keys, paths};
    let dir = args.api_dir.as_ref()?;
    let read = |key: &str| std::fs::read_to_string(dir.join(key)).ok();
    let connector = crate::client::connector(&read(keys::BUNDLE)?, read(keys::TOKEN)?.trim()).ok()?;
    let asks = async {
        let mut latest: Option<std::time::Instant> = None;
        for ip in asked.iter().filter_map(|r| r.addr) {
            let addr = std::net::SocketAddr::new(ip, args.api_port);
            let answer =
                crate::client::request(&connector, addr, &args.primary_host, hyper::Method::GET, paths::HEARD, None)
                    .await;
            let ago =
                answer.ok().and_then(|body| serde_json::from_slice::<fence::HeardAnswer>(&body).ok()?.bosun_ms_ago);
            if let Some(at) = ago.and_then(|ms| now.checked_sub(Duration::from_millis(ms))) {
                latest = Some(latest.map_or(at, |l| l.max(at)));
            }
        }
        latest
    };
    tokio::time::timeout(ASK_STANDBYS_TIMEOUT, asks).await.ok().flatten()
}

/// How a primary starts now ([`fence::at_start`]), from the kept terms and time heard.
fn start_as_primary(args: &InstanceArgs, shared: &Shared) -> fence::AtStart {
    let heard = fence::read_heard(&fence::heard_path(&args.pgdata));
    fence::at_start(shared.bosun().terms.as_ref(), heard, std::time::SystemTime::now())
}

/// How a served server ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// On its own (a crash, an outside stop).
    Own,
    /// Stopped to rejoin as a standby (the role says replica).
    Demoted,
    /// Stopped by its fence: it heard no one. `told`: bosun's tells of the role
    /// counted when it fenced ([`Shared::fence`]).
    Fenced { told: u64 },
}

/// A fenced primary's wait: until bosun tells it its role (whatever it is: bosun told
/// it after its own decision), or its label's file says replica (rejoin). `false` when
/// asked to stop first. The fence lasts as long as the wait; the kept terms stay.
/// `told`: the tells counted when it fenced, so that a tell that came while its
/// server was shutting down lifts the fence too (bosun tells a fenced instance once
/// it says it is fenced, which it does from the fence's decision on: counted from
/// this wait's start, that tell was lost and the fence held until bosun's next).
async fn wait_unfenced(roles: &RoleSource, shared: &Shared, told: u64, stop: &CancellationToken) -> bool {
    warn!(
        "fenced: this primary heard neither bosun nor enough of its standbys; its server stays stopped until bosun tells it its role"
    );
    loop {
        let lifted = if shared.told.load(Ordering::Relaxed) != told {
            Some("bosun told this instance its role")
        } else if roles.read() == Some(Role::Replica) {
            Some("the role label says replica")
        } else {
            None
        };
        if let Some(why) = lifted {
            info!(why, role = ?roles.read().map(Role::as_str), "the fence is lifted");
            shared.fenced.store(false, Ordering::Relaxed);
            return true;
        }
        tokio::select! {
            () = stop.cancelled() => return false,
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// Wait until bosun gives the instance a role; `None` when asked to stop first.
async fn wait_for_role(roles: &RoleSource, stop: &CancellationToken) -> Option<Role> {
    let mut said = false;
    loop {
        if let Some(role) = roles.read() {
            return Some(role);
        }
        if !said {
            info!("waiting for bosun to give this instance its role (label database.example.com/role)");
            said = true;
        }
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// The data made ready for `role`: one step at a time, each decided from what is on
/// disk after the one before.
async fn prepare<P: Postgres>(args: &InstanceArgs, pg: &P, role: Role, stop: &CancellationToken) -> Result<(), Halt> {
    let recovery = args.recovery.destination.is_some();
    // Each step changes what the next decision sees; a few are enough for any data.
    for _ in 0..6 {
        let step = data::next_step(role, &DataState::read(&args.pgdata), args.major.as_deref(), recovery);
        match step {
            Step::RestoreControl => {
                warn!(
                    "a major upgrade stopped while pg_upgrade --link ran: its new cluster never started, so this data is whole; putting its control file back"
                );
                data::restore_control(&args.pgdata)
                    .map_err(|e| failed(&args.pgdata.join(data::files::CONTROL), "restoring", e))?;
            }
            Step::Start => return Ok(()),
            Step::Recover => recover(args, pg).await?,
            Step::LeaveStandby => {
                info!("bosun made this instance the primary: starting it out of recovery");
                remove_file(&args.pgdata.join(data::files::STANDBY))?;
            }
            Step::Clone => clone(args, pg, stop).await?,
            Step::Reclone { have } => reclone(args, pg, &have, stop).await?,
            Step::Rejoin => rejoin(args, pg, stop).await?,
        }
    }
    Err(Halt::Failed(format!("the data directory {} did not become ready to start", args.pgdata.display())))
}

/// The primary behind the read-write Service, up and out of recovery: its major.
async fn wait_source<P: Postgres>(args: &InstanceArgs, pg: &P, stop: &CancellationToken) -> Result<u32, Halt> {
    let mut said = false;
    loop {
        if let Some(major) = pg.primary().await {
            return Ok(major);
        }
        if !said {
            info!(host = %args.primary_host, port = args.primary_port, "waiting for the primary");
            said = true;
        }
        tokio::select! {
            () = stop.cancelled() => return Err(Halt::Stopped),
            () = tokio::time::sleep(SOURCE_EVERY) => {}
        }
    }
}

/// A standby with no data: a copy of the primary, made beside the data directory and
/// moved into its place whole, so a clone cut short is never taken for data.
async fn clone<P: Postgres>(args: &InstanceArgs, pg: &P, stop: &CancellationToken) -> Result<(), Halt> {
    let pgdata = &args.pgdata;
    if pgdata.exists() && std::fs::remove_dir(pgdata).is_err() {
        return Err(Halt::Failed(format!(
            "{} is not empty but holds no cluster (no PG_VERSION): left as it is; empty or delete the claim to \
             clone the primary again",
            pgdata.display()
        )));
    }
    if args.replication_password().is_none() {
        return Err(Halt::Failed(
            "REPLICATION_PASSWORD is empty: the credentials Secret has no replication-password key".into(),
        ));
    }
    wait_source(args, pg, stop).await?;
    let partial = data::partial_path(pgdata);
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|e| failed(&partial, "removing", e))?;
    }
    info!(host = %args.primary_host, port = args.primary_port, pgdata = %pgdata.display(), "cloning the primary");
    pg.base_backup(&partial).await.map_err(Halt::Failed)?;
    touch(&partial.join(data::files::STANDBY))?;
    std::fs::rename(&partial, pgdata).map_err(|e| failed(&partial, "moving into place", e))?;
    info!("cloned; starting as a hot standby");
    Ok(())
}

/// A former primary's data (or a standby's told to rewind): rewound to the primary's
/// timeline; when that is impossible, kept aside whole and the primary cloned afresh.
async fn rejoin<P: Postgres>(args: &InstanceArgs, pg: &P, stop: &CancellationToken) -> Result<(), Halt> {
    wait_source(args, pg, stop).await?;
    info!(primary = %args.primary_host, "this data directory was a primary's: rewinding it with pg_rewind to follow the primary");
    // pg_rewind needs a clean shutdown recorded with wal_log_hints on.
    if let Err(why) = pg.crash_recovery().await {
        warn!(%why, "crash recovery of the old data directory failed");
    }
    if let Err(why) = pg.checkpoint_primary().await {
        warn!(%why, "CHECKPOINT on the primary failed: pg_rewind may not see its new timeline");
    }
    match pg.rewind().await {
        Ok(()) => {
            touch(&args.pgdata.join(data::files::STANDBY))?;
            info!("rewound; starting as a hot standby");
            Ok(())
        }
        Err(why) => {
            let aside = data::diverged_path(&args.pgdata, jiff::Timestamp::now());
            warn!(
                %why, aside = %aside.display(),
                "pg_rewind could not rewind it: the data directory is kept whole (delete it when you no longer need \
                 it) and the primary is cloned afresh"
            );
            std::fs::rename(&args.pgdata, &aside).map_err(|e| failed(&args.pgdata, "keeping aside", e))?;
            clone(args, pg, stop).await
        }
    }
}

/// A standby's data of an older major (`have`): once the primary answers on this
/// server's major, the copy goes (it is a copy: the primary keeps its pre-upgrade
/// directory itself); a primary on yet another major leaves it alone.
async fn reclone<P: Postgres>(args: &InstanceArgs, pg: &P, have: &str, stop: &CancellationToken) -> Result<(), Halt> {
    let major = args.major.clone().unwrap_or_default();
    let primary = wait_source(args, pg, stop).await?;
    if primary.to_string() != major {
        return Err(Halt::Failed(format!(
            "this standby's data is PostgreSQL {have} and the primary runs {primary}, not {major}: left as it is"
        )));
    }
    info!(from = have, to = %major, "the primary was upgraded: this standby's copy goes, the primary is cloned again");
    std::fs::remove_dir_all(&args.pgdata).map_err(|e| failed(&args.pgdata, "removing", e))
}

/// A new database's data from the archive (`bosun recover`). What refuses it (a
/// target out of range) is the container's termination message: bosun's status
/// quotes it.
async fn recover<P: Postgres>(args: &InstanceArgs, pg: &P) -> Result<(), Halt> {
    let r = &args.recovery;
    info!(
        pgdata = %args.pgdata.display(), name = r.name.as_deref().unwrap_or_default(),
        destination = r.destination.as_deref().unwrap_or_default(), "recovering from the archive"
    );
    match pg.recover().await {
        Ok(said) => {
            info!("recovered: {said}");
            Ok(())
        }
        Err(said) => {
            // The runner's JSON result line is for programs; the rest is for people.
            let message: Vec<&str> = said.lines().filter(|l| !l.starts_with('{')).collect();
            let message = crate::commands::tail(&message.join("\n"), 3000).to_owned();
            if let Err(e) = std::fs::write(&args.termination_log, &message) {
                warn!(path = %args.termination_log.display(), "the termination message could not be written: {e}");
            }
            Err(Halt::Failed(format!("recovery failed: {said}")))
        }
    }
}

/// How soon each end of a replication connection gives up on a silent other (60 s
/// each by default): a standby whose primary's machine is gone says it no longer
/// receives within 5 s, which bosun waits for before it fails over to one; a
/// primary drops a lost synchronous standby as soon. Each end pings the other after
/// half of it, so an idle but living peer is never dropped.
/// A standby also replies every second (10 s by default), which is how a primary
/// knows it is not cut off ([`crate::fence`]); and one whose primary is gone tries the
/// primary's Service again each second (5 s by default: up to 4 s more before a
/// synchronous standby confirms the new primary's first commit; with an archive, each
/// try also asks it for the next WAL file).
const REPLICATION_TIMEOUTS: [&str; 4] = [
    "wal_receiver_timeout=5s",
    "wal_sender_timeout=5s",
    "wal_receiver_status_interval=1s",
    "wal_retrieve_retry_interval=1s",
];

/// The server's command: the image's, who may connect and how ([`access`]), then the
/// standby's connection to the primary (a primary ignores it) and, while recovering
/// from an archive, its settings.
pub fn server_command(args: &InstanceArgs, tls: Option<&Tls>, to_primary: &ToPrimary) -> Vec<String> {
    let mut command = args.command.clone();
    for setting in access::server_settings(args, tls).into_iter().chain(REPLICATION_TIMEOUTS.map(str::to_owned)) {
        command.extend(["-c".to_owned(), setting]);
    }
    let (passfile, primary) = (args.passfile.to_string_lossy(), to_primary.pairs(args));
    let mut pairs: Vec<(&str, &str)> = primary.iter().map(|(k, v)| (*k, v.as_str())).collect();
    pairs.extend([
        ("user", args.replication_user.as_str()),
        ("passfile", &passfile),
        ("application_name", args.name.as_str()),
    ]);
    command.extend(["-c".to_owned(), format!("primary_conninfo={}", conninfo(&pairs))]);
    let recovering = args.pgdata.join(data::files::RECOVERY).exists();
    if let (true, Some(settings)) = (recovering, &args.recovery.settings)
        && let Ok(text) = std::fs::read_to_string(settings)
    {
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            command.extend(["-c".to_owned(), line.to_owned()]);
        }
    }
    command
}

/// The running server, followed: its setup beside it, its role looked at every
/// [`LOOK_EVERY`], and, while it is the primary, whom it hears ([`fence::Watch`]).
/// `silent`: how long it had heard no one when it started. Returns its exit status
/// and how it ended.
async fn serve<P: Postgres>(
    args: &InstanceArgs,
    pg: &P,
    roles: &RoleSource,
    server: &mut Child,
    stop: &CancellationToken,
    shared: &Shared,
    silent: std::time::Duration,
) -> (i32, Ended) {
    let mut setup = pin!(pg.setup());
    let (mut set_up, mut demoted, mut promoting, mut stopping) = (false, false, false, false);
    let started = std::time::Instant::now();
    let mut watch = fence::Watch::new(started.checked_sub(silent).unwrap_or(started));
    // The tells counted when it fenced, if it did.
    let mut fenced: Option<u64> = None;
    let mut look = tokio::time::interval(LOOK_EVERY);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The TLS files as the server loaded them: reloaded when the kubelet swaps them;
    // and the passwords as they were set: set again when the Secret is edited.
    let tls = Tls::of(args);
    let mut loaded = tls.as_ref().map(Tls::generation);
    let mut passwords =
        (args.superuser_password(), args.replication_password(), args.application(), args.pooler_password());
    let mut looks = 0u32;
    loop {
        tokio::select! {
            status = server.wait() => {
                let code = match status {
                    Ok(status) => exit_status(status),
                    Err(e) => {
                        warn!("waiting for the server: {e}");
                        1
                    }
                };
                let ended = match fenced {
                    Some(told) => Ended::Fenced { told },
                    None if demoted => Ended::Demoted,
                    None => Ended::Own,
                };
                return (code, ended);
            }
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                fast_shutdown(server);
            }
            () = &mut setup, if !set_up => set_up = true,
            _ = look.tick() => {
                looks = looks.wrapping_add(1);
                if looks.is_multiple_of(FILES_LOOK_EVERY) {
                    if let Some(tls) = &tls {
                        let now = tls.generation();
                        if loaded.as_ref() != Some(&now) {
                            info!("the TLS certificate changed: the server reloads it");
                            signal(server, nix::sys::signal::Signal::SIGHUP);
                            loaded = Some(now);
                        }
                    }
                    let now =
                        (args.superuser_password(), args.replication_password(), args.application(), args.pooler_password());
                    if now != passwords {
                        info!("a password changed in the credentials Secret: it is set without a restart");
                        if let Err(e) = write_passfile(args) {
                            warn!("the passfile could not be written again: {e}");
                        }
                        passwords = now;
                        setup.set(pg.setup());
                        set_up = false;
                    }
                }
                let data = DataState::read(&args.pgdata);
                let role = roles.read();
                if role == Some(Role::Primary) && !data.standby && !demoted && fenced.is_none() && !stopping {
                    let bosun = shared.bosun();
                    let now = std::time::Instant::now();
                    let mut next = watch.next(now, bosun.heard, bosun.terms.as_ref());
                    if next == fence::Next::Sample {
                        let before = watch.standby_heard();
                        let replies = pg.standby_replies().await.map(|r| fence::parse_replies(&r));
                        let expected = bosun.terms.map_or(0, |t| t.enough_standbys());
                        if let fence::Vouch::Ask(standbys) = watch.sampled(now, replies, expected)
                            && let Some(at) = heard_through(args, &standbys, now).await
                        {
                            watch.vouched(at);
                        }
                        if let Some(at) = watch.standby_heard().filter(|at| Some(*at) != before) {
                            shared.keep_heard(&args.pgdata, now.saturating_duration_since(at));
                        }
                        next = watch.next(now, bosun.heard, bosun.terms.as_ref());
                    }
                    match next {
                        fence::Next::Nothing | fence::Next::Sample => {}
                        fence::Next::Fence => {
                            let after = bosun.terms.map(|t| t.fence_after());
                            warn!(?after, "this primary has heard neither bosun nor enough of its standbys (or one that hears bosun): fencing it (fast shutdown), so that it takes no write a new primary would not have");
                            fenced = Some(shared.fence());
                            fast_shutdown(server);
                            continue;
                        }
                    }
                }
                match data::while_running(role, &data, demoted) {
                    WhileRunning::Nothing => {}
                    WhileRunning::Demote => {
                        info!("bosun made this instance a standby: stopping the primary (fast shutdown) to rejoin as a standby");
                        demoted = true;
                        shared.demoting.store(true, Ordering::Relaxed);
                        fast_shutdown(server);
                    }
                    WhileRunning::Promote => {
                        if !promoting {
                            info!("bosun made this instance the primary: promoting it");
                            promoting = true;
                        }
                        // It waits for the promotion to end; a server still starting
                        // refuses it: again on a later look.
                        match pg.promote().await {
                            // The primary's setup, which a standby skips: what only a
                            // primary writes and this one's Secret asks for (the
                            // pooler's role, added by a rolling change whose old
                            // primary never had it) is there from its first write on.
                            Ok(()) => {
                                setup.set(pg.setup());
                                set_up = false;
                            }
                            Err(why) => {
                                info!(%why, "the promotion did not take yet");
                                tokio::time::sleep(Duration::from_millis(500)).await;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// SIGINT to the server: PostgreSQL's fast shutdown.
fn fast_shutdown(server: &Child) {
    signal(server, nix::sys::signal::Signal::SIGINT);
}

fn signal(server: &Child, signal: nix::sys::signal::Signal) {
    if let Some(pid) = server.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}

/// A process's status as a shell says it: its code, or 128 + the signal that ended it.
fn exit_status(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1)
}

/// What a container before this one left in the pod's emptyDirs (`/tmp`, the socket
/// directory), which outlive a container's restart where a root file system would not:
/// a role told to it (it never outlives its container), and the socket's lock file of
/// a server that was killed, which the new server would refuse to start beside when its
/// process id now belongs to another process of this container. No server of this
/// instance runs yet: the manager starts it.
pub fn clear_leftovers(args: &InstanceArgs) -> Result<(), String> {
    let socket = args.socket_dir.join(format!(".s.PGSQL.{}", args.port));
    let lock = args.socket_dir.join(format!(".s.PGSQL.{}.lock", args.port));
    for path in [args.role_told.clone(), lock, socket] {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("removing {}, left by an earlier container: {e}", path.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The passfile of the instance's own connections (clone, rewind, the primary's
/// checks): readable by this user only, written before anything reads it.
pub fn write_passfile(args: &InstanceArgs) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let escape = |s: &str| s.replace('\\', "\\\\").replace(':', "\\:");
    let mut text = String::new();
    for (user, password) in [
        (&args.replication_user, args.replication_password().unwrap_or_default()),
        (&args.superuser, args.superuser_password()),
    ] {
        text.push_str(&format!("*:*:*:{}:{}\n", escape(user), escape(&password)));
    }
    let _ = std::fs::remove_file(&args.passfile);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&args.passfile)?;
    file.write_all(text.as_bytes())
}

fn touch(path: &Path) -> Result<(), Halt> {
    std::fs::write(path, b"").map_err(|e| failed(path, "creating", e))
}

fn remove_file(path: &Path) -> Result<(), Halt> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(failed(path, "removing", e)),
        _ => Ok(()),
    }
}

fn failed(path: &Path, doing: &str, e: std::io::Error) -> Halt {
    Halt::Failed(format!("{doing} {}: {e}", path.display()))
}
