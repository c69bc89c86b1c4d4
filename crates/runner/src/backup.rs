//! One backup run, streamed end to end:
//!
//! ```text
//! pg_dump/mysqldump/mongodump stdout ──► zstd ──► [age] ──► sha256 ──► multipart upload
//!                                                             (a few parts in flight at most)
//! tool exit 0? ─► complete upload ─► size and sha256 read back ─► manifest ─► retention
//!      │ no              │ failed            │ mismatch
//!      └─ abort upload   └─ nothing stored   └─ dump deleted          (nothing deleted)
//! ```
//!
//! Memory is bounded by the part size times the parts in flight, whatever the dump's
//! size; nothing touches local disk.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use jiff::{SignedDuration, Timestamp};
use object_store::buffered::BufWriter;
use object_store::{ObjectStoreExt, PutPayload};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::catalogue::Catalogue;
use crate::location::Database;
use crate::manifest::{self, Manifest};
use crate::progress::Progress;
use crate::retention;
use crate::seal::{self, Keys};
use crate::store::Store;
use crate::tool::{self, Password};
use crate::{Error, storage};

/// Upload part size: S3's minimum, so memory stays small.
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts uploading at once.
pub const PARTS_IN_FLIGHT: usize = 2;
/// How often a run tells its progress (a line on stderr, see [`Progress`]).
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
const CHUNK: usize = 256 * 1024;
/// Compressed chunks that may wait for the upload.
const COMPRESSED_CHUNKS_WAITING: usize = 4;

/// What to back up, where to, and what to keep.
#[derive(Debug, Clone)]
pub struct Backup {
    pub source: Database,
    pub password: Password,
    pub store: Store,
    /// The folder under the destination's prefix: `<namespace>/<backup>`.
    pub folder: String,
    pub retention: Option<SignedDuration>,
    pub keep_last: usize,
    /// The daily, weekly and monthly tiers of retention (dumps only).
    pub tiers: retention::Tiers,
    pub method: Method,
    /// Encrypt what is stored to the first of these keys (dumps only).
    pub keys: Option<Keys>,
}

/// What a run stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// A logical dump (`pg_dump`, `mysqldump`, `mongodump`): restorable into any server.
    #[default]
    Dump,
    /// A physical base backup (`pg_basebackup`, PostgreSQL only): the data directory,
    /// the base of point-in-time recovery from archived WAL.
    Base,
}

/// The result of a good run (also what the controller reads from the termination message).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The dump's key, as found in the bucket (with the destination's prefix).
    pub key: String,
    pub size: u64,
    pub sha256: String,
    pub uncompressed_size: u64,
    pub started: Timestamp,
    pub finished: Timestamp,
    pub duration_seconds: f64,
    /// Keys retention removed after this run.
    pub deleted: Vec<String>,
    /// The oldest good backup kept (for base backups: when it ended, the first point a
    /// recovery can reach).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_kept: Option<Timestamp>,
    /// Set when retention could not finish; the backup itself is good.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_error: Option<String>,
    /// The good dumps kept after retention, newest first, each with the rules that
    /// keep it (`last`, `age`, `daily`, `weekly`, `monthly`, or `unpruned`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<KeptReport>,
    /// For a base backup: the WAL it starts and ends at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wal: Option<crate::base::WalRange>,
}

impl Backup {
    pub async fn run(&self) -> Result<Report, Error> {
        let started = Timestamp::now();
        let started_at = std::time::Instant::now();
        // First contact: a wrong password or an unreachable host fails here, before
        // anything is uploaded.
        let server_version = tool::server_version(&self.source, &self.password)
            .await
            .map_err(tool::connecting("source", &self.source))?;
        // A base backup's WAL stays on the server (`_hold`) until the backup has read it.
        let (dump, extension, _hold) = match self.method {
            Method::Dump => (tool::dump(&self.source, &self.password)?, self.source.engine.extension(), None),
            Method::Base => (
                tool::base_backup(&self.source, &self.password),
                "base.tar",
                Some(tool::hold_wal(&self.source, &self.password).await?),
            ),
        };
        let tool_version = tool::tool_version(dump.program).await;
        let (mut key, manifest_key) = manifest::keys(&self.folder, started, extension);
        if self.keys.is_some() {
            key.push_str(seal::SUFFIX);
        }
        let path = self.store.path(&key);

        tracing::debug!(elapsed_ms = started_at.elapsed().as_millis() as u64, "dump starts");
        let mut running = dump.spawn(false, true)?;
        let stdout =
            running.child.stdout.take().ok_or(Error::Tool { tool: dump.program, detail: "no stdout".into() })?;
        let uncompressed = Arc::new(AtomicU64::new(0));
        let stored = Arc::new(AtomicU64::new(0));
        // Read on a thread of its own (see `compressing`): a blocking file.
        let stdout = std::fs::File::from(
            stdout
                .into_owned_fd()
                .map_err(|e| Error::Tool { tool: dump.program, detail: format!("its stdout: {e}") })?,
        );
        let _telling = tell_progress(&uncompressed, &stored);
        let mut zstd = compressing(stdout, uncompressed.clone());
        let mut upload = BufWriter::with_capacity(self.store.objects.clone(), path.clone(), PART_SIZE)
            .with_max_concurrency(PARTS_IN_FLIGHT);

        let streamed = stream(&mut zstd, &mut upload, self.keys.as_ref(), &stored).await.map_err(|e| match e {
            Error::Upload(e) => Error::Upload(format!("uploading {key} to {}: {e}", self.store.destination)),
            other => other,
        });
        if streamed.is_err() {
            // Nobody reads the dump any more: a tool still writing would block on the
            // full pipe for ever. Stop it (closing the pipe alone would do for most).
            let _ = running.child.start_kill();
        }
        drop(zstd);
        tracing::debug!(elapsed_ms = started_at.elapsed().as_millis() as u64, "dump streamed");
        // The tool's verdict comes before the upload is completed: a dump that died
        // mid-way must never become an object.
        let exited = running.finish_reporting().await;
        // A dump tool that dies ends the stream (its stdout closes), so a broken stream
        // is the upload's (or zstd's) fault, and the tool's exit is only its stopping.
        let ((size, sha256), report) = match streamed.and_then(|sums| exited.map(|report| (sums, report))) {
            Ok(done) => done,
            Err(e) => {
                // Nothing was completed yet: parts uploaded so far are dropped.
                let _ = upload.abort().await;
                return Err(e);
            }
        };
        // A failed shutdown has cleaned up after itself (a single put stored nothing, a
        // multipart upload is aborted by object_store); abort() would panic now.
        if let Err(e) = upload.shutdown().await {
            return Err(Error::Upload(format!("completing the upload of {key} to {}: {e}", self.store.destination)));
        }

        tracing::debug!(elapsed_ms = started_at.elapsed().as_millis() as u64, "upload completed");
        // A base backup is only good with the WAL range it needs.
        let wal = match self.method {
            Method::Dump => None,
            Method::Base => match crate::base::wal_range(&report) {
                Some(range) => Some(range),
                None => {
                    let _ = self.store.objects.delete(&path).await;
                    return Err(Error::Tool {
                        tool: dump.program,
                        detail: format!("it reported no write-ahead log start and end point: {report}"),
                    });
                }
            },
        };
        if let Err(e) = verify(&self.store, &key, size, &sha256).await {
            let _ = self.store.objects.delete(&path).await;
            return Err(e);
        }
        tracing::debug!(elapsed_ms = started_at.elapsed().as_millis() as u64, "verified");
        let finished = Timestamp::now();
        let manifest = Manifest {
            key: key.clone(),
            size,
            sha256: sha256.clone(),
            uncompressed_size: uncompressed.load(Ordering::Relaxed),
            compression: "zstd".into(),
            engine: self.source.engine.as_str().into(),
            source: self.source.to_string(),
            tool_version,
            server_version,
            started,
            finished,
            wal: wal.clone(),
            encryption: self.keys.as_ref().map(Keys::encryption),
        };
        let body = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Upload(format!("manifest: {e}")))?;
        if let Err(e) = self.store.objects.put(&self.store.path(&manifest_key), PutPayload::from(body)).await {
            let _ = self.store.objects.delete(&path).await;
            return Err(storage("writing the manifest")(e));
        }

        let Pruned { deleted, oldest: oldest_kept, kept, error: retention_error } = match self.prune(finished).await {
            Ok(pruned) => pruned,
            Err(e) => Pruned { error: Some(e.to_string()), ..Pruned::default() },
        };
        Ok(Report {
            key: self.store.full_key(&key),
            size,
            sha256,
            uncompressed_size: manifest.uncompressed_size,
            started,
            finished,
            duration_seconds: finished.duration_since(started).as_secs_f64(),
            deleted,
            oldest_kept,
            retention_error,
            kept,
            wal,
        })
    }

    /// Retention, after a good run only: the dumps (and their manifests) to go, and
    /// what is kept. Base backups are kept by recovery window (see
    /// [`retention::window_expired`]), and the WAL from before the oldest kept one's
    /// start goes with them. A delete the store refuses (an object lock, a policy) is
    /// reported and the object kept; the next good run tries again.
    async fn prune(&self, now: Timestamp) -> Result<Pruned, Error> {
        let catalogue = Catalogue::read(&self.store, &self.folder).await?;
        let (doomed, kept) = match self.method {
            Method::Dump => {
                let policy =
                    retention::Policy { retention: self.retention, keep_last: self.keep_last, tiers: self.tiers };
                let plan = retention::plan(&catalogue.stored(), now, &policy);
                let kept = plan
                    .kept
                    .iter()
                    .map(|k| KeptReport { at: k.at, why: k.why.iter().map(|w| w.as_str()).collect() })
                    .collect();
                (plan.doomed, kept)
            }
            Method::Base => (
                retention::window_expired(&catalogue.stored_at(|m| m.finished), now, self.retention, self.keep_last),
                Vec::new(),
            ),
        };
        let mut pruned = Pruned { kept, ..Pruned::default() };
        let mut refused = Vec::new();
        for key in &doomed {
            match self.delete_backup(key).await {
                Ok(()) => pruned.deleted.push(self.store.full_key(key)),
                Err(e) => refused.push(e.to_string()),
            }
        }
        // The oldest good backup still there (one whose delete was refused included).
        let gone = |key: &String| pruned.deleted.contains(&self.store.full_key(key));
        let oldest = catalogue.good.iter().find(|m| !gone(&m.key));
        if let (Method::Base, Some(wal)) = (self.method, oldest.and_then(|m| m.wal.as_ref())) {
            let database = self.folder.strip_suffix("/base").unwrap_or(&self.folder);
            // Pruning reads no WAL: no keys needed.
            let archive =
                crate::wal::Archive { store: self.store.clone(), folder: crate::wal::folder(database), keys: None };
            pruned.deleted.extend(archive.prune_before(&wal.start_wal).await?);
        }
        pruned.oldest = oldest.map(|m| if self.method == Method::Base { m.finished } else { m.started });
        if let Some(first) = refused.first() {
            pruned.error = Some(format!(
                "{} of {} expired backups could not be deleted and are kept (the next good run tries again): {first}",
                refused.len(),
                doomed.len()
            ));
        }
        Ok(pruned)
    }

    /// Delete one expired dump: its manifest first, so a dump without one is no longer
    /// counted as good; a manifest that cannot go keeps its dump too.
    async fn delete_backup(&self, key: &str) -> Result<(), Error> {
        let gone = |r: Result<(), object_store::Error>| match r {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        };
        if let Some(m) = manifest::manifest_key_of(key) {
            gone(self.store.objects.delete(&self.store.path(&m)).await)
                .map_err(storage("deleting an expired manifest"))?;
        }
        gone(self.store.objects.delete(&self.store.path(key)).await).map_err(storage("deleting an expired dump"))
    }
}

/// What retention did after a good run.
#[derive(Debug, Default)]
struct Pruned {
    deleted: Vec<String>,
    /// The oldest good backup left (for base backups, when it ended).
    oldest: Option<Timestamp>,
    kept: Vec<KeptReport>,
    /// Why retention did not finish; the backup itself is good.
    error: Option<String>,
}

/// A good dump kept by retention: when it was made and the rules that keep it.
#[derive(Debug, Clone, Serialize)]
pub struct KeptReport {
    pub at: Timestamp,
    pub why: Vec<&'static str>,
}

/// The dump compressed with zstd (with frame checksums, so a restore notices a
/// corrupted object before it loads it), counting the bytes read into `count`.
/// Compressing runs beside the rest, as the processes of `pg_dump | zstd | upload` do:
/// a blocking thread reads the dump and feeds zstd, whose own worker compresses (its
/// multithreaded mode with one worker, as the `zstd` CLI runs: whole jobs in one
/// buffer, a sixth faster than the streaming mode, whose window wraps); the
/// compressed chunks reach the upload through a channel, a few waiting at most.
fn compressing(dump: std::fs::File, count: Arc<AtomicU64>) -> impl AsyncRead + Unpin {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(COMPRESSED_CHUNKS_WAITING);
    tokio::task::spawn_blocking(move || {
        let counted = CountingRead { inner: dump, count };
        let encoder = zstd::stream::read::Encoder::new(counted, zstd::DEFAULT_COMPRESSION_LEVEL).and_then(|mut e| {
            e.include_checksum(true)?;
            e.multithread(1)?;
            // Jobs of 4 MiB: half the buffers of the default (8 MiB), the same speed, 1 %
            // larger; 1 MiB jobs were 9 % larger.
            e.set_parameter(zstd::stream::raw::CParameter::JobSize(ZSTD_JOB))?;
            Ok(e)
        });
        let mut zstd = match encoder {
            Ok(zstd) => zstd,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        loop {
            let mut chunk = vec![0u8; CHUNK];
            match read_full(&mut zstd, &mut chunk) {
                // The end: the channel closes.
                Ok(0) => break,
                Ok(n) => {
                    chunk.truncate(n);
                    // Nobody reads any more (the upload failed): stop, closing the pipe.
                    if tx.blocking_send(Ok(chunk.into())).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
            }
        }
    });
    let chunks = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    tokio_util::io::StreamReader::new(Box::pin(chunks))
}

/// The input of one zstd job (`ZSTD_c_jobSize`).
const ZSTD_JOB: u32 = 4 * 1024 * 1024;

/// Read into `buf` until it is full or the end: a whole chunk per message.
fn read_full(from: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match from.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Copy the compressed stream into the upload (encrypted with `keys` when given),
/// counting and hashing what is stored. The upload is written, not completed.
async fn stream<R: AsyncRead + Unpin>(
    from: &mut R,
    upload: &mut BufWriter,
    keys: Option<&Keys>,
    count: &AtomicU64,
) -> Result<(u64, String), Error> {
    let upload_error = |e: std::io::Error| Error::Upload(e.to_string());
    let mut stored = Stored { inner: upload, hasher: Sha256::new(), count };
    match keys {
        None => copy(from, &mut stored).await?,
        Some(keys) => copy(from, &mut keys.seal(&mut stored).await.map_err(upload_error)?).await?,
    }
    Ok((count.load(Ordering::Relaxed), hex::encode(stored.hasher.finalize())))
}

/// Read `from` to its end into `to`, then shut `to` down.
async fn copy<R: AsyncRead + Unpin, W: tokio::io::AsyncWrite + Unpin>(from: &mut R, to: &mut W) -> Result<(), Error> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = from
            .read(&mut buf)
            .await
            .map_err(|e| Error::Tool { tool: "zstd", detail: format!("reading the dump: {e}") })?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n]).await.map_err(|e| Error::Upload(e.to_string()))?;
    }
    to.shutdown().await.map_err(|e| Error::Upload(e.to_string()))
}

/// The upload as the stream's end sees it: what passes is counted and hashed (it is
/// what is stored), and shutting it down only flushes: the upload is completed after
/// the dump tool's verdict.
struct Stored<'a> {
    inner: &'a mut BufWriter,
    hasher: Sha256,
    /// Bytes stored (read by the progress lines meanwhile).
    count: &'a AtomicU64,
}

impl tokio::io::AsyncWrite for Stored<'_> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let poll = std::pin::Pin::new(&mut *self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = poll {
            self.hasher.update(&buf[..n]);
            self.count.fetch_add(n as u64, Ordering::Relaxed);
        }
        poll
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}

/// Read the stored object back: its size and checksum must be what was sent.
async fn verify(store: &Store, key: &str, size: u64, sha256: &str) -> Result<(), Error> {
    use futures::StreamExt;
    let path = store.path(key);
    let got = store.objects.get(&path).await.map_err(storage("reading the upload back"))?;
    if got.meta.size != size {
        return Err(Error::Verify(format!("{} holds {} bytes, {size} were sent", store.full_key(key), got.meta.size)));
    }
    let mut hasher = Sha256::new();
    let mut body = got.into_stream();
    while let Some(chunk) = body.next().await {
        hasher.update(&chunk.map_err(storage("reading the upload back"))?);
    }
    let stored = hex::encode(hasher.finalize());
    if stored != sha256 {
        return Err(Error::Verify(format!("{} has sha256 {stored}, {sha256} was sent", store.full_key(key))));
    }
    Ok(())
}

/// Tell the counts every [`PROGRESS_EVERY`] on stderr, as [`Progress`] lines, until
/// the returned guard is dropped.
fn tell_progress(read: &Arc<AtomicU64>, stored: &Arc<AtomicU64>) -> AbortOnDrop {
    let (read, stored) = (read.clone(), stored.clone());
    AbortOnDrop(tokio::spawn(async move {
        let mut every = tokio::time::interval(PROGRESS_EVERY);
        every.tick().await;
        loop {
            every.tick().await;
            let progress = Progress {
                at: Timestamp::now(),
                read_bytes: read.load(Ordering::Relaxed),
                stored_bytes: stored.load(Ordering::Relaxed),
            };
            eprintln!("{}", progress.line());
        }
    }))
}

/// Stops a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A reader that counts the bytes read through it.
struct CountingRead<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: std::io::Read> std::io::Read for CountingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.count.fetch_add(read as u64, Ordering::Relaxed);
        Ok(read)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use futures::StreamExt;
    use futures::stream::BoxStream;
    use object_store::local::LocalFileSystem;
    use object_store::path::Path;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
        PutOptions, PutPayload, PutResult,
    };

    use super::*;
    use crate::location::Destination;

    /// A store that refuses to delete what `locked` matches, as an object lock or a
    /// bucket policy does; everything else is a directory's.
    #[derive(Debug)]
    struct Locked {
        inner: Arc<LocalFileSystem>,
        locked: &'static str,
    }

    impl std::fmt::Display for Locked {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Locked({})", self.locked)
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Locked {
        async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> object_store::Result<PutResult> {
            self.inner.put_opts(l, p, o).await
        }
        async fn put_multipart_opts(
            &self,
            l: &Path,
            o: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(l, o).await
        }
        async fn get_opts(&self, l: &Path, o: GetOptions) -> object_store::Result<GetResult> {
            self.inner.get_opts(l, o).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            let (locked, inner) = (self.locked, self.inner.clone());
            locations
                .then(move |l| {
                    let inner = inner.clone();
                    async move {
                        let p = l?;
                        if p.as_ref().contains(locked) {
                            return Err(object_store::Error::PermissionDenied {
                                path: p.to_string(),
                                source: "object is under retention (locked)".into(),
                            });
                        }
                        inner.delete(&p).await.map(|()| p)
                    }
                })
                .boxed()
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(&self, from: &Path, to: &Path, o: CopyOptions) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, o).await
        }
    }

    /// A retention delete the store refuses is reported, the object kept, and every
    /// other expired backup still goes; the next run tries again.
    #[tokio::test]
    async fn a_refused_retention_delete_is_reported_never_fatal() {
        let dir = std::env::temp_dir().join(format!("bosun-locked-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let objects: Arc<dyn ObjectStore> =
            Arc::new(Locked { inner: Arc::new(LocalFileSystem::new_with_prefix(&dir).unwrap()), locked: "20260102" });
        let destination = Destination::parse(&format!("file://{}", dir.display())).unwrap();
        let store = Store { objects, destination };
        let folder = "ns/locked";
        for day in 1..=4 {
            let started: Timestamp = format!("2026-01-0{day}T02:00:00Z").parse().unwrap();
            let (key, manifest_key) = manifest::keys(folder, started, "pgdump");
            store.objects.put(&store.path(&key), PutPayload::from_static(b"dump")).await.unwrap();
            let m = Manifest {
                key: key.clone(),
                size: 4,
                sha256: String::new(),
                uncompressed_size: 4,
                compression: "zstd".into(),
                engine: "postgresql".into(),
                source: String::new(),
                tool_version: String::new(),
                server_version: String::new(),
                started,
                finished: started,
                wal: None,
                encryption: None,
            };
            let body = serde_json::to_vec(&m).unwrap();
            store.objects.put(&store.path(&manifest_key), PutPayload::from(body)).await.unwrap();
        }
        let backup = Backup {
            source: crate::location::Database::parse("--source", "postgresql://u@h/db").unwrap(),
            password: Password::default(),
            store: store.clone(),
            folder: folder.into(),
            retention: Some(SignedDuration::from_hours(24)),
            keep_last: 1,
            tiers: retention::Tiers::default(),
            method: Method::Dump,
            keys: None,
        };
        let pruned = backup.prune("2026-01-10T00:00:00Z".parse().unwrap()).await.expect("never fatal");
        let error = pruned.error.expect("the refusal is reported");
        assert!(error.starts_with("1 of 3 expired backups could not be deleted and are kept"), "{error}");
        assert!(error.contains("20260102") && error.contains("locked"), "{error}");
        assert_eq!(pruned.deleted.len(), 2, "the other two went: {:?}", pruned.deleted);
        let left = Catalogue::read(&store, folder).await.unwrap();
        let days: Vec<String> = left.good.iter().map(|m| m.started.to_string()).collect();
        assert_eq!(days, ["2026-01-02T02:00:00Z", "2026-01-04T02:00:00Z"], "the locked one and the newest");
        assert_eq!(pruned.oldest, Some("2026-01-02T02:00:00Z".parse().unwrap()), "the oldest still there");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
