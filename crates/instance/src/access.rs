//! Who may connect to the server, and how. The manager writes `pg_hba.conf` at each
//! start, outside the data directory (a clone copies none, an edit is undone, old
//! data's rules are not read): the socket trusted, as the image's entrypoint makes it
//! (`kubectl exec … psql -U postgres`); the network only over TLS (`hostssl`), every
//! password checked with `scram-sha-256`, replication too. The server serves TLS 1.3
//! with the instance Secret's certificate (it names the Services and the instances),
//! and reloads when the kubelet swaps in a renewed one. This instance's own
//! connections to its primary (streaming, clone, rewind) verify it with the CAs
//! (`sslmode=verify-full`), unless the primary offers no TLS at all: a primary of a
//! release before it, met once while an upgrade rolls, is followed without TLS, with
//! a warning.

use std::path::PathBuf;

use tracing::warn;

use crate::api::keys;
use crate::settings::InstanceArgs;

/// `pg_hba.conf`: nothing from the network without TLS, no `md5`, `password` or
/// `trust` on the network.
pub const HBA: &str = "\
# Written by bosun's instance manager at each start: changes made here are lost.
# The socket is trusted (kubectl exec ... psql); the network only over TLS, with
# scram-sha-256 passwords; replication by any role allowed to replicate.
local   all          all                 trust
local   replication  all                 trust
hostssl replication  all  all            scram-sha-256
hostssl all          all  all            scram-sha-256
";

/// The server's TLS files, when the instance has them (the API's directory): the
/// server's own (bosun's certificate, or one the user provides), else, from a Secret
/// of a release before them, the API's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CAs to verify the primary with (absent in a Secret of an older release).
    pub bundle: Option<PathBuf>,
}

impl Tls {
    pub fn of(args: &InstanceArgs) -> Option<Tls> {
        let dir = args.api_dir.as_ref()?;
        let files = |cert, key, bundle| (dir.join(cert), dir.join(key), dir.join(bundle));
        let (cert, key, bundle) = match files(keys::SERVER_CERT, keys::SERVER_KEY, keys::SERVER_CA) {
            server if server.0.exists() && server.1.exists() => server,
            _ => files(keys::CERT, keys::KEY, keys::BUNDLE),
        };
        (cert.exists() && key.exists()).then(|| Tls { cert, key, bundle: bundle.exists().then_some(bundle) })
    }

    /// What the files hold now: when it changes, the server reloads them.
    pub fn generation(&self) -> Vec<u8> {
        [Some(&self.cert), Some(&self.key), self.bundle.as_ref()]
            .into_iter()
            .flatten()
            .flat_map(|path| std::fs::read(path).unwrap_or_default())
            .collect()
    }
}

/// The server's settings of who may connect: its `pg_hba.conf`, passwords hashed
/// with scram (PostgreSQL 13 hashes with md5 unless told), and TLS when there are
/// files for it.
pub fn server_settings(args: &InstanceArgs, tls: Option<&Tls>) -> Vec<String> {
    let mut settings =
        vec![format!("hba_file={}", args.hba_file.display()), "password_encryption=scram-sha-256".to_owned()];
    if let Some(tls) = tls {
        settings.extend([
            "ssl=on".to_owned(),
            format!("ssl_cert_file={}", tls.cert.display()),
            format!("ssl_key_file={}", tls.key.display()),
            "ssl_min_protocol_version=TLSv1.3".to_owned(),
        ]);
    }
    settings
}

/// The rules: [`HBA`], after a rule that turns the superuser away from the network
/// when it may not log in there.
pub fn hba(args: &InstanceArgs) -> String {
    if args.superuser_network {
        return HBA.to_owned();
    }
    let user = format!("\"{}\"", args.superuser.replace('"', "\"\""));
    let mut rules = String::from(HBA);
    let at = rules.find("hostssl").unwrap_or(rules.len());
    rules.insert_str(
        at,
        &format!(
            "# The superuser only through the socket (spec.enableSuperuserAccess: false).\n\
             hostssl replication  {user}  all  reject\n\
             hostssl all          {user}  all  reject\n"
        ),
    );
    rules
}

/// Write [`hba`] where the server reads it.
pub fn write_hba(args: &InstanceArgs) -> std::io::Result<()> {
    std::fs::write(&args.hba_file, hba(args))
}

/// How this instance connects to its primary: libpq's TLS settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToPrimary {
    /// The primary's certificate verified with the CAs, for the Service's name.
    Verified(PathBuf),
    /// TLS when the primary offers it, unverified: no CAs to verify it with, or a
    /// primary without TLS (a release before it).
    Prefer,
}

impl ToPrimary {
    /// The connection string's pairs: where the primary is, and how to connect.
    pub fn pairs(&self, args: &InstanceArgs) -> Vec<(&'static str, String)> {
        let mut pairs = vec![("host", args.primary_host.clone()), ("port", args.primary_port.to_string())];
        pairs.extend(args.primary_hostaddr.iter().map(|a| ("hostaddr", a.clone())));
        pairs.extend(match self {
            ToPrimary::Verified(bundle) => {
                vec![("sslmode", "verify-full".to_owned()), ("sslrootcert", bundle.display().to_string())]
            }
            ToPrimary::Prefer => vec![("sslmode", "prefer".to_owned())],
        });
        pairs
    }
}

/// How to connect to the primary now: verified, unless there are no CAs or the
/// primary answers that it has no TLS.
pub async fn to_primary(args: &InstanceArgs) -> ToPrimary {
    let Some(bundle) = Tls::of(args).and_then(|t| t.bundle) else { return ToPrimary::Prefer };
    let (host, name) = match &args.primary_hostaddr {
        Some(addr) => (addr.as_str(), args.primary_host.as_str()),
        None => (args.primary_host.as_str(), args.primary_host.as_str()),
    };
    if crate::ping::offers_tls(host, name, args.primary_port).await == Some(false) {
        warn!(
            host = %args.primary_host,
            "the primary offers no TLS (it runs a release of bosun before TLS): following it without TLS until it restarts"
        );
        return ToPrimary::Prefer;
    }
    ToPrimary::Verified(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The instance's arguments: the required ones, then `extra`.
    fn args(extra: &[&str]) -> InstanceArgs {
        let mut argv = vec!["bosun", "--pgdata", "/d", "--password", "p", "--primary-host", "db"];
        argv.extend(extra);
        argv.extend(["--", "postgres"]);
        crate::settings::tests::parse(argv)
    }

    #[test]
    fn the_network_takes_only_tls_and_scram() {
        let rules: Vec<Vec<&str>> = HBA
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split_whitespace().collect())
            .collect();
        for rule in &rules {
            match rule[0] {
                "local" => assert_eq!(rule.len(), 4, "{rule:?}"),
                "hostssl" => assert_eq!(rule[4], "scram-sha-256", "{rule:?}"),
                other => panic!("a rule of type {other}: {rule:?}"),
            }
        }
        assert!(rules.iter().any(|r| r[..2] == ["hostssl", "replication"]));
        let methods: Vec<&str> = rules.iter().filter_map(|r| r.last().copied()).collect();
        assert!(!methods.iter().any(|m| ["md5", "password"].contains(m)), "{methods:?}");
    }

    #[test]
    fn without_superuser_access_the_superuser_is_turned_away_from_the_network_first() {
        let args = |network: &str| args(&["--superuser", "admin", "--superuser-network", network]);
        assert_eq!(hba(&args("true")), HBA);
        let rules = hba(&args("false"));
        let network: Vec<&str> = rules.lines().filter(|l| l.starts_with("host")).collect();
        assert_eq!(
            network.iter().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect::<Vec<_>>(),
            [
                "hostssl replication \"admin\" all reject",
                "hostssl all \"admin\" all reject",
                "hostssl replication all all scram-sha-256",
                "hostssl all all all scram-sha-256",
            ]
        );
        assert!(rules.starts_with("# Written by bosun"), "{rules}");
    }

    #[test]
    fn tls_settings_name_the_files_and_tls_1_3() {
        let dir = std::env::temp_dir().join(format!("bosun-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let args = args(&["--hba-file", "/run/hba.conf", "--api-dir", dir.to_str().unwrap_or_default()]);
        assert_eq!(Tls::of(&args), None, "no certificate yet");
        assert_eq!(server_settings(&args, None), ["hba_file=/run/hba.conf", "password_encryption=scram-sha-256"]);
        for key in [keys::CERT, keys::KEY] {
            std::fs::write(dir.join(key), key).unwrap_or_default();
        }
        let tls = Tls::of(&args).unwrap_or_else(|| unreachable!("the files are there"));
        assert_eq!(tls.bundle, None);
        let settings = server_settings(&args, Some(&tls));
        assert!(settings.contains(&"ssl=on".to_owned()), "{settings:?}");
        assert!(settings.contains(&"ssl_min_protocol_version=TLSv1.3".to_owned()), "{settings:?}");
        assert!(settings.contains(&format!("ssl_key_file={}", dir.join("tls.key").display())), "{settings:?}");
        let before = tls.generation();
        std::fs::write(dir.join(keys::CERT), "renewed").unwrap_or_default();
        assert_ne!(tls.generation(), before, "a renewed certificate is a new generation");
        let verified = ToPrimary::Verified(dir.join("ca-bundle.crt")).pairs(&args);
        assert_eq!(
            verified[..3],
            [("host", "db".to_owned()), ("port", "5432".to_owned()), ("sslmode", "verify-full".to_owned())]
        );
        assert_eq!(ToPrimary::Prefer.pairs(&args)[2], ("sslmode", "prefer".to_owned()));
        // The server's own files (bosun's, or the user's certificate) when the Secret has them.
        for key in [keys::SERVER_CERT, keys::SERVER_KEY, keys::SERVER_CA] {
            std::fs::write(dir.join(key), key).unwrap_or_default();
        }
        let tls = Tls::of(&args).unwrap_or_else(|| unreachable!("the files are there"));
        assert_eq!(
            (tls.cert, tls.key, tls.bundle),
            (dir.join("server.crt"), dir.join("server.key"), Some(dir.join("server-ca.crt")))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
