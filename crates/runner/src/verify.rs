//! One verification: a Backup's newest good dump restored into a throwaway server
//! (the verification pod's own, reached on its loopback address) and checked: the
//! stored bytes match the manifest (the restore checks that), the database holds
//! tables, and an optional query returns rows. It reads the bucket and deletes nothing.

use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use crate::Error;
use crate::catalogue::Catalogue;
use crate::location::Database;
use crate::restore::{Pick, Restore};
use crate::seal::Keys;
use crate::store::Store;
use crate::tool::{self, Password};

#[derive(Debug, Clone)]
pub struct Verification {
    pub store: Store,
    /// The Backup's folder (`<namespace>/<name>`).
    pub folder: String,
    /// The throwaway server's empty database.
    pub target: Database,
    pub password: Password,
    pub keys: Option<Keys>,
    /// SQL that must return at least one row in the restored database.
    pub query: Option<String>,
    /// How long to wait for the server to accept connections (it starts beside us).
    pub wait: Duration,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The dump restored, with the destination's prefix.
    pub key: String,
    pub size: u64,
    /// Tables in the restored database, and their rows together.
    pub tables: u64,
    pub rows: u64,
    /// Rows the query returned, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_rows: Option<u64>,
    pub started: Timestamp,
    pub finished: Timestamp,
    pub duration_seconds: f64,
}

impl Verification {
    pub async fn run(&self) -> Result<Report, Error> {
        let started = Timestamp::now();
        let catalogue = Catalogue::read(&self.store, &self.folder).await?;
        let latest = catalogue.latest().ok_or_else(|| {
            Error::Refused(format!("no good backup under {} to verify", self.store.full_key(&self.folder)))
        })?;
        let key = self.store.full_key(&latest.key);
        // A dump changed in the bucket after its run is no longer good, so the newest
        // good one would be an older one: that is a failed verification, not a pass.
        if let Some(tampered) = catalogue.tampered.last() {
            return Err(tampered.error(&self.store, "").await);
        }
        // A dump found changed names itself (and both checksums) already; what it left
        // in the throwaway server does not matter.
        let of_dump = |source: Error| match source {
            Error::Mismatch(mut m) => {
                m.consequence.clear();
                Error::Mismatch(m)
            }
            source => Error::OfDump { key: key.clone(), source: Box::new(source) },
        };
        self.await_server().await?;
        let restore = Restore {
            store: self.store.clone(),
            pick: Pick::Key(latest.key.clone()),
            target: self.target.clone(),
            password: self.password.clone(),
            overwrite: false,
            keys: self.keys.clone(),
        };
        let restored = restore.run().await.map_err(of_dump)?;
        let counted = tool::table_rows(&self.target, &self.password).await.map_err(of_dump)?;
        for (table, rows) in &counted {
            tracing::info!(%table, rows, "restored");
        }
        if counted.is_empty() {
            return Err(of_dump(Error::Verify("it restored no tables: a backup of nothing".to_owned())));
        }
        let query_rows = match &self.query {
            Some(sql) => {
                let rows = tool::query_rows(&self.target, &self.password, sql)
                    .await
                    .map_err(|e| of_dump(Error::Verify(format!("the query failed: {e}"))))?;
                if rows == 0 {
                    return Err(of_dump(Error::Verify("the query returned no rows".to_owned())));
                }
                Some(rows)
            }
            None => None,
        };
        let finished = Timestamp::now();
        Ok(Report {
            key: restored.key,
            size: restored.size,
            tables: counted.len() as u64,
            rows: counted.iter().map(|(_, rows)| rows).sum(),
            query_rows,
            started,
            finished,
            duration_seconds: finished.duration_since(started).as_secs_f64(),
        })
    }

    /// Wait until the throwaway server answers, at most `wait`.
    async fn await_server(&self) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            match tool::server_version(&self.target, &self.password).await {
                Ok(_) => return Ok(()),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(tool::connecting("throwaway server", &self.target)(e));
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
}
