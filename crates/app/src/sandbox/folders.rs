//! A sandbox's host folder (`<terminal.sandbox_dir>/docker/<profile>/<task>-<digest>`, its `/root` and `/workspace`):
//! removed with its sandbox unless kept, never through a symlink, as root through the engine when the sandbox's root
//! user left files the calling user cannot delete; and the sweep of folders whose sandbox and task are both gone
//! (the gateway's cleanup pass and `sandbox reap`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use domain::policy::folders::{FolderSeen, folder_digest, gone_folders};
use domain::ports::Engine;
use domain::ports::RuntimeError;
use domain::sandbox::SandboxIdentity;
use domain::service;
use serde::Serialize;

use crate::edge::context::Ctx;

/// What folder removal needs, owned (the gateway's cleanup loop carries one).
#[derive(Clone, Debug)]
pub struct Folders {
    pub home: PathBuf,
    /// `terminal.sandbox_dir`.
    pub sandbox_dir: String,
    /// `terminal.docker_image`: the root helper runs it (it exists: the sandboxes were made from it).
    pub image: String,
    /// `terminal.docker_shared_container_key` (empty when unset): a task's sandbox, and so its folder, is keyed by it.
    pub shared_key: String,
    /// The PostgreSQL board (`kanban.database_url`), this host's id and the bound of a round trip to it, when the
    /// board is not the home's file.
    pub board: Option<(String, String, std::time::Duration)>,
}

/// A folder a sweep removed (or would remove), or failed to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SweptFolder {
    pub path: String,
    /// Seconds since the folder was last modified.
    pub age_secs: i64,
    /// Why it could not be removed; `None` when it was (or, in a dry run, would be).
    pub error: Option<String>,
}

impl Folders {
    pub fn from_ctx(ctx: &Ctx) -> Self {
        Self {
            home: ctx.home.clone(),
            sandbox_dir: ctx.settings.terminal.sandbox_dir.clone(),
            image: ctx.settings.terminal.docker_image.clone(),
            shared_key: shared_key(ctx),
            board: ctx.database_url().map(|u| (u.to_owned(), ctx.host_id(), ctx.database_timeout())),
        }
    }

    /// This home's board, read-only (`None` when there is none yet).
    ///
    /// # Errors
    /// The board cannot be opened.
    pub fn open_board(&self) -> Result<Option<crate::edge::open::Board>, crate::edge::error::Failure> {
        crate::edge::open::open_read_only_at(
            &self.home,
            self.board.as_ref().map(|(u, h, b)| (u.as_str(), h.as_str(), *b)),
        )
    }

    /// The sandbox identity of `task` run by `assignee` (keyed by the shared key when one is set): the one the
    /// worker's sandbox has, so its folder is the one the worker works in.
    pub fn task_identity(&self, task: &str, assignee: Option<&str>) -> Option<SandboxIdentity> {
        use domain::ids::{ProfileName, TaskId};
        let (t, p) = (TaskId::parse(task).ok()?, ProfileName::parse(assignee?).ok()?);
        Some(SandboxIdentity::new(t, p).shared(&self.shared_key))
    }

    /// `<sandbox_dir>/docker`.
    fn docker_root(&self) -> PathBuf {
        Path::new(self.sandbox_dir.trim_end_matches('/')).join("docker")
    }

    /// The folder of `identity`'s sandbox.
    pub fn of(&self, identity: &SandboxIdentity) -> PathBuf {
        PathBuf::from(identity.host_dir(&self.sandbox_dir))
    }

    /// Whether `dir` is a sandbox folder berth made and may remove: `<sandbox_dir>/docker/<profile>/<name>-<digest>`,
    /// where `docker/`, the profile folder and the folder itself are real folders, not symlinks (a symlink planted
    /// there could point anywhere on the host). `Ok(false)` when it does not exist.
    fn check(&self, dir: &Path) -> Result<bool, String> {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let profile_dir = dir.parent().ok_or_else(|| format!("{} is not a sandbox folder", dir.display()))?;
        if folder_digest(name).is_none() || profile_dir.parent() != Some(self.docker_root().as_path()) {
            return Err(format!("{} is not a sandbox folder berth made", dir.display()));
        }
        for p in [self.docker_root().as_path(), profile_dir, dir] {
            match p.symlink_metadata() {
                Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
                    return Err(format!("{} is not a real folder (a symlink?); left alone", p.display()));
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(format!("cannot inspect {}: {e}", p.display())),
            }
        }
        Ok(true)
    }

    /// Removes the sandbox folder `dir`; `Ok(false)` when there was none. Symlinks inside are removed, never
    /// followed. Files the calling user may not delete (made by the sandbox's root user) are removed as root by a
    /// one-shot helper container on `rt`.
    ///
    /// # Errors
    /// One line saying what was left and why.
    pub async fn remove(&self, rt: Option<&dyn Engine>, dir: &Path, profile_label: &str) -> Result<bool, String> {
        if !self.check(dir)? {
            return Ok(false);
        }
        // Off the async threads: a workspace of many files (a node_modules) takes a while, and the gateway's ticks run
        // beside this. Not `remove_dir_all`: it recurses per level, and a task's tree can be deep enough to overflow
        // the stack (`remove_tree` walks it in a loop).
        let owned = dir.to_path_buf();
        let removed = tokio::task::spawn_blocking(move || crate::edge::remove_tree::remove_tree(&owned))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        match removed {
            Ok(()) => return Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                let Some(rt) = rt else { return Err(format!("cannot remove {}: {e}", dir.display())) };
                let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str())) else {
                    return Err(format!("cannot remove {}: {e}", dir.display()));
                };
                let labels = std::collections::BTreeMap::from([(
                    domain::label::LABEL_PROFILE.to_owned(),
                    profile_label.to_owned(),
                )]);
                tracing::debug!(
                    "{} holds files of another user; removing it as root through the engine",
                    dir.display()
                );
                rt.remove_folder_as_root(&self.image, &parent.display().to_string(), name, &labels)
                    .await
                    .map_err(|re| format!("cannot remove {} ({e}), not even as root: {re}", dir.display()))?;
            }
            Err(e) => return Err(format!("cannot remove {}: {e}", dir.display())),
        }
        if dir.symlink_metadata().is_ok() {
            return Err(format!("{} is still there after its removal", dir.display()));
        }
        Ok(true)
    }

    /// Removes the folder of `identity`'s sandbox unless another container of that identity still uses it (an opt-out
    /// run beside a persistent sandbox of the same task shares its folder) or a task on a board owns it (its
    /// workspace is the task's output). Returns what happened, in words, or `None` when there was no folder.
    pub async fn remove_for(&self, rt: &dyn Engine, identity: &SandboxIdentity) -> Option<Result<String, String>> {
        let dir = self.of(identity);
        if dir.symlink_metadata().is_err() {
            return None;
        }
        if self.board_task_digests().contains(&identity.digest()) {
            return Some(Ok(format!(
                "kept folder {} (the workspace of task {} on a board; `kanban archive` or `kanban rm` removes it)",
                dir.display(),
                identity.task_label()
            )));
        }
        let query = domain::ports::ListQuery { labels: identity.upstream_labels(), states: Vec::new() };
        match domain::ports::ContainerRuntime::list(rt, &query).await {
            Ok(left) if left.iter().any(|c| c.identity() == Some(identity.digest().as_str())) => {
                return Some(Ok(format!("kept folder {} (another sandbox of the task uses it)", dir.display())));
            }
            Ok(_) => {}
            Err(e) => return Some(Err(format!("kept folder {}: {e}", dir.display()))),
        }
        let label = identity.profile_label().as_str().to_owned();
        Some(self.remove(Some(rt), &dir, &label).await.map(|_| format!("removed folder {}", dir.display())))
    }

    /// The sandbox folders of one profile (or every profile) that no container claims any more, in any state, and no
    /// task on a board owns, untouched for `max_age_secs`; removed unless `dry_run`. Containers whose ids are in
    /// `removed` count as gone already (a dry run's reap would remove them: their folders would go in the same pass).
    ///
    /// # Errors
    /// A [`RuntimeError`] when the engine cannot list the containers (nothing is removed then).
    pub async fn sweep(
        &self,
        rt: &dyn Engine,
        profile_label: Option<&str>,
        max_age_secs: i64,
        dry_run: bool,
        removed: &BTreeSet<String>,
    ) -> Result<Vec<SweptFolder>, RuntimeError> {
        let profiles: Vec<String> = match profile_label {
            Some(p) => vec![p.to_owned()],
            None => std::fs::read_dir(self.docker_root())
                .map(|d| d.flatten().filter_map(|e| e.file_name().to_str().map(str::to_owned)).collect())
                .unwrap_or_default(),
        };
        let now = std::time::SystemTime::now();
        let mut found: Vec<(String, Vec<FolderSeen>)> = Vec::new();
        for p in profiles {
            let root = self.docker_root().join(&p);
            // A profile folder that is a symlink is never walked.
            if !root.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&root) else { continue };
            let seen: Vec<FolderSeen> = entries
                .flatten()
                .filter_map(|e| {
                    // Only real folders: a symlink placed here is never followed, let alone removed through.
                    let meta = e.path().symlink_metadata().ok().filter(std::fs::Metadata::is_dir)?;
                    let age = now.duration_since(meta.modified().ok()?).unwrap_or_default();
                    Some(FolderSeen {
                        name: e.file_name().to_str()?.to_owned(),
                        age_secs: i64::try_from(age.as_secs()).unwrap_or(i64::MAX),
                    })
                })
                .collect();
            if !seen.is_empty() {
                found.push((p, seen));
            }
        }
        if found.is_empty() {
            return Ok(Vec::new());
        }
        // Listed after the folders were read: a sandbox created in between claims its folder in this listing.
        let listed = service::list_managed(rt, profile_label, None).await?;
        let mut live: BTreeSet<String> = listed
            .iter()
            .filter(|c| !removed.contains(&c.id))
            .filter_map(|c| c.identity().map(str::to_owned))
            .collect();
        // A suspended sandbox (its snapshot) keeps its folder: the resume mounts it again.
        let snapshots = crate::sandbox::snapshots::in_home(rt, None, profile_label).await?;
        live.extend(snapshots.iter().filter_map(|s| s.label(domain::label::LABEL_IDENTITY).map(str::to_owned)));
        // A finished task's workspace is its output: it stays, container or not, until the task is archived or
        // removed from its board (or its retention ends: `kanban prune`).
        live.extend(self.board_task_digests());
        let mut out = Vec::new();
        for (profile, seen) in found {
            let root = self.docker_root().join(&profile);
            for gone in gone_folders(&seen, &live, max_age_secs) {
                let dir = root.join(&gone.name);
                let error = if dry_run { None } else { self.remove(Some(rt), &dir, &profile).await.err() };
                out.push(SweptFolder { path: dir.display().to_string(), age_secs: gone.age_secs, error });
            }
        }
        Ok(out)
    }
}

impl Folders {
    /// The sandbox identity digests of every task on this home's boards that is not archived: their folders are
    /// kept. An unreadable board keeps nothing extra (the sweep still needs the age and the missing container).
    fn board_task_digests(&self) -> BTreeSet<String> {
        let Ok(Some(store)) = self.open_board() else { return BTreeSet::new() };
        let boards = store.boards().unwrap_or_default();
        let slugs = boards.iter().filter_map(|b| domain::ids::BoardSlug::parse(&b.slug).ok());
        slugs
            .flat_map(|slug| store.tasks(&slug, None, None).unwrap_or_default())
            .filter(|t| t.status != domain::board::TaskStatus::Archived)
            .filter_map(|t| Some(self.task_identity(&t.id, t.assignee.as_deref())?.digest()))
            .collect()
    }
}

/// `terminal.docker_shared_container_key` (empty when unset).
pub fn shared_key(ctx: &Ctx) -> String {
    ctx.settings.terminal.docker_shared_container_key.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folders(dir: &Path) -> Folders {
        Folders {
            home: dir.join("home"),
            sandbox_dir: dir.join("sandboxes").display().to_string(),
            image: "unused".into(),
            shared_key: String::new(),
            board: None,
        }
    }

    #[tokio::test]
    async fn removal_never_follows_a_symlink_out_of_the_sandbox_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let f = folders(tmp.path());
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("precious"), "x").unwrap();
        let profile = Path::new(&f.sandbox_dir).join("docker").join("p");
        let own = profile.join("task-0123456789ab");
        std::fs::create_dir_all(own.join("workspace")).unwrap();
        std::fs::write(own.join("workspace").join("out"), "y").unwrap();
        // A symlink inside the folder goes, its target stays.
        std::os::unix::fs::symlink(&outside, own.join("workspace").join("link")).unwrap();
        // A sandbox folder that is itself a symlink is refused.
        let planted = profile.join("evil-aaaaaaaaaaaa");
        std::os::unix::fs::symlink(&outside, &planted).unwrap();
        let err = f.remove(None, &planted, "p").await.unwrap_err();
        assert!(err.contains("not a real folder"), "{err}");
        // A path that is not a sandbox folder is refused.
        let err = f.remove(None, &outside, "p").await.unwrap_err();
        assert!(err.contains("not a sandbox folder"), "{err}");
        assert!(f.remove(None, &own, "p").await.unwrap());
        assert!(!own.exists());
        assert!(outside.join("precious").exists() && planted.symlink_metadata().is_ok());
        // Gone already: nothing to do.
        assert!(!f.remove(None, &own, "p").await.unwrap());
    }

    #[tokio::test]
    async fn a_symlinked_profile_folder_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let f = folders(tmp.path());
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("task-0123456789ab")).unwrap();
        std::fs::create_dir_all(Path::new(&f.sandbox_dir).join("docker")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, Path::new(&f.sandbox_dir).join("docker").join("p")).unwrap();
        let dir = Path::new(&f.sandbox_dir).join("docker").join("p").join("task-0123456789ab");
        assert!(f.remove(None, &dir, "p").await.is_err());
        assert!(elsewhere.join("task-0123456789ab").exists());
    }
}
