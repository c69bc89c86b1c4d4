//! Client-side encryption of what a run stores: [age](https://age-encryption.org) with
//! X25519 keys, streamed, so the bucket holds only ciphertext.
//!
//! The keys are an age identity file (what `age-keygen` writes: one
//! `AGE-SECRET-KEY-1…` line per key, `#` comments). The **first** identity encrypts new
//! backups; **every** identity is tried to decrypt, so rotating a key is putting the new
//! one first and keeping the old ones below it for as long as backups made with them are
//! kept. A backup's manifest names the public key it was encrypted to.
//!
//! ```text
//! backup:  zstd ──► age encrypt (to the first identity) ──► sha256 ──► upload
//! restore: download ──► sha256 ──► age decrypt (any identity) ──► zstd -d ──► tool
//! ```

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use age::x25519::Identity;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite};
use tokio_util::compat::{
    FuturesAsyncReadCompatExt, FuturesAsyncWriteCompatExt, TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt,
};

use crate::Error;

/// What an encrypted object's key ends with, after the compression's `.zst`.
pub const SUFFIX: &str = ".age";
/// The scheme a manifest records.
pub const SCHEME: &str = "age";

/// How a stored object was encrypted, as its manifest records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Encryption {
    /// `age`.
    pub scheme: String,
    /// The public key (`age1…`) it was encrypted to: the identity that decrypts it.
    pub recipient: String,
}

/// The identities of one key file, and what to call it in messages (the Secret it
/// came from, say): never its contents.
#[derive(Clone)]
pub struct Keys {
    identities: Vec<Identity>,
    name: String,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys").field("name", &self.name).field("recipients", &self.recipients()).finish()
    }
}

impl Keys {
    /// The identities in `text`, an age identity file called `name` in messages.
    pub fn parse(text: &str, name: &str) -> Result<Self, Error> {
        let mut identities = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // The line is a secret: the message names where it is, never what it says.
            let identity = Identity::from_str(line).map_err(|_| {
                Error::Encryption(format!(
                    "{name}, line {}: not an age identity (a line AGE-SECRET-KEY-1…, as age-keygen writes)",
                    n + 1
                ))
            })?;
            identities.push(identity);
        }
        if identities.is_empty() {
            return Err(Error::Encryption(format!(
                "{name} holds no age identity (a line AGE-SECRET-KEY-1…, as age-keygen writes)"
            )));
        }
        Ok(Keys { identities, name: name.to_owned() })
    }

    /// The key file at `path`; `name` (default: the path) is what messages call it.
    pub fn read(path: &Path, name: Option<&str>) -> Result<Self, Error> {
        let name = name.map(str::to_owned).unwrap_or_else(|| path.display().to_string());
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Encryption(format!("reading {name} ({}): {e}", path.display())))?;
        Keys::parse(&text, &name)
    }

    /// What messages call these keys.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The public key new backups are encrypted to: the first identity's.
    pub fn recipient(&self) -> String {
        self.identities.first().map(|i| i.to_public().to_string()).unwrap_or_default()
    }

    /// Every identity's public key, in the file's order.
    pub fn recipients(&self) -> Vec<String> {
        self.identities.iter().map(|i| i.to_public().to_string()).collect()
    }

    /// What a manifest records of an object sealed with these keys.
    pub fn encryption(&self) -> Encryption {
        Encryption { scheme: SCHEME.to_owned(), recipient: self.recipient() }
    }

    /// A writer that encrypts what it is given to the first identity and writes the
    /// ciphertext to `out`; its shutdown writes the last chunk and shuts `out` down.
    pub async fn seal<W: AsyncWrite + Unpin>(&self, out: W) -> std::io::Result<impl AsyncWrite + Unpin> {
        let recipient = self.identities.first().map(Identity::to_public).ok_or(std::io::ErrorKind::InvalidInput)?;
        let encryptor = age::Encryptor::with_recipients(std::iter::once(&recipient as &dyn age::Recipient))
            .map_err(std::io::Error::other)?;
        Ok(encryptor.wrap_async_output(out.compat_write()).await?.compat_write())
    }

    /// The plaintext of the age file `input` (the object `what`, whose manifest says it
    /// was encrypted to `sealed_to` when it has one); a clear error when none of these
    /// identities opens it.
    pub async fn open<R: AsyncBufRead + Unpin>(
        &self,
        input: R,
        what: &str,
        sealed_to: Option<&str>,
    ) -> Result<impl AsyncRead + Unpin, Error> {
        let decryptor = age::Decryptor::new_async_buffered(input.compat())
            .await
            .map_err(|e| Error::Encryption(format!("{what} is not a readable age file: {e}")))?;
        let identities = self.identities.iter().map(|i| i as &dyn age::Identity);
        match decryptor.decrypt_async(identities) {
            Ok(plain) => Ok(plain.compat()),
            Err(age::DecryptError::NoMatchingKeys) => Err(Error::Encryption(format!(
                "{what} was encrypted to {}; {} holds the identities of {}, not that one: add the identity it \
                 was made with (older identities stay in the file, after the first)",
                sealed_to.unwrap_or("a key that is not listed"),
                self.name,
                self.recipients().join(", ")
            ))),
            Err(e) => Err(Error::Encryption(format!("decrypting {what} with {}: {e}", self.name))),
        }
    }
}

/// A stored object's bytes `input` as they were before sealing: opened with `keys`
/// when it is encrypted (`sealed`; to `sealed_to` when its manifest says), as they are
/// otherwise; an encrypted object without keys is [`no_keys`]. `what` names it.
pub async fn unsealed<'a, R: AsyncBufRead + Unpin + Send + 'a>(
    keys: Option<&'a Keys>,
    input: R,
    sealed: bool,
    what: &'a str,
    sealed_to: Option<&'a str>,
) -> Result<Box<dyn AsyncBufRead + Unpin + Send + 'a>, Error> {
    match (keys, sealed) {
        (_, false) => Ok(Box::new(input)),
        (None, true) => Err(no_keys(what, sealed_to)),
        (Some(keys), true) => {
            Ok(Box::new(tokio::io::BufReader::with_capacity(OPENED_BUFFER, keys.open(input, what, sealed_to).await?)))
        }
    }
}

/// The read size of an opened object's plaintext.
const OPENED_BUFFER: usize = 256 * 1024;

/// The error for an encrypted object `what` and no keys to open it.
pub fn no_keys(what: &str, sealed_to: Option<&str>) -> Error {
    Error::Encryption(format!(
        "{what} is encrypted{}; give the identity that opens it (destination.encryption's Secret, or \
         --encryption-key-file)",
        sealed_to.map(|r| format!(" (to {r})")).unwrap_or_default()
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use age::secrecy::ExposeSecret;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn key_file(identities: &[&Identity]) -> String {
        let mut text = String::from("# created: by the test\n\n");
        for i in identities {
            text.push_str(&format!("# public key: {}\n{}\n", i.to_public(), i.to_string().expose_secret()));
        }
        text
    }

    async fn sealed(keys: &Keys, plain: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = keys.seal(&mut out).await.unwrap();
        w.write_all(plain).await.unwrap();
        w.shutdown().await.unwrap();
        drop(w);
        out
    }

    async fn opened(keys: &Keys, cipher: &[u8]) -> Result<Vec<u8>, Error> {
        let mut r = keys.open(cipher, "ns/db/x.pgdump.zst.age", None).await?;
        let mut plain = Vec::new();
        r.read_to_end(&mut plain).await.map_err(|e| Error::Encryption(e.to_string()))?;
        Ok(plain)
    }

    #[tokio::test]
    async fn sealed_bytes_hide_the_plaintext_and_open_with_any_listed_identity() {
        let (old, new, other) = (Identity::generate(), Identity::generate(), Identity::generate());
        let plain = b"INSERT INTO orders VALUES ('canary-row-4711');\n".repeat(5000);
        let before = Keys::parse(&key_file(&[&old]), "Secret k").unwrap();
        let after = Keys::parse(&key_file(&[&new, &old]), "Secret k").unwrap();
        assert_eq!(after.recipient(), new.to_public().to_string(), "the first identity encrypts");

        let from_before = sealed(&before, &plain).await;
        let from_after = sealed(&after, &plain).await;
        for cipher in [&from_before, &from_after] {
            assert!(!cipher.windows(15).any(|w| w == b"canary-row-4711"), "plaintext in the ciphertext");
            assert_eq!(opened(&after, cipher).await.unwrap(), plain, "rotation: old and new both open");
        }
        let stranger = Keys::parse(&key_file(&[&other]), "Secret wrong-key (key identities)").unwrap();
        let err = opened(&stranger, &from_after).await.err().unwrap().to_string();
        assert!(err.contains("Secret wrong-key (key identities)") && err.contains("not that one"), "{err}");
        assert!(err.contains(&other.to_public().to_string()), "names the identities it holds: {err}");
        // Tampered ciphertext is refused, never passed on as plaintext.
        let mut tampered = from_after.clone();
        let last = tampered.len() - 100;
        tampered[last] ^= 1;
        assert!(opened(&after, &tampered).await.is_err());
    }

    #[test]
    fn a_bad_key_file_is_refused_by_line_without_echoing_it() {
        let err = Keys::parse("# only comments\n\n", "Secret k (key identities)").err().unwrap().to_string();
        assert!(err.contains("Secret k (key identities) holds no age identity"), "{err}");
        let text = format!("{}\nAGE-SECRET-KEY-1NOTAKEY\n", key_file(&[&Identity::generate()]));
        let err = Keys::parse(&text, "Secret k").err().unwrap().to_string();
        assert!(err.contains("line 6: not an age identity") && !err.contains("NOTAKEY"), "{err}");
        let debug = format!("{:?}", Keys::parse(&key_file(&[&Identity::generate()]), "k").unwrap());
        assert!(debug.contains("age1") && !debug.contains("AGE-SECRET-KEY"), "{debug}");
    }
}
