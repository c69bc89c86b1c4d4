//! Whether the server accepts connections, asked as `pg_isready` (libpq's `PQping`)
//! asks it, without a process: a startup message over TCP, and the server's first
//! answer. An authentication request, or any refusal but "the database system is
//! starting up / shutting down / in recovery" (SQLSTATE 57P03), means it accepts
//! connections; no answer, or 57P03, that it does not. The probes of the pod ask it
//! through the API ([`crate::api`]'s `/healthz` and `/readyz`), so that a probe forks
//! nothing.
//!
//! The network takes only TLS (`hostssl`), so the startup message goes as a client's
//! would: TLS asked for first (`SSLRequest`), over TLS when the server says yes. The
//! session ends as a client's that gave up before its password does (TLS closed
//! cleanly), so a probe leaves nothing in the server's log. The same negotiation
//! tells whether a primary offers TLS at all ([`offers_tls`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

/// How long a ping waits for the server in all.
const TIMEOUT: Duration = Duration::from_secs(3);
/// SQLSTATE `cannot_connect_now`.
const CANNOT_CONNECT_NOW: &str = "57P03";
/// The protocol's version 3.0.
const PROTOCOL: i32 = 3 << 16;
/// The `SSLRequest` message: its length, and the code 1234/5679.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Whether the server on `port` of this host accepts connections of `user`.
pub async fn accepting(port: u16, user: &str) -> bool {
    tokio::time::timeout(TIMEOUT, ask(port, user)).await.ok().flatten().unwrap_or(false)
}

/// Whether the server at `host:port` (its certificate's `name`) offers TLS: `None`
/// when it does not answer.
pub async fn offers_tls(host: &str, name: &str, port: u16) -> Option<bool> {
    let ask = async {
        match negotiate(TcpStream::connect((host, port)).await.ok()?, name).await? {
            Wire::Tls(mut tls) => {
                let _ = tls.shutdown().await;
                Some(true)
            }
            Wire::Plain(_) => Some(false),
        }
    };
    tokio::time::timeout(TIMEOUT, ask).await.ok().flatten()
}

/// A connection after TLS was asked for: over TLS when the server said yes.
enum Wire {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

async fn negotiate(mut stream: TcpStream, host: &str) -> Option<Wire> {
    stream.write_all(&SSL_REQUEST).await.ok()?;
    match stream.read_u8().await.ok()? {
        b'S' => {
            let name = ServerName::try_from(host.to_owned()).ok()?;
            Some(Wire::Tls(Box::new(connector().connect(name, stream).await.ok()?)))
        }
        b'N' => Some(Wire::Plain(stream)),
        _ => None,
    }
}

async fn ask(port: u16, user: &str) -> Option<bool> {
    match negotiate(TcpStream::connect(("127.0.0.1", port)).await.ok()?, "127.0.0.1").await? {
        Wire::Plain(stream) => startup_answer(stream, user).await,
        Wire::Tls(stream) => startup_answer(*stream, user).await,
    }
}

async fn startup_answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, user: &str) -> Option<bool> {
    stream.write_all(&startup(user)).await.ok()?;
    let tag = stream.read_u8().await.ok()?;
    let length = usize::try_from(stream.read_i32().await.ok()?).ok()?.checked_sub(4)?;
    let mut body = vec![0; length.min(8192)];
    stream.read_exact(&mut body).await.ok()?;
    let accepting = answer(tag, &body);
    if tag == b'R' && body.get(..4) == Some(&[0, 0, 0, 0]) {
        // Trusted: a session began; it ends at once (Terminate), without a word in the log.
        let _ = stream.write_all(&[b'X', 0, 0, 0, 4]).await;
    }
    // Whatever else it sends is read, so that the close is not a reset the server
    // would log; a password it waits for ends quietly at the end of the stream.
    let _ = stream.shutdown().await;
    let mut rest = [0u8; 1024];
    while matches!(stream.read(&mut rest).await, Ok(n) if n > 0) {}
    Some(accepting)
}

/// A TLS client that takes any certificate: a ping sends only a user's and a
/// database's names, and learns only whether the server answers; whoever connects
/// for real (libpq) verifies the server with the CAs.
fn connector() -> TlsConnector {
    static CONFIG: std::sync::OnceLock<Arc<ClientConfig>> = std::sync::OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let verifier = Arc::new(AnyCertificate(provider.clone()));
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth());
        // The provider's defaults are always valid: no configuration is not possible.
        Arc::new(config.unwrap_or_else(|e| unreachable!("{e}")))
    });
    TlsConnector::from(config.clone())
}

#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The startup message of `user` to the database `postgres`.
fn startup(user: &str) -> Vec<u8> {
    let mut body = PROTOCOL.to_be_bytes().to_vec();
    for (key, value) in [("user", user), ("database", "postgres")] {
        for text in [key, value] {
            body.extend_from_slice(text.as_bytes());
            body.push(0);
        }
    }
    body.push(0);
    let length = i32::try_from(body.len() + 4).unwrap_or(i32::MAX);
    let mut message = length.to_be_bytes().to_vec();
    message.extend(body);
    message
}

/// What the server's first message (`tag`, `body`) says of it.
fn answer(tag: u8, body: &[u8]) -> bool {
    tag != b'E' || sqlstate(body).is_none_or(|code| code != CANNOT_CONNECT_NOW)
}

/// The SQLSTATE of an ErrorResponse's fields (`C`).
fn sqlstate(body: &[u8]) -> Option<&str> {
    for field in body.split(|b| *b == 0) {
        match field.split_first() {
            Some((b'C', code)) => return std::str::from_utf8(code).ok(),
            Some(_) => {}
            None => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: &str) -> Vec<u8> {
        let mut body = Vec::new();
        for (field, text) in [(b'S', "FATAL"), (b'C', code), (b'M', "the database system is starting up")] {
            body.push(field);
            body.extend_from_slice(text.as_bytes());
            body.push(0);
        }
        body.push(0);
        body
    }

    #[test]
    fn a_refusal_to_connect_now_is_the_only_no() {
        assert!(!answer(b'E', &error("57P03")), "starting up, shutting down, or recovering");
        assert!(answer(b'E', &error("28000")), "no pg_hba.conf entry: it answers");
        assert!(answer(b'R', &[0, 0, 0, 10]), "SASL: it asks for a password");
        assert!(answer(b'R', &[0, 0, 0, 0]), "trusted");
        assert_eq!(sqlstate(&error("57P03")), Some("57P03"));
        assert_eq!(sqlstate(b"\0"), None);
    }

    #[test]
    fn the_startup_message_names_the_user_and_the_database() {
        let message = startup("postgres");
        assert_eq!(&message[..4], &i32::try_from(message.len()).unwrap().to_be_bytes());
        assert_eq!(&message[4..8], &[0, 3, 0, 0]);
        assert_eq!(&message[8..], b"user\0postgres\0database\0postgres\0\0");
    }

    #[tokio::test]
    async fn nothing_listening_is_not_accepting() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert!(!accepting(port, "postgres").await);
    }
}
