//! What the data directory holds, and what the instance does about it: the pure
//! decisions of the instance manager, taken again from what is on disk each time
//! (level-triggered), so a manager killed at any step decides the same on restart.

use std::path::{Path, PathBuf};

use crate::role::Role;

/// The files of a data directory the decisions read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataState {
    /// The directory exists (a cluster or not).
    pub exists: bool,
    /// Its `PG_VERSION`: the major of the cluster it holds; `None`: no cluster.
    pub major: Option<String>,
    /// `standby.signal`: it starts as a standby.
    pub standby: bool,
    /// `recovery.signal`: it recovers from an archive to a target.
    pub recovering: bool,
    /// `global/pg_control.old` without `global/pg_control`: a `pg_upgrade --link`
    /// stopped before its new cluster took this directory's place.
    pub upgrade_interrupted: bool,
}

/// The files the decisions read, by name.
pub mod files {
    pub const VERSION: &str = "PG_VERSION";
    pub const STANDBY: &str = "standby.signal";
    pub const RECOVERY: &str = "recovery.signal";
    /// The control file, and the name `pg_upgrade --link` gives it while it links.
    pub const CONTROL: &str = "global/pg_control";
    pub const CONTROL_SET_ASIDE: &str = "global/pg_control.old";
}

impl DataState {
    pub fn read(pgdata: &Path) -> DataState {
        let major = std::fs::read_to_string(pgdata.join(files::VERSION))
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty());
        DataState {
            exists: pgdata.exists(),
            major,
            standby: pgdata.join(files::STANDBY).exists(),
            recovering: pgdata.join(files::RECOVERY).exists(),
            upgrade_interrupted: pgdata.join(files::CONTROL_SET_ASIDE).exists()
                && !pgdata.join(files::CONTROL).exists(),
        }
    }

    pub fn has_cluster(&self) -> bool {
        self.major.is_some()
    }
}

/// The next thing to do before the server starts in `role`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The control file back in place: a major upgrade's Job stopped (killed) while
    /// `pg_upgrade --link` ran. Its new cluster never started, so the files it shares
    /// with this one are unchanged and this one is whole (see [`restore_control`]).
    RestoreControl,
    /// Start the server.
    Start,
    /// A new database made by recovery: its data from the archive (`bosun recover`).
    Recover,
    /// The primary's data still says standby (it was one): it starts out of recovery.
    LeaveStandby,
    /// A standby with no data: clone the primary (`pg_basebackup`).
    Clone,
    /// A standby's data of an older major than this server's (`have`): the primary was
    /// upgraded; once it answers on this major, the copy goes and is cloned again.
    Reclone { have: String },
    /// Data that was a primary's (or is told to rewind): rewound to follow the
    /// primary (`pg_rewind`), or kept aside whole and cloned afresh.
    Rejoin,
}

/// What to do next for `role` with `data`; `major` is the server's (the image's),
/// `recovery` whether this database is made by recovery from an archive.
pub fn next_step(role: Role, data: &DataState, major: Option<&str>, recovery: bool) -> Step {
    if data.upgrade_interrupted {
        return Step::RestoreControl;
    }
    match role {
        Role::Primary if !data.has_cluster() && recovery => Step::Recover,
        Role::Primary if data.standby => Step::LeaveStandby,
        Role::Primary => Step::Start,
        Role::Replica => match (&data.major, major) {
            (Some(have), Some(major)) if have != major => Step::Reclone { have: have.clone() },
            (None, _) => Step::Clone,
            (Some(_), _) if !data.standby => Step::Rejoin,
            (Some(_), _) => Step::Start,
        },
    }
}

/// What a running server's instance does when it looks at its role again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhileRunning {
    Nothing,
    /// A primary (or a server promoted by hand) made a replica: stopped (a fast
    /// shutdown sends every WAL record to the connected standbys), to rejoin.
    Demote,
    /// A standby made the primary: promoted in place.
    Promote,
}

/// The instance follows what its role says now, not only its changes: a label that
/// changed twice between two looks still ends in the state it names. `demoted`: a
/// stop was already asked for.
pub fn while_running(role: Option<Role>, data: &DataState, demoted: bool) -> WhileRunning {
    match role {
        Some(Role::Replica) if !demoted && data.has_cluster() && !data.standby => WhileRunning::Demote,
        Some(Role::Primary) if data.standby => WhileRunning::Promote,
        _ => WhileRunning::Nothing,
    }
}

/// Where the data of a rejoin that could not be rewound is kept whole.
pub fn diverged_path(pgdata: &Path, now: jiff::Timestamp) -> PathBuf {
    let mut name = pgdata.as_os_str().to_owned();
    name.push(format!(".diverged-{}", now.strftime("%Y%m%dT%H%M%SZ")));
    PathBuf::from(name)
}

/// `pg_upgrade --link` renames the old cluster's control file before it links the
/// first file, so that the old server cannot start on files the new one may have
/// changed; it puts it back when it fails. Until the new cluster first starts nothing
/// of the old one has changed: whoever finds the renamed file first (the upgrade run
/// again, or the instance when the upgrade was given up) puts it back. `Ok(true)`:
/// it was put back.
pub fn restore_control(pgdata: &Path) -> std::io::Result<bool> {
    let (aside, control) = (pgdata.join(files::CONTROL_SET_ASIDE), pgdata.join(files::CONTROL));
    if !aside.exists() || control.exists() {
        return Ok(false);
    }
    std::fs::rename(aside, control).map(|()| true)
}

/// Where a clone is made before it takes the data directory's place.
pub fn partial_path(pgdata: &Path) -> PathBuf {
    let mut name = pgdata.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(major: Option<&str>, standby: bool) -> DataState {
        DataState { exists: major.is_some(), major: major.map(str::to_owned), standby, ..DataState::default() }
    }

    #[test]
    fn a_control_file_set_aside_by_an_interrupted_upgrade_comes_back_first() {
        let interrupted = DataState { upgrade_interrupted: true, ..data(Some("13"), false) };
        for role in [Role::Primary, Role::Replica] {
            assert_eq!(next_step(role, &interrupted, Some("13"), false), Step::RestoreControl);
        }
        let dir = crate::role::tests::temp_dir("control");
        std::fs::create_dir_all(dir.join("global")).unwrap();
        std::fs::write(dir.join(files::CONTROL_SET_ASIDE), "control").unwrap();
        assert!(DataState::read(&dir).upgrade_interrupted);
        assert!(restore_control(&dir).unwrap());
        assert!(!DataState::read(&dir).upgrade_interrupted);
        assert_eq!(std::fs::read_to_string(dir.join(files::CONTROL)).unwrap(), "control");
        // Both there (a finished pg_upgrade's old directory is never the data's): left alone.
        std::fs::write(dir.join(files::CONTROL_SET_ASIDE), "old").unwrap();
        assert!(!restore_control(&dir).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join(files::CONTROL)).unwrap(), "control");
    }

    #[test]
    fn a_primary_recovers_only_a_new_database_made_by_recovery_and_leaves_standby() {
        assert_eq!(next_step(Role::Primary, &data(None, false), Some("17"), true), Step::Recover);
        // No recovery: the image's entrypoint initialises the first primary.
        assert_eq!(next_step(Role::Primary, &data(None, false), Some("17"), false), Step::Start);
        // Recovery never writes over data.
        assert_eq!(next_step(Role::Primary, &data(Some("17"), false), Some("17"), true), Step::Start);
        assert_eq!(next_step(Role::Primary, &data(Some("17"), true), Some("17"), false), Step::LeaveStandby);
    }

    #[test]
    fn a_replica_clones_reclones_after_an_upgrade_rejoins_or_starts() {
        assert_eq!(next_step(Role::Replica, &data(None, false), Some("17"), false), Step::Clone);
        assert_eq!(next_step(Role::Replica, &data(None, false), Some("17"), true), Step::Clone);
        assert_eq!(
            next_step(Role::Replica, &data(Some("13"), true), Some("17"), false),
            Step::Reclone { have: "13".into() }
        );
        assert_eq!(next_step(Role::Replica, &data(Some("17"), false), Some("17"), false), Step::Rejoin);
        assert_eq!(next_step(Role::Replica, &data(Some("17"), true), Some("17"), false), Step::Start);
        // An image that does not say its major: nothing is recloned.
        assert_eq!(next_step(Role::Replica, &data(Some("13"), true), None, false), Step::Start);
    }

    #[test]
    fn a_running_instance_follows_its_role_now() {
        use WhileRunning::*;
        assert_eq!(while_running(Some(Role::Replica), &data(Some("17"), false), false), Demote);
        assert_eq!(while_running(Some(Role::Replica), &data(Some("17"), false), true), Nothing, "asked once");
        assert_eq!(while_running(Some(Role::Replica), &data(Some("17"), true), false), Nothing);
        assert_eq!(while_running(Some(Role::Primary), &data(Some("17"), true), false), Promote);
        assert_eq!(while_running(Some(Role::Primary), &data(Some("17"), false), false), Nothing);
        // A label removed: nothing changes while it is away.
        assert_eq!(while_running(None, &data(Some("17"), false), false), Nothing);
        // The image's entrypoint still initialising: no cluster yet, nothing to demote.
        assert_eq!(while_running(Some(Role::Replica), &data(None, false), false), Nothing);
    }

    #[test]
    fn kept_and_partial_directories_sit_beside_the_data() {
        let at: jiff::Timestamp = "2026-11-28T11:02:03Z".parse().unwrap_or_default();
        assert_eq!(diverged_path(Path::new("/d/pgdata"), at), Path::new("/d/pgdata.diverged-20261128T110203Z"));
        assert_eq!(partial_path(Path::new("/d/pgdata")), Path::new("/d/pgdata.partial"));
    }
}
