//! A role's password as PostgreSQL stores it with `scram-sha-256` (RFC 5802 and 7677,
//! in PostgreSQL's text form), made here: `ALTER ROLE … PASSWORD '<verifier>'` sets a
//! password the server never sees, so it cannot reach its log, even in an error's
//! statement.
//!
//! ```text
//! SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>      (base64)
//! SaltedPassword = PBKDF2-HMAC-SHA-256(password, salt, iterations)
//! StoredKey = SHA-256(HMAC(SaltedPassword, "Client Key")),  ServerKey = HMAC(SaltedPassword, "Server Key")
//! ```

use std::num::NonZeroU32;

use aws_lc_rs::{digest, hmac, pbkdf2};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// PostgreSQL's own defaults (`scram_iterations`, the salt's length).
const ITERATIONS: u32 = 4096;
const SALT_LEN: usize = 16;

/// The verifier of `password` with a fresh random salt; `None` for a password that is
/// not ASCII, which PostgreSQL first normalises (SASLprep) in ways not done here.
pub fn verifier(password: &str) -> Option<String> {
    let mut salt = [0u8; SALT_LEN];
    aws_lc_rs::rand::fill(&mut salt).ok()?;
    verifier_with(password, &salt, ITERATIONS)
}

/// `stored` (a role's verifier, as `pg_authid` holds it) when it is `password`'s, so
/// that setting the same password again changes nothing: a pooler that looked the
/// verifier up (PgBouncer's `auth_query`) keeps logging its clients in with it. A
/// fresh verifier otherwise.
pub fn verifier_keeping(password: &str, stored: Option<&str>) -> Option<String> {
    let same = stored.and_then(|stored| {
        let (iterations, salt) = stored.strip_prefix("SCRAM-SHA-256$")?.split_once('$')?.0.split_once(':')?;
        let again = verifier_with(password, &STANDARD.decode(salt).ok()?, iterations.parse().ok()?)?;
        (again == stored).then_some(again)
    });
    same.or_else(|| verifier(password))
}

/// The verifier of `password` with `salt` and `iterations`.
pub fn verifier_with(password: &str, salt: &[u8], iterations: u32) -> Option<String> {
    // SASLprep leaves printable ASCII as it is, and PostgreSQL uses a password it
    // prohibits (ASCII control characters) as it is: for ASCII, the bytes themselves.
    if !password.is_ascii() {
        return None;
    }
    let mut salted = [0u8; 32];
    let rounds = NonZeroU32::new(iterations)?;
    pbkdf2::derive(pbkdf2::PBKDF2_HMAC_SHA256, rounds, salt, password.as_bytes(), &mut salted);
    let key = hmac::Key::new(hmac::HMAC_SHA256, &salted);
    let client_key = hmac::sign(&key, b"Client Key");
    let stored_key = digest::digest(&digest::SHA256, client_key.as_ref());
    let server_key = hmac::sign(&key, b"Server Key");
    Some(format!(
        "SCRAM-SHA-256${iterations}:{}${}:{}",
        STANDARD.encode(salt),
        STANDARD.encode(stored_key.as_ref()),
        STANDARD.encode(server_key.as_ref())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example (user "user", password "pencil"): its ServerSignature, from
    /// the ServerKey this verifier holds, is the one the RFC gives.
    #[test]
    fn the_rfc_example_gives_the_rfc_server_signature() {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap_or_default();
        let verifier = verifier_with("pencil", &salt, 4096).unwrap_or_default();
        let (head, keys) = verifier.split_once('$').and_then(|(_, rest)| rest.split_once('$')).unwrap_or_default();
        assert_eq!(head, "4096:W22ZaJ0SNY7soEsUEjb6gQ==");
        let server_key = STANDARD.decode(keys.split_once(':').unwrap_or_default().1).unwrap_or_default();
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,\
                            r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,\
                            c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let signature = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &server_key), auth_message.as_bytes());
        assert_eq!(STANDARD.encode(signature.as_ref()), "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    #[test]
    fn each_verifier_has_its_own_salt_and_only_ascii_is_hashed_here() {
        let (a, b) = (verifier("s3cret").unwrap_or_default(), verifier("s3cret").unwrap_or_default());
        assert!(a.starts_with("SCRAM-SHA-256$4096:") && a != b, "{a} {b}");
        assert!(!a.contains("s3cret"));
        assert_eq!(verifier("pässword"), None);
    }

    #[test]
    fn the_same_password_keeps_its_verifier_and_a_new_one_gets_a_new_salt() {
        let stored = verifier("secret").unwrap();
        assert_eq!(verifier_keeping("secret", Some(&stored)).as_deref(), Some(stored.as_str()));
        let changed = verifier_keeping("other", Some(&stored)).unwrap();
        assert_ne!(changed, stored);
        assert_ne!(changed.split('$').nth(1), stored.split('$').nth(1), "a new password, a new salt");
        // Nothing stored, an md5 hash, garbage: a fresh verifier.
        for stored in [None, Some("md5d5f6a4c0b8d1e2f3a4b5c6d7e8f9a0b1"), Some("SCRAM-SHA-256$x:y$z")] {
            let fresh = verifier_keeping("secret", stored).unwrap();
            assert!(fresh.starts_with("SCRAM-SHA-256$4096:"), "{fresh}");
        }
    }
}
