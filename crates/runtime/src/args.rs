//! Flags of `bosun run`; every flag can also be set from the environment.

use std::fmt;
use std::str::FromStr;

/// A controller `bosun run` can serve: one of [`bosun_controller::kinds::controllers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ControllerName(pub &'static str);

impl fmt::Display for ControllerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl FromStr for ControllerName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let known = || bosun_controller::kinds::controllers();
        known().find(|c| *c == s.trim()).map(ControllerName).ok_or_else(|| {
            format!("unknown controller {s:?}; known controllers: {}", known().collect::<Vec<_>>().join(", "))
        })
    }
}

#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Controllers to run (comma-separated); all when not given.
    #[arg(long, env = "BOSUN_CONTROLLERS", value_delimiter = ',')]
    pub controllers: Vec<ControllerName>,

    /// Threads running the controllers, watches and HTTP servers. The work waits on the
    /// API server (1,000 WebApps cost about 7 CPU-seconds), and each thread that
    /// allocates gets a heap arena of its own: one worker is the leanest (`make bench`).
    #[arg(long, env = "BOSUN_WORKER_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_threads: u16,

    /// Namespaces to watch (comma-separated); all when not given.
    #[arg(long, env = "BOSUN_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// Most reconciles running at once, per controller and namespace.
    #[arg(long, env = "BOSUN_CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Elect a leader among replicas with a Lease; default: on when running in a cluster.
    #[arg(long, env = "BOSUN_LEADER_ELECT", num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: Option<bool>,

    /// Divide the objects among the replicas in this many shards (1–256), each held by
    /// one replica with a Lease, instead of one leader reconciling everything. Every
    /// replica must run with the same count. Implies leases, in a cluster or not.
    #[arg(long, env = "BOSUN_SHARDS", value_parser = parse_shards)]
    pub shards: Option<bosun_resources::shard::Shards>,

    /// Name of the leader election Lease.
    #[arg(long, env = "BOSUN_LEADER_ELECT_LEASE_NAME", default_value = "bosun-leader")]
    pub leader_elect_lease_name: String,

    /// Namespace of the Lease; default: the pod's namespace, else the kubeconfig's.
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,

    /// How long a lease is valid without renewal; a standby takes over after this.
    #[arg(long, env = "BOSUN_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: std::time::Duration,

    /// The leader renews this long after its last renewal (lease duration minus this is the safety margin).
    #[arg(long, env = "BOSUN_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: std::time::Duration,

    /// How often a standby checks whether the lease is free.
    #[arg(long, env = "BOSUN_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: std::time::Duration,

    /// Identity in the Lease and in events; default: the pod name (POD_NAME), else hostname and a random suffix.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// Address of /metrics, /healthz and /readyz (`:8080` means all interfaces).
    #[arg(long, env = "BOSUN_METRICS_BIND_ADDRESS", default_value = ":8080", value_parser = parse_addr)]
    pub metrics_bind_address: std::net::SocketAddr,

    /// The image whose `bosun` runs backups and restores (CronJobs and Jobs of Backup and Restore).
    #[arg(long, env = "BOSUN_RUNNER_IMAGE", default_value = bosun_controller::settings::DEFAULT_RUNNER_IMAGE)]
    pub runner_image: String,

    /// The image of PostgreSQL instances; `{version}` in it stands for the major version
    /// (`spec.version`), and an image without it is used for every version.
    #[arg(long, env = "BOSUN_POSTGRES_IMAGE", default_value = bosun_controller::settings::DEFAULT_POSTGRES_IMAGE)]
    pub postgres_image: String,

    /// The image of PostgreSQL's pooler pods (`spec.pooler`): PgBouncer 1.21 or later
    /// and psql on PATH, run by the `bosun` the runner image puts in.
    #[arg(long, env = "BOSUN_POOLER_IMAGE", default_value = bosun_resources::postgresql::DEFAULT_POOLER_IMAGE)]
    pub pooler_image: String,

    /// Validity of each PostgreSQL's server certificate (its clients' TLS, its
    /// instances' API), and how long before expiry it is renewed.
    #[arg(long, env = "BOSUN_POSTGRES_CERT_VALIDITY", default_value = "2160h", value_parser = parse_duration)]
    pub postgres_cert_validity: std::time::Duration,
    #[arg(long, env = "BOSUN_POSTGRES_CERT_RENEW_BEFORE", default_value = "720h", value_parser = parse_duration)]
    pub postgres_cert_renew_before: std::time::Duration,

    /// Validity of each PostgreSQL's CA, and how long before expiry its rotation starts.
    #[arg(long, env = "BOSUN_POSTGRES_CA_VALIDITY", default_value = "87600h", value_parser = parse_duration)]
    pub postgres_ca_validity: std::time::Duration,
    #[arg(long, env = "BOSUN_POSTGRES_CA_RENEW_BEFORE", default_value = "8760h", value_parser = parse_duration)]
    pub postgres_ca_renew_before: std::time::Duration,

    /// How long a PostgreSQL's old and new CA are trusted together while it rotates:
    /// long enough for the kubelet to bring the new CAs into every pod that mounts
    /// them (about a minute) before the new CA signs.
    #[arg(long, env = "BOSUN_POSTGRES_CA_OVERLAP", default_value = "5m", value_parser = parse_duration)]
    pub postgres_ca_overlap: std::time::Duration,

    /// How long the primary of a PostgreSQL with standbys may leave bosun's heartbeat
    /// unanswered while its pod still looks Ready before a standby takes its place
    /// (the loss of its node, which Kubernetes declares only after its node monitor's
    /// grace period and more), and only once the standbys too have lost it. A primary
    /// that hears neither bosun nor enough of its standbys (or one that hears bosun)
    /// fences itself a heartbeat and a half sooner (at least half of it).
    #[arg(long, env = "BOSUN_POSTGRES_UNANSWERED_FAILOVER", default_value = "5s", value_parser = parse_duration)]
    pub postgres_unanswered_failover: std::time::Duration,

    /// Give each PostgreSQL data volume to the postgres user (uid 999) in an init
    /// container that runs as root with only CHOWN: for storage that ignores fsGroup,
    /// such as hostPath volumes. Off by default: the instances run as non-root only.
    #[arg(long, env = "BOSUN_POSTGRES_VOLUME_PERMISSIONS", num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub postgres_volume_permissions: bool,

    /// The image of a stack's MySQL database; `{version}` in it stands for
    /// `spec.database.version`.
    #[arg(long, env = "BOSUN_MYSQL_IMAGE", default_value = "mysql:{version}")]
    pub mysql_image: String,

    /// The image of a stack's Redis cache.
    #[arg(long, env = "BOSUN_REDIS_IMAGE", default_value = "redis:7")]
    pub redis_image: String,

    /// Serve the admission webhooks (TLS on --webhook-port); default: on in a cluster, or when --webhook-url is set.
    #[arg(long, env = "BOSUN_ENABLE_WEBHOOKS", num_args = 0..=1, default_missing_value = "true")]
    pub enable_webhooks: Option<bool>,

    /// Port of the webhook server, on every replica.
    #[arg(long, env = "BOSUN_WEBHOOK_PORT", default_value_t = 9443)]
    pub webhook_port: u16,

    /// Address the webhook server binds (`0.0.0.0` in a pod; `127.0.0.1` with a local --webhook-url).
    #[arg(long, env = "BOSUN_WEBHOOK_HOST")]
    pub webhook_host: Option<std::net::IpAddr>,

    /// Where the apiserver reaches the webhooks when no Service routes to bosun (e.g.
    /// `https://127.0.0.1:9443` on the local control plane): bosun then creates the
    /// webhook configurations itself, pointing at this URL.
    #[arg(long, env = "BOSUN_WEBHOOK_URL")]
    pub webhook_url: Option<String>,

    /// With --webhook-url: at exit, delete the webhook configurations pointing at it and
    /// point the converted CRDs at the webhook Service again (`make run` sets it). Off by
    /// default: of several replicas, one that stops must not remove the others' admission.
    #[arg(long, env = "BOSUN_WEBHOOK_REMOVE_ON_EXIT", num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub webhook_remove_on_exit: bool,

    /// `self`: bosun makes and rotates its own CA and certificate (Secret --webhook-secret-name);
    /// `files`: tls.crt and tls.key in --webhook-cert-dir (cert-manager), read again when they change.
    #[arg(long, env = "BOSUN_WEBHOOK_CERT_MODE", default_value = "self", value_parser = ["self", "files"])]
    pub webhook_cert_mode: String,

    /// Directory of tls.crt and tls.key in `files` mode.
    #[arg(long, env = "BOSUN_WEBHOOK_CERT_DIR", default_value = "/tmp/k8s-webhook-server/serving-certs")]
    pub webhook_cert_dir: std::path::PathBuf,

    /// The Secret (in bosun's namespace) of the self-managed CA and certificate.
    #[arg(long, env = "BOSUN_WEBHOOK_SECRET_NAME", default_value = "bosun-webhook-certs")]
    pub webhook_secret_name: String,

    /// The webhook Service (in bosun's namespace), whose DNS names the certificate is for.
    #[arg(long, env = "BOSUN_WEBHOOK_SERVICE_NAME", default_value = "bosun-webhook-service")]
    pub webhook_service_name: String,

    /// Prefix of the configuration names (`<prefix>validating-webhook-configuration`).
    #[arg(long, env = "BOSUN_WEBHOOK_CONFIGURATION_PREFIX", default_value = "bosun-")]
    pub webhook_configuration_prefix: String,

    /// Validity of the serving certificate, and how long before expiry it is renewed.
    #[arg(long, env = "BOSUN_WEBHOOK_CERT_VALIDITY", default_value = "2160h", value_parser = parse_duration)]
    pub webhook_cert_validity: std::time::Duration,
    #[arg(long, env = "BOSUN_WEBHOOK_CERT_RENEW_BEFORE", default_value = "720h", value_parser = parse_duration)]
    pub webhook_cert_renew_before: std::time::Duration,

    /// Validity of the CA, and how long before expiry its rotation starts.
    #[arg(long, env = "BOSUN_WEBHOOK_CA_VALIDITY", default_value = "87600h", value_parser = parse_duration)]
    pub webhook_ca_validity: std::time::Duration,
    #[arg(long, env = "BOSUN_WEBHOOK_CA_RENEW_BEFORE", default_value = "8760h", value_parser = parse_duration)]
    pub webhook_ca_renew_before: std::time::Duration,

    /// How long an old and a new CA are trusted together during a CA rotation.
    #[arg(long, env = "BOSUN_WEBHOOK_CA_OVERLAP", default_value = "5m", value_parser = parse_duration)]
    pub webhook_ca_overlap: std::time::Duration,

    /// The admission policy (YAML: productionNamespaces, productionNamespaceSelector,
    /// maxReplicas, allowedRegistries, requireLimitsInProduction, defaultSecurityContext),
    /// read again when it changes; defaults without one.
    #[arg(long, env = "BOSUN_ADMISSION_POLICY")]
    pub admission_policy: Option<std::path::PathBuf>,

    /// How long an AppConfig change waits for more before its consumers roll (changes within it roll them once).
    #[arg(long, env = "BOSUN_APPCONFIG_SETTLE", default_value = "2s", value_parser = parse_duration)]
    pub appconfig_settle: std::time::Duration,

    /// The least time between two rollouts of one AppConfig's consumers (a flapping value restarts nothing more often).
    #[arg(long, env = "BOSUN_APPCONFIG_MIN_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub appconfig_min_interval: std::time::Duration,

    /// How long one step of a stack's ordered deletion (frontend, backend, cache, database)
    /// may last before bosun stops waiting, removes the stack's finalizer and leaves the
    /// rest to the garbage collector.
    #[arg(long, env = "BOSUN_STACK_DELETION_TIMEOUT", default_value = "5m", value_parser = parse_positive_duration)]
    pub stack_deletion_timeout: std::time::Duration,

    /// At most this many workloads bosun created (a new WebApp's Deployment) may be in
    /// their first rollout at once (created, not yet available nor failed; each counts
    /// for 2 minutes at most); the parents of more wait in line, first come first served.
    /// Paces thousands of new WebApps to what the cluster's controllers bring up; 0: no bound.
    #[arg(long, env = "BOSUN_MAX_ROLLOUTS_IN_FLIGHT", default_value_t = bosun_controller::window::DEFAULT_LIMIT)]
    pub max_rollouts_in_flight: usize,

    /// How long in-flight reconciles may take to finish after SIGTERM.
    #[arg(long, env = "BOSUN_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: std::time::Duration,
}

impl RunArgs {
    /// The names of the controllers to run: those of `--controllers`, else all.
    pub fn enabled_controllers(&self) -> Vec<&'static str> {
        if self.controllers.is_empty() {
            bosun_controller::kinds::controllers().collect()
        } else {
            self.controllers.iter().map(|c| c.0).collect()
        }
    }
}

/// `host:port`, or `:port` for all interfaces.
pub fn parse_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    let full = if s.starts_with(':') { format!("0.0.0.0{s}") } else { s.to_owned() };
    full.parse().map_err(|_| format!("invalid address {s:?}: expected host:port or :port"))
}

pub use bosun_resources::duration::parse_duration;

/// A shard count, 1 to 256.
pub fn parse_shards(s: &str) -> Result<bosun_resources::shard::Shards, String> {
    let count: u16 = s.trim().parse().map_err(|_| format!("--shards must be a number between 1 and 256, not {s:?}"))?;
    bosun_resources::shard::Shards::new(count)
}

/// A duration of at least a second.
pub fn parse_positive_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d < std::time::Duration::from_secs(1) {
        return Err(format!("invalid duration {s:?}: at least 1s"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_deletion_timeout_is_at_least_a_second() {
        assert_eq!(parse_positive_duration("5m"), Ok(std::time::Duration::from_secs(300)));
        assert!(parse_positive_duration("500ms").is_err());
        assert!(parse_positive_duration("0s").is_err());
    }

    #[test]
    fn a_shard_count_is_a_number_from_1_to_256() {
        assert_eq!(parse_shards("3").map(|s| s.count()), Ok(3));
        for bad in ["0", "257", "three", "-1", ""] {
            assert!(parse_shards(bad).unwrap_err().contains("--shards"), "{bad:?}");
        }
    }

    #[test]
    fn addresses() {
        assert_eq!(parse_addr(":8080").unwrap().to_string(), "0.0.0.0:8080");
        assert_eq!(parse_addr("127.0.0.1:0").unwrap().port(), 0);
        assert!(parse_addr("localhost").is_err());
    }

    #[test]
    fn controller_names() {
        assert_eq!("webapp".parse::<ControllerName>(), Ok(ControllerName("webapp")));
        assert_eq!("voteconfig".parse::<ControllerName>(), Ok(ControllerName("voteconfig")));
        assert_eq!(" demovolume".parse::<ControllerName>(), Ok(ControllerName("demovolume")));
        assert!(
            "webapps"
                .parse::<ControllerName>()
                .unwrap_err()
                .contains("known controllers: webapp, voteconfig, demovolume, appconfig, backup, restore, postgresql, appstack, ecommerceplatform")
        );
    }
}
