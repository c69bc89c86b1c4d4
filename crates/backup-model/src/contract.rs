//! The runners' contract: the variables by which the Jobs, CronJobs and instances that
//! bosun builds tell `bosun backup|restore|verify|wal|recover` what to do. The builders
//! (`bosun-resources`) name each variable through these constants and the runners'
//! argument parsers (`bosun-runner`, `bosun-instance`) read it through the same, so no
//! name is spelled on both sides.

/// Where the backups (or the WAL archive) are: a URL (`s3://bucket/prefix`, `file:///path`, ...).
pub const BACKUP_DESTINATION: &str = "BOSUN_BACKUP_DESTINATION";
/// The object store's endpoint and region, when not the provider's default.
pub const BACKUP_ENDPOINT: &str = "BOSUN_BACKUP_ENDPOINT";
pub const BACKUP_REGION: &str = "BOSUN_BACKUP_REGION";
/// The file of the encryption key (age), and its name as recorded in each manifest.
pub const BACKUP_ENCRYPTION_KEY_FILE: &str = "BOSUN_BACKUP_ENCRYPTION_KEY_FILE";
pub const BACKUP_ENCRYPTION_KEY_NAME: &str = "BOSUN_BACKUP_ENCRYPTION_KEY_NAME";
/// The Backup's namespace and name: the folder of its runs in the destination.
pub const BACKUP_NAMESPACE: &str = "BOSUN_BACKUP_NAMESPACE";
pub const BACKUP_NAME: &str = "BOSUN_BACKUP_NAME";
/// The database backed up (a URL without its password).
pub const BACKUP_SOURCE: &str = "BOSUN_BACKUP_SOURCE";
/// The retention rules (`spec.retention`, `spec.keep*`).
pub const BACKUP_RETENTION: &str = "BOSUN_BACKUP_RETENTION";
pub const BACKUP_KEEP_LAST: &str = "BOSUN_BACKUP_KEEP_LAST";
pub const BACKUP_KEEP_DAILY: &str = "BOSUN_BACKUP_KEEP_DAILY";
pub const BACKUP_KEEP_WEEKLY: &str = "BOSUN_BACKUP_KEEP_WEEKLY";
pub const BACKUP_KEEP_MONTHLY: &str = "BOSUN_BACKUP_KEEP_MONTHLY";
/// `dump` or `base` (a PostgreSQL base backup for point-in-time recovery).
pub const BACKUP_METHOD: &str = "BOSUN_BACKUP_METHOD";
/// The file of the database password (never a variable's value).
pub const PASSWORD_FILE: &str = "BOSUN_PASSWORD_FILE";
/// Where a run writes its one-line JSON result (the termination message).
pub const RESULT_FILE: &str = "BOSUN_RESULT_FILE";
/// A restore: the run to load (or the latest), the database loaded, whether it may be overwritten.
pub const RESTORE_KEY: &str = "BOSUN_RESTORE_KEY";
pub const RESTORE_LATEST: &str = "BOSUN_RESTORE_LATEST";
pub const RESTORE_TARGET: &str = "BOSUN_RESTORE_TARGET";
pub const RESTORE_OVERWRITE: &str = "BOSUN_RESTORE_OVERWRITE";
/// A verification: the throwaway server, the check query, how long to wait for the server.
pub const VERIFY_TARGET: &str = "BOSUN_VERIFY_TARGET";
pub const VERIFY_QUERY: &str = "BOSUN_VERIFY_QUERY";
pub const VERIFY_WAIT_SECONDS: &str = "BOSUN_VERIFY_WAIT_SECONDS";
/// Where `bosun wal push` leaves its last failure, which the instance API quotes.
pub const WAL_ERROR_FILE: &str = "BOSUN_WAL_ERROR_FILE";
/// `bosun recover`: the file of the recovering server's settings, and the target.
pub const RECOVERY_SETTINGS: &str = "BOSUN_RECOVERY_SETTINGS";
pub const RECOVERY_TARGET_TIME: &str = "BOSUN_RECOVERY_TARGET_TIME";
pub const RECOVERY_TARGET_LSN: &str = "BOSUN_RECOVERY_TARGET_LSN";
pub const RECOVERY_TARGET_NAME: &str = "BOSUN_RECOVERY_TARGET_NAME";
