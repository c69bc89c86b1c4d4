//! What a backup is, without I/O: the database [`engine`]s, the [`retention`] rules and
//! a run's [`progress`] line, and the runners' [`contract`] (the variables that drive them). The runner (`bosun backup run`) and the builders (the
//! Backup controller's validation and status) both use them, and neither pulls the
//! other's dependencies in.

pub mod contract;
pub mod engine;
pub mod progress;
pub mod retention;
