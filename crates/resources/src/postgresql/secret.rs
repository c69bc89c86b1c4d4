//! The credentials Secret: generated once, never written again; what the pods are told of it.

use super::*;

/// A password of [`PASSWORD_LENGTH`] characters from `random` bytes, which must come
/// from a CSPRNG: letters and digits only (the 62 of them; bytes that would bias the
/// choice are skipped), so it needs no quoting in a URI, a pgpass line or a shell.
pub fn password(random: impl IntoIterator<Item = u8>) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    // 248 = 4 × 62: bytes below it map uniformly.
    random
        .into_iter()
        .filter(|b| *b < 248)
        .map(|b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()]))
        .take(PASSWORD_LENGTH)
        .collect()
}

/// The credentials Secret, created once with `password` and `replication_password`
/// and never written again.
pub fn desired_secret(db: &PostgreSQL, password: &str, replication_password: &str) -> Secret {
    let host = host(db);
    let pgpass = format!("{host}:{PORT}:*:{SUPERUSER}:{password}\n");
    // Always encrypted, and usable as it is by any client; one that verifies the
    // server adds the `<name>-ca` Secret's `ca.crt` (sslmode=verify-full&sslrootcert=…).
    let uri = format!("postgresql://{SUPERUSER}:{password}@{host}:{PORT}/{DATABASE}?sslmode=require");
    let data = [
        (keys::USERNAME, SUPERUSER.to_owned()),
        (keys::PASSWORD, password.to_owned()),
        (keys::HOST, host.clone()),
        (keys::PORT, PORT.to_string()),
        (keys::DATABASE, DATABASE.to_owned()),
        (keys::URI, uri),
        (keys::PGPASS, pgpass),
        (keys::REPLICATION_PASSWORD, replication_password.to_owned()),
    ];
    kept_secret(db, secret_name(db), data)
}

/// A Secret of `data` that outlives `db` (no owner), as the data it opens does.
fn kept_secret<const N: usize>(db: &PostgreSQL, name: String, data: [(&str, String); N]) -> Secret {
    Secret {
        metadata: kept_meta(db, name),
        type_: Some("Opaque".to_owned()),
        data: Some(data.into_iter().map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes()))).collect()),
        ..Secret::default()
    }
}

/// The application's Secret (`<name>-app`), created once with `password` and never
/// written again: what a client of the application's database needs, its connection
/// strings verifying the server (`sslmode=verify-full`: a client mounts `<name>-ca`'s
/// `ca.crt` as its root certificate, `~/.postgresql/root.crt` for libpq).
pub fn desired_app_secret(db: &PostgreSQL, password: &str) -> Secret {
    let (host, user, dbname) = (host(db), owner(db), app_database(db));
    let data = [
        (keys::USERNAME, user.to_owned()),
        (keys::PASSWORD, password.to_owned()),
        (keys::HOST, host.clone()),
        (keys::PORT, PORT.to_string()),
        (keys::DBNAME, dbname.to_owned()),
        (keys::URI, format!("postgresql://{user}:{password}@{host}:{PORT}/{dbname}?sslmode=verify-full")),
        (
            keys::JDBC_URI,
            format!("jdbc:postgresql://{host}:{PORT}/{dbname}?user={user}&password={password}&sslmode=verify-full"),
        ),
        (keys::PGPASS, format!("{host}:{PORT}:{dbname}:{user}:{password}\n")),
        (keys::CA_SECRET, crate::instances::ca_secret_name(db)),
    ];
    kept_secret(db, app_secret_name(db), data)
}

/// What the credentials Secret lacks for `db` (`None`: nothing).
pub fn missing_key(db: &PostgreSQL, secret: &Secret) -> Option<&'static str> {
    let has = |key: &str| secret.data.as_ref().and_then(|d| d.get(key)).is_some_and(|v| !v.0.is_empty());
    let needed: &[&str] = if db.spec.replicas > 1 {
        &[keys::USERNAME, keys::PASSWORD, keys::REPLICATION_PASSWORD]
    } else {
        &[keys::USERNAME, keys::PASSWORD]
    };
    needed.iter().copied().find(|k| !has(k))
}

/// A digest of the Secret's superuser name, in the pod template: a name edited there
/// restarts the instances. Passwords are not in it: an instance sets an edited
/// password without a restart (it reads them from the Secret's volume).
pub fn credentials_digest(secret: &Secret) -> String {
    let mut h = Sha256::new();
    let name = secret.data.as_ref().and_then(|d| d.get(keys::USERNAME)).map(|v| v.0.as_slice()).unwrap_or_default();
    h.update((name.len() as u64).to_be_bytes());
    h.update(name);
    hex::encode(&h.finalize()[..16])
}

pub(super) fn secret_env(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: optional.then_some(true),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}
