//! What an instance says of itself over its API ([`crate::api`]): the types bosun
//! decides from, shared by the instance manager (which answers) and the controller
//! (which asks), and how the instance reads them from its server.

use serde::{Deserialize, Serialize};

/// An instance as it sees itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The pod's name.
    pub name: String,
    /// The role it follows (`primary` or `replica`), none before bosun gave one.
    pub role: Option<String>,
    /// Where that role comes from: `label` (the pod's label, through its file),
    /// `told` (bosun, ahead of the label's file) or `none`.
    pub role_source: String,
    /// The major of the data directory (`PG_VERSION`), none while it holds no cluster.
    pub data_major: Option<String>,
    /// `standby.signal`: the data starts, or runs, as a standby's.
    pub standby_signal: bool,
    /// `recovery.signal`: the data recovers from an archive to a target.
    pub recovery_signal: bool,
    /// The server, as it answered just now; none when it does not answer (stopped,
    /// starting, shutting down).
    pub server: Option<Server>,
    /// Why the server did not answer.
    pub server_error: Option<String>,
    /// A stop was asked to rejoin as a standby (the role says replica).
    pub demoting: bool,
    /// The primary fenced itself (it heard neither bosun nor enough of its standbys): its server is
    /// stopped until bosun tells it its role.
    #[serde(default)]
    pub fenced: bool,
    /// A major upgrade's statistics are still to gather (the setup's marker).
    pub analyze_pending: bool,
    /// `bosun wal push`'s last failure's message, when it left one.
    pub archive_error: Option<String>,
}

/// The server's own answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Server {
    /// `pg_is_in_recovery()`: a standby (or a server recovering from an archive).
    pub in_recovery: bool,
    /// A primary's current timeline; a standby's, the newest of its last restartpoint's,
    /// the one its WAL receiver receives and that of the WAL segments it holds
    /// ([`wal_timeline`]): a standby that crossed into a new timeline shows it at once,
    /// before its next restartpoint, and still when its receiver is down.
    pub timeline: Option<u32>,
    /// A standby's last WAL received and replayed; a primary's current WAL position.
    pub receive_lsn: Option<String>,
    pub replay_lsn: Option<String>,
    pub current_lsn: Option<String>,
    /// A primary's standbys that stream from it now (their `application_name`s).
    pub streaming: Vec<String>,
    /// A standby's WAL receiver streams from its primary now (`pg_stat_wal_receiver`).
    #[serde(default)]
    pub receiving: bool,
    /// `server_version`.
    pub version: String,
    /// When the server started (`pg_postmaster_start_time()`, Unix seconds): a primary
    /// that just restarted has standbys reconnecting.
    #[serde(default)]
    pub started: Option<i64>,
    /// A primary's archiver (`pg_stat_archiver`).
    pub archiver: Option<Archiver>,
    /// A primary's replication connections (`pg_stat_replication`), one per standby;
    /// absent from an instance manager of a release before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replication: Vec<Replication>,
}

/// One standby as its primary sees it (`pg_stat_replication`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replication {
    /// The standby's `application_name` (its pod's name).
    pub name: String,
    /// `streaming`, `catchup`, `startup`, `backup` or `stopping`.
    pub state: String,
    /// `sync`, `quorum`, `potential` or `async`.
    pub sync_state: String,
    /// The last WAL position the standby replayed, as the primary last heard.
    pub replay_lsn: Option<String>,
    /// The time from a commit on the primary to its replay on the standby, in
    /// milliseconds, as last measured (none after the standby caught up and idle).
    pub replay_lag_ms: Option<i64>,
}

/// `pg_stat_archiver`, times in Unix seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Archiver {
    pub last_archived_wal: Option<String>,
    pub last_archived_time: Option<i64>,
    pub last_failed_wal: Option<String>,
    pub last_failed_time: Option<i64>,
    pub failed_count: i64,
}

/// The one statement that asks a server everything of [`Server`] but the archiver:
/// fields separated by `|`.
pub const SERVER_SQL: &str = "SELECT pg_is_in_recovery(), \
     CASE WHEN pg_is_in_recovery() THEN greatest((SELECT timeline_id FROM pg_control_checkpoint()), \
       coalesce((SELECT received_tli FROM pg_stat_wal_receiver), 0)) \
     ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END, \
     pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn(), \
     CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn() END, \
     coalesce((SELECT string_agg(application_name, ',') FROM pg_stat_replication WHERE state = 'streaming'), ''), \
     current_setting('server_version'), \
     coalesce((SELECT status = 'streaming' FROM pg_stat_wal_receiver), false), \
     extract(epoch FROM pg_postmaster_start_time())::bigint";

/// A primary's archiver statistics, `|`-separated, times in Unix seconds, and last
/// its standbys' replication as a JSON array (names are pod names: no `|`).
pub const ARCHIVER_SQL: &str = "SELECT coalesce(last_archived_wal, ''), \
     coalesce(floor(extract(epoch FROM last_archived_time))::bigint::text, ''), \
     coalesce(last_failed_wal, ''), coalesce(floor(extract(epoch FROM last_failed_time))::bigint::text, ''), \
     failed_count, \
     coalesce((SELECT json_agg(json_build_object('name', application_name, 'state', state, \
     'syncState', sync_state, 'replayLsn', replay_lsn::text, \
     'replayLagMs', floor(extract(epoch FROM replay_lag) * 1000)::bigint) ORDER BY application_name) \
     FROM pg_stat_replication), '[]') FROM pg_stat_archiver";

/// A WAL position (`X/Y`, as the server writes it) as a number of bytes.
pub fn lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

impl Server {
    /// A primary's standbys' lag, from its replication connections: `(name, bytes
    /// not yet replayed, seconds)`. A standby caught up and idle has no measured
    /// lag (`replay_lag` is reset): 0 s when it replayed all there is.
    pub fn standby_lag(&self) -> Vec<(String, Option<u64>, Option<f64>)> {
        let position = self.current_lsn.as_deref().and_then(lsn);
        self.replication
            .iter()
            .map(|r| {
                let bytes = position.zip(r.replay_lsn.as_deref().and_then(lsn)).map(|(p, s)| p.saturating_sub(s));
                let seconds = match (r.replay_lag_ms, bytes) {
                    (Some(ms), _) => Some(ms as f64 / 1000.0),
                    (None, Some(0)) => Some(0.0),
                    (None, _) => None,
                };
                (r.name.clone(), bytes, seconds)
            })
            .collect()
    }
}

fn text(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// [`SERVER_SQL`]'s answer (unaligned, `|`-separated); none when it is not that.
pub fn parse_server(answer: &str) -> Option<Server> {
    let fields: Vec<&str> = answer.trim().split('|').collect();
    // The last two came later: an instance of an older release answers without them.
    let (receiving, started, fields) = match fields.as_slice() {
        [rest @ .., receiving, started] if rest.len() == 7 => (*receiving == "t", started.parse().ok(), rest),
        [rest @ .., receiving] if rest.len() == 7 => (*receiving == "t", None, rest),
        all => (false, None, all),
    };
    let [recovery, timeline, receive, replay, current, streaming, version] = fields else { return None };
    let in_recovery = match *recovery {
        "t" => true,
        "f" => false,
        _ => return None,
    };
    Some(Server {
        in_recovery,
        timeline: timeline.parse().ok(),
        receive_lsn: text(receive),
        replay_lsn: text(replay),
        current_lsn: text(current),
        streaming: streaming.split(',').filter(|n| !n.is_empty()).map(str::to_owned).collect(),
        version: (*version).to_owned(),
        receiving,
        started,
        archiver: None,
        replication: Vec::new(),
    })
}

/// The newest timeline of the WAL segments in `pg_wal` (their names' first eight hex
/// digits; partial segments and history files aside), if any. A standby that followed
/// its primary onto a new timeline holds segments of it: with its WAL receiver down (a
/// partition, a restart of the primary) and no restartpoint on the new timeline yet,
/// the server itself says the old one, and bosun would take it for a standby that
/// cannot follow and have it rewound (which it does not need, and which can leave it
/// waiting for WAL it never asks for again).
pub fn wal_timeline(pg_wal: &std::path::Path) -> Option<u32> {
    let names = std::fs::read_dir(pg_wal).ok()?.flatten().map(|e| e.file_name().to_string_lossy().into_owned());
    names
        .filter(|n| n.len() == 24 && n.bytes().all(|b| b.is_ascii_hexdigit()))
        .filter_map(|n| u32::from_str_radix(&n[..8], 16).ok())
        .max()
}

/// [`ARCHIVER_SQL`]'s answer: the archiver, and the replication connections; none
/// when it is not that.
pub fn parse_primary(answer: &str) -> Option<(Archiver, Vec<Replication>)> {
    let fields: Vec<&str> = answer.trim().splitn(6, '|').collect();
    let (archiver, replication) = match fields.as_slice() {
        [archiver @ .., replication] if archiver.len() == 5 => (archiver, serde_json::from_str(replication).ok()?),
        all => (all, Vec::new()),
    };
    Some((parse_archiver(archiver)?, replication))
}

fn parse_archiver(fields: &[&str]) -> Option<Archiver> {
    let [archived, archived_at, failed, failed_at, count] = fields else { return None };
    let time = |s: &str| -> Result<Option<i64>, ()> {
        if s.is_empty() { Ok(None) } else { s.parse().map(Some).map_err(drop) }
    };
    Some(Archiver {
        last_archived_wal: text(archived),
        last_archived_time: time(archived_at).ok()?,
        last_failed_wal: text(failed),
        last_failed_time: time(failed_at).ok()?,
        failed_count: count.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wal_timeline_is_the_newest_of_the_segments_held() {
        let dir = std::env::temp_dir().join(format!("bosun-wal-tli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(wal_timeline(&dir), None);
        for name in ["000000010000000000000003", "000000020000000000000004", "00000002.history"] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        // Partial segments (a promotion's last of the old timeline) and others aside.
        std::fs::write(dir.join("000000030000000000000004.partial"), "").unwrap();
        std::fs::create_dir_all(dir.join("archive_status")).unwrap();
        assert_eq!(wal_timeline(&dir), Some(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_primarys_and_a_standbys_answers_parse() {
        let primary = parse_server("f|3|||0/5000060|db-1,db-2|15.10 (Debian 15.10-0+deb12u1)").unwrap_or_default();
        assert!(!primary.in_recovery);
        assert_eq!((primary.timeline, primary.current_lsn.as_deref()), (Some(3), Some("0/5000060")));
        assert_eq!(primary.streaming, ["db-1", "db-2"]);
        assert_eq!(primary.receive_lsn, None);
        let standby = parse_server("t|2|0/5000060|0/5000000||| 17.2|t").unwrap_or_default();
        assert!(standby.in_recovery && standby.streaming.is_empty() && standby.receiving);
        assert!(!parse_server("t|2|0/5000060|0/5000000||| 17.2|f").unwrap_or_default().receiving);
        assert_eq!(
            (standby.receive_lsn.as_deref(), standby.replay_lsn.as_deref()),
            (Some("0/5000060"), Some("0/5000000"))
        );
        assert_eq!(parse_server("psql: error"), None);
        // With the start time (this release), and without it (an older instance's).
        let restarted = parse_server("f|2|||0/4031060||15.20|f|1795945142").unwrap_or_default();
        assert_eq!((restarted.started, restarted.in_recovery), (Some(1795945142), false));
        assert_eq!(standby.started, None);
        assert_eq!(parse_server("x|1|||||15"), None);
    }

    #[test]
    fn the_archivers_answer_parses() {
        let (a, replication) = parse_primary("000000010000000000000003|1764300000|||2").unwrap_or_default();
        assert_eq!(a.last_archived_wal.as_deref(), Some("000000010000000000000003"));
        assert_eq!((a.last_archived_time, a.last_failed_time, a.failed_count), (Some(1764300000), None, 2));
        assert!(replication.is_empty());
        assert_eq!(parse_primary("a|not a time|||0"), None);
        assert_eq!(parse_primary("a|1|||0|not json"), None);
    }

    #[test]
    fn positions_are_numbers_and_lag_is_the_primarys_position_less_the_replay() {
        assert_eq!(lsn("0/3000148"), Some(0x300_0148));
        assert_eq!(lsn("1/0"), Some(1 << 32));
        assert_eq!(lsn("nonsense"), None);
        let standby = |name: &str, replay: Option<&str>, ms: Option<i64>| Replication {
            name: name.into(),
            replay_lsn: replay.map(str::to_owned),
            replay_lag_ms: ms,
            ..Replication::default()
        };
        let primary = Server {
            current_lsn: Some("0/5000000".into()),
            replication: vec![
                standby("a", Some("0/4FFF000"), Some(1500)),
                standby("b", Some("0/5000000"), None),
                standby("c", None, None),
            ],
            ..Server::default()
        };
        assert_eq!(
            primary.standby_lag(),
            [("a".into(), Some(0x1000), Some(1.5)), ("b".into(), Some(0), Some(0.0)), ("c".into(), None, None)]
        );
    }

    #[test]
    fn the_standbys_replication_parses() {
        let answer = r#"|||1764300000|1|[{"name" : "db-1", "state" : "streaming", "syncState" : "sync", "replayLsn" : "0/3000148", "replayLagMs" : 12}, {"name" : "db-2", "state" : "catchup", "syncState" : "async", "replayLsn" : null, "replayLagMs" : null}]"#;
        let (a, replication) = parse_primary(answer).unwrap_or_default();
        assert_eq!((a.last_failed_time, a.failed_count), (Some(1764300000), 1));
        assert_eq!(replication.len(), 2);
        assert_eq!(
            (replication[0].name.as_str(), replication[0].sync_state.as_str(), replication[0].replay_lag_ms),
            ("db-1", "sync", Some(12))
        );
        assert_eq!((replication[1].state.as_str(), replication[1].replay_lsn.as_deref()), ("catchup", None));
    }
}
