//! What an instance manager is told: one typed contract for the program (its command
//! line, each option also read from a variable) and for the StatefulSet's builder,
//! which names the variables through [`env`] and never spells one itself.

use std::path::PathBuf;
use std::time::Duration;

/// The variables of the contract. The first four are also the image's own (its
/// entrypoint initialises a first primary with them).
pub mod env {
    /// The data directory.
    pub const PGDATA: &str = "PGDATA";
    /// The port the server listens on.
    pub const PORT: &str = "PGPORT";
    /// The superuser's name and password (the credentials Secret's).
    pub const SUPERUSER: &str = "POSTGRES_USER";
    pub const PASSWORD: &str = "POSTGRES_PASSWORD";
    /// The directory of the credentials Secret's `password` and `replication-password`,
    /// read ahead of the two variables: the kubelet refreshes it when the Secret is
    /// edited, and the manager sets the new passwords without a restart.
    pub const CREDENTIALS_DIR: &str = "BOSUN_CREDENTIALS_DIR";
    /// The application's role and database (`spec.owner`, `spec.database`); its
    /// password is the credentials directory's [`APP_PASSWORD_FILE`].
    pub const APP_USER: &str = "BOSUN_APP_USER";
    pub const APP_DATABASE: &str = "BOSUN_APP_DATABASE";
    pub const APP_PASSWORD_FILE: &str = "app-password";
    /// The pooler's role's password (`spec.pooler`), in the credentials directory:
    /// with it, the primary keeps the role [`crate::pooler::AUTH_USER`] and the
    /// function the pooler looks passwords up with.
    pub const POOLER_PASSWORD_FILE: &str = "pooler-password";
    /// The replication role's name and password (the Secret's; no password: no role).
    pub const REPLICATION_USER: &str = "REPLICATION_USER";
    pub const REPLICATION_PASSWORD: &str = "REPLICATION_PASSWORD";
    /// The read-write Service: where the primary answers.
    pub const PRIMARY_HOST: &str = "PRIMARY_HOST";
    pub const PRIMARY_PORT: &str = "PRIMARY_PORT";
    /// Where to reach the primary when its name does not resolve to it (libpq's
    /// `hostaddr`: the name is still the one its certificate is verified for).
    pub const PRIMARY_HOSTADDR: &str = "PRIMARY_HOSTADDR";
    /// The role label's downward-API file.
    pub const ROLE_FILE: &str = "BOSUN_ROLE_FILE";
    /// What bosun told the instance directly, ahead of the label's file.
    pub const ROLE_TOLD: &str = "BOSUN_ROLE_TOLD";
    /// Where the passfile of the instance's own connections is written.
    pub const PASSFILE: &str = "BOSUN_PGPASS";
    /// Where the server's `pg_hba.conf` is written (outside the data directory).
    pub const HBA_FILE: &str = "BOSUN_HBA_FILE";
    /// `false`: the superuser logs in through the socket only (`spec.enableSuperuserAccess`).
    pub const SUPERUSER_NETWORK: &str = "BOSUN_SUPERUSER_NETWORK";
    /// The server's Unix socket directory (the setup connects there).
    pub const SOCKET_DIR: &str = "BOSUN_SOCKET_DIR";
    /// The major the image's server runs (the image sets it).
    pub const MAJOR: &str = "PG_MAJOR";
    /// The pod's name: the standby's `application_name` on its primary.
    pub const NAME: &str = "HOSTNAME";
    /// Where a recovering start's server settings are (`bosun recover` writes them).
    pub const RECOVERY_SETTINGS: &str = bosun_backup_model::contract::RECOVERY_SETTINGS;
    /// The archive a new database recovers from (`spec.bootstrap.recovery`) and what
    /// `bosun recover` needs of it.
    pub const RECOVERY_DESTINATION: &str = "BOSUN_RECOVERY_DESTINATION";
    pub const RECOVERY_ENDPOINT: &str = "BOSUN_RECOVERY_ENDPOINT";
    pub const RECOVERY_REGION: &str = "BOSUN_RECOVERY_REGION";
    pub const RECOVERY_NAMESPACE: &str = "BOSUN_RECOVERY_NAMESPACE";
    pub const RECOVERY_NAME: &str = "BOSUN_RECOVERY_NAME";
    pub const RECOVERY_TARGET_TIME: &str = bosun_backup_model::contract::RECOVERY_TARGET_TIME;
    pub const RECOVERY_TARGET_LSN: &str = bosun_backup_model::contract::RECOVERY_TARGET_LSN;
    pub const RECOVERY_TARGET_NAME: &str = bosun_backup_model::contract::RECOVERY_TARGET_NAME;
    /// Where a failure that ends the container is told (the kubelet's termination message).
    pub const TERMINATION_LOG: &str = "BOSUN_TERMINATION_LOG";
    /// How long the primary's setup waits for its server, in seconds.
    pub const SETUP_TIMEOUT: &str = "BOSUN_SETUP_TIMEOUT";
    /// The `bosun` binary that runs `bosun recover` (this one, unless told).
    pub const RUNNER: &str = "BOSUN_RUNNER";
    /// Where `bosun wal push` leaves its last failure (the archive command's).
    pub const WAL_ERROR_FILE: &str = bosun_backup_model::contract::WAL_ERROR_FILE;
    /// The directory of the API's certificate, key and token (the instance Secret).
    pub const API_DIR: &str = "BOSUN_API_DIR";
    pub const API_PORT: &str = "BOSUN_API_PORT";
    /// A major upgrade's Job (`bosun upgrade`): the data's major, the new one, and
    /// where the old major's programs are copied.
    pub const UPGRADE_FROM: &str = "BOSUN_FROM";
    pub const UPGRADE_TO: &str = "BOSUN_TO";
    pub const UPGRADE_OLD: &str = "BOSUN_OLD";
    /// The archive's variables a Backup's run reads: `bosun recover` is given the
    /// recovery's instead, so these are taken out of its environment.
    pub const ARCHIVE_ONLY: [&str; 4] = {
        use bosun_backup_model::contract::*;
        [BACKUP_DESTINATION, BACKUP_ENDPOINT, BACKUP_REGION, BACKUP_NAME]
    };
}

/// Default paths in the pod.
pub mod defaults {
    pub const ROLE_FILE: &str = "/etc/bosun/role";
    pub const ROLE_TOLD: &str = "/tmp/bosun.role";
    pub const PASSFILE: &str = "/tmp/bosun.pgpass";
    pub const HBA_FILE: &str = "/tmp/bosun.pg_hba.conf";
    pub const SOCKET_DIR: &str = "/var/run/postgresql";
    pub const TERMINATION_LOG: &str = "/dev/termination-log";
    pub const UPGRADE_OLD: &str = "/opt/bosun/old";
}

/// `bosun instance`: run the server in COMMAND as the instance's role says.
#[derive(clap::Args, Clone, Debug)]
pub struct InstanceArgs {
    /// The data directory.
    #[arg(long, env = env::PGDATA)]
    pub pgdata: PathBuf,
    /// The port the server listens on (its setup connects to it on the socket).
    #[arg(long, env = env::PORT, default_value_t = 5432)]
    pub port: u16,
    /// The server's Unix socket directory.
    #[arg(long, env = env::SOCKET_DIR, default_value = defaults::SOCKET_DIR)]
    pub socket_dir: PathBuf,
    #[arg(long, env = env::SUPERUSER, default_value = "postgres")]
    pub superuser: String,
    #[arg(long, env = env::PASSWORD, hide_env_values = true)]
    pub password: String,
    /// Whether the superuser may log in over the network (with its password, over
    /// TLS); `false`: only through the socket, and this instance's own connections to
    /// its primary go as the replication role.
    #[arg(long, env = env::SUPERUSER_NETWORK, default_value_t = true, action = clap::ArgAction::Set)]
    pub superuser_network: bool,
    #[arg(long, env = env::REPLICATION_USER, default_value = "replicator")]
    pub replication_user: String,
    /// Empty or absent: this database has no replication role (a standby cannot clone).
    #[arg(long, env = env::REPLICATION_PASSWORD, hide_env_values = true)]
    pub replication_password: Option<String>,
    /// Where the passwords are read first (files `password`, `replication-password`,
    /// and the application's `app-password`).
    #[arg(long, env = env::CREDENTIALS_DIR)]
    pub credentials_dir: Option<PathBuf>,
    /// The application's role, set up once its password is there.
    #[arg(long, env = env::APP_USER)]
    pub app_user: Option<String>,
    /// The application's database, owned by its role.
    #[arg(long, env = env::APP_DATABASE)]
    pub app_database: Option<String>,
    /// The primary's address (the read-write Service).
    #[arg(long, env = env::PRIMARY_HOST)]
    pub primary_host: String,
    #[arg(long, env = env::PRIMARY_PORT, default_value_t = 5432)]
    pub primary_port: u16,
    #[arg(long, env = env::PRIMARY_HOSTADDR)]
    pub primary_hostaddr: Option<String>,
    #[arg(long, env = env::ROLE_FILE, default_value = defaults::ROLE_FILE)]
    pub role_file: PathBuf,
    #[arg(long, env = env::ROLE_TOLD, default_value = defaults::ROLE_TOLD)]
    pub role_told: PathBuf,
    #[arg(long, env = env::PASSFILE, default_value = defaults::PASSFILE)]
    pub passfile: PathBuf,
    /// The server's `pg_hba.conf`, written at each start ([`crate::access`]).
    #[arg(long, env = env::HBA_FILE, default_value = defaults::HBA_FILE)]
    pub hba_file: PathBuf,
    /// The major this image's server runs: a standby whose data is older re-clones.
    #[arg(long, env = env::MAJOR)]
    pub major: Option<String>,
    /// This instance's name, as its primary sees it.
    #[arg(long, env = env::NAME, default_value = "standby")]
    pub name: String,
    #[command(flatten)]
    pub recovery: RecoveryArgs,
    #[arg(long, env = env::TERMINATION_LOG, default_value = defaults::TERMINATION_LOG)]
    pub termination_log: PathBuf,
    /// How long the primary's setup waits for the server, in seconds (a server
    /// recovering from an archive is waited for as long as it recovers).
    #[arg(long, env = env::SETUP_TIMEOUT, default_value_t = 600)]
    pub setup_timeout: u64,
    /// `bosun wal push`'s last failure, which the API's status quotes.
    #[arg(long, env = env::WAL_ERROR_FILE)]
    pub wal_error_file: Option<PathBuf>,
    /// The API's `tls.crt`, `tls.key` and `token`, and `ca-bundle.crt`; none: no API.
    /// The server serves TLS with the same certificate and key.
    #[arg(long, env = env::API_DIR)]
    pub api_dir: Option<PathBuf>,
    #[arg(long, env = env::API_PORT, default_value_t = crate::api::PORT)]
    pub api_port: u16,
    /// The server's command: the image's entrypoint, `postgres`, and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// A new database's recovery from an archive (`spec.bootstrap.recovery`): none
/// without a destination.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RecoveryArgs {
    #[arg(id = "recovery_destination", long = "recovery-destination", env = env::RECOVERY_DESTINATION)]
    pub destination: Option<String>,
    #[arg(id = "recovery_endpoint", long = "recovery-endpoint", env = env::RECOVERY_ENDPOINT)]
    pub endpoint: Option<String>,
    #[arg(id = "recovery_region", long = "recovery-region", env = env::RECOVERY_REGION)]
    pub region: Option<String>,
    #[arg(id = "recovery_namespace", long = "recovery-namespace", env = env::RECOVERY_NAMESPACE)]
    pub namespace: Option<String>,
    #[arg(id = "recovery_name", long = "recovery-name", env = env::RECOVERY_NAME)]
    pub name: Option<String>,
    /// The server settings of a recovering start, one `name=value` a line.
    #[arg(id = "recovery_settings", long = "recovery-settings", env = env::RECOVERY_SETTINGS)]
    pub settings: Option<PathBuf>,
    /// The `bosun` that runs `bosun recover`.
    #[arg(long, env = env::RUNNER)]
    pub runner: Option<PathBuf>,
}

impl InstanceArgs {
    /// The credentials directory's file `key`, when it holds one.
    fn credential(&self, key: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.credentials_dir.as_ref()?.join(key)).ok()?;
        (!text.is_empty()).then_some(text)
    }

    /// The superuser's password: the credentials directory's, else the variable's.
    pub fn superuser_password(&self) -> String {
        self.credential("password").unwrap_or_else(|| self.password.clone())
    }

    /// The application's role, database and password, when there is all of it.
    pub fn application(&self) -> Option<(&str, &str, String)> {
        let (user, database) = (self.app_user.as_deref()?, self.app_database.as_deref()?);
        Some((user, database, self.credential(env::APP_PASSWORD_FILE)?))
    }

    /// The pooler's role's password, when the database has a pooler.
    pub fn pooler_password(&self) -> Option<String> {
        self.credential(env::POOLER_PASSWORD_FILE)
    }

    /// The replication password, when there is one.
    pub fn replication_password(&self) -> Option<String> {
        self.credential("replication-password").or_else(|| self.replication_password.clone()).filter(|p| !p.is_empty())
    }

    pub fn setup_timeout(&self) -> Duration {
        Duration::from_secs(self.setup_timeout)
    }

    /// The server's `-c name=value` settings of its command, in order.
    pub fn server_settings(&self) -> Vec<String> {
        self.command.windows(2).filter(|w| w[0] == "-c").map(|w| w[1].clone()).collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: InstanceArgs,
    }

    /// `bosun instance`'s arguments from a command line (`argv[0]` first).
    pub(crate) fn parse<S: Into<std::ffi::OsString> + Clone>(argv: impl IntoIterator<Item = S>) -> InstanceArgs {
        Cli::try_parse_from(argv).map(|c| c.args).unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn the_server_command_follows_two_dashes_and_its_settings_are_read() {
        let cli = Cli::try_parse_from([
            "bosun",
            "--pgdata",
            "/data",
            "--password",
            "p",
            "--primary-host",
            "db",
            "--",
            "docker-entrypoint.sh",
            "postgres",
            "-c",
            "wal_log_hints=on",
            "-c",
            "archive_command=bosun wal push %p",
        ])
        .expect("parses");
        assert_eq!(cli.args.command[0], "docker-entrypoint.sh");
        assert_eq!(cli.args.server_settings(), ["wal_log_hints=on", "archive_command=bosun wal push %p"]);
        assert_eq!(cli.args.replication_password(), None);
        assert!(Cli::try_parse_from(["bosun", "--pgdata", "/d", "--password", "p", "--primary-host", "h"]).is_err());
    }
}
