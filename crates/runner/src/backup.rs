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
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::catalogue::Catalogue;
use crate::location::Database;
use crate::manifest::{self, Manifest};
use crate::retention;
use crate::seal::{self, Keys};
use crate::store::Store;
use crate::tool::{self, Password};
use crate::{Error, storage};

/// Upload part size: S3's minimum, so memory stays small.
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts uploading at once.
pub const PARTS_IN_FLIGHT: usize = 2;
const CHUNK: usize = 256 * 1024;

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
    /// For a base backup: the WAL it starts and ends at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wal: Option<crate::base::WalRange>,
}

impl Backup {
    pub async fn run(&self) -> Result<Report, Error> {
        let started = Timestamp::now();
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

        let mut running = dump.spawn(false, true)?;
        let stdout =
            running.child.stdout.take().ok_or(Error::Tool { tool: dump.program, detail: "no stdout".into() })?;
        let uncompressed = Arc::new(AtomicU64::new(0));
        let counted = Counting { inner: stdout, count: uncompressed.clone() };
        // Frame checksums let a restore notice a corrupted object before it loads it.
        let mut zstd = async_compression::tokio::bufread::ZstdEncoder::with_quality_and_params(
            BufReader::with_capacity(CHUNK, counted),
            async_compression::Level::Default,
            &[async_compression::zstd::CParameter::checksum_flag(true)],
        );
        let mut upload = BufWriter::with_capacity(self.store.objects.clone(), path.clone(), PART_SIZE)
            .with_max_concurrency(PARTS_IN_FLIGHT);

        let streamed = stream(&mut zstd, &mut upload, self.keys.as_ref()).await.map_err(|e| match e {
            Error::Upload(e) => Error::Upload(format!("uploading {key} to {}: {e}", self.store.destination)),
            other => other,
        });
        if streamed.is_err() {
            // Nobody reads the dump any more: a tool still writing would block on the
            // full pipe for ever. Stop it (closing the pipe alone would do for most).
            let _ = running.child.start_kill();
        }
        drop(zstd);
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

        let (deleted, oldest_kept, retention_error) = match self.prune(finished).await {
            Ok((deleted, oldest)) => (deleted, oldest, None),
            Err(e) => (Vec::new(), None, Some(e.to_string())),
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
            wal,
        })
    }

    /// Retention, after a good run only: the dumps (and their manifests) to go, and
    /// when the oldest kept one was made. Base backups are kept by recovery window
    /// (see [`retention::window_expired`]), and the WAL from before the oldest kept
    /// one's start goes with them.
    async fn prune(&self, now: Timestamp) -> Result<(Vec<String>, Option<Timestamp>), Error> {
        let catalogue = Catalogue::read(&self.store, &self.folder).await?;
        let doomed = match self.method {
            Method::Dump => retention::expired(&catalogue.stored(), now, self.retention, self.keep_last),
            Method::Base => {
                retention::window_expired(&catalogue.stored_at(|m| m.finished), now, self.retention, self.keep_last)
            }
        };
        let mut deleted = Vec::new();
        for key in &doomed {
            // The manifest first: a dump without one is no longer counted as good.
            if let Some(m) = manifest::manifest_key_of(key) {
                match self.store.objects.delete(&self.store.path(&m)).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(storage("deleting an expired manifest")(e)),
                }
            }
            match self.store.objects.delete(&self.store.path(key)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(storage("deleting an expired dump")(e)),
            }
            deleted.push(self.store.full_key(key));
        }
        let oldest = catalogue.good.iter().find(|m| !doomed.contains(&m.key));
        if let (Method::Base, Some(wal)) = (self.method, oldest.and_then(|m| m.wal.as_ref())) {
            let database = self.folder.strip_suffix("/base").unwrap_or(&self.folder);
            let archive = crate::wal::Archive { store: self.store.clone(), folder: crate::wal::folder(database) };
            deleted.extend(archive.prune_before(&wal.start_wal).await?);
        }
        let oldest_at = oldest.map(|m| if self.method == Method::Base { m.finished } else { m.started });
        Ok((deleted, oldest_at))
    }
}

/// Copy the compressed stream into the upload (encrypted with `keys` when given),
/// counting and hashing what is stored. The upload is written, not completed.
async fn stream<R: AsyncRead + Unpin>(
    from: &mut R,
    upload: &mut BufWriter,
    keys: Option<&Keys>,
) -> Result<(u64, String), Error> {
    let upload_error = |e: std::io::Error| Error::Upload(e.to_string());
    let mut stored = Stored { inner: upload, hasher: Sha256::new(), size: 0 };
    match keys {
        None => copy(from, &mut stored).await?,
        Some(keys) => copy(from, &mut keys.seal(&mut stored).await.map_err(upload_error)?).await?,
    }
    Ok((stored.size, hex::encode(stored.hasher.finalize())))
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
    size: u64,
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
            self.size += n as u64;
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

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Counting<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        self.count.fetch_add(read as u64, Ordering::Relaxed);
        poll
    }
}
