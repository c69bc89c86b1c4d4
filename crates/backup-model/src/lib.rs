//! What a backup is, without I/O: the database [`engine`]s, the [`retention`] rules and
//! a run's [`progress`] line. The runner (`bosun backup run`) and the builders (the
//! Backup controller's validation and status) both use them, and neither pulls the
//! other's dependencies in.

pub mod engine;
pub mod progress;
pub mod retention;
