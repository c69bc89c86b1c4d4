//! Condition types and reasons shared by every kind.
//!
//! Conditions use the standard `metav1.Condition` shape. The constants here are the
//! vocabulary users filter on (`kubectl wait --for=condition=Ready`, alerts on reasons),
//! so they live in one place.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Condition types.
pub mod types {
    /// Fully converged and serving.
    pub const READY: &str = "Ready";
    /// A change is being rolled out.
    pub const PROGRESSING: &str = "Progressing";
    /// Something is wrong that needs attention (bad spec, failed rollout).
    pub const DEGRADED: &str = "Degraded";
}

/// Condition reasons (CamelCase, as Kubernetes requires).
pub mod reasons {
    pub const AVAILABLE: &str = "Available";
    pub const ROLLING_OUT: &str = "RollingOut";
    pub const PENDING: &str = "Pending";
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    pub const ROLLOUT_FAILED: &str = "RolloutFailed";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const AS_EXPECTED: &str = "AsExpected";
}
