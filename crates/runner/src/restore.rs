//! One restore, streamed: object ──► sha256 ──► [age -d] ──► zstd -d ──► pg_restore/mysql/mongorestore.
//!
//! It refuses a target that already holds tables unless told to overwrite. A dump that
//! is not what its manifest vouches for is told as exactly that ([`crate::integrity`]):
//! at once when its size differs, else when reading it breaks (age's authentication
//! and zstd's frame checksum stop a changed object early) or at its end.

use futures::TryStreamExt;
use jiff::Timestamp;
use object_store::ObjectStoreExt;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::io::StreamReader;

use crate::catalogue::{Catalogue, read_manifest};
use crate::integrity::{self, Recorded, Sums};
use crate::location::{Database, Engine};
use crate::manifest::manifest_key_of;
use crate::seal::{self, Keys};
use crate::store::Store;
use crate::tool::{self, Password};
use crate::{Error, storage};

const CHUNK: usize = 256 * 1024;

/// What a dump found changed left behind, before the restore tool started.
const UNTOUCHED: &str = "; the target was not touched";
/// After it started.
const PARTIAL: &str = "; the target may hold a partial restore";

/// Which dump to load.
#[derive(Debug, Clone)]
pub enum Pick {
    /// This key (relative to the destination's prefix, or with it).
    Key(String),
    /// The newest good backup in this folder (`<namespace>/<backup>`).
    Latest { folder: String },
}

#[derive(Debug, Clone)]
pub struct Restore {
    pub store: Store,
    pub pick: Pick,
    pub target: Database,
    pub password: Password,
    pub overwrite: bool,
    /// The identities that may open an encrypted dump (a plain one needs none).
    pub keys: Option<Keys>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The key restored, as found in the bucket.
    pub key: String,
    pub size: u64,
    pub started: Timestamp,
    pub finished: Timestamp,
    pub duration_seconds: f64,
}

impl Restore {
    pub async fn run(&self) -> Result<Report, Error> {
        let started = Timestamp::now();
        let (key, manifest) = self.choose().await?;
        if manifest.as_ref().is_some_and(|m| m.wal.is_some()) || key.contains(".base.tar.zst") {
            return Err(Error::Refused(format!(
                "{key} is a physical base backup: it becomes a data directory (PostgreSQL's recovery), it is not loaded into a running database"
            )));
        }
        if manifest.as_ref().is_some_and(|m| m.engine != self.target.engine.as_str()) {
            let engine = manifest.as_ref().map(|m| m.engine.clone()).unwrap_or_default();
            return Err(Error::Refused(format!(
                "{} is a {engine} dump; the target is {}",
                self.store.full_key(&key),
                self.target.engine.as_str()
            )));
        }
        // Encrypted by its manifest's word, or by its name when it has none.
        let sealed_to = manifest.as_ref().and_then(|m| m.encryption.as_ref()).map(|e| e.recipient.as_str());
        let sealed = sealed_to.is_some() || key.ends_with(seal::SUFFIX);
        let what = self.store.full_key(&key);
        if sealed && self.keys.is_none() {
            return Err(seal::no_keys(&what, sealed_to));
        }
        if !self.overwrite {
            let tables = tool::table_count(&self.target, &self.password)
                .await
                .map_err(tool::connecting("target", &self.target))?;
            if tables > 0 {
                return Err(Error::Refused(format!(
                    "the target database {} already holds {tables} tables; restore into an empty database, \
                     or pass --overwrite (spec.overwrite: true) to replace what the dump contains",
                    self.target
                )));
            }
        }

        // What the manifest vouches for: a dump that is not that is told as changed,
        // before (instead of) whatever reading it then breaks on.
        let record = manifest_key_of(&key).unwrap_or_default();
        let recorded = manifest.as_ref().map(|m| Recorded {
            key: &key,
            record: &record,
            sums: Sums { size: m.size, sha256: m.sha256.clone() },
        });
        let recorded = recorded.as_ref();
        let explained = |failed: Error, consequence: &'static str| async move {
            match recorded {
                Some(r) => integrity::explain(&self.store, r, failed, consequence).await,
                None => failed,
            }
        };
        let got = self.store.objects.get(&self.store.path(&key)).await.map_err(storage("downloading the dump"))?;
        let size = got.meta.size;
        if let Some(r) = recorded.filter(|r| r.sums.size != size) {
            let found = integrity::stored(&self.store, &key).await?;
            integrity::compare(&self.store, r, found, UNTOUCHED)?;
        }
        let mut hasher = Sha256::new();
        let bytes = got.into_stream().map_err(std::io::Error::other).inspect_ok(|chunk| hasher.update(chunk));
        let reader = StreamReader::new(bytes);
        // Opened before the target is touched: a wrong key changes nothing.
        let compressed = match seal::unsealed(self.keys.as_ref(), reader, sealed, &what, sealed_to).await {
            Ok(compressed) => compressed,
            Err(e) => return Err(explained(e, UNTOUCHED).await),
        };
        let mut unzstd = async_compression::tokio::bufread::ZstdDecoder::new(compressed);

        let older_server = match self.target.engine {
            Engine::Postgresql => {
                let server = tool::postgres_major(&self.target, &self.password)
                    .await
                    .map_err(tool::connecting("target", &self.target))?;
                tool::major_of(&tool::tool_version("pg_restore").await).is_some_and(|client| server < client)
            }
            _ => false,
        };
        let tool = tool::restore(&self.target, &self.password, self.overwrite, older_server)?;
        let mut running = tool.spawn(true, false)?;
        let mut stdin =
            running.child.stdin.take().ok_or(Error::Tool { tool: tool.program, detail: "no stdin".into() })?;
        let fed = feed(&mut unzstd, &mut stdin).await;
        if let Err(Broken::Reading(_)) = &fed {
            // A download that broke off must not look like the end of the dump to the
            // tool: mysql would commit the statements it got and exit 0.
            let _ = running.child.start_kill();
        }
        drop(stdin);
        let exited = running.finish().await;
        drop(unzstd);
        let failed = match fed {
            Err(Broken::Reading(e)) => Some(e),
            // The tool stopped reading: its own message says why.
            Err(Broken::Writing(e)) => Some(exited.err().unwrap_or(e)),
            Ok(()) => exited.err(),
        };
        if let Some(e) = failed {
            return Err(explained(e, PARTIAL).await);
        }
        if let Some(r) = recorded {
            let found = Sums { size, sha256: hex::encode(hasher.finalize()) };
            integrity::compare(&self.store, r, found, PARTIAL)?;
        }
        let finished = Timestamp::now();
        Ok(Report {
            key: self.store.full_key(&key),
            size,
            started,
            finished,
            duration_seconds: finished.duration_since(started).as_secs_f64(),
        })
    }

    /// The key and, when there is one, its manifest.
    async fn choose(&self) -> Result<(String, Option<crate::manifest::Manifest>), Error> {
        match &self.pick {
            Pick::Latest { folder } => {
                let catalogue = Catalogue::read(&self.store, folder).await?;
                let latest = catalogue
                    .latest()
                    .ok_or_else(|| Error::Refused(format!("no good backup under {}", self.store.full_key(folder))))?;
                Ok((latest.key.clone(), Some(latest.clone())))
            }
            Pick::Key(key) => {
                let prefix = format!("{}/", self.store.destination.prefix);
                let key = key.strip_prefix(prefix.as_str()).unwrap_or(key).to_owned();
                let manifest = match manifest_key_of(&key) {
                    Some(m) => read_manifest(&self.store, &m).await?,
                    None => None,
                };
                Ok((key, manifest))
            }
        }
    }
}

/// Where feeding the restore tool broke off.
enum Broken {
    /// Downloading or decompressing the dump.
    Reading(Error),
    /// Writing to the tool, which has stopped reading (usually: it failed).
    Writing(Error),
}

async fn feed<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(from: &mut R, to: &mut W) -> Result<(), Broken> {
    let reading =
        |e: std::io::Error| Broken::Reading(Error::Tool { tool: "downloading the dump", detail: e.to_string() });
    let writing = |e: std::io::Error| {
        Broken::Writing(Error::Tool { tool: "restore", detail: format!("streaming the dump: {e}") })
    };
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = from.read(&mut buf).await.map_err(reading)?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n]).await.map_err(writing)?;
    }
    to.shutdown().await.map_err(writing)
}
