//! An isolated primary fences itself: a primary that has heard neither bosun (its
//! heartbeat, [`crate::api`]'s `/v1/heartbeat`) nor its standbys for the time bosun
//! gave it stops its server (a fast shutdown, which ends every session at once), and
//! starts again only when bosun tells it its role again (`/v1/role`) or its label's
//! file says replica.
//!
//! Why it is safe: bosun fails a primary over only after it has not answered bosun for
//! bosun's limit (`--postgres-unanswered-failover`) *and* the standbys bosun reaches
//! say they no longer receive from it. bosun gives each instance a fencing time
//! shorter than that limit by more than a heartbeat's period ([`fence_after`]), so a
//! primary cut off from bosun has stopped taking writes before any standby can be
//! promoted, unless its standbys keep it heard, which they do only when no standby can
//! be promoted:
//!
//! * **every** standby of the database replies to it ([`Vouch::Heard`]): a standby
//!   bosun would promote must have lost this primary, and none has. This is what keeps
//!   a primary serving while bosun restarts.
//! * or a standby that replies **heard bosun** lately ([`Vouch::Ask`], its API's
//!   `/v1/heard`): the primary counts as heard when that standby last heard bosun, no
//!   later. bosun, hearing that standby, sees it receive from this primary and
//!   promotes no one; a standby cut off with the primary (a partition that leaves a
//!   primary and one standby on one side, bosun and another standby on the other)
//!   heard bosun no later than the cut, so the primary fences within its fencing time
//!   of the cut, before bosun's decision, although that standby goes on replying.
//!
//! So there are never two primaries acknowledging writes. A database with no standby
//! (bosun says `standbys: 0`) is never fenced: there is no one to fail over to. A
//! primary whose bosun is away *and* that lost a standby fences (none of its standbys
//! can say bosun is there), and serves again as soon as bosun is back and tells it its
//! role.
//!
//! The standbys' replies are watched only while bosun is silent (a `pg_stat_replication`
//! look every [`SAMPLE_EVERY`]), and by this machine's clock alone: a standby replies
//! when its reply time changed between two looks, whatever its clock says. Standbys
//! reply every second (`wal_receiver_status_interval=1s`). A standby's "heard bosun" is
//! an age it measured on its own clock, which this primary subtracts from its own now.
//!
//! The terms and the time this instance last heard anyone are kept on the data volume
//! ([`terms_path`], [`heard_path`]): a primary whose container restarts counts its
//! silence from that time ([`at_start`]), so a restart while cut off neither resets
//! the count nor opens a window of writes after bosun's decision.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// What bosun's heartbeat says: how many standbys the database has, and how long this
/// instance, as the primary, may hear no one before it fences itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Heartbeat {
    pub standbys: u32,
    pub fence_after_ms: u64,
    /// How many standbys bosun needs to answer before it promotes one (all but
    /// `spec.synchronous.number` less one with synchronous replication, else one); 0
    /// from a bosun before it, which needed one.
    #[serde(default)]
    pub quorum: u32,
}

impl Heartbeat {
    pub fn fence_after(&self) -> Duration {
        Duration::from_millis(self.fence_after_ms)
    }

    /// How many of its standbys a primary must hear for none to be promotable: bosun
    /// promotes only with `quorum` standbys answering, which it cannot have while more
    /// than `standbys − quorum` of them reply to this primary.
    pub fn enough_standbys(&self) -> u32 {
        self.standbys.saturating_sub(self.quorum.max(1)) + 1
    }

    /// Whether a primary given this fences itself at all.
    pub fn armed(&self) -> bool {
        self.standbys > 0 && self.fence_after_ms > 0
    }
}

/// The heartbeat's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatAnswer {
    /// The instance fenced itself and waits for bosun to tell it its role.
    pub fenced: bool,
}

/// `/v1/heard`'s answer: how long ago this instance last heard bosun's heartbeat, in
/// milliseconds of its own clock; none when it has not since it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeardAnswer {
    pub bosun_ms_ago: Option<u64>,
}

/// The fencing time bosun gives instances when it fails a primary over after `limit`
/// without an answer: the limit less one and a half heartbeat periods, never less than
/// half the limit. bosun counts its silence from its first unanswered heartbeat, at
/// the earliest when the cut came, and then waits the whole limit (and for the
/// standbys to lose the primary); the primary counts from the last heartbeat it heard,
/// at the latest when the cut came, and stops within a look (200 ms) of its time.
pub fn fence_after(limit: Duration, heartbeat_every: Duration) -> Duration {
    limit.saturating_sub(heartbeat_every * 3 / 2).max(limit / 2)
}

/// How long bosun may be silent before the standbys' replies are looked at: one and a
/// half heartbeats, so that a heartbeat a little late starts nothing (a third of the
/// fencing time when that is shorter).
pub const WATCH_AFTER: Duration = Duration::from_millis(1500);
/// How often they are looked at while it is: at each of the manager's looks (an
/// eighth of the fencing time when that is shorter). A standby replies each second,
/// so one that still hears the primary is seen within 1.2 s of the first look: the
/// fencing time must leave that after the watch starts (it does from about 1.9 s).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// What is looked at: each standby's name, address and last reply time, a line each
/// (`name|address|time`).
pub const REPLIES_SQL: &str = "SELECT application_name, coalesce(host(client_addr), ''), coalesce(reply_time::text, '') \
     FROM pg_stat_replication ORDER BY pid";
/// How recently a standby's replies must have changed for it to count as there: a
/// standby replies each second, the watch looks every 200 ms.
pub const ALIVE: Duration = Duration::from_millis(2000);

/// One standby's last reply, as its primary sees it ([`REPLIES_SQL`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Its `application_name` (its pod's name).
    pub name: String,
    /// Where it connects from (its pod's address): where its API answers.
    pub addr: Option<std::net::IpAddr>,
    /// Its last reply's time, as text: only whether it changes matters.
    pub at: String,
}

/// [`REPLIES_SQL`]'s answer, read.
pub fn parse_replies(answer: &str) -> Vec<Reply> {
    answer
        .lines()
        .filter_map(|line| {
            let mut fields = line.trim().splitn(3, '|');
            let (name, addr, at) = (fields.next()?, fields.next()?, fields.next()?);
            Some(Reply { name: name.to_owned(), addr: addr.parse().ok(), at: at.to_owned() })
        })
        .filter(|r| !r.name.is_empty())
        .collect()
}

/// What a sample of the standbys' replies says ([`Watch::sampled`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vouch {
    /// Every standby the database has replies: none of them can have been promoted
    /// (bosun promotes only one that lost this primary), so this primary is heard.
    Heard,
    /// Some standbys reply, not all: one that does not may be in bosun's reach and
    /// promoted. These are asked when they last heard bosun ([`Watch::vouched`]).
    Ask(Vec<Reply>),
    /// No standby replies.
    Nobody,
}

/// What the watch decides at a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing to do.
    Nothing,
    /// Look at the standbys' replies ([`REPLIES_SQL`]) and say what they were.
    Sample,
    /// No one heard for the fencing time: stop taking writes.
    Fence,
}

/// A serving primary's watch over whom it hears.
#[derive(Debug)]
pub struct Watch {
    /// When the server started: a primary that never heard bosun since counts from it.
    started: Instant,
    /// Each standby's reply as last sampled, and when it was last seen to change, in
    /// this silence (none before the first sample of a silence).
    standbys: std::collections::HashMap<String, (String, Option<Instant>)>,
    /// When this primary last counted as heard through its standbys, in this silence.
    standby_heard: Option<Instant>,
    sampled: Option<Instant>,
}

impl Watch {
    pub fn new(started: Instant) -> Watch {
        Watch { started, standbys: Default::default(), standby_heard: None, sampled: None }
    }

    /// What to do at `now`, bosun having been heard last at `bosun` with `heartbeat`;
    /// after a [`Next::Sample`] (and [`Watch::sampled`]), asked again at the same `now`.
    pub fn next(&mut self, now: Instant, bosun: Option<Instant>, heartbeat: Option<&Heartbeat>) -> Next {
        let Some(heartbeat) = heartbeat.filter(|h| h.armed()) else { return Next::Nothing };
        let bosun = bosun.map_or(self.started, |b| b.max(self.started));
        // A short fencing time is watched sooner and closer, so that standbys are
        // always looked at twice before it ends.
        let after = heartbeat.fence_after();
        let (watch_after, sample_every) = (WATCH_AFTER.min(after / 3), SAMPLE_EVERY.min(after / 8));
        if now.saturating_duration_since(bosun) < watch_after {
            // Heard: the next silence starts afresh.
            (self.standby_heard, self.sampled) = (None, None);
            self.standbys.clear();
            return Next::Nothing;
        }
        // The standbys are looked at first, so that a fence is decided on a fresh look.
        if self.sampled.is_none_or(|at| now.saturating_duration_since(at) >= sample_every) {
            return Next::Sample;
        }
        let heard = self.standby_heard.map_or(bosun, |s| s.max(bosun));
        if now.saturating_duration_since(heard) >= after { Next::Fence } else { Next::Nothing }
    }

    /// When this primary last counted as heard through its standbys, in this silence.
    pub fn standby_heard(&self) -> Option<Instant> {
        self.standby_heard
    }

    /// The standbys' replies sampled at `now` (`None`: the server did not answer, which
    /// hears no one): whether they make this primary heard, `expected` of them replying
    /// being enough ([`Heartbeat::enough_standbys`]). A standby counts as there while
    /// its replies changed within [`ALIVE`].
    pub fn sampled(&mut self, now: Instant, replies: Option<Vec<Reply>>, expected: u32) -> Vouch {
        self.sampled = Some(now);
        let Some(replies) = replies else { return Vouch::Nobody };
        let mut alive = Vec::new();
        let mut seen = std::collections::HashMap::new();
        for reply in replies {
            let changed = match self.standbys.remove(&reply.name) {
                Some((before, _)) if before != reply.at && !reply.at.is_empty() => Some(now),
                Some((_, changed)) => changed,
                None => None,
            };
            if let Some(at) = changed.filter(|at| now.saturating_duration_since(*at) <= ALIVE) {
                alive.push((at, reply.clone()));
            }
            seen.insert(reply.name, (reply.at, changed));
        }
        self.standbys = seen;
        // The latest replies first: with every standby there, the primary was heard
        // when the last of them to reply did (its `expected`-th latest reply).
        alive.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        let enough = usize::try_from(expected).ok().filter(|n| *n > 0).and_then(|n| alive.get(n - 1));
        if let Some((at, _)) = enough {
            self.vouched(*at);
            Vouch::Heard
        } else if alive.is_empty() {
            Vouch::Nobody
        } else {
            Vouch::Ask(alive.into_iter().map(|(_, reply)| reply).collect())
        }
    }

    /// A standby that replies said it heard bosun at `at`: this primary counts as heard
    /// then (bosun, hearing that standby, sees it receive from this primary and
    /// promotes no other).
    pub fn vouched(&mut self, at: Instant) {
        self.standby_heard = Some(self.standby_heard.map_or(at, |s| s.max(at)));
    }
}

/// Where the last heartbeat's terms are kept, beside the data directory (on the data
/// volume): a primary whose container restarts while it is cut off fences itself too.
pub fn terms_path(pgdata: &Path) -> PathBuf {
    pgdata.with_file_name("bosun-heartbeat.json")
}

/// Where the time this instance last heard bosun or a standby is kept (Unix
/// milliseconds), beside the terms: a primary whose container restarts counts its
/// silence from then, not from its new start.
pub fn heard_path(pgdata: &Path) -> PathBuf {
    pgdata.with_file_name("bosun-heard")
}

/// How often, at most, the time heard is written: a kept time at most this old makes
/// a restarted primary fence that much sooner, never later.
pub const KEEP_HEARD_EVERY: Duration = Duration::from_secs(1);

/// The kept time heard; none when there is none (an instance of a release before it).
pub fn read_heard(path: &Path) -> Option<SystemTime> {
    let ms: u64 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    UNIX_EPOCH.checked_add(Duration::from_millis(ms))
}

/// Keep `at` as the time heard (replaced whole, never half written).
pub fn write_heard(path: &Path, at: SystemTime) -> std::io::Result<()> {
    let ms = at.duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or_default();
    let partial = path.with_extension("partial");
    std::fs::write(&partial, ms.to_string())?;
    std::fs::rename(&partial, path)
}

/// How a primary starts, from the kept terms and the time it last heard anyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtStart {
    /// Its server, watched as if it had been silent for this long already.
    Serve { silent: Duration },
    /// Fenced before its server starts: it has heard no one for its whole fencing
    /// time, so a standby may be promoted by now. It waits to be told its role.
    Fenced { silent: Duration },
}

/// How a primary starts at `now`: fenced when it was last heard (`heard`, kept) longer
/// ago than its fencing time, so that a container that restarts while cut off takes
/// no write the new timeline would not have; otherwise served, its silence counted
/// from `heard`. Without armed terms, or without a kept time (a release before it,
/// which kept none), as before: served, silent from its start.
pub fn at_start(terms: Option<&Heartbeat>, heard: Option<SystemTime>, now: SystemTime) -> AtStart {
    let silent = heard.and_then(|h| now.duration_since(h).ok()).unwrap_or_default();
    match terms.filter(|t| t.armed()) {
        Some(terms) if silent >= terms.fence_after() => AtStart::Fenced { silent },
        Some(_) => AtStart::Serve { silent },
        None => AtStart::Serve { silent: Duration::ZERO },
    }
}

/// The kept terms; none when there are none (or they do not read).
pub fn read_terms(path: &Path) -> Option<Heartbeat> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Keep `heartbeat`'s terms (replaced whole, never half written).
pub fn write_terms(path: &Path, heartbeat: &Heartbeat) -> std::io::Result<()> {
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, serde_json::to_vec(heartbeat).unwrap_or_default())?;
    std::fs::rename(&partial, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERMS: Heartbeat = Heartbeat { standbys: 1, fence_after_ms: 3000, quorum: 1 };

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// Standbys' replies: (name, reply time) each.
    fn replies(standbys: &[(&str, String)]) -> Option<Vec<Reply>> {
        Some(standbys.iter().map(|(name, at)| Reply { name: (*name).into(), addr: None, at: at.clone() }).collect())
    }

    /// Runs a watch from `t0` at 100 ms looks until `until`, bosun last heard at
    /// `bosun`, the standbys' replies at each sample given by `sample(elapsed)`, and
    /// when the standbys asked last heard bosun by `vouch(elapsed)`; returns when it
    /// fenced (elapsed), if it did.
    fn run_vouched(
        bosun: Option<f64>,
        terms: Option<Heartbeat>,
        until: f64,
        sample: impl Fn(f64) -> Option<Vec<Reply>>,
        vouch: impl Fn(f64) -> Option<f64>,
    ) -> Option<f64> {
        let t0 = Instant::now();
        let mut watch = Watch::new(t0);
        let bosun = bosun.map(|b| t0 + secs(b));
        let expected = terms.map_or(0, |t| t.enough_standbys());
        let mut t = 0.0;
        while t <= until {
            let now = t0 + secs(t);
            let mut next = watch.next(now, bosun, terms.as_ref());
            if next == Next::Sample {
                if let Vouch::Ask(_) = watch.sampled(now, sample(t), expected)
                    && let Some(heard) = vouch(t)
                {
                    watch.vouched(t0 + secs(heard));
                }
                next = watch.next(now, bosun, terms.as_ref());
            }
            if next == Next::Fence {
                return Some(t);
            }
            t += 0.1;
        }
        None
    }

    /// [`run_vouched`] with one standby replying `reply(elapsed)`, none vouching.
    fn run(
        bosun: Option<f64>,
        terms: Option<Heartbeat>,
        until: f64,
        reply: impl Fn(f64) -> Option<String>,
    ) -> Option<f64> {
        let sample = |t| reply(t).and_then(|at| replies(&[("db-1", at)]));
        run_vouched(bosun, terms, until, sample, |_| None)
    }

    #[test]
    fn a_primary_that_hears_no_one_fences_at_the_time_bosun_gave() {
        let fenced = run(Some(0.0), Some(TERMS), 10.0, |_| Some(String::new())).expect("fenced");
        assert!((2.95..3.15).contains(&fenced), "{fenced}");
        // Replies that never change are no one heard either (a standby gone silent
        // stays in pg_stat_replication until its sender's timeout).
        let fenced = run(Some(0.0), Some(TERMS), 10.0, |_| Some("2026-11-29 06:00:00+00".into())).expect("fenced");
        assert!((2.95..3.15).contains(&fenced), "{fenced}");
    }

    #[test]
    fn a_standby_that_replies_keeps_the_primary_serving_while_bosun_is_away() {
        let ticking = |t: f64| Some(format!("reply at {}", (t as u64)));
        assert_eq!(run(Some(0.0), Some(TERMS), 30.0, ticking), None);
        // Until it stops replying: fenced the fencing time after its last reply.
        let stops = |t: f64| Some(format!("reply at {}", (t.min(10.0) as u64)));
        let fenced = run(Some(0.0), Some(TERMS), 30.0, stops).expect("fenced");
        assert!((12.9..13.7).contains(&fenced), "{fenced}");
    }

    /// Issue 45's partition that splits the standbys: of two, one stays on the
    /// primary's side and goes on replying; the other, beside bosun, may be promoted.
    #[test]
    fn of_two_standbys_one_that_replies_keeps_the_primary_serving_only_while_it_hears_bosun() {
        let two = Heartbeat { standbys: 2, fence_after_ms: 3000, quorum: 1 };
        let tick = |t: f64| format!("reply at {}", (t as u64));
        // Both reply: served, bosun away or not (a bosun that restarts stops nothing).
        let both = |t: f64| replies(&[("db-1", tick(t)), ("db-2", tick(t))]);
        assert_eq!(run_vouched(Some(0.0), Some(two), 30.0, both, |_| None), None);
        // One of them stops at 10 s; the other, which says nothing of bosun, is not
        // enough: fenced the fencing time after the last look at both.
        let split = |t: f64| replies(&[("db-1", tick(t)), ("db-2", tick(t.min(10.0)))]);
        let fenced = run_vouched(Some(0.0), Some(two), 30.0, split, |_| None).expect("fenced");
        assert!((12.9..14.2).contains(&fenced), "{fenced}");
        // The one that replies hears bosun (half a second ago at each ask): served.
        assert_eq!(run_vouched(Some(0.0), Some(two), 30.0, split, |t| Some(t - 0.5)), None);
        // It heard bosun last at 15 s (cut off with the primary then): fenced the
        // fencing time after that, however long it goes on replying.
        let fenced = run_vouched(Some(0.0), Some(two), 30.0, split, |t| Some(t.min(15.0))).expect("fenced");
        assert!((17.95..18.15).contains(&fenced), "{fenced}");
    }

    #[test]
    fn the_standbys_replies_are_read_a_line_each() {
        let answer = "test-db-1|10.244.1.7|2026-11-30 15:00:01.5+00\ntest-db-2||\n|10.0.0.1|x\n";
        let read = parse_replies(answer);
        assert_eq!(read.len(), 2, "{read:?}");
        assert_eq!(read[0].name, "test-db-1");
        assert_eq!(read[0].addr, Some("10.244.1.7".parse().unwrap()));
        assert_eq!((read[1].name.as_str(), read[1].addr, read[1].at.as_str()), ("test-db-2", None, ""));
    }

    #[test]
    fn no_standby_or_no_terms_never_fences() {
        let alone = Heartbeat { standbys: 0, fence_after_ms: 3000, quorum: 1 };
        assert_eq!(run(Some(0.0), Some(alone), 30.0, |_| None), None);
        assert_eq!(run(Some(0.0), None, 30.0, |_| None), None);
    }

    #[test]
    fn a_primary_that_never_heard_bosun_counts_from_its_start() {
        let fenced = run(None, Some(TERMS), 10.0, |_| None).expect("fenced");
        assert!((2.95..3.15).contains(&fenced), "{fenced}");
    }

    #[test]
    fn bosun_heard_again_starts_the_next_silence_afresh() {
        let t0 = Instant::now();
        let mut watch = Watch::new(t0);
        let changing = |t: f64| replies(&[("db-1", format!("{t}"))]);
        // A silence in which a standby was heard at 2.5 s…
        let mut t = 1.0;
        while t < 2.6 {
            if watch.next(t0 + secs(t), Some(t0), Some(&TERMS)) == Next::Sample {
                watch.sampled(t0 + secs(t), changing(t), 1);
            }
            t += 0.1;
        }
        // …then bosun at 5 s: what the standby said before is forgotten.
        assert_eq!(watch.next(t0 + secs(5.0), Some(t0 + secs(5.0)), Some(&TERMS)), Next::Nothing);
        assert_eq!(watch.next(t0 + secs(6.5), Some(t0 + secs(5.0)), Some(&TERMS)), Next::Sample);
        watch.sampled(t0 + secs(6.5), changing(6.5), 1);
        assert_eq!(watch.next(t0 + secs(6.5), Some(t0 + secs(5.0)), Some(&TERMS)), Next::Nothing);
        assert_eq!(watch.next(t0 + secs(8.0), Some(t0 + secs(5.0)), Some(&TERMS)), Next::Sample);
        watch.sampled(t0 + secs(8.0), changing(6.5), 1);
        assert_eq!(watch.next(t0 + secs(8.0), Some(t0 + secs(5.0)), Some(&TERMS)), Next::Fence);
    }

    #[test]
    fn the_fencing_time_leaves_a_heartbeat_and_a_half_before_bosuns_limit() {
        let every = Duration::from_secs(1);
        assert_eq!(fence_after(Duration::from_secs(5), every), Duration::from_millis(3500));
        assert_eq!(fence_after(Duration::from_secs(30), every), Duration::from_millis(28500));
        assert_eq!(fence_after(Duration::from_secs(2), every), Duration::from_secs(1));
    }

    #[test]
    fn terms_are_kept_beside_the_data_directory() {
        let dir = std::env::temp_dir().join(format!("bosun-fence-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = terms_path(&dir.join("pgdata"));
        assert_eq!(path, dir.join("bosun-heartbeat.json"));
        assert_eq!(read_terms(&path), None);
        write_terms(&path, &TERMS).unwrap();
        assert_eq!(read_terms(&path), Some(TERMS));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_restarted_primary_counts_its_silence_from_when_it_last_heard_anyone() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ago = |s: u64| Some(now - Duration::from_secs(s));
        // Heard a second ago: served, its watch already a second into the silence.
        assert_eq!(at_start(Some(&TERMS), ago(1), now), AtStart::Serve { silent: secs(1.0) });
        // Cut off for its whole fencing time (3 s) before it came back: fenced at once.
        assert_eq!(at_start(Some(&TERMS), ago(3), now), AtStart::Fenced { silent: secs(3.0) });
        assert_eq!(at_start(Some(&TERMS), ago(60), now), AtStart::Fenced { silent: secs(60.0) });
        // A database without standbys, or no terms at all: never fenced.
        let alone = Heartbeat { standbys: 0, ..TERMS };
        assert_eq!(at_start(Some(&alone), ago(60), now), AtStart::Serve { silent: Duration::ZERO });
        assert_eq!(at_start(None, ago(60), now), AtStart::Serve { silent: Duration::ZERO });
        // No kept time (a release before it), or one ahead of this clock: from its start.
        assert_eq!(at_start(Some(&TERMS), None, now), AtStart::Serve { silent: Duration::ZERO });
        assert_eq!(
            at_start(Some(&TERMS), Some(now + Duration::from_secs(5)), now),
            AtStart::Serve { silent: Duration::ZERO }
        );
    }

    #[test]
    fn the_time_heard_is_kept_beside_the_data_directory() {
        let dir = std::env::temp_dir().join(format!("bosun-heard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = heard_path(&dir.join("pgdata"));
        assert_eq!(path, dir.join("bosun-heard"));
        assert_eq!(read_heard(&path), None);
        let at = UNIX_EPOCH + Duration::from_millis(1_764_000_000_123);
        write_heard(&path, at).unwrap();
        assert_eq!(read_heard(&path), Some(at));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
