//! The controller manager behind `bosun run`.
//!
//! ```text
//!  flags ─▶ client ─▶ one Controller per (enabled kind × watched namespace) ─▶ join
//!                                       ▲
//!  SIGTERM/SIGINT ─▶ shutdown token ────┘ (stop taking work, finish in-flight reconciles)
//! ```

pub mod args;
pub mod client;
pub mod http;
pub mod leader;
pub mod manager;
mod process;
pub mod shards;
pub mod webhook;

pub use args::RunArgs;
pub use manager::{Error, run};
