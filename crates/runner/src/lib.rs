//! The backup and restore data plane behind `bosun backup run`, `bosun backup list`
//! and `bosun restore run`. No Kubernetes in it: a streaming program a person can run
//! by hand and the tests run against real servers.
//!
//! ```text
//! location ── what the URLs name        tool ── the databases' own dump/restore programs
//! store ───── object_store per provider  manifest ── keys and what a good backup is
//! backup ──── dump → zstd → upload → verify → manifest → retention
//! base ────── a physical base backup (pg_basebackup) instead of a dump: its WAL range
//! restore ─── download → zstd -d → restore tool     catalogue ── a Backup's folder
//! retention ─ which dumps a good run may delete (pure)
//! wal ─────── a PostgreSQL's archive_command and restore_command: WAL written once
//! recover ─── a new data directory from a base backup, to recover to a target
//! seal ────── client-side encryption (age) of what a run stores, and opening it again
//! verify ──── the newest good dump restored into a throwaway server and checked
//! integrity ─ a stored object that is not what its manifest says, named as that
//! ```

pub mod backup;
pub mod base;
pub mod catalogue;
pub mod cli;
pub mod integrity;
pub mod location;
pub mod manifest;
pub mod recover;
pub mod restore;
pub mod seal;
pub use bosun_backup_model::{progress, retention};
pub mod store;
pub mod tool;
pub mod verify;
pub mod wal;

/// Why a run failed; the message says which step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{tool} failed: {detail}")]
    Tool { tool: &'static str, detail: String },
    /// The first contact with a database (its version, its tables) failed: a wrong
    /// password, an unreachable host, a missing database.
    #[error("connecting to the {role} {database} failed: {detail}")]
    Connect { role: &'static str, database: String, detail: String },
    #[error("upload failed: {0}")]
    Upload(String),
    #[error("verification failed: {0}")]
    Verify(String),
    #[error("{step} failed: {source}")]
    Storage {
        step: &'static str,
        #[source]
        source: object_store::Error,
    },
    #[error("refused: {0}")]
    Refused(String),
    /// The encryption keys: unreadable, or none of them opens what is stored.
    #[error("encryption: {0}")]
    Encryption(String),
    /// A WAL file asked for is not in the archive (the server asks past its end).
    #[error("not archived: {0}")]
    NotArchived(String),
    /// A stored object is not what its manifest vouches for: changed or cut in the
    /// bucket after it was stored. Told before (instead of) what reading it then broke
    /// on: a decryption, decompression or restore error.
    #[error("{0}")]
    Mismatch(Box<integrity::Mismatch>),
    /// A step about one stored dump failed; the message and the result name the dump.
    #[error("{key}: {source}")]
    OfDump {
        key: String,
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// The dump the failure is about, when it is about one.
    pub fn dump(&self) -> Option<&str> {
        match self {
            Error::OfDump { key, .. } => Some(key),
            Error::Mismatch(m) => Some(&m.key),
            _ => None,
        }
    }
}

/// Map an object store error to the step it failed in.
pub(crate) fn storage(step: &'static str) -> impl Fn(object_store::Error) -> Error {
    move |source| Error::Storage { step, source }
}
