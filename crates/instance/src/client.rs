//! Asking an instance's API ([`crate::api`]): HTTPS with the database's CAs and its
//! token, one request over a connection of its own. bosun asks every instance so
//! (`bosun_controller::instances`); a primary that no longer hears bosun asks its
//! standbys so whether they still do ([`crate::fence`]).

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// Why an instance gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AskError {
    /// The instance answered, and said no (its message).
    Refused(String),
    /// The instance could not be reached (no address, no answer in time, a
    /// certificate that is not the database's): nothing is known of it.
    Unreachable(String),
}

impl std::fmt::Display for AskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AskError::Refused(why) => write!(f, "the instance refused: {why}"),
            AskError::Unreachable(why) => write!(f, "the instance could not be asked: {why}"),
        }
    }
}

/// A TLS connector and the token to send with it.
pub type Connector = (TlsConnector, Arc<String>);

/// A TLS connector that trusts the CAs of `ca_bundle` (PEM) only, and `token`.
pub fn connector(ca_bundle: &str, token: &str) -> Result<Connector, String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle.as_bytes()) {
        let cert = cert.map_err(|e| format!("the instance Secret's CA: {e}"))?;
        roots.add(cert).map_err(|e| format!("the instance Secret's CA: {e}"))?;
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok((TlsConnector::from(Arc::new(config)), Arc::new(token.to_owned())))
}

/// One request to the instance at `addr` over a connection of its own, its
/// certificate checked for `server_name`.
pub async fn request(
    (connector, token): &Connector,
    addr: SocketAddr,
    server_name: &str,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<Bytes, AskError> {
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| AskError::Unreachable(e.to_string()))?;
    request_over(tcp, connector, token, server_name, method, path, body).await
}

/// One request over `stream` (a TCP connection, a port-forward's stream), the
/// instance's certificate checked for `server_name`.
pub async fn request_over<S>(
    stream: S,
    connector: &TlsConnector,
    token: &str,
    server_name: &str,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<Bytes, AskError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let unreachable = |e: &dyn std::fmt::Display| AskError::Unreachable(e.to_string());
    let name = ServerName::try_from(server_name.to_owned()).map_err(|e| unreachable(&e))?;
    let tls = connector.connect(name, stream).await.map_err(|e| unreachable(&e))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| unreachable(&e))?;
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, server_name)
        .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    if body.is_some() {
        request = request.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let request = request.body(Full::new(Bytes::from(body.unwrap_or_default()))).map_err(|e| unreachable(&e))?;
    let response = sender.send_request(request).await.map_err(|e| unreachable(&e))?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| unreachable(&e))?.to_bytes();
    if status.is_success() {
        return Ok(body);
    }
    let said = String::from_utf8_lossy(&body).trim().to_owned();
    match status {
        // The token is not the Secret's (rotated meanwhile): nothing is known.
        StatusCode::UNAUTHORIZED => Err(AskError::Unreachable(format!("{status}: {said}"))),
        _ => Err(AskError::Refused(format!("{status}: {said}"))),
    }
}
