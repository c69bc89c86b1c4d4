//! bosun's controllers.
//!
//! Every controller is the same pipeline, called once per stage:
//!
//! ```text
//!  [read (only what a decision needs)] → build (pure, bosun-resources) → apply (server-side)
//!      → update_status (from what was applied)
//! ```
//!
//! The mechanisms every controller shares live here once: server-side apply under one
//! field manager ([`apply`]), the error taxonomy that decides between "retry with
//! backoff" and "wait for a spec change" ([`error`]), per-object exponential backoff
//! ([`backoff`]) and the wiring of watches into a kube-runtime `Controller`
//! ([`wiring`]). A new controller is mostly its builders and its status.

pub mod appconfig;
pub mod apply;
pub mod backoff;
pub mod backup;
pub mod changes;
pub mod checkpoint;
pub mod children;
pub mod context;
pub mod demovolume;
pub mod dependencies;
pub mod error;
pub mod events;
pub mod failover;
pub mod finalizers;
pub mod gate;
pub mod guard;
pub mod health;
pub mod instances;
pub mod kinds;
pub mod lost;
pub mod metrics;
#[cfg(test)]
mod mock;
pub mod permissions;
pub mod pooler;
pub mod postgresql;
pub mod queue;
pub mod rbac;
pub mod read;
pub mod restore;
pub mod settings;
pub mod stacks;
pub mod status;
pub mod upgrade;
pub mod voteconfig;
pub mod webapp;
pub mod window;
pub mod wiring;
pub mod written;

pub use context::{Context, Scope, Settings};
pub use error::Error;
