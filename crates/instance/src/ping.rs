//! Whether the server accepts connections, asked as `pg_isready` (libpq's `PQping`)
//! asks it, without a process: a startup message over TCP, and the server's first
//! answer. An authentication request, or any refusal but "the database system is
//! starting up / shutting down / in recovery" (SQLSTATE 57P03), means it accepts
//! connections; no answer, or 57P03, that it does not. The probes of the pod ask it
//! through the API ([`crate::api`]'s `/healthz` and `/readyz`), so that a probe forks
//! nothing.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// How long a ping waits for the server in all.
const TIMEOUT: Duration = Duration::from_secs(3);
/// SQLSTATE `cannot_connect_now`.
const CANNOT_CONNECT_NOW: &str = "57P03";
/// The protocol's version 3.0.
const PROTOCOL: i32 = 3 << 16;

/// Whether the server on `port` of this host accepts connections of `user`.
pub async fn accepting(port: u16, user: &str) -> bool {
    tokio::time::timeout(TIMEOUT, ask(port, user)).await.ok().flatten().unwrap_or(false)
}

async fn ask(port: u16, user: &str) -> Option<bool> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
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
