//! What bosun's resources should look like, as pure functions.
//!
//! Every controller is a pipeline `validate → build → apply → update_status`; this
//! crate holds the pure stages: the builders (custom resource → desired children) and
//! the status computations (custom resource + applied children → status). Nothing here
//! performs I/O or reads a clock, so every branch is unit-tested without an apiserver.

pub mod admission;
pub mod appconfig;
pub mod backup;
pub mod claims;
pub mod conditions;
pub mod demovolume;
pub mod duration;
pub mod failover;
pub mod instances;
pub mod meta;
pub mod pki;
pub mod pods;
pub mod postgresql;
pub mod provided;
pub mod quantity;
pub mod render;
pub mod shard;
pub mod slim;
pub mod stacks;
pub mod teardown;
pub mod upgrade;
pub mod voteconfig;
pub mod webapp;
