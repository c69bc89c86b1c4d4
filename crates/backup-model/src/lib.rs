//! What a backup is, without I/O: the database [`engine`]s and the [`retention`]
//! rule. The runner (`bosun backup run`) and the builders (the Backup controller's
//! validation) both use them, and neither pulls the other's dependencies in.

pub mod engine;
pub mod retention;
