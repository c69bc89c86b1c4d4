//! The checks that protect a running database before anything is applied (a Refusal).

use super::*;

/// Why a PostgreSQL's spec is not (or could not be) applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `spec.storage` is below what a data claim already requests.
    Shrink { storage: String, claim: String, current: String },
    /// `spec.version` is below the major version of the data (a downgrade).
    VersionChange { wanted: Version, data: String, holder: String },
    /// The credentials Secret is gone (or lacks a key) while the data exists.
    CredentialsMissing(String),
    /// The apiserver refused a child; its message names the field.
    InvalidSpec(String),
    /// A child's name is held by an object this PostgreSQL does not control.
    NameConflict(String),
    /// `spec.bootstrap.recovery` cannot be done as asked.
    Recovery(String),
    /// The certificate `spec.certificates` names cannot be served ([`crate::provided`]).
    Certificate(String),
}

impl Refusal {
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Shrink { .. } => reasons::SHRINK_REFUSED,
            Refusal::VersionChange { .. } => reasons::VERSION_CHANGE_REFUSED,
            Refusal::CredentialsMissing(_) => reasons::CREDENTIALS_MISSING,
            Refusal::InvalidSpec(_) => reasons::INVALID_SPEC,
            Refusal::NameConflict(_) => reasons::NAME_CONFLICT,
            Refusal::Recovery(_) => reasons::RECOVERY_REFUSED,
            Refusal::Certificate(_) => reasons::CERTIFICATE_INVALID,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::Shrink { storage, claim, current } => format!(
                "spec.storage {storage} is less than the {current} claim {claim} already requests: Kubernetes \
                 cannot shrink a PersistentVolumeClaim, so nothing is changed and the database runs on; set \
                 spec.storage to {current} or more"
            ),
            Refusal::VersionChange { wanted, data, holder } => format!(
                "spec.version \"{}\" is below the major version \"{data}\" of the existing data ({holder}): \
                 PostgreSQL cannot be downgraded in place (pg_upgrade only goes up), so nothing is changed and \
                 the database runs on; set spec.version back to \"{data}\", or restore a dump into a new \
                 database of the older major",
                wanted.as_str()
            ),
            Refusal::CredentialsMissing(message)
            | Refusal::InvalidSpec(message)
            | Refusal::NameConflict(message)
            | Refusal::Recovery(message)
            | Refusal::Certificate(message) => message.clone(),
        }
    }

    /// Whether the database is left running as it was (the refusal is about a change).
    pub(super) fn keeps_running(&self) -> bool {
        matches!(self, Refusal::Shrink { .. } | Refusal::VersionChange { .. } | Refusal::Certificate(_))
    }
}

/// Whether `db` may change what runs: its major version no lower than the data's (the
/// `VERSION_LABEL` of its claims and StatefulSet: a higher one is an upgrade,
/// [`crate::upgrade`]), and its storage no less than any data claim requests. `claims`
/// are the data claims of `db`.
pub fn check(db: &PostgreSQL, sts: Option<&StatefulSet>, claims: &[&PersistentVolumeClaim]) -> Result<(), Refusal> {
    if let Some(why) = recovery_refusal(db, sts, claims) {
        return Err(Refusal::Recovery(why));
    }
    let wanted = db.spec.version;
    let labelled = sts
        .map(|s| (format!("StatefulSet {}", s.name_any()), s.labels().get(VERSION_LABEL)))
        .into_iter()
        .chain(claims.iter().map(|c| (format!("claim {}", c.name_any()), c.labels().get(VERSION_LABEL))));
    for (holder, version) in labelled {
        if let Some(data) = version.filter(|v| Version::parse(v).is_some_and(|v| v > wanted)) {
            return Err(Refusal::VersionChange { wanted, data: data.clone(), holder });
        }
    }
    let want = quantity::to_units(&db.spec.storage);
    for claim in claims {
        let Some(current) = requested(claim) else { continue };
        if let (Some(want), Some(have)) = (want, quantity::to_units(current))
            && want < have
        {
            return Err(Refusal::Shrink {
                storage: db.spec.storage.clone(),
                claim: claim.name_any(),
                current: current.to_owned(),
            });
        }
    }
    Ok(())
}

/// The storage a claim requests.
pub fn requested(claim: &PersistentVolumeClaim) -> Option<&str> {
    claims::requested(claim).map(|q| q.0.as_str())
}

/// Whether `claim` is a data claim of `db` (`data-<name>-<ordinal>`, labelled for it).
pub fn is_data_claim(db: &PostgreSQL, claim: &PersistentVolumeClaim) -> bool {
    let prefix = format!("{DATA_VOLUME}-{}-", db.name_any());
    claim.namespace() == db.namespace()
        && claim.labels().get("app.kubernetes.io/instance") == Some(&db.name_any())
        && claim.labels().get("app.kubernetes.io/name").map(String::as_str) == Some(APP_NAME)
        && claim
            .name_any()
            .strip_prefix(&prefix)
            .is_some_and(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `claim` requests less than `spec.storage`: it is to be expanded.
pub fn needs_growth(db: &PostgreSQL, claim: &PersistentVolumeClaim) -> bool {
    match (quantity::to_units(&db.spec.storage), requested(claim).and_then(quantity::to_units)) {
        (Some(want), Some(have)) => want > have,
        _ => false,
    }
}
