//! Where a dump comes from and where it goes, in the URL form a person types:
//! `postgresql://USER@HOST:PORT/DB`, `mysql://…`, `mongodb://…` for databases;
//! `s3://BUCKET/PREFIX`, `gs://BUCKET/PREFIX`, `azure://CONTAINER/PREFIX`,
//! `file:///PATH` for destinations. Passwords never travel in a URL: they come from
//! the tools' own variables or a file (see [`crate::source`]).

use std::fmt;

use url::Url;

use crate::Error;

pub use bosun_backup_model::engine::Engine;

/// A database to dump from or restore into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Database {
    pub engine: Engine,
    pub user: String,
    pub host: String,
    pub port: u16,
    pub name: String,
}

impl fmt::Display for Database {
    /// The URL without any secret, for messages and manifests.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}@{}:{}/{}", self.engine.as_str(), self.user, self.host, self.port, self.name)
    }
}

impl Database {
    /// Parse `ENGINE://USER@HOST[:PORT]/DATABASE`; `flag` names the option in errors.
    pub fn parse(flag: &str, text: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Usage(format!("{flag} {text:?}: {why}"));
        let url = Url::parse(text).map_err(|e| bad(&format!("not a URL ({e})")))?;
        let engine = match url.scheme() {
            "postgresql" | "postgres" => Engine::Postgresql,
            "mysql" | "mariadb" => Engine::Mysql,
            "mongodb" => Engine::Mongodb,
            other => {
                return Err(bad(&format!(
                    "unknown database type {other:?}; use postgresql://, mysql:// or mongodb://"
                )));
            }
        };
        if url.password().is_some() {
            return Err(bad(
                "has a password in it; pass it in PGPASSWORD / MYSQL_PWD / MONGODB_PASSWORD or --password-file, never in a flag",
            ));
        }
        let user = percent_decode(url.username());
        if user.is_empty() {
            return Err(bad("names no user (USER@HOST)"));
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| bad("names no host"))?.to_owned();
        let name = percent_decode(url.path().trim_start_matches('/'));
        if name.is_empty() || name.contains('/') {
            return Err(bad("must name one database as its path (…/DATABASE)"));
        }
        Ok(Database { engine, user, host, port: url.port().unwrap_or(engine.default_port()), name })
    }
}

/// The kind of object storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    S3,
    Gcs,
    Azure,
    /// A directory: the `pvc` destination, a claim mounted into the job.
    File,
}

/// A bucket (or container, or directory) and the prefix inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    pub kind: StoreKind,
    /// Bucket or container; the directory for `file://`.
    pub bucket: String,
    /// Key prefix inside the bucket, without leading or trailing `/`; may be empty.
    pub prefix: String,
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.kind {
            StoreKind::S3 => "s3",
            StoreKind::Gcs => "gs",
            StoreKind::Azure => "azure",
            StoreKind::File => return write!(f, "file://{}", self.bucket),
        };
        write!(f, "{scheme}://{}/{}", self.bucket, self.prefix)
    }
}

impl Destination {
    /// Parse `s3://BUCKET[/PREFIX]`, `gs://…`, `azure://CONTAINER[/PREFIX]` or `file:///DIR`.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Usage(format!("--destination {text:?}: {why}"));
        let url = Url::parse(text).map_err(|e| bad(&format!("not a URL ({e})")))?;
        let kind = match url.scheme() {
            "s3" => StoreKind::S3,
            "gs" | "gcs" => StoreKind::Gcs,
            "azure" | "az" => StoreKind::Azure,
            "file" => StoreKind::File,
            other => return Err(bad(&format!("unknown storage {other:?}; use s3://, gs://, azure:// or file://"))),
        };
        if kind == StoreKind::File {
            let dir = percent_decode(url.path());
            if url.host_str().is_some_and(|h| !h.is_empty()) || !dir.starts_with('/') || dir == "/" {
                return Err(bad("must be an absolute directory, file:///PATH"));
            }
            return Ok(Destination { kind, bucket: dir.trim_end_matches('/').to_owned(), prefix: String::new() });
        }
        if url.username() != "" || url.password().is_some() {
            return Err(bad("has credentials in it; use the provider's environment variables or files"));
        }
        let bucket = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| bad("names no bucket"))?.to_owned();
        let prefix = percent_decode(url.path()).trim_matches('/').to_owned();
        Ok(Destination { kind, bucket, prefix })
    }
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn databases_parse_with_default_ports() {
        let db = Database::parse("--source", "postgresql://app@db.example:6543/orders").unwrap();
        assert_eq!(
            db,
            Database {
                engine: Engine::Postgresql,
                user: "app".into(),
                host: "db.example".into(),
                port: 6543,
                name: "orders".into()
            }
        );
        assert_eq!(Database::parse("--source", "mysql://root@127.0.0.1/shop").unwrap().port, 3306);
        assert_eq!(Database::parse("--source", "postgres://u@h/d").unwrap().port, 5432);
        assert_eq!(Database::parse("--source", "mongodb://u@h/d").unwrap().engine, Engine::Mongodb);
        assert_eq!(db.to_string(), "postgresql://app@db.example:6543/orders");
    }

    #[test]
    fn careless_database_urls_are_refused_naming_the_flag() {
        for (url, why) in [
            ("postgresql://app:hunter2@h/d", "password"),
            ("postgresql://h/d", "no user"),
            ("postgresql://u@h", "one database"),
            ("postgresql://u@h/a/b", "one database"),
            ("oracle://u@h/d", "unknown database type"),
            ("db.example:5432", "unknown database type"),
        ] {
            let err = Database::parse("--target", url).unwrap_err().to_string();
            assert!(err.contains("--target") && err.contains(why), "{url}: {err}");
            assert!(!err.contains("hunter2") || url.contains("hunter2"), "only the user's own text is echoed");
        }
    }

    #[test]
    fn destinations_parse() {
        let d = Destination::parse("s3://backups/team/a/").unwrap();
        assert_eq!((d.kind, d.bucket.as_str(), d.prefix.as_str()), (StoreKind::S3, "backups", "team/a"));
        assert_eq!(Destination::parse("gs://b").unwrap().prefix, "");
        assert_eq!(Destination::parse("azure://c/p").unwrap().kind, StoreKind::Azure);
        let f = Destination::parse("file:///var/backups/").unwrap();
        assert_eq!((f.kind, f.bucket.as_str()), (StoreKind::File, "/var/backups"));
    }

    #[test]
    fn careless_destinations_are_refused() {
        for (url, why) in [
            ("ftp://x/y", "unknown storage"),
            ("s3:///prefix", "no bucket"),
            ("s3://key:secret@bucket/p", "credentials"),
            ("file://relative/dir", "absolute"),
            ("file:///", "absolute"),
        ] {
            let err = Destination::parse(url).unwrap_err().to_string();
            assert!(err.contains("--destination") && err.contains(why), "{url}: {err}");
        }
    }
}
