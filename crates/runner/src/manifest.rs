//! What a backup is, as stored beside its dump: `<namespace>/<backup>/<stamp>.<ext>.zst`
//! (`.zst.age` when encrypted) and `<namespace>/<backup>/<stamp>.manifest.json` under the
//! destination's prefix.
//! The stamp is the UTC start time, fixed width, so keys sort by time.
//!
//! A dump counts as a good backup only with its manifest beside it: the manifest is
//! written last, after the upload was verified.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The manifest of one good backup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The dump's key, relative to the destination's prefix.
    pub key: String,
    /// Bytes stored (compressed).
    pub size: u64,
    /// SHA-256 of the stored bytes, hex.
    pub sha256: String,
    /// Bytes the dump tool wrote, before compression.
    pub uncompressed_size: u64,
    pub compression: String,
    /// `postgresql`, `mysql` or `mongodb`.
    pub engine: String,
    /// The source as a URL without secrets.
    pub source: String,
    /// `pg_dump --version` and the like.
    pub tool_version: String,
    pub server_version: String,
    pub started: Timestamp,
    pub finished: Timestamp,
    /// For a base backup: the WAL it starts and ends at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal: Option<crate::base::WalRange>,
    /// Set when the dump is encrypted: how, and to which key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<crate::seal::Encryption>,
}

/// The folder of one Backup's dumps, relative to the destination's prefix.
pub fn folder(namespace: &str, backup: &str) -> String {
    format!("{namespace}/{backup}")
}

/// A time-sortable stamp: `20261123T020000.123Z`.
pub fn stamp(at: Timestamp) -> String {
    at.strftime("%Y%m%dT%H%M%S%.3fZ").to_string()
}

/// The dump's key and its manifest's key for a run started `at`.
pub fn keys(folder: &str, at: Timestamp, extension: &str) -> (String, String) {
    let s = stamp(at);
    (format!("{folder}/{s}.{extension}.zst"), format!("{folder}/{s}.manifest.json"))
}

/// The manifest key that belongs beside a dump key, if it is one of ours.
pub fn manifest_key_of(dump_key: &str) -> Option<String> {
    let (folder, file) = dump_key.rsplit_once('/')?;
    let file = file.strip_suffix(crate::seal::SUFFIX).unwrap_or(file);
    let (stamp, _extension) = file.strip_suffix(".zst")?.split_once("Z.")?;
    Some(format!("{folder}/{stamp}Z.manifest.json"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_time_and_pair_with_their_manifest() {
        let a: Timestamp = "2026-11-23T02:00:00Z".parse().unwrap();
        let b: Timestamp = "2026-11-23T02:00:00.5Z".parse().unwrap();
        let c: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        let (ka, ma) = keys("ns/nightly", a, "pgdump");
        assert_eq!(ka, "ns/nightly/20261123T020000.000Z.pgdump.zst");
        assert_eq!(ma, "ns/nightly/20261123T020000.000Z.manifest.json");
        let (kb, _) = keys("ns/nightly", b, "pgdump");
        let (kc, _) = keys("ns/nightly", c, "pgdump");
        assert!(ka < kb && kb < kc);
        assert_eq!(manifest_key_of(&ka).as_deref(), Some(ma.as_str()));
        assert_eq!(manifest_key_of(&format!("{ka}.age")).as_deref(), Some(ma.as_str()), "encrypted");
        assert_eq!(manifest_key_of("ns/x/notes.txt"), None);
        assert_eq!(manifest_key_of("ns/x/notes.age"), None);
    }
}
