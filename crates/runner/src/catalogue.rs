//! What one Backup's folder holds: its good backups (a dump with its manifest) and
//! the dumps that never got one.

use futures::TryStreamExt;
use jiff::Timestamp;
use object_store::ObjectStoreExt;
use object_store::path::Path;

use crate::integrity::{Recorded, Sums};
use crate::manifest::{Manifest, manifest_key_of};
use crate::retention::Stored;
use crate::store::Store;
use crate::{Error, storage};

/// Every dump under `folder`, oldest first, with the manifests of the good ones.
#[derive(Debug, Default)]
pub struct Catalogue {
    pub good: Vec<Manifest>,
    /// Dumps without a manifest, with their modification times.
    pub partial: Vec<(String, Timestamp)>,
    /// Dumps (among `partial`) whose manifest vouches for other bytes: changed or cut
    /// in the bucket after their run (a size the listing shows).
    pub tampered: Vec<Tampered>,
}

/// A dump whose manifest is of other bytes, or of another key.
#[derive(Debug, Clone)]
pub struct Tampered {
    pub key: String,
    /// The manifest's key beside it, and what it says.
    pub record: String,
    pub manifest: Manifest,
}

impl Tampered {
    /// What is wrong with it, told as [`Error::Mismatch`] (the object read whole for
    /// its checksum) when the manifest is its own.
    pub async fn error(&self, store: &Store, consequence: &str) -> Error {
        if self.manifest.key != self.key {
            return Error::OfDump {
                key: store.full_key(&self.key),
                source: Box::new(Error::Verify(format!(
                    "it does not match its manifest: the manifest is of {}",
                    self.manifest.key
                ))),
            };
        }
        let recorded = Recorded {
            key: &self.key,
            record: &self.record,
            sums: Sums { size: self.manifest.size, sha256: self.manifest.sha256.clone() },
        };
        match crate::integrity::stored(store, &self.key).await {
            Ok(found) => {
                crate::integrity::compare(store, &recorded, found, consequence).err().unwrap_or_else(|| Error::OfDump {
                    key: store.full_key(&self.key),
                    source: Box::new(Error::Verify("it changed while it was read".into())),
                })
            }
            Err(e) => Error::OfDump { key: store.full_key(&self.key), source: Box::new(e) },
        }
    }
}

impl Catalogue {
    pub async fn read(store: &Store, folder: &str) -> Result<Self, Error> {
        let prefix = store.path(folder);
        let objects: Vec<_> =
            store.objects.list(Some(&prefix)).try_collect().await.map_err(storage("listing the backups"))?;
        let strip = |p: &Path| -> String {
            let full = p.to_string();
            match store.destination.prefix.as_str() {
                "" => full,
                pre => full.strip_prefix(&format!("{pre}/")).unwrap_or(&full).to_owned(),
            }
        };
        // This folder's own objects: a database's base backups and WAL live in
        // folders under its dumps' (`base/`, `wal/`) and are not its dumps.
        let own = |key: &String| key.rsplit_once('/').is_some_and(|(parent, _)| parent == folder.trim_end_matches('/'));
        let keys: std::collections::BTreeMap<String, &object_store::ObjectMeta> =
            objects.iter().map(|m| (strip(&m.location), m)).filter(|(k, _)| own(k)).collect();
        let mut catalogue = Catalogue::default();
        for (key, meta) in &keys {
            let Some(manifest_key) = manifest_key_of(key) else { continue };
            if key.ends_with(".manifest.json") {
                continue;
            }
            let manifest = match keys.get(&manifest_key) {
                Some(_) => read_manifest(store, &manifest_key).await?,
                None => None,
            };
            let modified = || Timestamp::from_second(meta.last_modified.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH);
            match manifest {
                // Good only if what is stored is what the manifest vouches for.
                Some(m) if m.key == *key && m.size == meta.size => catalogue.good.push(m),
                Some(manifest) => {
                    catalogue.tampered.push(Tampered { key: key.clone(), record: manifest_key.clone(), manifest });
                    catalogue.partial.push((key.clone(), modified()));
                }
                None => catalogue.partial.push((key.clone(), modified())),
            }
        }
        catalogue.good.sort_by(|a, b| a.started.cmp(&b.started).then_with(|| a.key.cmp(&b.key)));
        Ok(catalogue)
    }

    /// The newest good backup.
    pub fn latest(&self) -> Option<&Manifest> {
        self.good.last()
    }

    /// Everything stored, for the retention plan, each good backup dated by when it
    /// started.
    pub fn stored(&self) -> Vec<Stored> {
        self.stored_at(|m| m.started)
    }

    /// Everything stored, each good backup dated by `when` (a base backup by its end).
    pub fn stored_at(&self, when: impl Fn(&Manifest) -> Timestamp) -> Vec<Stored> {
        let good = self.good.iter().map(|m| Stored { key: m.key.clone(), at: when(m), good: true });
        let partial = self.partial.iter().map(|(k, at)| Stored { key: k.clone(), at: *at, good: false });
        good.chain(partial).collect()
    }
}

/// A manifest, or `None` when it is not one of ours (unreadable JSON is not a good backup).
pub async fn read_manifest(store: &Store, key: &str) -> Result<Option<Manifest>, Error> {
    let bytes = match store.objects.get(&store.path(key)).await {
        Ok(r) => r.bytes().await.map_err(storage("reading a manifest"))?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(storage("reading a manifest")(e)),
    };
    Ok(serde_json::from_slice(&bytes).ok())
}
