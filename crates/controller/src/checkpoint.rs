//! bosun's record of what it applied to each child ([`Applied`]), kept across restarts
//! and leader changes, so that a new process vouches for the children it left as they
//! were instead of applying every one of them again.
//!
//! ```text
//!  every Owned<C> cache ─register─▶ Checkpoints ─2 s after changes stop (≤ 10 s)─▶ ConfigMap <lease>-applied-<key>
//!                                        ▲                                  (own namespace, zstd JSON)
//!  start or leadership won ─load──────────┘ (before the first reconcile)
//! ```
//!
//! Without it, the first reconcile of every parent after a start knows nothing of its
//! children ([`crate::changes::Drift::Unrecorded`]) and applies each one: nothing is
//! stored (the apiserver sees no change), but 10,000 WebApps cost 20,000 requests.
//!
//! A checkpoint is only ever a set of facts that were true when it was taken: "bosun
//! applied content with this fingerprint to the object with this uid, and it was
//! stored at this version". A stale one (taken before later applies, or before
//! someone's edit) cannot make bosun skip a needed apply: the cached object's newer
//! version or other uid shows as drift and the child is applied, exactly as with the
//! in-memory record of a running bosun. A lost or unreadable one costs what a start
//! always cost. Only the replica that leads writes, and it writes nothing at rest.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use crate::changes::{Applied, Version};

/// Selects the checkpoints among the ConfigMaps of bosun's namespace.
pub const LABEL: &str = "bosun.dev/checkpoint";
/// `<lease>/<key>`: whose records a checkpoint holds.
const RECORDS_OF: &str = "bosun.dev/records-of";
/// The binaryData key of the compressed records.
const DATA: &str = "applied.json.zst";
const MANAGER: &str = "bosun-checkpoint";
/// Compressed, a checkpoint stays well under a ConfigMap's 1 MiB; one that would not
/// is not written (a start then applies that kind's children, as it always did).
const MAX_BYTES: usize = 768 * 1024;
/// The leader writes the checkpoints that changed once their records have been quiet
/// this long (the end of a convergence, a burst of edits)…
pub const QUIET: Duration = Duration::from_secs(2);
/// …or, while they keep changing, this long after the first unwritten change.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// One record: namespace, name, uid, fingerprint, version (`g<generation>` or
/// `r<resourceVersion>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry(pub String, pub String, pub String, pub u64, pub String);

impl Entry {
    pub fn new(namespace: &str, name: &str, applied: &Applied) -> Self {
        let version = match &applied.version {
            Version::Generation(g) => format!("g{g}"),
            Version::Resource(rv) => format!("r{rv}"),
        };
        Entry(namespace.to_owned(), name.to_owned(), applied.uid.clone(), applied.fingerprint, version)
    }

    /// `(namespace, name, record)`, or `None` for a version in no known form.
    pub fn record(self) -> Option<(String, String, Applied)> {
        let Entry(namespace, name, uid, fingerprint, version) = self;
        let version = match version.split_at_checked(1)? {
            ("g", g) => Version::Generation(g.parse().ok()?),
            ("r", rv) => Version::Resource(rv.to_owned()),
            _ => return None,
        };
        Some((namespace, name, Applied { uid, fingerprint, version }))
    }
}

/// A cache whose records are checkpointed ([`crate::children::Owned`]).
pub trait Checkpointed: Send + Sync {
    /// A number that moves whenever the records change.
    fn changes(&self) -> u64;
    /// The records worth keeping: those of objects the cache still holds.
    fn export(&self) -> Vec<Entry>;
    /// Take `entries` as records where there is none yet; how many were taken.
    fn import(&self, entries: Vec<Entry>) -> usize;
}

/// A count of changes, shared by a cache's clones.
#[derive(Clone, Debug, Default)]
pub struct Changes(Arc<AtomicU64>);

impl Changes {
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Where the records are kept: the lease's name (one checkpoint per set of replicas)
/// and bosun's namespace.
#[derive(Clone, Debug)]
pub struct Place {
    pub namespace: String,
    pub lease: String,
}

impl Place {
    fn name(&self, key: &str) -> String {
        let name: String = format!("{}-applied-{key}", self.lease)
            .to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' })
            .take(253)
            .collect();
        name.trim_end_matches(['-', '.']).to_owned()
    }

    fn records_of(&self, key: &str) -> String {
        format!("{}/{key}", self.lease)
    }
}

/// Every checkpointed cache of this process, by key, and what was last written of each.
#[derive(Default)]
pub struct Checkpoints {
    inner: Mutex<Registry>,
    written: Mutex<HashMap<String, u64>>,
}

#[derive(Default)]
struct Registry {
    caches: BTreeMap<String, Arc<dyn Checkpointed>>,
    /// Records loaded for a cache that has not started yet: it takes them when it does.
    pending: HashMap<String, Vec<Entry>>,
}

impl std::fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoints").field("caches", &self.lock().caches.keys().collect::<Vec<_>>()).finish()
    }
}

impl Checkpoints {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register `cache` under `key` (kind, namespace, selected app); a second cache
    /// with the same key gets `key-2`, and so on, in the order they start. Records
    /// already loaded for it are taken now.
    pub fn register(&self, key: &str, cache: Arc<dyn Checkpointed>) {
        let mut registry = self.lock();
        let key = (1..)
            .map(|i| if i == 1 { key.to_owned() } else { format!("{key}-{i}") })
            .find(|k| !registry.caches.contains_key(k))
            .unwrap_or_else(|| key.to_owned());
        if let Some(entries) = registry.pending.remove(&key) {
            cache.import(entries);
        }
        registry.caches.insert(key, cache);
    }

    /// Give `entries` to the cache of `key`, or keep them until it registers.
    fn take(&self, key: &str, entries: Vec<Entry>) -> usize {
        let mut registry = self.lock();
        match registry.caches.get(key) {
            Some(cache) => cache.import(entries),
            None => {
                let n = entries.len();
                registry.pending.insert(key.to_owned(), entries);
                n
            }
        }
    }

    /// Read the checkpoints at `place` into the registered caches; returns how many
    /// records were taken. Unreadable ones are skipped with a warning.
    pub async fn load(&self, client: &Client, place: &Place) -> Result<usize, kube::Error> {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &place.namespace);
        let list = api.list(&ListParams::default().labels(LABEL)).await?;
        let mut taken = 0;
        for cm in list.items {
            let name = cm.metadata.name.clone().unwrap_or_default();
            let of = cm.metadata.annotations.as_ref().and_then(|a| a.get(RECORDS_OF)).cloned().unwrap_or_default();
            let Some(key) = of.strip_prefix(&format!("{}/", place.lease)) else { continue };
            match decode(&cm) {
                Ok(entries) => {
                    let n = self.take(key, entries);
                    debug!(checkpoint = %name, records = n, "checkpoint loaded");
                    taken += n;
                }
                Err(err) => warn!(checkpoint = %name, %err, "checkpoint unreadable; its children are applied once"),
            }
        }
        Ok(taken)
    }

    /// Write the checkpoint of every cache whose records changed since the last write.
    pub async fn save(&self, client: &Client, place: &Place) {
        let caches: Vec<(String, Arc<dyn Checkpointed>)> =
            self.lock().caches.iter().map(|(k, c)| (k.clone(), c.clone())).collect();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &place.namespace);
        for (key, cache) in caches {
            let changes = cache.changes();
            let last = self.written.lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied();
            if last == Some(changes) || (last.is_none() && changes == 0) {
                continue;
            }
            let entries = cache.export();
            let records = entries.len();
            let data = match encode(&entries) {
                Ok(data) if data.len() <= MAX_BYTES => data,
                Ok(data) => {
                    warn!(%key, records, bytes = data.len(), "too many records for one checkpoint; not written");
                    continue;
                }
                Err(err) => {
                    warn!(%key, %err, "could not compress the checkpoint");
                    continue;
                }
            };
            let cm = checkpoint(place, &key, data);
            let name = cm.metadata.name.clone().unwrap_or_default();
            match api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&cm)).await {
                Ok(_) => {
                    debug!(checkpoint = %name, records, "checkpoint written");
                    self.written.lock().unwrap_or_else(|e| e.into_inner()).insert(key, changes);
                }
                Err(err) => warn!(checkpoint = %name, %err, "could not write the checkpoint; retrying later"),
            }
        }
    }

    /// Write the changed checkpoints after [`QUIET`] without changes, or [`INTERVAL`]
    /// after the first unwritten one, until `stop` resolves. At rest nothing is written.
    pub async fn keep(&self, client: &Client, place: &Place, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let mut seen = self.changes();
        let mut pending = Pending::default();
        loop {
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            let now = self.changes();
            if pending.observe(now != seen, Instant::now()) {
                self.save(client, place).await;
            }
            seen = now;
        }
    }

    /// The sum of every cache's changes.
    fn changes(&self) -> u64 {
        self.lock().caches.values().map(|c| c.changes()).fold(0, u64::wrapping_add)
    }

    /// The last write, at exit: bounded, as an apiserver that is gone must not keep a
    /// stopping bosun alive (a checkpoint not written costs one apply per child).
    pub async fn flush(&self, client: &Client, place: &Place) {
        if tokio::time::timeout(Duration::from_secs(5), self.save(client, place)).await.is_err() {
            warn!("the checkpoints were not written within 5 s at exit");
        }
    }

    /// Load at `place`, bounded: a start never waits long on its checkpoints.
    pub async fn load_bounded(&self, client: &Client, place: &Place) {
        match tokio::time::timeout(Duration::from_secs(5), self.load(client, place)).await {
            Ok(Ok(n)) => info!(records = n, namespace = %place.namespace, "loaded the records of bosun's last applies"),
            Ok(Err(err)) => warn!(%err, "could not read the checkpoints; every child is applied once"),
            Err(_) => warn!("the checkpoints were not read within 5 s; every child is applied once"),
        }
    }
}

/// When to write: the first unwritten change, and the last.
#[derive(Debug, Default)]
struct Pending {
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Pending {
    /// Note whether the records `changed` since the last look, at `now`; whether to
    /// write now.
    fn observe(&mut self, changed: bool, now: Instant) -> bool {
        if changed {
            self.first.get_or_insert(now);
            self.last = Some(now);
        }
        let (Some(first), Some(last)) = (self.first, self.last) else { return false };
        let due = now.duration_since(last) >= QUIET || now.duration_since(first) >= INTERVAL;
        if due {
            *self = Pending::default();
        }
        due
    }
}

/// The ConfigMap holding `data`, the records of `key`.
fn checkpoint(place: &Place, key: &str, data: Vec<u8>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(place.name(key)),
            namespace: Some(place.namespace.clone()),
            labels: Some(BTreeMap::from([
                (LABEL.to_owned(), "applied".to_owned()),
                ("app.kubernetes.io/name".to_owned(), "bosun".to_owned()),
            ])),
            annotations: Some(BTreeMap::from([(RECORDS_OF.to_owned(), place.records_of(key))])),
            ..ObjectMeta::default()
        },
        binary_data: Some(BTreeMap::from([(DATA.to_owned(), ByteString(data))])),
        ..ConfigMap::default()
    }
}

fn encode(entries: &[Entry]) -> std::io::Result<Vec<u8>> {
    let json = serde_json::to_vec(entries)?;
    // In one call, with the size known: zstd sizes its window and context to the
    // input. A streaming encoder sets up for any length: heaptrack counted 3.7 MiB of
    // its contexts at bosun's peak over 3,000 WebApps.
    zstd::bulk::compress(&json, 3)
}

fn decode(cm: &ConfigMap) -> Result<Vec<Entry>, String> {
    let data = cm.binary_data.as_ref().and_then(|d| d.get(DATA)).ok_or_else(|| format!("no binaryData {DATA}"))?;
    // Bounded: a checkpoint never decompresses past what a ConfigMap's size allows of it.
    let mut json = Vec::new();
    zstd::Decoder::new(data.0.as_slice())
        .map_err(|e| e.to_string())?
        .take(64 * 1024 * 1024)
        .read_to_end(&mut json)
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&json).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(uid: &str, version: Version) -> Applied {
        Applied { uid: uid.to_owned(), fingerprint: u64::MAX - 7, version }
    }

    #[test]
    fn records_survive_the_round_trip() {
        let records = vec![
            Entry::new("shop", "web", &applied("u-1", Version::Generation(3))),
            Entry::new("shop", "web-svc", &applied("u-2", Version::Resource("12345".into()))),
        ];
        let cm = checkpoint(&Place { namespace: "bosun-system".into(), lease: "bosun-leader".into() }, "service", {
            encode(&records).expect("encode")
        });
        let back: Vec<_> = decode(&cm).expect("decode").into_iter().filter_map(Entry::record).collect();
        assert_eq!(
            back,
            vec![
                ("shop".into(), "web".into(), applied("u-1", Version::Generation(3))),
                ("shop".into(), "web-svc".into(), applied("u-2", Version::Resource("12345".into()))),
            ]
        );
    }

    #[test]
    fn a_version_in_no_known_form_is_no_record() {
        assert_eq!(Entry("a".into(), "b".into(), "u".into(), 1, "x9".into()).record(), None);
        assert_eq!(Entry("a".into(), "b".into(), "u".into(), 1, "gnine".into()).record(), None);
        assert_eq!(Entry("a".into(), "b".into(), "u".into(), 1, String::new()).record(), None);
    }

    #[test]
    fn garbage_is_reported_not_taken() {
        let mut cm = ConfigMap::default();
        assert!(decode(&cm).unwrap_err().contains(DATA));
        cm.binary_data = Some(BTreeMap::from([(DATA.to_owned(), ByteString(b"not zstd".to_vec()))]));
        assert!(decode(&cm).is_err());
        let not_records = zstd::encode_all(&b"{\"a\": 1}"[..], 3).expect("zstd");
        cm.binary_data = Some(BTreeMap::from([(DATA.to_owned(), ByteString(not_records))]));
        assert!(decode(&cm).is_err());
    }

    #[test]
    fn names_are_valid_object_names() {
        let place = Place { namespace: "ns".into(), lease: "bosun-leader".into() };
        assert_eq!(place.name("deployment"), "bosun-leader-applied-deployment");
        assert_eq!(place.name("ConfigMap-shop_x-postgresql"), "bosun-leader-applied-configmap-shop-x-postgresql");
        assert!(place.name(&"x".repeat(400)).len() <= 253);
    }

    #[test]
    fn checkpoints_are_written_when_changes_pause_or_keep_on_too_long() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut pending = Pending::default();
        assert!(!pending.observe(false, at(0)), "nothing changed: nothing to write");
        assert!(!pending.observe(true, at(500)));
        assert!(!pending.observe(false, at(2000)), "quiet for 1.5 s only");
        assert!(pending.observe(false, at(2500)), "quiet for 2 s");
        assert!(!pending.observe(false, at(9000)), "written: nothing pending");
        // Changes every half second: written 10 s after the first.
        let writes: Vec<u64> =
            (1..=30u64).map(|i| 10_000 + i * 500).filter(|&ms| pending.observe(true, at(ms))).collect();
        assert_eq!(writes, vec![20_500]);
    }

    /// A cache for the registry's tests.
    #[derive(Default)]
    struct Cache {
        records: Mutex<Vec<Entry>>,
        changes: Changes,
    }

    impl Checkpointed for Cache {
        fn changes(&self) -> u64 {
            self.changes.get()
        }
        fn export(&self) -> Vec<Entry> {
            self.records.lock().expect("lock").clone()
        }
        fn import(&self, entries: Vec<Entry>) -> usize {
            let n = entries.len();
            self.records.lock().expect("lock").extend(entries);
            n
        }
    }

    #[test]
    fn a_second_cache_of_one_key_gets_its_own() {
        let checkpoints = Checkpoints::default();
        checkpoints.register("configmap", Arc::new(Cache::default()));
        checkpoints.register("configmap", Arc::new(Cache::default()));
        checkpoints.register("configmap", Arc::new(Cache::default()));
        let keys: Vec<String> = checkpoints.lock().caches.keys().cloned().collect();
        assert_eq!(keys, ["configmap", "configmap-2", "configmap-3"]);
    }

    #[test]
    fn records_loaded_before_their_cache_starts_wait_for_it() {
        let checkpoints = Checkpoints::default();
        let record = Entry::new("shop", "web", &applied("u-1", Version::Generation(1)));
        assert_eq!(checkpoints.take("deployment", vec![record.clone()]), 1);
        let cache = Arc::new(Cache::default());
        checkpoints.register("deployment", cache.clone());
        assert_eq!(cache.export(), vec![record.clone()]);
        let later = Arc::new(Cache::default());
        checkpoints.register("service", later.clone());
        assert_eq!(checkpoints.take("service", vec![record.clone()]), 1);
        assert_eq!(later.export(), vec![record]);
    }
}
