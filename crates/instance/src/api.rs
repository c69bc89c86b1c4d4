//! The instance's status and control API: HTTPS on [`PORT`], with the certificate and
//! the token bosun keeps in the database's instance Secret (mounted read-only in the
//! pod, re-read when the kubelet refreshes it). Every request carries the token
//! (`Authorization: Bearer …`): a caller without it gets 401 and nothing changes. No
//! answer holds a password. The two health paths are the kubelet's probes, which
//! carry no token: they say a status code and a word, nothing else.
//!
//! ```text
//! GET  /healthz         200: the server accepts connections, or is fenced (startup and liveness probes); 503 otherwise
//! GET  /readyz          200: it accepts them and serves its data, not recovering from an archive (readiness)
//! GET  /v1/status       Status (JSON): role, data directory, the server's answers
//! POST /v1/role         {"role": "primary"|"replica"}: followed at once, until the label's file is refreshed
//! POST /v1/rewind       a standby that cannot follow: rewound (pg_rewind) on its next start
//! POST /v1/checkpoint   CHECKPOINT on this server
//! POST /v1/heartbeat    {"standbys": n, "fenceAfterMs": ms}: bosun is here ([`crate::fence`]); answers {"fenced": bool}
//! GET  /v1/heard        {"bosunMsAgo": ms|null}: when this instance last heard bosun (its primary asks, [`crate::fence`])
//! ```

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::data::{DataState, files};
use crate::fence::{self, HeardAnswer, Heartbeat, HeartbeatAnswer};
use crate::role::{Role, RoleSource};
use crate::settings::InstanceArgs;
use crate::status::{self, Status};

/// The API's port (the container port `instance-api`).
pub const PORT: u16 = 8000;
/// The files of the mounted instance Secret.
pub mod keys {
    pub const CERT: &str = "tls.crt";
    pub const KEY: &str = "tls.key";
    /// The CAs that sign the instances' certificates (the primary's, for a standby).
    pub const BUNDLE: &str = "ca-bundle.crt";
    pub const TOKEN: &str = "token";
    /// The certificate and key PostgreSQL serves clients with: bosun's (the API's), or
    /// one the user provides; and the CAs that verify it (the primary's, for a standby).
    pub const SERVER_CERT: &str = "server.crt";
    pub const SERVER_KEY: &str = "server.key";
    pub const SERVER_CA: &str = "server-ca.crt";
}
pub mod paths {
    pub const HEALTH: &str = "/healthz";
    pub const READY: &str = "/readyz";
    pub const STATUS: &str = "/v1/status";
    pub const ROLE: &str = "/v1/role";
    pub const REWIND: &str = "/v1/rewind";
    pub const CHECKPOINT: &str = "/v1/checkpoint";
    pub const HEARTBEAT: &str = "/v1/heartbeat";
    pub const HEARD: &str = "/v1/heard";
}

/// The body of [`paths::ROLE`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleRequest {
    pub role: String,
}

/// What the manager shares with the API.
#[derive(Debug, Default)]
pub struct Shared {
    /// A stop to rejoin as a standby was asked.
    pub demoting: AtomicBool,
    /// The primary fenced itself ([`crate::fence`]) and waits to be told its role.
    pub fenced: AtomicBool,
    /// How many times bosun told the role (`/v1/role`).
    pub told: AtomicU64,
    /// bosun's heartbeat: when it was last heard, and the terms it gave.
    pub bosun: Mutex<Bosun>,
    /// When the time heard was last written ([`fence::heard_path`]).
    kept_heard: Mutex<Option<Instant>>,
}

/// bosun's heartbeat as the instance last heard it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bosun {
    pub heard: Option<Instant>,
    /// The last terms given (kept on the data volume, so known again after a restart).
    pub terms: Option<Heartbeat>,
}

impl Shared {
    pub fn bosun(&self) -> Bosun {
        *self.bosun.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keep `ago` before now as the time this instance last heard bosun or its
    /// standbys (at most every [`fence::KEEP_HEARD_EVERY`]; a write that fails is
    /// logged and tried again at the next).
    pub fn keep_heard(&self, pgdata: &std::path::Path, ago: std::time::Duration) {
        let mut kept = self.kept_heard.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.is_some_and(|at| at.elapsed() < fence::KEEP_HEARD_EVERY) {
            return;
        }
        let path = fence::heard_path(pgdata);
        let at = std::time::SystemTime::now().checked_sub(ago).unwrap_or(std::time::UNIX_EPOCH);
        match fence::write_heard(&path, at) {
            Ok(()) => *kept = Some(Instant::now()),
            Err(e) => warn!(path = %path.display(), "the time heard could not be kept: {e}"),
        }
    }

    /// The primary fences itself: says so from now on (the heartbeat's answer), and
    /// returns bosun's tells counted before, so that a tell that answers it lifts the
    /// fence whenever it comes.
    pub fn fence(&self) -> u64 {
        let told = self.told.load(Ordering::SeqCst);
        self.fenced.store(true, Ordering::SeqCst);
        told
    }

    /// bosun heard now with `terms`; whether the terms changed.
    pub fn heard(&self, terms: Heartbeat) -> bool {
        let mut bosun = self.bosun.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        bosun.heard = Some(Instant::now());
        let changed = bosun.terms != Some(terms);
        bosun.terms = Some(terms);
        changed
    }
}

/// The API's files, re-read when they change (the kubelet swaps a Secret volume's
/// files when the Secret changes).
#[derive(Debug)]
struct Credentials {
    dir: PathBuf,
    loaded: Mutex<Option<Loaded>>,
}

#[derive(Clone)]
struct Loaded {
    generation: Vec<u8>,
    acceptor: TlsAcceptor,
    token: Arc<String>,
}

impl Credentials {
    /// The acceptor and token of the files now; the last good ones when they do not
    /// load (a Secret edited badly neither stops the probes nor locks bosun out).
    fn current(&self) -> Result<(TlsAcceptor, Arc<String>), String> {
        let fresh = self.load();
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        match (fresh, loaded.as_ref()) {
            (Ok(fresh), _) => {
                let current = (fresh.acceptor.clone(), fresh.token.clone());
                *loaded = Some(fresh);
                Ok(current)
            }
            (Err(why), Some(last)) => {
                debug!(%why, "the API's files do not load: the last good ones serve");
                Ok((last.acceptor.clone(), last.token.clone()))
            }
            (Err(why), None) => Err(why),
        }
    }

    fn load(&self) -> Result<Loaded, String> {
        let read = |name: &str| std::fs::read(self.dir.join(name)).map_err(|e| format!("{name}: {e}"));
        let (cert, key, token) = (read(keys::CERT)?, read(keys::KEY)?, read(keys::TOKEN)?);
        let generation = [cert.as_slice(), key.as_slice(), token.as_slice()].concat();
        if let Some(same) = self.loaded.lock().unwrap_or_else(|e| e.into_inner()).as_ref()
            && same.generation == generation
        {
            return Ok(same.clone());
        }
        let token = String::from_utf8_lossy(&token).trim().to_owned();
        if token.is_empty() {
            return Err(format!("{} is empty", keys::TOKEN));
        }
        Ok(Loaded { generation, acceptor: acceptor(&cert, &key)?, token: Arc::new(token) })
    }
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Loaded { .. }")
    }
}

fn acceptor(cert: &[u8], key: &[u8]) -> Result<TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>().map_err(|e| format!("{}: {e}", keys::CERT))?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("{}: {e}", keys::KEY))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// What answers the API's requests.
#[derive(Debug)]
pub struct Api {
    pub args: InstanceArgs,
    pub shared: Arc<Shared>,
}

/// What answers an API's requests (the instance's, the pooler's): the probes' paths
/// without the token, the rest only with it ([`Handler::handle`] checks, with
/// [`unauthorized`]).
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, token: &str, req: Request<Incoming>) -> impl std::future::Future<Output = Reply> + Send;
}

impl Handler for Api {
    async fn handle(&self, token: &str, req: Request<Incoming>) -> Reply {
        handle(self, token, req).await
    }
}

/// Serve `api` on `listener` with the files in `dir` (certificate, key, token) until
/// `stop`.
pub async fn serve<H: Handler>(listener: TcpListener, dir: PathBuf, api: Arc<H>, stop: CancellationToken) {
    let credentials = Arc::new(Credentials { dir, loaded: Mutex::new(None) });
    let mut said = false;
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(err) => { warn!(%err, "the API's accept failed"); continue; }
            },
            () = stop.cancelled() => return,
        };
        let (acceptor, token) = match credentials.current() {
            Ok(current) => current,
            Err(why) => {
                if !said {
                    warn!(%why, dir = %credentials.dir.display(), "the API's certificate or token cannot be read: connections are refused");
                    said = true;
                }
                continue;
            }
        };
        said = false;
        let api = api.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(err) => return debug!(%err, %peer, "an API TLS handshake failed"),
            };
            let service = hyper::service::service_fn(move |req| {
                let (api, token) = (api.clone(), token.clone());
                async move { Ok::<_, Infallible>(api.handle(&token, req).await) }
            });
            if let Err(err) =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await
            {
                debug!(%err, %peer, "an API connection ended");
            }
        });
    }
}

pub type Reply = Response<Full<Bytes>>;

pub fn reply(status: StatusCode, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
}

pub fn json(value: &impl Serialize) -> Reply {
    let mut response = reply(StatusCode::OK, serde_json::to_vec(value).unwrap_or_default());
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response
}

/// Whether `header` is `Bearer <token>`, compared in time independent of where they differ.
pub fn authorized(header: Option<&[u8]>, token: &str) -> bool {
    let Some(given) = header.and_then(|h| h.strip_prefix(b"Bearer ")) else { return false };
    given.len() == token.len() && given.iter().zip(token.as_bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// The reply that refuses `req` when it does not carry `token`; `None` when it does.
pub fn unauthorized<B>(req: &Request<B>, token: &str) -> Option<Reply> {
    let header = req.headers().get(hyper::header::AUTHORIZATION).map(|h| h.as_bytes());
    if authorized(header, token) {
        return None;
    }
    let mut response = reply(StatusCode::UNAUTHORIZED, "a bearer token from the instance Secret is required\n");
    response.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, hyper::header::HeaderValue::from_static("Bearer"));
    Some(response)
}

/// The largest request body read.
const MAX_BODY: usize = 1024;

async fn handle(api: &Api, token: &str, req: Request<Incoming>) -> Reply {
    if req.method() == Method::GET {
        match req.uri().path() {
            // A fenced primary is alive and holds its server stopped on purpose: a
            // restart by the liveness probe would start it taking writes again.
            paths::HEALTH => return health(api.shared.fenced.load(Ordering::Relaxed) || api.accepting().await),
            paths::READY => {
                let serving = !api.args.pgdata.join(files::RECOVERY).exists() && api.accepting().await;
                return health(serving);
            }
            _ => {}
        }
    }
    if let Some(refused) = unauthorized(&req, token) {
        return refused;
    }
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    match (method, path.as_str()) {
        (Method::GET, paths::STATUS) => json(&api.status().await),
        (Method::POST, paths::ROLE) => {
            let role = match read_json::<RoleRequest>(req).await {
                Ok(r) => Role::parse(&r.role),
                Err(reply) => return reply,
            };
            let Some(role) = role else {
                return reply(
                    StatusCode::BAD_REQUEST,
                    "the body must be {\"role\": \"primary\"} or {\"role\": \"replica\"}\n",
                );
            };
            match api.roles().tell(role) {
                Ok(()) => {
                    api.shared.told.fetch_add(1, Ordering::Relaxed);
                    info!(%role, "bosun told this instance its role");
                    reply(StatusCode::NO_CONTENT, "")
                }
                Err(e) => reply(StatusCode::CONFLICT, format!("the role could not be recorded: {e}\n")),
            }
        }
        (Method::POST, paths::HEARTBEAT) => {
            let terms = match read_json::<Heartbeat>(req).await {
                Ok(terms) => terms,
                Err(reply) => return reply,
            };
            let changed = api.shared.heard(terms);
            api.shared.keep_heard(&api.args.pgdata, std::time::Duration::ZERO);
            if changed {
                info!(standbys = terms.standbys, fence_after = ?terms.fence_after(), "bosun's heartbeat gives new terms");
                let path = fence::terms_path(&api.args.pgdata);
                if let Err(e) = fence::write_terms(&path, &terms) {
                    warn!(path = %path.display(), "the heartbeat's terms could not be kept: {e}");
                }
            }
            json(&HeartbeatAnswer { fenced: api.shared.fenced.load(Ordering::Relaxed) })
        }
        (Method::GET, paths::HEARD) => {
            let ago = api.shared.bosun().heard.map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX));
            json(&HeardAnswer { bosun_ms_ago: ago })
        }
        (Method::POST, paths::REWIND) => match remove(&api.args.pgdata.join(files::STANDBY)) {
            Ok(()) => {
                info!("bosun asked for a rewind: this standby rewinds its data (pg_rewind) on its next start");
                reply(StatusCode::NO_CONTENT, "")
            }
            Err(e) => reply(StatusCode::CONFLICT, format!("{}: {e}\n", files::STANDBY)),
        },
        (Method::POST, paths::CHECKPOINT) => match crate::setup::query(&api.args, "CHECKPOINT").await {
            Ok(_) => reply(StatusCode::NO_CONTENT, ""),
            Err(e) => reply(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        },
        (_, paths::STATUS | paths::ROLE | paths::REWIND | paths::CHECKPOINT | paths::HEARTBEAT) => {
            reply(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n")
        }
        _ => reply(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// A request's JSON body (at most [`MAX_BODY`]), or the reply that refuses it.
pub async fn read_json<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, Reply> {
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return Err(reply(StatusCode::BAD_REQUEST, format!("the body could not be read: {e}\n"))),
    };
    serde_json::from_slice(&body).map_err(|e| reply(StatusCode::BAD_REQUEST, format!("the body does not parse: {e}\n")))
}

pub fn health(ok: bool) -> Reply {
    if ok {
        reply(StatusCode::OK, "ok\n")
    } else {
        reply(StatusCode::SERVICE_UNAVAILABLE, "not accepting connections\n")
    }
}

fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Api {
    fn roles(&self) -> RoleSource {
        RoleSource { label_file: self.args.role_file.clone(), told_file: self.args.role_told.clone() }
    }

    /// Whether the server accepts connections (over TCP, as a client connects).
    async fn accepting(&self) -> bool {
        crate::ping::accepting(self.args.port, &self.args.superuser).await
    }

    /// The instance now: its files, and its server's answers.
    pub async fn status(&self) -> Status {
        let roles = self.roles();
        let (role, source) = roles.read_with_source();
        let data = DataState::read(&self.args.pgdata);
        let (server, server_error) = match crate::setup::query(&self.args, status::SERVER_SQL).await {
            Ok(answer) => match status::parse_server(&answer) {
                Some(mut server) => {
                    if server.in_recovery {
                        let held = status::wal_timeline(&self.args.pgdata.join("pg_wal"));
                        server.timeline = server.timeline.max(held);
                    }
                    if !server.in_recovery {
                        let primary = crate::setup::query(&self.args, status::ARCHIVER_SQL).await;
                        if let Some((archiver, replication)) = primary.ok().and_then(|a| status::parse_primary(&a)) {
                            server.archiver = Some(archiver);
                            server.replication = replication;
                        }
                    }
                    (Some(server), None)
                }
                None => (None, Some(format!("an answer that does not parse: {}", answer.trim()))),
            },
            Err(e) => (None, Some(e)),
        };
        let archive_error = self
            .args
            .wal_error_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty());
        Status {
            name: self.args.name.clone(),
            role: role.map(|r| r.as_str().to_owned()),
            role_source: source.to_owned(),
            data_major: data.major.clone(),
            standby_signal: data.standby,
            recovery_signal: data.recovering,
            server,
            server_error,
            demoting: self.shared.demoting.load(Ordering::Relaxed),
            fenced: self.shared.fenced.load(Ordering::Relaxed),
            analyze_pending: self.args.pgdata.join(crate::setup::ANALYZE_MARKER).exists(),
            archive_error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bearer_of_the_token_is_authorized() {
        assert!(authorized(Some(b"Bearer s3cret"), "s3cret"));
        for header in
            [None, Some(&b"s3cret"[..]), Some(b"Bearer s3cre"), Some(b"Bearer s3cret "), Some(b"Basic s3cret")]
        {
            assert!(!authorized(header, "s3cret"), "{header:?}");
        }
    }
}
