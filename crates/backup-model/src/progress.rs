//! How far a running backup is. The run tells it on stderr every few seconds, one line
//! `progress {"at":…,"readBytes":…,"storedBytes":…}`; the Backup controller reads the
//! newest such line from the run's pod log into the Backup's status.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// What starts a progress line; JSON follows.
pub const PREFIX: &str = "progress ";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// When it was told.
    pub at: Timestamp,
    /// Bytes the dump tool has written so far (uncompressed).
    pub read_bytes: u64,
    /// Bytes stored so far (compressed, and encrypted when it is).
    pub stored_bytes: u64,
}

impl Progress {
    /// The line a run prints.
    pub fn line(&self) -> String {
        format!("{PREFIX}{}", serde_json::to_string(self).unwrap_or_default())
    }

    /// The newest progress line in `log` (a container's log, oldest line first).
    pub fn newest_in(log: &str) -> Option<Progress> {
        log.lines().rev().find_map(|l| serde_json::from_str(l.strip_prefix(PREFIX)?).ok())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_progress_line_is_found_among_the_others() {
        let first = Progress { at: "2026-11-27T02:00:02Z".parse().unwrap(), read_bytes: 10, stored_bytes: 4 };
        let second = Progress { at: "2026-11-27T02:00:04Z".parse().unwrap(), read_bytes: 30, stored_bytes: 9 };
        let log = format!("starting\n{}\npg_dump: warning\n{}\nprogress {{broken\n", first.line(), second.line());
        assert_eq!(Progress::newest_in(&log), Some(second));
        assert_eq!(
            second.line(),
            r#"progress {"at":"2026-11-27T02:00:04Z","readBytes":30,"storedBytes":9}"#,
            "the line is the contract between the run and the controller"
        );
        assert_eq!(Progress::newest_in("no progress yet\n"), None);
    }
}
