//! The instance's role, as bosun gives it: the pod's role label, read through its
//! downward-API file, or what bosun told the instance directly while that file is
//! still the generation it was when told. The kubelet may refresh the file seconds
//! after a label changes, and any refresh makes the label the word again: what was
//! told never outlives the file it was told beside.

use std::path::{Path, PathBuf};

/// What an instance is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica,
}

impl Role {
    pub fn parse(text: &str) -> Option<Role> {
        match text.trim() {
            "primary" => Some(Role::Primary),
            "replica" => Some(Role::Replica),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the role is read: the label's file and the file of what was told.
#[derive(Clone, Debug)]
pub struct RoleSource {
    pub label_file: PathBuf,
    pub told_file: PathBuf,
}

impl RoleSource {
    /// The role now; `None` while bosun has given none (a new pod, a label removed).
    pub fn read(&self) -> Option<Role> {
        self.read_with_source().0
    }

    /// The role now and where it comes from: `told`, `label` or `none`.
    pub fn read_with_source(&self) -> (Option<Role>, &'static str) {
        if let Some(told) = self.told() {
            return (Some(told), "told");
        }
        match std::fs::read_to_string(&self.label_file).ok().as_deref().and_then(Role::parse) {
            Some(role) => (Some(role), "label"),
            None => (None, "none"),
        }
    }

    /// What was told, if it still stands: `<role> <generation>`, the generation being
    /// the label file's volume's (the `..data` link the kubelet swaps on a refresh).
    fn told(&self) -> Option<Role> {
        let text = std::fs::read_to_string(&self.told_file).ok()?;
        let (role, generation) = text.trim().split_once(' ')?;
        (Some(generation) == self.generation().as_deref()).then(|| Role::parse(role)).flatten()
    }

    /// The current generation of the label file's volume.
    pub fn generation(&self) -> Option<String> {
        let data = self.label_file.parent()?.join("..data");
        Some(std::fs::read_link(data).ok()?.to_string_lossy().into_owned())
    }

    /// Record `role` as told now: it stands until the label's file is refreshed.
    /// Written whole (a temporary file renamed), so a reader never sees half of it.
    pub fn tell(&self, role: Role) -> std::io::Result<()> {
        let generation = self.generation().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "the role label's volume has no generation yet")
        })?;
        write_whole(&self.told_file, format!("{role} {generation}\n").as_bytes())
    }
}

/// `contents` into `path` through a temporary name beside it.
pub fn write_whole(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, contents)?;
    std::fs::rename(&partial, path)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A downward-API volume as the kubelet lays it out: `role -> ..data/role`,
    /// `..data -> ..<generation>`; each call a new generation swapped in.
    pub(crate) fn set_label(dir: &Path, generation: u32, role: &str) {
        let name = format!("..gen{generation}");
        std::fs::create_dir_all(dir.join(&name)).unwrap();
        std::fs::write(dir.join(&name).join("role"), role).unwrap();
        let _ = std::fs::remove_file(dir.join("..data.tmp"));
        std::os::unix::fs::symlink(&name, dir.join("..data.tmp")).unwrap();
        std::fs::rename(dir.join("..data.tmp"), dir.join("..data")).unwrap();
        if std::fs::symlink_metadata(dir.join("role")).is_err() {
            std::os::unix::fs::symlink("..data/role", dir.join("role")).unwrap();
        }
    }

    pub(crate) fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bosun-instance-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_label_decides_and_a_tell_stands_until_the_file_is_refreshed() {
        let dir = temp_dir("role");
        let source = RoleSource { label_file: dir.join("podinfo/role"), told_file: dir.join("told") };
        assert_eq!(source.read(), None, "no volume yet");
        assert!(source.tell(Role::Primary).is_err(), "nothing to tell beside");
        std::fs::create_dir_all(dir.join("podinfo")).unwrap();
        set_label(&dir.join("podinfo"), 1, "");
        assert_eq!(source.read(), None, "an empty label is no role");
        set_label(&dir.join("podinfo"), 2, "replica");
        assert_eq!(source.read(), Some(Role::Replica));
        source.tell(Role::Primary).unwrap();
        assert_eq!(source.read(), Some(Role::Primary), "told ahead of the label");
        set_label(&dir.join("podinfo"), 3, "replica");
        assert_eq!(source.read(), Some(Role::Replica), "a refresh makes the label the word");
        set_label(&dir.join("podinfo"), 4, "nonsense");
        assert_eq!(source.read(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
