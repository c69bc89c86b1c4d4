//! Point-in-time recovery of a PostgreSQL from its base backups and archived WAL
//! (`bosun recover`): the data directory of a new server, to be started once in
//! recovery and promoted at the target.
//!
//! ```text
//! <folder>/base/*.manifest.json ─┐
//! <folder>/wal/  (newest file)  ─┴─► plan: the target inside the recoverable range?
//!                                         │ no: refused, naming the range (nothing written)
//!                                         ▼ the newest base backup that ends before it
//! object ──► sha256 ──► zstd -d ──► tar -x into <pgdata>.partial ──► recovery.signal
//!        ──► rename to <pgdata> ──► <settings file>: restore_command, recovery_target_*
//! ```
//!
//! The settings are not written into the data directory: they are the server's
//! arguments for the start that recovers (the instance manager passes them while
//! `recovery.signal` exists), so a standby cloned from this server later never stops
//! at the target. No Kubernetes in here.

use std::path::{Path, PathBuf};

use futures::TryStreamExt;
use jiff::Timestamp;
use object_store::ObjectStoreExt;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio_util::io::StreamReader;

use crate::base::{SEGMENT_SIZE, parse_lsn};
use crate::catalogue::Catalogue;
use crate::integrity::{self, Recorded, Sums};
use crate::manifest::Manifest;
use crate::store::Store;
use crate::{Error, storage, wal};

/// Where recovery stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The end of the archived WAL.
    Latest,
    /// The last transaction committed at or before this time.
    Time(Timestamp),
    /// This WAL position (`X/Y`).
    Lsn(String),
    /// A restore point made with `pg_create_restore_point(name)`.
    Name(String),
}

/// What the archive holds: its base backups (oldest first) and its WAL's end.
#[derive(Clone, Debug, Default)]
pub struct Archived {
    pub bases: Vec<Manifest>,
    /// The newest WAL segment archived (by name) and when its upload finished.
    pub last_wal: Option<(String, Timestamp)>,
}

impl Archived {
    /// The earliest point a recovery can stop at: the end of the oldest base backup.
    pub fn first_point(&self) -> Option<Timestamp> {
        self.bases.first().map(|m| m.finished)
    }

    /// The latest point a recovery can reach: the newest archived WAL, or the newest
    /// base backup's end when WAL archiving has not passed it.
    pub fn last_point(&self) -> Option<Timestamp> {
        let base = self.bases.last().map(|m| m.finished);
        let wal = self.last_wal.as_ref().map(|(_, at)| *at);
        base.max(wal)
    }

    fn range(&self) -> String {
        match (self.first_point(), self.last_point()) {
            (Some(first), Some(last)) => format!("recoverable: from {first} to {last}"),
            _ => "nothing is recoverable".to_owned(),
        }
    }

    /// The base backup to start from for `target`, or why the target is out of reach.
    pub fn plan(&self, target: &Target, folder: &str) -> Result<&Manifest, Error> {
        let (Some(oldest), Some(newest)) = (self.bases.first(), self.bases.last()) else {
            return Err(Error::Refused(format!(
                "no base backup under {folder}/base: recovery starts from one (they are taken on the backup schedule)"
            )));
        };
        let refused = |why: String| Err(Error::Refused(format!("{why}; {}", self.range())));
        match target {
            Target::Latest => Ok(newest),
            // A named point can be anywhere: from the oldest, PostgreSQL finds it or says so.
            Target::Name(_) => Ok(oldest),
            Target::Time(t) => {
                if *t < oldest.finished {
                    return refused(format!(
                        "the target time {t} is before the end of the oldest base backup ({})",
                        oldest.finished
                    ));
                }
                if let Some(last) = self.last_point()
                    && *t > last
                {
                    return refused(format!("the target time {t} is after the last archived WAL ({last})"));
                }
                Ok(self.bases.iter().rev().find(|m| m.finished <= *t).unwrap_or(oldest))
            }
            Target::Lsn(text) => {
                let Some(lsn) = parse_lsn(text) else {
                    return Err(Error::Usage(format!("--target-lsn {text:?}: not an LSN (X/Y, hexadecimal)")));
                };
                let end = |m: &Manifest| m.wal.as_ref().and_then(|w| parse_lsn(&w.end_lsn)).unwrap_or(u64::MAX);
                let Some(base) = self.bases.iter().rev().find(|m| end(m) <= lsn) else {
                    return refused(format!(
                        "the target LSN {text} is before the end of the oldest base backup ({})",
                        oldest.wal.as_ref().map(|w| w.end_lsn.as_str()).unwrap_or("?")
                    ));
                };
                if let Some(archive_end) = self.last_wal.as_ref().and_then(|(name, _)| segment_end(name))
                    && lsn > archive_end.max(end(newest))
                {
                    return refused(format!("the target LSN {text} is past the last archived WAL"));
                }
                Ok(base)
            }
        }
    }
}

/// The LSN just past the end of the WAL segment `name` (24 hex digits).
pub fn segment_end(name: &str) -> Option<u64> {
    if name.len() != 24 {
        return None;
    }
    let log = u64::from_str_radix(&name[8..16], 16).ok()?;
    let seg = u64::from_str_radix(&name[16..24], 16).ok()?;
    let per_log = 0x1_0000_0000 / SEGMENT_SIZE;
    Some((log * per_log + seg + 1) * SEGMENT_SIZE)
}

/// One recovery.
#[derive(Debug, Clone)]
pub struct Recovery {
    pub store: Store,
    /// The database's folder, `<namespace>/<name>` (base backups in `base/`, WAL in `wal/`).
    pub folder: String,
    pub target: Target,
    /// The data directory to create; it must not exist or be empty.
    pub pgdata: PathBuf,
    /// Where to write the server's arguments for the recovering start (`-c` pairs, one per line).
    pub settings_file: PathBuf,
    /// The server's `restore_command` (`bosun wal fetch %f %p …` of this archive).
    pub restore_command: String,
    /// The identities that open an encrypted archive.
    pub keys: Option<crate::seal::Keys>,
}

/// What a recovery prepared.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The base backup restored, as found in the bucket.
    pub base: String,
    /// When that base backup ended.
    pub base_finished: Timestamp,
    pub first_recoverable: Option<Timestamp>,
    pub last_recoverable: Option<Timestamp>,
    pub last_archived_wal: Option<String>,
    pub duration_seconds: f64,
}

impl Recovery {
    pub async fn run(&self) -> Result<Report, Error> {
        let started = Timestamp::now();
        refuse_non_empty(&self.pgdata)?;
        let archived = self.archived().await?;
        let base = archived.plan(&self.target, &self.store.full_key(&self.folder))?;
        let partial = partial_path(&self.pgdata);
        if partial.exists() {
            // A recovery that died half-way: its partial copy is ours to replace.
            tokio::fs::remove_dir_all(&partial).await.map_err(io("removing an earlier partial recovery"))?;
        }
        create_private_dir(&partial).await?;
        self.extract(base, &partial).await?;
        // Recovery, not a standby: started from the archive, promoted at the target.
        let _ = tokio::fs::remove_file(partial.join("standby.signal")).await;
        tokio::fs::write(partial.join("recovery.signal"), b"").await.map_err(io("writing recovery.signal"))?;
        tokio::fs::write(&self.settings_file, settings(&self.target, &self.restore_command))
            .await
            .map_err(io("writing the recovery settings"))?;
        if self.pgdata.exists() {
            tokio::fs::remove_dir(&self.pgdata).await.map_err(io("replacing the empty data directory"))?;
        }
        tokio::fs::rename(&partial, &self.pgdata).await.map_err(io("moving the recovered data directory"))?;
        Ok(Report {
            base: self.store.full_key(&base.key),
            base_finished: base.finished,
            first_recoverable: archived.first_point(),
            last_recoverable: archived.last_point(),
            last_archived_wal: archived.last_wal.as_ref().map(|(name, _)| name.clone()),
            duration_seconds: Timestamp::now().duration_since(started).as_secs_f64(),
        })
    }

    /// The base backups and the WAL's end.
    pub async fn archived(&self) -> Result<Archived, Error> {
        let bases = Catalogue::read(&self.store, &format!("{}/base", self.folder)).await?;
        // Not a base to recover from, but a person must hear of it.
        for changed in &bases.tampered {
            tracing::warn!(
                base = %self.store.full_key(&changed.key),
                manifest_size = changed.manifest.size,
                "a base backup does not match its manifest (changed or cut in the bucket): not used"
            );
        }
        let bases = bases.good.into_iter().filter(|m| m.wal.is_some()).collect();
        let prefix = self.store.path(&wal::folder(&self.folder));
        let mut last_wal: Option<(String, Timestamp)> = None;
        let mut listing = self.store.objects.list(Some(&prefix));
        while let Some(meta) = listing.try_next().await.map_err(storage("listing the archived WAL"))? {
            let Some(name) = meta.location.filename().and_then(wal::archived_name) else { continue };
            // Whole segments only (no partial one, label or history).
            let Some(position) = wal::position(name).filter(|_| name.len() == 24) else { continue };
            let at =
                Timestamp::from_millisecond(meta.last_modified.timestamp_millis()).unwrap_or(Timestamp::UNIX_EPOCH);
            // By position in the WAL (the name without its timeline), then timeline.
            let newer = last_wal.as_ref().is_none_or(|(n, _)| (position, name) > (&n[8..], n.as_str()));
            if newer {
                last_wal = Some((name.to_owned(), at));
            }
        }
        Ok(Archived { bases, last_wal })
    }

    /// Stream the base backup into `dir`, checking it against its manifest.
    async fn extract(&self, base: &Manifest, dir: &Path) -> Result<(), Error> {
        let record = crate::manifest::manifest_key_of(&base.key).unwrap_or_default();
        let recorded =
            Recorded { key: &base.key, record: &record, sums: Sums { size: base.size, sha256: base.sha256.clone() } };
        let got = self
            .store
            .objects
            .get(&self.store.path(&base.key))
            .await
            .map_err(storage("downloading the base backup"))?;
        if got.meta.size != base.size {
            let found = integrity::stored(&self.store, &base.key).await?;
            integrity::compare(&self.store, &recorded, found, NOT_RECOVERED)?;
        }
        let size = got.meta.size;
        let mut hasher = Sha256::new();
        let bytes = got.into_stream().map_err(std::io::Error::other).inspect_ok(|chunk| hasher.update(chunk));
        let reader = StreamReader::new(bytes);
        let what = self.store.full_key(&base.key);
        let sealed_to = base.encryption.as_ref().map(|e| e.recipient.as_str());
        let sealed = sealed_to.is_some() || base.key.ends_with(crate::seal::SUFFIX);
        let unpacked = async {
            let compressed = crate::seal::unsealed(self.keys.as_ref(), reader, sealed, &what, sealed_to).await?;
            let mut unzstd = async_compression::tokio::bufread::ZstdDecoder::new(compressed);
            let tar = crate::tool::untar(dir);
            let mut running = tar.spawn(true, false)?;
            let mut stdin = running.child.stdin.take().ok_or(Error::Tool { tool: "tar", detail: "no stdin".into() })?;
            let copied = tokio::io::copy(&mut unzstd, &mut stdin).await;
            let closed = stdin.shutdown().await;
            drop(stdin);
            if copied.is_err() {
                let _ = running.child.start_kill();
            }
            let exited = running.finish().await;
            let copied =
                copied.map_err(|e| Error::Tool { tool: "downloading the base backup", detail: e.to_string() })?;
            closed.map_err(|e| Error::Tool { tool: "tar", detail: e.to_string() })?;
            exited?;
            Ok::<u64, Error>(copied)
        };
        let copied = match unpacked.await {
            Ok(copied) => copied,
            Err(e) => return Err(integrity::explain(&self.store, &recorded, e, NOT_RECOVERED).await),
        };
        let found = Sums { size, sha256: hex::encode(hasher.finalize()) };
        integrity::compare(&self.store, &recorded, found, NOT_RECOVERED)?;
        if copied != base.uncompressed_size {
            return Err(Error::Verify(format!(
                "{} unpacked to {copied} bytes, its manifest says {}",
                self.store.full_key(&base.key),
                base.uncompressed_size
            )));
        }
        Ok(())
    }
}

/// What a base backup found changed left behind: nothing but the partial copy, which
/// the next try replaces.
const NOT_RECOVERED: &str = "; no data directory was made from it";

/// The server's arguments for the start that recovers: one `name=value` per line
/// (each a `-c` of the command line).
pub fn settings(target: &Target, restore_command: &str) -> String {
    let mut lines = vec![format!("restore_command={restore_command}"), "recovery_target_timeline=latest".to_owned()];
    let stop = match target {
        Target::Latest => None,
        // PostgreSQL's own form (it refuses RFC 3339's `T…Z` here), in UTC.
        Target::Time(t) => Some(format!("recovery_target_time={}", t.strftime("%Y-%m-%d %H:%M:%S%.f+00"))),
        Target::Lsn(lsn) => Some(format!("recovery_target_lsn={lsn}")),
        Target::Name(name) => Some(format!("recovery_target_name={name}")),
    };
    if let Some(stop) = stop {
        lines.extend([stop, "recovery_target_inclusive=true".to_owned(), "recovery_target_action=promote".to_owned()]);
    }
    lines.join("\n") + "\n"
}

fn partial_path(pgdata: &Path) -> PathBuf {
    let mut name = pgdata.file_name().unwrap_or_default().to_os_string();
    name.push(".recovering");
    pgdata.with_file_name(name)
}

/// A data directory that holds anything is never recovered into.
fn refuse_non_empty(pgdata: &Path) -> Result<(), Error> {
    match std::fs::read_dir(pgdata).map(|mut entries| entries.next().is_some()) {
        Ok(true) => Err(Error::Refused(format!(
            "{} is not empty: recovery makes a new data directory and never writes over one",
            pgdata.display()
        ))),
        Ok(false) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("reading the data directory")(e)),
    }
}

async fn create_private_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::create_dir_all(dir).await.map_err(io("creating the data directory"))?;
    // PostgreSQL refuses a data directory others can read.
    tokio::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .await
        .map_err(io("creating the data directory"))
}

fn io(step: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::Tool { tool: "recovery", detail: format!("{step}: {e}") }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::base::WalRange;

    fn base(finished: &str, end_lsn: &str) -> Manifest {
        let finished: Timestamp = finished.parse().unwrap();
        Manifest {
            key: format!("ns/db-backup/base/{}.base.tar.zst", crate::manifest::stamp(finished)),
            size: 1,
            sha256: String::new(),
            uncompressed_size: 1,
            compression: "zstd".into(),
            engine: "postgresql".into(),
            source: String::new(),
            tool_version: String::new(),
            server_version: String::new(),
            started: finished,
            finished,
            wal: Some(WalRange {
                timeline: 1,
                start_lsn: end_lsn.into(),
                end_lsn: end_lsn.into(),
                start_wal: String::new(),
                end_wal: String::new(),
            }),
            encryption: None,
        }
    }

    fn archive() -> Archived {
        Archived {
            bases: vec![base("2026-11-26T02:00:00Z", "0/3000100"), base("2026-11-27T02:00:00Z", "0/9000100")],
            last_wal: Some(("00000002000000000000000C".into(), "2026-11-27T14:00:00Z".parse().unwrap())),
        }
    }

    #[test]
    fn a_target_time_starts_from_the_newest_base_backup_that_ended_before_it() {
        let a = archive();
        let at = |t: &str| Target::Time(t.parse().unwrap());
        assert_eq!(a.plan(&at("2026-11-26T14:03:00Z"), "f").unwrap().finished, a.bases[0].finished);
        assert_eq!(a.plan(&at("2026-11-27T02:00:00Z"), "f").unwrap().finished, a.bases[1].finished);
        assert_eq!(a.plan(&Target::Latest, "f").unwrap().finished, a.bases[1].finished);
        assert_eq!(a.plan(&Target::Name("before-migration".into()), "f").unwrap().finished, a.bases[0].finished);
    }

    #[test]
    fn a_target_outside_the_range_is_refused_naming_the_range() {
        let a = archive();
        let early = a.plan(&Target::Time("2026-11-25T00:00:00Z".parse().unwrap()), "f").unwrap_err().to_string();
        assert!(early.contains("before the end of the oldest base backup"), "{early}");
        assert!(early.contains("from 2026-11-26T02:00:00Z to 2026-11-27T14:00:00Z"), "{early}");
        let late = a.plan(&Target::Time("2026-11-27T15:00:00Z".parse().unwrap()), "f").unwrap_err().to_string();
        assert!(late.contains("after the last archived WAL"), "{late}");
        let lsn = a.plan(&Target::Lsn("0/2000000".into()), "f").unwrap_err().to_string();
        assert!(lsn.contains("before the end of the oldest base backup (0/3000100)"), "{lsn}");
        assert_eq!(a.plan(&Target::Lsn("0/9000200".into()), "f").unwrap().finished, a.bases[1].finished);
        assert_eq!(a.plan(&Target::Lsn("0/5000000".into()), "f").unwrap().finished, a.bases[0].finished);
        let past = a.plan(&Target::Lsn("0/F000000".into()), "f").unwrap_err().to_string();
        assert!(past.contains("past the last archived WAL"), "{past}");
        assert!(a.plan(&Target::Lsn("nonsense".into()), "f").unwrap_err().to_string().contains("--target-lsn"));
        let none = Archived::default().plan(&Target::Latest, "bucket/ns/db-backup").unwrap_err().to_string();
        assert!(none.contains("no base backup under bucket/ns/db-backup/base"), "{none}");
    }

    #[test]
    fn segments_end_where_the_next_begins() {
        assert_eq!(segment_end("00000001000000000000000C"), Some(0xD00_0000));
        assert_eq!(segment_end("0000000300000001000000FF"), Some(0x2_0000_0000));
        assert_eq!(segment_end("00000001.history"), None);
    }

    #[test]
    fn settings_stop_at_the_target_and_promote() {
        let s = settings(&Target::Time("2026-11-26T14:03:00Z".parse().unwrap()), "bosun wal fetch %f %p");
        assert_eq!(
            s,
            "restore_command=bosun wal fetch %f %p\nrecovery_target_timeline=latest\n\
             recovery_target_time=2026-11-26 14:03:00+00\nrecovery_target_inclusive=true\nrecovery_target_action=promote\n"
        );
        assert!(!settings(&Target::Latest, "x").contains("recovery_target_action"));
    }

    #[test]
    fn a_data_directory_with_anything_in_it_is_refused() {
        let dir = std::env::temp_dir().join(format!("bosun-recover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(refuse_non_empty(&dir).is_ok());
        assert!(refuse_non_empty(&dir.join("absent")).is_ok());
        std::fs::write(dir.join("PG_VERSION"), "15").unwrap();
        assert!(refuse_non_empty(&dir).unwrap_err().to_string().contains("is not empty"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
