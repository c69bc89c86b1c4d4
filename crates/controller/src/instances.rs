//! Asking a database instance something: one SQL statement run by `psql` in the
//! instance's container over the apiserver's exec (no network path from bosun to the
//! pod is needed, so it works in-cluster and from `make run` alike). Used only where a
//! decision must come from the database itself: the WAL position of each standby
//! before a failover, and the promotion that ends one.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::AsyncReadExt;

/// How long one statement may take, the connection through the apiserver included.
pub const TIMEOUT: Duration = Duration::from_secs(70);

/// The shell line that runs `$0` as the image's superuser over the local socket.
const PSQL: &str = r#"exec psql -X -q -tA -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -c "$0""#;

/// Run `sql` in `container` of pod `ns/pod` within `timeout`: its output, trimmed, or
/// why not (the pod is gone, the exec was refused, psql failed — with its stderr).
pub async fn sql(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
    sql: &str,
    timeout: Duration,
) -> Result<String, String> {
    let run = async {
        let api = Api::<Pod>::namespaced(client.clone(), ns);
        let params = AttachParams::default().container(container).stdout(true).stderr(true);
        let mut process = api.exec(pod, ["bash", "-c", PSQL, sql], &params).await.map_err(|e| e.to_string())?;
        let status = process.take_status();
        let read = |stream: Option<tokio::io::ReadHalf<tokio::io::SimplexStream>>| async move {
            let mut text = String::new();
            if let Some(mut stream) = stream {
                stream.read_to_string(&mut text).await.map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(text)
        };
        // Both at once: a full buffer of one must not stall the other.
        let (out, err) = tokio::join!(read(process.stdout()), read(process.stderr()));
        let (out, err) = (out?, err?);
        let status = match status {
            Some(status) => status.await,
            None => None,
        };
        process.join().await.map_err(|e| e.to_string())?;
        match status {
            Some(s) if s.status.as_deref() != Some("Success") => {
                Err(format!("{}: {}", s.message.unwrap_or_default(), err.trim()))
            }
            _ => Ok(out.trim().to_owned()),
        }
    };
    tokio::time::timeout(timeout, run).await.unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
}
