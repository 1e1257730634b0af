//! Host folders whose sandbox is gone: which of a profile's sandbox folders no container claims any more.

use std::collections::BTreeSet;

use serde::Serialize;

/// One folder under `<sandbox_dir>/docker/<profile label>/`, as the caller found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FolderSeen {
    /// The folder's name: `<task label>-<first 12 hex digits of the identity digest>` for berth's own.
    pub name: String,
    /// Seconds since the folder itself was last modified.
    pub age_secs: i64,
}

/// A folder to remove, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GoneFolder {
    pub name: String,
    pub age_secs: i64,
}

/// The identity part of a berth sandbox folder's name, `None` for a name berth does not make.
pub fn folder_digest(name: &str) -> Option<&str> {
    let (_, digest) = name.rsplit_once('-')?;
    (digest.len() == 12 && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(digest)
}

/// The folders no container of the profile claims (by identity digest, any state) and untouched for at least
/// `max_age_secs`: the age keeps a folder made just before its container was created, and gives a removed sandbox's
/// files the reaper's grace period. Names berth does not make are never chosen.
pub fn gone_folders(folders: &[FolderSeen], live_digests: &BTreeSet<String>, max_age_secs: i64) -> Vec<GoneFolder> {
    folders
        .iter()
        .filter(|f| f.age_secs >= max_age_secs)
        .filter(|f| folder_digest(&f.name).is_some_and(|d| !live_digests.iter().any(|l| l.starts_with(d))))
        .map(|f| GoneFolder { name: f.name.clone(), age_secs: f.age_secs })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(name: &str, age: i64) -> FolderSeen {
        FolderSeen { name: name.into(), age_secs: age }
    }

    #[test]
    fn only_old_unclaimed_berth_folders_go() {
        let live = BTreeSet::from(["0123456789abffff0000".to_owned()]);
        let folders = [
            seen("kept-0123456789ab", 9_999),
            seen("gone-aaaaaaaaaaaa", 600),
            seen("young-bbbbbbbbbbbb", 10),
            seen("not-berths", 9_999),
            seen("upper-AAAAAAAAAAAA", 9_999),
            seen("short-abc", 9_999),
        ];
        let gone = gone_folders(&folders, &live, 600);
        assert_eq!(gone, vec![GoneFolder { name: "gone-aaaaaaaaaaaa".into(), age_secs: 600 }]);
    }

    #[test]
    fn task_labels_with_dashes_keep_their_digest() {
        assert_eq!(folder_digest("my-task-name-0123456789ab"), Some("0123456789ab"));
        assert_eq!(folder_digest("0123456789ab"), None);
    }
}
