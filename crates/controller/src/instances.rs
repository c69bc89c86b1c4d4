//! Asking a database instance something, or telling it: its instance manager's API
//! (`bosun_instance::api`) over HTTPS at the pod's address, the certificate checked
//! against the CA of the database's instance Secret and the request carrying its token
//! (`bosun_resources::instances`). bosun needs no exec into any pod. Used where a
//! decision must come from the instance itself: each standby's WAL position before a
//! failover, whether an instance serves writes, who streams from the primary, the
//! archiver's health, a major upgrade's statistics; and telling an instance its role
//! at once, or to rewind on its next start.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use bosun_api::postgresql::PostgreSQL;
use bosun_instance::api::{self, RoleRequest};
pub use bosun_instance::client::{AskError, Connector, request_over};
use bosun_instance::status::Status;
use bosun_resources::instances::{self as build, Access};
use hyper::Method;
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// One instance's address and the name its certificate must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub ip: IpAddr,
    pub port: u16,
    pub server_name: String,
}

/// How long a demoted primary may take to stop serving, by default.
pub const DEMOTE_TIMEOUT: Duration = Duration::from_secs(30);

/// The instances of one database, as bosun reaches them.
#[derive(Clone)]
pub struct Instances {
    connector: Option<Connector>,
    why_not: String,
    targets: HashMap<String, Target>,
    /// How long a primary told to step down may take to stop serving (its fast
    /// shutdown) before bosun gives up and undoes the switchover.
    pub demote_timeout: Duration,
}

impl std::fmt::Debug for Instances {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instances").field("targets", &self.targets).field("why_not", &self.why_not).finish()
    }
}

impl Instances {
    /// `db`'s instances `pods`, reached with `access` (none: its Secret is not there
    /// yet, and every call is [`AskError::Unreachable`]).
    pub fn new(db: &PostgreSQL, pods: &[&Pod], access: Option<&Access>) -> Instances {
        Instances::with_targets(access, targets(db, pods), || {
            format!("the Secret {} is not there yet", build::secret_name(db))
        })
    }

    /// `db`'s instances `pods`, reached with a connector made before (or why there is
    /// none): a caller that asks every second keeps it while the Secret stays the same.
    pub fn with_connector(db: &PostgreSQL, pods: &[&Pod], connector: Result<Connector, String>) -> Instances {
        let (connector, why_not) = match connector {
            Ok(c) => (Some(c), String::new()),
            Err(why) => (None, why),
        };
        Instances { connector, why_not, targets: targets(db, pods), demote_timeout: DEMOTE_TIMEOUT }
    }

    /// Whether `pod` has an address to be asked at.
    pub fn reaches(&self, pod: &str) -> bool {
        self.targets.contains_key(pod)
    }

    /// Instances at `targets` (by name), reached with `access`.
    pub fn with_targets(
        access: Option<&Access>,
        targets: HashMap<String, Target>,
        missing: impl FnOnce() -> String,
    ) -> Instances {
        let (connector, why_not) = match access.map(connector) {
            Some(Ok(c)) => (Some(c), String::new()),
            Some(Err(why)) => (None, why),
            None => (None, missing()),
        };
        Instances { connector, why_not, targets, demote_timeout: DEMOTE_TIMEOUT }
    }

    /// The instance `pod` now.
    pub async fn status(&self, pod: &str, timeout: Duration) -> Result<Status, AskError> {
        let body = self.call(pod, Method::GET, api::paths::STATUS, None, timeout).await?;
        serde_json::from_slice(&body).map_err(|e| AskError::Unreachable(format!("an answer that does not parse: {e}")))
    }

    /// Tell `pod`'s instance its role, ahead of its label's file.
    pub async fn tell(&self, pod: &str, role: &str, timeout: Duration) -> Result<(), AskError> {
        let body = serde_json::to_vec(&RoleRequest { role: role.to_owned() }).unwrap_or_default();
        self.call(pod, Method::POST, api::paths::ROLE, Some(body), timeout).await.map(drop)
    }

    /// bosun's heartbeat to `pod`'s instance, with `terms`: whether it says it is fenced.
    pub async fn heartbeat(
        &self,
        pod: &str,
        terms: &bosun_instance::fence::Heartbeat,
        timeout: Duration,
    ) -> Result<bosun_instance::fence::HeartbeatAnswer, AskError> {
        let body = serde_json::to_vec(terms).unwrap_or_default();
        let answer = self.call(pod, Method::POST, api::paths::HEARTBEAT, Some(body), timeout).await?;
        serde_json::from_slice(&answer)
            .map_err(|e| AskError::Unreachable(format!("an answer that does not parse: {e}")))
    }

    /// The same access to other pods of the database (its pooler's): `targets`.
    pub fn retargeted(&self, targets: HashMap<String, Target>) -> Instances {
        Instances { targets, ..self.clone() }
    }

    /// Pause `pod`'s pooler, for `max` at most: `Ok` once it holds (`drain`: once the
    /// transactions in flight ended too).
    pub async fn pause_pooler(&self, pod: &str, max: Duration, drain: bool, timeout: Duration) -> Result<(), AskError> {
        let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        let body = serde_json::to_vec(&bosun_instance::pooler::PauseRequest { max_ms, drain }).unwrap_or_default();
        self.call(pod, Method::POST, bosun_instance::pooler::paths::PAUSE, Some(body), timeout).await.map(drop)
    }

    /// Resume `pod`'s pooler (it waits for the read-write Service to reach a primary).
    pub async fn resume_pooler(
        &self,
        pod: &str,
        timeout: Duration,
    ) -> Result<bosun_instance::pooler::ResumeAnswer, AskError> {
        let answer = self.call(pod, Method::POST, bosun_instance::pooler::paths::RESUME, None, timeout).await?;
        serde_json::from_slice(&answer)
            .map_err(|e| AskError::Unreachable(format!("an answer that does not parse: {e}")))
    }

    /// Have `pod`'s standby rewind its data on its next start.
    pub async fn rewind_on_start(&self, pod: &str, timeout: Duration) -> Result<(), AskError> {
        self.call(pod, Method::POST, api::paths::REWIND, None, timeout).await.map(drop)
    }

    async fn call(
        &self,
        pod: &str,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Bytes, AskError> {
        let Some(connector) = &self.connector else { return Err(AskError::Unreachable(self.why_not.clone())) };
        let Some(target) = self.targets.get(pod) else {
            return Err(AskError::Unreachable(format!("{pod} has no address")));
        };
        let call = request(connector, target, method, path, body);
        tokio::time::timeout(timeout, call)
            .await
            .unwrap_or_else(|_| Err(AskError::Unreachable(format!("no answer within {timeout:?}"))))
    }
}

/// `pods`' addresses and certificate names. A pod on a fake node runs nothing: asking
/// it would only wait for a timeout; a pod of the previous release has no API to ask.
fn targets(db: &PostgreSQL, pods: &[&Pod]) -> HashMap<String, Target> {
    pods.iter()
        .filter(|p| !bosun_resources::pods::simulated(p) && build::serves_api(p))
        .filter_map(|p| {
            let ip = p.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
            Some((p.name_any(), Target { ip, port: api::PORT, server_name: build::server_name(db, &p.name_any()) }))
        })
        .collect()
}

/// A TLS connector that trusts `access`'s CAs only, and its token.
pub fn connector(access: &Access) -> Result<Connector, String> {
    bosun_instance::client::connector(&access.ca_bundle, &access.token)
}

/// One request to `target` over a connection of its own.
pub async fn request(
    connector: &Connector,
    target: &Target,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<Bytes, AskError> {
    let addr = std::net::SocketAddr::new(target.ip, target.port);
    bosun_instance::client::request(connector, addr, &target.server_name, method, path, body).await
}

/// Instances' APIs in memory, for reconcile-level tests: one local HTTPS server with a
/// certificate of the database's, answering for every instance (by the name it is
/// called by) with the status a test sets, and recording what it was told. Told its
/// role, an instance acts as the real one would: made the primary it serves writes, made
/// a replica it stops (its server answers nothing).
#[cfg(test)]
pub mod fake {
    use std::collections::HashMap;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use bosun_api::postgresql::PostgreSQL;
    use bosun_instance::api::{self, RoleRequest};
    use bosun_instance::status::{Server, Status};
    use bosun_resources::instances as build;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper_util::rt::TokioIo;
    use tokio_rustls::TlsAcceptor;
    use tokio_rustls::rustls::ServerConfig;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use super::{Instances, Target};

    /// What the fake instances were told: `(pod, path, body)`.
    pub type Told = Vec<(String, String, String)>;

    #[derive(Clone, Debug, Default)]
    pub struct State {
        pub statuses: HashMap<String, Status>,
        pub told: Told,
        /// Instances that, told to be replicas, go on serving writes (a stop that hangs).
        pub stubborn: std::collections::HashSet<String>,
        /// Instances that answer nothing (cut off): a request waits a minute, then 503.
        pub silent: std::collections::HashSet<String>,
    }

    #[derive(Debug)]
    pub struct FakeInstances {
        pub state: Arc<Mutex<State>>,
        addr: SocketAddr,
        access: build::Access,
    }

    /// A standby's status at `receive_lsn`.
    pub fn standby(name: &str, receive_lsn: &str) -> Status {
        let server = Server {
            in_recovery: true,
            timeline: Some(1),
            receive_lsn: Some(receive_lsn.to_owned()),
            replay_lsn: Some(receive_lsn.to_owned()),
            receiving: true,
            ..Server::default()
        };
        Status { name: name.to_owned(), role: Some("replica".into()), server: Some(server), ..Status::default() }
    }

    /// A primary's status.
    pub fn primary(name: &str) -> Status {
        let server = Server {
            in_recovery: false,
            timeline: Some(1),
            current_lsn: Some("0/5000000".into()),
            ..Server::default()
        };
        Status { name: name.to_owned(), role: Some("primary".into()), server: Some(server), ..Status::default() }
    }

    impl FakeInstances {
        pub async fn start(db: &PostgreSQL) -> FakeInstances {
            let now = jiff::Timestamp::now();
            let data =
                build::desired_data(db, None, now, &Default::default(), || "fake-token".into(), build::Server::Own)
                    .unwrap_or_default()
                    .unwrap_or_default();
            let access = build::access(&build::desired_secret(db, &data)).unwrap_or_else(|| unreachable!());
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(data["tls.crt"].as_bytes()).filter_map(Result::ok).collect();
            let key = PrivateKeyDer::from_pem_slice(data["tls.key"].as_bytes()).unwrap_or_else(|e| unreachable!("{e}"));
            let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
            let config = ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap_or_else(|e| unreachable!("{e}"))
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap_or_else(|e| unreachable!("{e}"));
            let acceptor = TlsAcceptor::from(Arc::new(config));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| unreachable!("{e}"));
            let addr = listener.local_addr().unwrap_or_else(|e| unreachable!("{e}"));
            let state = Arc::new(Mutex::new(State::default()));
            let serving = state.clone();
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, state) = (acceptor.clone(), serving.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else { return };
                        let service = hyper::service::service_fn(move |req| answer(state.clone(), req));
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            });
            FakeInstances { state, addr, access }
        }

        /// The client of `db`'s instances `pods` (the others have no address).
        pub fn reach(&self, db: &PostgreSQL, pods: &[&str]) -> Instances {
            let targets = pods
                .iter()
                .map(|p| {
                    let target =
                        Target { ip: self.addr.ip(), port: self.addr.port(), server_name: build::server_name(db, p) };
                    ((*p).to_owned(), target)
                })
                .collect();
            // A demotion that does not come within a moment never will here.
            let demote_timeout = std::time::Duration::from_millis(500);
            Instances { demote_timeout, ..Instances::with_targets(Some(&self.access), targets, String::new) }
        }

        pub fn set(&self, status: Status) {
            self.lock().statuses.insert(status.name.clone(), status);
        }

        pub fn told(&self) -> Told {
            self.lock().told.clone()
        }

        pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
            self.state.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    async fn answer(
        state: Arc<Mutex<State>>,
        req: hyper::Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<Full<Bytes>>, std::convert::Infallible> {
        let host = req.headers().get(hyper::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
        let pod = host.split('.').next().unwrap_or_default().to_owned();
        let authorized = req.headers().get(hyper::header::AUTHORIZATION).map(|h| h.as_bytes());
        let path = req.uri().path().to_owned();
        let reply = |code: u16, body: Vec<u8>| {
            let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
            *response.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::OK);
            Ok(response)
        };
        if authorized != Some(b"Bearer fake-token".as_slice()) {
            return reply(401, b"no".to_vec());
        }
        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let silent = state.lock().unwrap_or_else(|e| e.into_inner()).silent.contains(&pod);
        if silent {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            return reply(503, b"cut off".to_vec());
        }
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        if path == api::paths::STATUS {
            return match state.statuses.get(&pod) {
                Some(status) => reply(200, serde_json::to_vec(status).unwrap_or_default()),
                None => reply(503, b"no such instance".to_vec()),
            };
        }
        state.told.push((pod.clone(), path.clone(), String::from_utf8_lossy(&body).into_owned()));
        if path == api::paths::ROLE {
            let role = serde_json::from_slice::<RoleRequest>(&body).map(|r| r.role).unwrap_or_default();
            let stubborn = state.stubborn.contains(&pod);
            if let Some(status) = state.statuses.get_mut(&pod) {
                match role.as_str() {
                    "primary" => status.server = Some(primary(&pod).server.unwrap_or_default()),
                    "replica" if !stubborn => status.server = None,
                    _ => {}
                }
                status.role = Some(role);
            }
        }
        reply(204, Vec::new())
    }
}
