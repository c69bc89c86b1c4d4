//! The operator's configuration that goes into children (`bosun run`'s flags).

use std::time::Duration;

/// Operator configuration that goes into children (set by `bosun run`'s flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The image whose `bosun` runs backups and restores (`--runner-image`).
    pub runner_image: String,
    /// How PostgreSQL instances are run (`--postgres-image`, `--postgres-volume-permissions`).
    pub postgres: bosun_resources::postgresql::Settings,
    /// The images of a stack's MySQL and Redis (`--mysql-image`, `--redis-image`).
    pub stack: bosun_resources::stacks::Images,
    /// How AppConfig rollouts are paced (`--appconfig-settle`, `--appconfig-min-interval`).
    pub rollout_pace: bosun_resources::appconfig::Pace,
    /// How long one step of a stack's ordered deletion may last before bosun stops
    /// waiting and removes its finalizer (`--stack-deletion-timeout`).
    pub stack_deletion: bosun_resources::teardown::Bound,
}

/// `--appconfig-settle`'s default: changes within it roll consumers once.
pub const DEFAULT_ROLLOUT_SETTLE: Duration = Duration::from_secs(2);
/// `--appconfig-min-interval`'s default: the least time between two rollouts of one AppConfig.
pub const DEFAULT_ROLLOUT_MIN_INTERVAL: Duration = Duration::from_secs(10);

pub use bosun_resources::backup::DEFAULT_RUNNER_IMAGE;
pub use bosun_resources::postgresql::DEFAULT_IMAGE as DEFAULT_POSTGRES_IMAGE;

impl Default for Settings {
    fn default() -> Self {
        Self {
            runner_image: DEFAULT_RUNNER_IMAGE.to_owned(),
            postgres: bosun_resources::postgresql::Settings::default(),
            stack: bosun_resources::stacks::Images::default(),
            rollout_pace: bosun_resources::appconfig::Pace {
                settle: DEFAULT_ROLLOUT_SETTLE,
                min_interval: DEFAULT_ROLLOUT_MIN_INTERVAL,
            },
            stack_deletion: bosun_resources::teardown::Bound::default(),
        }
    }
}
