//! Asking a database instance something: one SQL statement run by `psql` in the
//! instance's container over the apiserver's exec (no network path from bosun to the
//! pod is needed, so it works in-cluster and from `make run` alike). Used only where a
//! decision must come from the database itself: the WAL position of each standby
//! before a failover, and whether an instance serves writes (a demotion or a
//! promotion done); and telling an instance its new role at once.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::AsyncReadExt;

/// The shell line that runs `$0` as the image's superuser over the local socket.
const PSQL: &str = r#"exec psql -X -q -tA -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -c "$0""#;

/// Why a statement gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqlError {
    /// psql ran in the container and failed (e.g. the server refuses connections
    /// because it is shutting down): the database itself said no.
    Refused(String),
    /// The container could not be reached (pod gone, exec refused, no answer in time):
    /// nothing is known of the database.
    Unreachable(String),
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SqlError::Refused(why) => write!(f, "psql failed: {why}"),
            SqlError::Unreachable(why) => write!(f, "the instance could not be asked: {why}"),
        }
    }
}

/// Run `sql` in `container` of pod `ns/pod` within `timeout`: its output, trimmed, or
/// why not.
pub async fn sql(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
    sql: &str,
    timeout: Duration,
) -> Result<String, SqlError> {
    run(client, (ns, pod, container), &["bash", "-c", PSQL, sql], timeout).await
}

/// Run `command` in `container` of pod `ns/pod` within `timeout`: its output, trimmed,
/// or why not.
pub async fn run(
    client: &kube::Client,
    (ns, pod, container): (&str, &str, &str),
    command: &[&str],
    timeout: Duration,
) -> Result<String, SqlError> {
    let unreachable = |e: &dyn std::fmt::Display| SqlError::Unreachable(e.to_string());
    let run = async {
        let api = Api::<Pod>::namespaced(client.clone(), ns);
        let params = AttachParams::default().container(container).stdout(true).stderr(true);
        let mut process = api.exec(pod, command.to_vec(), &params).await.map_err(|e| unreachable(&e))?;
        let status = process.take_status();
        let read = |stream: Option<tokio::io::ReadHalf<tokio::io::SimplexStream>>| async move {
            let mut text = String::new();
            if let Some(mut stream) = stream {
                stream.read_to_string(&mut text).await.map_err(|e| unreachable(&e))?;
            }
            Ok::<_, SqlError>(text)
        };
        // Both at once: a full buffer of one must not stall the other.
        let (out, err) = tokio::join!(read(process.stdout()), read(process.stderr()));
        let (out, err) = (out?, err?);
        let status = match status {
            Some(status) => status.await,
            None => None,
        };
        process.join().await.map_err(|e| unreachable(&e))?;
        match status {
            // The kubelet's word for a command that ran and exited non-zero.
            Some(s) if s.status.as_deref() != Some("Success") && s.reason.as_deref() == Some("NonZeroExitCode") => {
                Err(SqlError::Refused(format!("{}: {}", s.message.unwrap_or_default(), err.trim())))
            }
            Some(s) if s.status.as_deref() != Some("Success") => {
                Err(SqlError::Unreachable(format!("{}: {}", s.message.unwrap_or_default(), err.trim())))
            }
            _ => Ok(out.trim().to_owned()),
        }
    };
    tokio::time::timeout(timeout, run)
        .await
        .unwrap_or_else(|_| Err(SqlError::Unreachable(format!("no answer within {timeout:?}"))))
}
