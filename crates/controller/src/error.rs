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
}

impl Error {
    /// Every value [`Error::category`] can return.
    pub const CATEGORIES: &'static [&'static str] = &[
        "InvalidSpec",
        "Conflict",
        "Forbidden",
        "NotFound",
        "Throttled",
        "ApiUnavailable",
        "ApiError",
        "ApiUnreachable",
        "ClientError",
    ];

    fn kube(&self) -> &kube::Error {
        match self {
            Error::Apply { source, .. } | Error::Read { source, .. } => source,
            Error::Status(source) => source,
        }
    }

    fn api_status(&self) -> Option<&Status> {
        match self.kube() {
            kube::Error::Api(status) => Some(status),
            _ => None,
        }
    }

    /// The apiserver refused a child because of what the user wrote (HTTP 422 Invalid
    /// or 400 BadRequest on apply): retrying cannot help until the spec changes.
    pub fn is_invalid_spec(&self) -> bool {
        matches!(self, Error::Apply { .. }) && self.api_status().is_some_and(|s| s.code == 422 || s.code == 400)
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
        match self.api_status().map(|s| s.code) {
            Some(409) => "Conflict",
            Some(401 | 403) => "Forbidden",
            Some(404) => "NotFound",
            Some(429) => "Throttled",
            Some(500..=599) => "ApiUnavailable",
            Some(_) => "ApiError",
            None => match self.kube() {
                kube::Error::HyperError(_) | kube::Error::Service(_) => "ApiUnreachable",
                _ => "ClientError",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            Status::failure("nope: spec.template.spec.containers[0].env[0].name", "Invalid").with_code(code),
        ))
    }

    fn apply_err(code: u16) -> Error {
        Error::Apply { kind: "Deployment".into(), name: "w".into(), source: api(code) }
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
        for code in [400, 401, 404, 409, 422, 429, 500, 503, 418] {
            assert!(Error::CATEGORIES.contains(&apply_err(code).category()), "{code}");
        }
    }

    #[test]
    fn server_trouble_is_transient() {
        assert!(!apply_err(500).is_invalid_spec());
        assert_eq!(apply_err(503).category(), "ApiUnavailable");
        assert_eq!(apply_err(409).category(), "Conflict");
        assert!(!Error::Status(api(422)).is_invalid_spec());
    }
}
