//! Whether a stored object is what its record vouches for: a dump's or a base backup's
//! manifest, an archived WAL file's checksum record ([`crate::wal`]).
//!
//! A changed object fails later steps with errors that point elsewhere: age says
//! "decryption error" (a wrong key, a person on call reads), zstd says its frame
//! checksum is wrong, a restore tool says the input is garbage. Whenever a read of a
//! recorded object fails, or its size already differs, the object is hashed whole and,
//! when it is not what the record says, *that* is the error: [`Error::Mismatch`], with
//! the key, the record, and both sizes and checksums. Nothing here deletes anything.

use futures::StreamExt;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::Store;
use crate::{Error, storage};

/// The size and SHA-256 (hex) of stored bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sums {
    pub size: u64,
    pub sha256: String,
}

impl std::fmt::Display for Sums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes with sha256 {}", self.size, self.sha256)
    }
}

/// An object that is not what its record vouches for ([`Error::Mismatch`]).
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "{key} does not match its manifest {record}: the bucket holds {found}, the manifest says {expected}; \
     it was changed or cut in the bucket after it was stored{consequence}"
)]
pub struct Mismatch {
    pub key: String,
    pub record: String,
    pub expected: Sums,
    pub found: Sums,
    /// What it left behind, said after the message (`; the target may hold …`).
    pub consequence: String,
}

/// What a record says an object `key` (relative to the destination's prefix) holds,
/// and which record says it (its key, for messages).
#[derive(Clone, Debug)]
pub struct Recorded<'a> {
    pub key: &'a str,
    pub record: &'a str,
    pub sums: Sums,
}

/// The size and checksum of what `store` holds at `key`, read whole.
pub async fn stored(store: &Store, key: &str) -> Result<Sums, Error> {
    let got = store.objects.get(&store.path(key)).await.map_err(storage("reading a stored object to check it"))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut body = got.into_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(storage("reading a stored object to check it"))?;
        size += chunk.len() as u64;
        hasher.update(&chunk);
    }
    Ok(Sums { size, sha256: hex::encode(hasher.finalize()) })
}

/// [`Error::Mismatch`] when `found` is not what `recorded` vouches for.
pub fn compare(store: &Store, recorded: &Recorded<'_>, found: Sums, consequence: &str) -> Result<(), Error> {
    if found == recorded.sums {
        return Ok(());
    }
    Err(Error::Mismatch(Box::new(Mismatch {
        key: store.full_key(recorded.key),
        record: store.full_key(recorded.record),
        expected: recorded.sums.clone(),
        found,
        consequence: consequence.to_owned(),
    })))
}

/// Why reading the recorded object failed with `failed`: a [`Error::Mismatch`] when
/// the object is not what its record says (the cause of every later error), else
/// `failed` itself. The object is read again whole to tell.
pub async fn explain(store: &Store, recorded: &Recorded<'_>, failed: Error, consequence: &str) -> Error {
    if matches!(failed, Error::Mismatch(_)) {
        return failed;
    }
    match stored(store, recorded.key).await {
        Ok(found) => compare(store, recorded, found, consequence).err().unwrap_or(failed),
        // Unreadable now: the first error is the one to tell.
        Err(_) => failed,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use object_store::PutPayload;

    use super::*;
    use crate::location::Destination;
    use crate::store::Endpoint;

    #[tokio::test]
    async fn a_changed_object_is_named_with_both_checksums_and_a_good_one_passes() {
        let dir = std::env::temp_dir().join(format!("bosun-integrity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let destination = Destination::parse(&format!("file://{}/backups", dir.display())).unwrap();
        let store = Store::open(&destination, &Endpoint::default()).unwrap();
        let put = |bytes: &'static [u8]| {
            let store = store.clone();
            async move { store.objects.put(&store.path("ns/db/x.pgdump.zst"), PutPayload::from(bytes)).await.unwrap() }
        };
        put(b"the dump as it was made").await;
        let sums = stored(&store, "ns/db/x.pgdump.zst").await.unwrap();
        assert_eq!(sums.size, 23);
        let recorded = Recorded { key: "ns/db/x.pgdump.zst", record: "ns/db/x.manifest.json", sums: sums.clone() };
        let other = || Error::Encryption("decryption error".into());
        assert!(matches!(explain(&store, &recorded, other(), "").await, Error::Encryption(_)), "unchanged: as it was");

        put(b"the dump as it was MADE").await;
        let err = explain(&store, &recorded, other(), "; nothing was deleted").await;
        assert_eq!(err.dump(), Some("ns/db/x.pgdump.zst"), "the result names the object");
        let message = err.to_string();
        for part in [
            "ns/db/x.pgdump.zst does not match its manifest ns/db/x.manifest.json",
            &format!("the manifest says 23 bytes with sha256 {}", sums.sha256),
            "the bucket holds 23 bytes with sha256 ",
            "; nothing was deleted",
        ] {
            assert!(message.contains(part), "{part:?} not in {message}");
        }
        assert!(!message.contains("decryption"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
