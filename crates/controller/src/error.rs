//! What can go wrong in a reconcile, and what to do about it.
//!
//! Each error has a bounded [`Error::category`] that doubles as the metric label and
//! the event reason, and [`Error::is_invalid_spec`] decides the policy: an invalid spec
//! is reported on the resource and waits for the user to change it; everything else is
//! retried with exponential backoff.

use kube::core::Status;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
    #[error("reading {what}: {source}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// The name of a child is held by an object this parent does not control.
    #[error("{0}")]
    NameConflict(String),
}

impl Error {
    /// Every value [`Error::category`] can return.
    pub const CATEGORIES: &'static [&'static str] = &[
        "InvalidSpec",
        "NameConflict",
        "NamespaceTerminating",
        crate::guard::UNREADABLE,
        "Conflict",
        "Forbidden",
        "NotFound",
        "Throttled",
        "ApiUnavailable",
        "ApiError",
        "ApiUnreachable",
        "ClientError",
    ];

    fn kube(&self) -> Option<&kube::Error> {
        match self {
            Error::Apply { source, .. } | Error::Read { source, .. } => Some(source),
            Error::Status(source) => Some(source),
            Error::NameConflict(_) => None,
        }
    }

    fn api_status(&self) -> Option<&Status> {
        match self.kube()? {
            kube::Error::Api(status) => Some(status),
            _ => None,
        }
    }

    /// The apiserver refused a child because of what the user wrote: retrying cannot
    /// help until the spec changes.
    ///
    /// That is HTTP 422 Invalid or 400 BadRequest on apply — and some 500s: the
    /// apiserver answers 500 when it cannot even build the applied object (duplicate
    /// keys in a list-map such as two env vars of one name, a quantity it cannot
    /// parse), and says so in its message.
    pub fn is_invalid_spec(&self) -> bool {
        if !matches!(self, Error::Apply { .. }) || self.is_precondition_failed() {
            return false;
        }
        self.api_status().is_some_and(|s| match s.code {
            400 | 422 => true,
            500 => SPEC_CAUSED_500.iter().any(|m| s.message.contains(m)),
            _ => false,
        })
    }

    /// The precondition of a child apply failed (see [`crate::children`]): a create-only
    /// apply found the name taken (409), or the object the apply was decided for is gone
    /// (409 "uid mismatch") or was replaced (422 on `metadata.uid`). Forced applies have
    /// no field conflicts, so a 409 on one is always a precondition.
    pub fn is_precondition_failed(&self) -> bool {
        matches!(self, Error::Apply { .. })
            && self.api_status().is_some_and(|s| {
                s.code == 409
                    || (s.code == 422
                        && (s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid"))
                            || s.message.contains("metadata.uid: Invalid value")))
            })
    }

    /// The namespace is being deleted: nothing can be created in it any more, and
    /// nothing needs to be.
    pub fn is_namespace_terminating(&self) -> bool {
        self.api_status().is_some_and(|s| {
            s.code == 403
                && (s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
                    || s.message.contains("because it is being terminated"))
        })
    }

    /// The user-facing explanation of an invalid spec: the apiserver's own message,
    /// which names the offending field.
    pub fn user_message(&self) -> String {
        match (self, self.api_status()) {
            (Error::Apply { kind, .. }, Some(status)) => format!("the {kind} was refused: {}", status.message),
            _ => self.to_string(),
        }
    }

    /// A short, bounded label for metrics, events and logs.
    pub fn category(&self) -> &'static str {
        if self.is_invalid_spec() {
            return "InvalidSpec";
        }
        if matches!(self, Error::NameConflict(_)) {
            return "NameConflict";
        }
        if self.is_namespace_terminating() {
            return "NamespaceTerminating";
        }
        match self.api_status().map(|s| s.code) {
            Some(409) => "Conflict",
            Some(401 | 403) => "Forbidden",
            Some(404) => "NotFound",
            Some(429) => "Throttled",
            Some(500..=599) => "ApiUnavailable",
            Some(_) => "ApiError",
            None => match self.kube() {
                Some(kube::Error::HyperError(_) | kube::Error::Service(_)) => "ApiUnreachable",
                _ => "ClientError",
            },
        }
    }
}

/// What the apiserver says in a 500 on apply when the applied object itself is
/// malformed (server-side apply cannot build a typed object from it).
const SPEC_CAUSED_500: &[&str] = &[
    "failed to create typed patch object",
    "failed to convert new object",
    "duplicate entries for key",
    "quantities must match",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure(message, "Invalid").with_code(code)))
    }

    fn apply_err_with(code: u16, message: &str) -> Error {
        Error::Apply { kind: "Deployment".into(), name: "w".into(), source: api(code, message) }
    }

    fn apply_err(code: u16) -> Error {
        apply_err_with(code, "nope: spec.template.spec.containers[0].env[0].name")
    }

    #[test]
    fn refused_child_is_an_invalid_spec() {
        assert!(apply_err(422).is_invalid_spec());
        assert!(apply_err(400).is_invalid_spec());
        assert_eq!(apply_err(422).category(), "InvalidSpec");
        assert!(apply_err(422).user_message().contains("env[0].name"));
    }

    #[test]
    fn every_category_is_listed() {
        for code in [400, 401, 403, 404, 409, 422, 429, 500, 503, 418] {
            assert!(Error::CATEGORIES.contains(&apply_err(code).category()), "{code}");
        }
    }

    #[test]
    fn a_500_the_spec_caused_is_an_invalid_spec() {
        let dup = apply_err_with(
            500,
            "failed to create typed patch object (/w; apps/v1, Kind=Deployment): \
             .spec.template.spec.containers[name=\"app\"].env: duplicate entries for key [name=\"A\"]",
        );
        assert!(dup.is_invalid_spec());
        assert_eq!(dup.category(), "InvalidSpec");
        assert!(dup.user_message().contains("duplicate entries"));
        let outage = apply_err_with(500, "etcdserver: request timed out");
        assert!(!outage.is_invalid_spec());
        assert_eq!(outage.category(), "ApiUnavailable");
    }

    #[test]
    fn a_failed_precondition_is_not_an_invalid_spec() {
        let replaced = apply_err_with(
            422,
            "Deployment.apps \"web\" is invalid: metadata.uid: Invalid value: \"x\": field is immutable",
        );
        assert!(replaced.is_precondition_failed());
        assert!(!replaced.is_invalid_spec());
        let taken =
            apply_err_with(409, "the object has been modified; please apply your changes to the latest version");
        assert!(taken.is_precondition_failed());
        assert_eq!(taken.category(), "Conflict");
        assert!(!apply_err(422).is_precondition_failed());
    }

    #[test]
    fn a_terminating_namespace_is_recognised() {
        let err = apply_err_with(
            403,
            "deployments.apps \"web\" is forbidden: unable to create new content in namespace e2e because it is being terminated",
        );
        assert!(err.is_namespace_terminating());
        assert_eq!(err.category(), "NamespaceTerminating");
        assert!(!apply_err(403).is_namespace_terminating());
    }

    #[test]
    fn server_trouble_is_transient() {
        assert!(!apply_err(500).is_invalid_spec());
        assert_eq!(apply_err(503).category(), "ApiUnavailable");
        assert_eq!(apply_err(409).category(), "Conflict");
        assert!(!Error::Status(api(422, "nope")).is_invalid_spec());
    }
}
