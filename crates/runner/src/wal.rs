//! Continuous archiving of a PostgreSQL's write-ahead log: `bosun wal push` is the
//! server's `archive_command`, `bosun wal fetch` its `restore_command`.
//!
//! ```text
//! pg_wal/<file> ──► zstd (frame checksum) ──► [age] ──► put-if-absent <folder>/wal/<file>.zst[.age]
//!                                                          │ already there
//!                                                          └─► same bytes? fine : refused, loudly
//! <folder>/wal/<file>.zst[.age] ──► [age -d] ──► zstd -d (checksum checked) ──► <dest>.bosun-partial ──► rename
//! ```
//!
//! With keys ([`crate::seal`]), a push stores `<file>.zst.age`, encrypted to the first
//! identity; a fetch opens either form, so an archive that was plain before encryption
//! was turned on stays readable.
//!
//! Beside each archived file, `<key>.manifest.json` records the size and sha256 of
//! what was stored; a fetch of an object that is no longer that is told as changed
//! ([`crate::integrity`]), before any decryption or decompression error. Files archived
//! before there were records are fetched as before.
//!
//! A WAL file is written once and never overwritten: a second push of identical bytes
//! (the server retrying after a crash between upload and its bookkeeping) succeeds,
//! and a push of different bytes under an archived name fails and keeps failing, so
//! the server stops recycling its WAL and the condition is visible in
//! `pg_stat_archiver` (and in the PostgreSQL's status). No Kubernetes in here.

use std::path::Path;

use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::integrity::{self, Recorded, Sums};
use crate::seal::{self, Keys};
use crate::store::Store;
use crate::{Error, storage};

/// Where one database's WAL lives, relative to the destination's prefix: beside
/// its base backups, in its folder (`<namespace>/<name>`, [`crate::manifest::folder`]).
pub fn folder(database_folder: &str) -> String {
    format!("{database_folder}/wal")
}

/// The archive of one database.
#[derive(Debug, Clone)]
pub struct Archive {
    pub store: Store,
    /// [`folder`].
    pub folder: String,
    /// Encrypt what is pushed to the first of these; open what is fetched with any.
    pub keys: Option<Keys>,
}

/// The WAL file an archived object's file name holds (`<file>.zst` or `<file>.zst.age`).
pub fn archived_name(object_name: &str) -> Option<&str> {
    object_name.strip_suffix(seal::SUFFIX).unwrap_or(object_name).strip_suffix(".zst")
}

/// What a push or a fetch did (one JSON line on stdout).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The object's key, as found in the bucket.
    pub key: String,
    /// The WAL file's size.
    pub size: u64,
    /// The size stored (compressed).
    pub stored: u64,
    /// The push found the same bytes already archived.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub already_archived: bool,
}

/// Whether `name` is a file PostgreSQL archives: a segment (24 hex digits, maybe
/// `.partial`), a timeline history (`<8 hex>.history`) or a backup label
/// (`<24 hex>.<8 hex>.backup`). Anything else is refused: a key is built from it.
pub fn is_wal_name(name: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase());
    let (stem, suffix) = name.split_once('.').unwrap_or((name, ""));
    match suffix {
        "" | "partial" => hex(stem, 24),
        "history" => hex(stem, 8),
        _ => suffix.strip_suffix(".backup").is_some_and(|offset| hex(offset, 8)) && hex(stem, 24),
    }
}

/// Where a WAL file `name` lies in the log, whatever its timeline: the 16 hex digits
/// after the timeline's 8 of a segment, a partial segment or a backup label (they
/// compare in the order of the log); `None` for a timeline history file.
pub fn position(name: &str) -> Option<&str> {
    (is_wal_name(name) && !name.ends_with(".history")).then(|| name.get(8..24)).flatten()
}

fn checked_name(flag: &str, name: &str) -> Result<(), Error> {
    if is_wal_name(name) {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{flag} {name:?}: not a WAL file name (24 hex digits, maybe .partial; <timeline>.history; or a .backup label)"
        )))
    }
}

impl Archive {
    /// The key of the WAL file `name`, plain or encrypted.
    fn key(&self, name: &str, sealed: bool) -> String {
        format!("{}/{name}.zst{}", self.folder, if sealed { seal::SUFFIX } else { "" })
    }

    /// Archive the WAL file at `path` (`archive_command = 'bosun wal push %p'`).
    pub async fn push(&self, path: &Path) -> Result<Report, Error> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        checked_name("PATH", name)?;
        let bytes =
            tokio::fs::read(path).await.map_err(|e| Error::Usage(format!("reading {}: {e}", path.display())))?;
        let mut compressed = compress(&bytes).await?;
        if let Some(keys) = &self.keys {
            compressed = sealed(keys, &compressed).await?;
        }
        let key = self.key(name, self.keys.is_some());
        let location = self.store.path(&key);
        let create = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
        let sums = sums_of(&compressed);
        let (already_archived, sums) = match self
            .store
            .objects
            .put_opts(&location, PutPayload::from(compressed), create)
            .await
        {
            Ok(_) => (false, sums),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let (archived, stored) = self.read(&key).await?;
                if archived != bytes {
                    return Err(Error::Refused(format!(
                        "{} is already archived with different contents ({} bytes there, {} here); WAL is never overwritten: archiving stops until an operator looks (is another database archiving to the same place?)",
                        self.store.full_key(&key),
                        archived.len(),
                        bytes.len()
                    )));
                }
                // A retry after a crash between the upload and its record: the
                // record is of what is stored.
                (true, stored)
            }
            Err(e) => return Err(storage("archiving WAL")(e)),
        };
        // Written after the object, so an object never has a record of other bytes; a
        // push that dies between the two is retried by the server and lands here again.
        let record = serde_json::to_vec(&sums).map_err(|e| Error::Upload(format!("a WAL record: {e}")))?;
        self.store
            .objects
            .put(&self.store.path(&record_key(&key)), PutPayload::from(record))
            .await
            .map_err(storage("recording archived WAL"))?;
        Ok(Report { key: self.store.full_key(&key), size: bytes.len() as u64, stored: sums.size, already_archived })
    }

    /// Restore the archived WAL file `name` to `dest` (`restore_command = 'bosun wal
    /// fetch %f %p'`). A file that is not archived is [`Error::NotArchived`]: the
    /// server asks for files past the end of the archive as a matter of course.
    pub async fn fetch(&self, name: &str, dest: &Path) -> Result<Report, Error> {
        checked_name("NAME", name)?;
        // The form this archive is likely in first: encrypted when there are keys.
        let sealed = self.keys.is_some();
        let (key, (bytes, stored)) = match self.read(&self.key(name, sealed)).await {
            Err(Error::NotArchived(_)) => {
                let other = self.key(name, !sealed);
                (other.clone(), self.read(&other).await?)
            }
            read => (self.key(name, sealed), read?),
        };
        // Written beside the destination and renamed: the server never sees half a file.
        let partial = dest.with_extension("bosun-partial");
        let write = async {
            tokio::fs::write(&partial, &bytes).await?;
            tokio::fs::rename(&partial, dest).await
        };
        if let Err(e) = write.await {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(Error::Usage(format!("writing {}: {e}", dest.display())));
        }
        Ok(Report {
            key: self.store.full_key(&key),
            size: bytes.len() as u64,
            stored: stored.size,
            already_archived: false,
        })
    }

    /// Delete the archived WAL from before the segment `start_wal` (the start of the
    /// oldest base backup kept): segments (of every timeline), partial segments and
    /// backup labels whose position is earlier. Timeline history files stay (tiny, and
    /// a recovery reads them all). Returns the keys deleted, as found in the bucket.
    pub async fn prune_before(&self, start_wal: &str) -> Result<Vec<String>, Error> {
        use futures::TryStreamExt;
        let Some(start) = position(start_wal) else { return Ok(Vec::new()) };
        let objects: Vec<_> = self
            .store
            .objects
            .list(Some(&self.store.path(&self.folder)))
            .try_collect()
            .await
            .map_err(storage("listing the archived WAL"))?;
        let mut deleted = Vec::new();
        for meta in objects {
            // An archived object, or the record beside one.
            let file = meta.location.filename().map(|f| f.strip_suffix(RECORD_SUFFIX).unwrap_or(f));
            let Some(name) = file.and_then(archived_name) else { continue };
            let earlier = position(name).is_some_and(|p| p < start);
            if !earlier {
                continue;
            }
            match self.store.objects.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted.push(meta.location.to_string()),
                Err(e) => return Err(storage("deleting expired WAL")(e)),
            }
        }
        Ok(deleted)
    }

    /// The archived bytes of `key`, decrypted when it is encrypted, decompressed (the
    /// frame checksum checked), and the size and checksum stored. An object that is
    /// not what its record says is [`Error::Mismatch`], before it is opened.
    async fn read(&self, key: &str) -> Result<(Vec<u8>, Sums), Error> {
        let record_key = record_key(key);
        let (object, record) = (self.store.path(key), self.store.path(&record_key));
        let (got, record) = tokio::join!(self.store.objects.get(&object), self.store.objects.get(&record));
        let got = match got {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Error::NotArchived(self.store.full_key(key)));
            }
            Err(e) => return Err(storage("reading archived WAL")(e)),
        };
        let stored = got.bytes().await.map_err(storage("reading archived WAL"))?;
        let sums = sums_of(&stored);
        let recorded = match record {
            Ok(record) => {
                let bytes = record.bytes().await.map_err(storage("reading archived WAL's record"))?;
                serde_json::from_slice::<Sums>(&bytes).ok()
            }
            // Archived before there were records.
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(storage("reading archived WAL's record")(e)),
        };
        if let Some(recorded) = recorded {
            let recorded = Recorded { key, record: &record_key, sums: recorded };
            integrity::compare(&self.store, &recorded, sums.clone(), "")?;
        }
        let what = self.store.full_key(key);
        let compressed = match (key.ends_with(seal::SUFFIX), &self.keys) {
            (false, _) => stored.to_vec(),
            (true, None) => return Err(seal::no_keys(&what, None)),
            (true, Some(keys)) => {
                let mut plain = Vec::new();
                keys.open(&stored[..], &what, None)
                    .await?
                    .read_to_end(&mut plain)
                    .await
                    .map_err(|e| Error::Encryption(format!("{what}: {e}")))?;
                plain
            }
        };
        let bytes = decompress(&compressed)
            .await
            .map_err(|e| Error::Verify(format!("{} does not decompress: {e}", self.store.full_key(key))))?;
        Ok((bytes, sums))
    }
}

/// The key of the record beside the archived object `key`.
fn record_key(key: &str) -> String {
    format!("{key}{RECORD_SUFFIX}")
}

/// What an archived object's record's key ends with.
const RECORD_SUFFIX: &str = ".manifest.json";

/// The size and sha256 of `bytes`.
fn sums_of(bytes: &[u8]) -> Sums {
    use sha2::{Digest, Sha256};
    Sums { size: bytes.len() as u64, sha256: hex::encode(Sha256::digest(bytes)) }
}

/// `plain` encrypted to the first of `keys`.
async fn sealed(keys: &Keys, plain: &[u8]) -> Result<Vec<u8>, Error> {
    use tokio::io::AsyncWriteExt;
    let failed = |e: std::io::Error| Error::Encryption(format!("encrypting WAL: {e}"));
    let mut out = Vec::with_capacity(plain.len() + 256);
    let mut writer = keys.seal(&mut out).await.map_err(failed)?;
    writer.write_all(plain).await.map_err(failed)?;
    writer.shutdown().await.map_err(failed)?;
    drop(writer);
    Ok(out)
}

/// zstd with a frame checksum, as the dumps are.
async fn compress(bytes: &[u8]) -> Result<Vec<u8>, Error> {
    let mut encoder = async_compression::tokio::bufread::ZstdEncoder::with_quality_and_params(
        bytes,
        async_compression::Level::Default,
        &[async_compression::zstd::CParameter::checksum_flag(true)],
    );
    let mut out = Vec::with_capacity(bytes.len() / 4);
    encoder.read_to_end(&mut out).await.map_err(|e| Error::Tool { tool: "zstd", detail: e.to_string() })?;
    Ok(out)
}

async fn decompress(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut decoder = async_compression::tokio::bufread::ZstdDecoder::new(bytes);
    let mut out = Vec::new();
    decoder.read_to_end(&mut out).await?;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::location::Destination;
    use crate::store::Endpoint;

    fn archive(dir: &Path) -> Archive {
        let destination = Destination::parse(&format!("file://{}", dir.display())).unwrap();
        Archive {
            store: Store::open(&destination, &Endpoint::default()).unwrap(),
            folder: folder(&crate::manifest::folder("ns", "db")),
            keys: None,
        }
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("bosun-wal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("pg_wal")).unwrap();
        dir
    }

    #[test]
    fn only_wal_file_names_are_taken() {
        for good in [
            "000000010000000000000001",
            "00000002000000A10000003F.partial",
            "00000002.history",
            "000000010000000000000002.00000028.backup",
        ] {
            assert!(is_wal_name(good), "{good}");
        }
        for bad in [
            "",
            "00000001000000000000001",
            "000000010000000000000001.zst",
            "0000000100000000000000ab",
            "../../etc/passwd",
            "00000002.history.backup",
            "000000010000000000000002.backup",
            "RECOVERYHISTORY",
        ] {
            assert!(!is_wal_name(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_segment_round_trips_and_is_written_once() {
        let dir = scratch("once");
        let a = archive(&dir.join("bucket"));
        let segment = dir.join("pg_wal/000000010000000000000003");
        let mut bytes = vec![0u8; 16 * 1024 * 1024];
        bytes[..11].copy_from_slice(b"first write");
        std::fs::write(&segment, &bytes).unwrap();

        let pushed = a.push(&segment).await.unwrap();
        assert_eq!(pushed.size, bytes.len() as u64);
        assert!(pushed.stored < pushed.size / 100, "a mostly empty segment compresses: {pushed:?}");
        assert!(pushed.key.ends_with("ns/db/wal/000000010000000000000003.zst"), "{pushed:?}");
        // The server retries a push it did not see finish: the same bytes are fine.
        assert!(a.push(&segment).await.unwrap().already_archived);
        // Different bytes under an archived name are refused, and the archive keeps the first.
        bytes[..11].copy_from_slice(b"other write");
        std::fs::write(&segment, &bytes).unwrap();
        let refused = a.push(&segment).await.unwrap_err().to_string();
        assert!(refused.contains("different contents") && refused.contains("000000010000000000000003"), "{refused}");

        let restored = dir.join("pg_wal/RECOVERYXLOG");
        let fetched = a.fetch("000000010000000000000003", &restored).await.unwrap();
        assert_eq!(fetched.size, bytes.len() as u64);
        assert_eq!(&std::fs::read(&restored).unwrap()[..11], b"first write");
        assert!(!dir.join("pg_wal/RECOVERYXLOG.bosun-partial").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn with_keys_the_archive_holds_only_ciphertext_and_opens_either_form() {
        let dir = scratch("sealed");
        let plain = archive(&dir.join("bucket"));
        let key = age::x25519::Identity::generate();
        use age::secrecy::ExposeSecret;
        let keys = |ids: &[&age::x25519::Identity]| {
            let text: String = ids.iter().map(|i| format!("{}\n", i.to_string().expose_secret())).collect();
            Some(Keys::parse(&text, "Secret ns/archive-key (key identities)").unwrap())
        };
        let sealed = Archive { keys: keys(&[&key]), ..plain.clone() };
        // One segment archived before encryption was turned on, one after.
        let before = dir.join("pg_wal/000000010000000000000004");
        std::fs::write(&before, vec![4u8; 1 << 20]).unwrap();
        plain.push(&before).await.unwrap();
        let after = dir.join("pg_wal/000000010000000000000005");
        let mut bytes = vec![0u8; 1 << 20];
        bytes[..14].copy_from_slice(b"canary in WAL!");
        std::fs::write(&after, &bytes).unwrap();
        let pushed = sealed.push(&after).await.unwrap();
        assert!(pushed.key.ends_with("ns/db/wal/000000010000000000000005.zst.age"), "{pushed:?}");
        let raw = std::fs::read(dir.join("bucket/ns/db/wal/000000010000000000000005.zst.age")).unwrap();
        assert!(raw.starts_with(b"age-encryption.org/v1\n"), "an age file");
        assert!(sealed.push(&after).await.unwrap().already_archived, "a retried push of the same bytes is fine");

        let dest = dir.join("pg_wal/RECOVERYXLOG");
        sealed.fetch("000000010000000000000005", &dest).await.unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), bytes);
        sealed.fetch("000000010000000000000004", &dest).await.unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), vec![4u8; 1 << 20], "the plain one still opens");
        std::fs::remove_file(&dest).unwrap();
        // Without the key, or with another: refused naming what is needed; nothing written.
        let none = plain.fetch("000000010000000000000005", &dest).await.unwrap_err().to_string();
        assert!(none.contains("is encrypted") && none.contains("000000010000000000000005"), "{none}");
        let other = Archive { keys: keys(&[&age::x25519::Identity::generate()]), ..plain.clone() };
        let wrong = other.fetch("000000010000000000000005", &dest).await.unwrap_err().to_string();
        assert!(wrong.contains("Secret ns/archive-key (key identities)"), "{wrong}");
        assert!(!dest.exists());
        // Rotated: the new key first, the old one kept; both forms and both keys open.
        let rotated = Archive { keys: keys(&[&age::x25519::Identity::generate(), &key]), ..plain.clone() };
        rotated.fetch("000000010000000000000005", &dest).await.unwrap();
        // Changed in the bucket (same size): told as changed, with both checksums, not
        // as a key that does not open it.
        let stored = dir.join("bucket/ns/db/wal/000000010000000000000005.zst.age");
        let original = std::fs::read(&stored).unwrap();
        std::fs::write(&stored, vec![7u8; original.len()]).unwrap();
        std::fs::remove_file(&dest).unwrap();
        let changed = sealed.fetch("000000010000000000000005", &dest).await.unwrap_err().to_string();
        for part in
            ["ns/db/wal/000000010000000000000005.zst.age does not match its manifest", "sha256", "the bucket holds"]
        {
            assert!(changed.contains(part), "{part:?} not in {changed}");
        }
        assert!(!changed.contains("decrypt") && !dest.exists(), "{changed}");
        std::fs::write(&stored, &original).unwrap();
        // Retention finds encrypted WAL by its name too, and their records with them.
        let deleted = sealed.prune_before("000000010000000000000006").await.unwrap();
        assert_eq!(deleted.len(), 4, "two objects and their records: {deleted:?}");
        let left = std::fs::read_dir(dir.join("bucket/ns/db/wal")).map(|d| d.count()).unwrap_or(0);
        assert_eq!(left, 0, "nothing left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_missing_or_corrupted_file_is_not_restored() {
        let dir = scratch("missing");
        let a = archive(&dir.join("bucket"));
        let dest = dir.join("pg_wal/RECOVERYXLOG");
        let missing = a.fetch("000000010000000000000009", &dest).await.unwrap_err();
        assert!(matches!(missing, Error::NotArchived(_)), "{missing}");
        assert!(!dest.exists());

        let history = dir.join("pg_wal/00000002.history");
        std::fs::write(&history, "1\t0/3000000\tno recovery target specified\n").unwrap();
        a.push(&history).await.unwrap();
        let stored = dir.join("bucket/ns/db/wal/00000002.history.zst");
        let mut raw = std::fs::read(&stored).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0xff;
        std::fs::write(&stored, raw).unwrap();
        let corrupt = a.fetch("00000002.history", &dest).await.unwrap_err().to_string();
        assert!(corrupt.contains("does not match its manifest"), "told as changed first: {corrupt}");
        assert!(!dest.exists(), "nothing half-written is left for the server");
        // Archived before records were written: zstd's frame checksum still stops it.
        std::fs::remove_file(dir.join("bucket/ns/db/wal/00000002.history.zst.manifest.json")).unwrap();
        let corrupt = a.fetch("00000002.history", &dest).await.unwrap_err().to_string();
        assert!(corrupt.contains("does not decompress"), "{corrupt}");
        assert!(!dest.exists());

        let bad = a.push(&dir.join("pg_wal/archive_status")).await.unwrap_err().to_string();
        assert!(bad.contains("not a WAL file name"), "{bad}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
