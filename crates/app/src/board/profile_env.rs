//! A profile's own settings for its workers: hermes keeps a profile's settings in `profiles/<name>/config.yaml`, and
//! a task's sandbox is the one its assignee's file describes, whoever dispatches it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use domain::ids::{ProfileName, TaskId};
use domain::sandbox::SandboxIdentity;

use crate::edge::context::{Ctx, profile_config_path};

/// What the workers of one profile get beyond the dispatch's shared environment: the profile's `terminal.*` settings
/// as it resolves them (its own `profiles/<name>/config.yaml` over the home's) where they differ from the dispatch's.
/// The board's `kanban.*` settings stay the dispatcher's: one board, one set of rules.
pub(super) struct ProfileEnv {
    /// The profile's context: its sandbox's identity and folder.
    pub(super) ctx: Ctx,
    pub(super) vars: Vec<(String, String)>,
    /// Its `terminal.sandbox_dir` checked (it holds no home, is inside no other).
    pub(super) sandbox_dir: Result<(), String>,
    /// What its tasks' sandbox identities share: the home's digest and `terminal.docker_shared_container_key`.
    home_id: String,
    shared_key: String,
}

/// Each assignee's settings, worked out at its first task of a dispatch.
#[derive(Default)]
pub(super) struct Profiles(Mutex<BTreeMap<String, Result<Arc<ProfileEnv>, String>>>);

impl Profiles {
    /// The settings of `assignee`'s workers. A profile file that cannot be read fails its tasks' starts with the
    /// reason: a sandbox it locks down is never started on the home's settings instead.
    ///
    /// # Errors
    /// The one-line reason.
    pub(super) fn get(&self, ctx: &Ctx, assignee: &str) -> Result<Arc<ProfileEnv>, String> {
        let mut profiles = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        profiles.entry(assignee.to_owned()).or_insert_with(|| resolve(ctx, assignee)).clone()
    }
}

fn resolve(dispatch: &Ctx, assignee: &str) -> Result<Arc<ProfileEnv>, String> {
    let name = ProfileName::parse(assignee).map_err(|e| e.to_string())?;
    // A profile with no file of its own, dispatched from a profile with none either, resolves exactly as the
    // dispatch did (the same home file, environment and `-c`): nothing to read again.
    let no_file = |p: &ProfileName| matches!(profile_config_path(&dispatch.home, p).try_exists(), Ok(false));
    let ctx = if no_file(&name) && no_file(&dispatch.profile) {
        Ctx { profile: name, ..dispatch.clone() }
    } else {
        dispatch.for_profile(&name)?
    };
    // Only what differs from the dispatch's own (every worker has those already).
    let vars = ctx
        .resolved
        .entries()
        .iter()
        .filter(|e| e.setting.section() == "terminal" && e.value != *dispatch.resolved.value(e.setting.key))
        .map(|e| (e.setting.env_var(), e.value.to_text()))
        .collect();
    let sandbox_dir = crate::sandbox::mounts::check_sandbox_dir(&ctx.home, &ctx.settings.terminal.sandbox_dir);
    let (home_id, shared_key) = (ctx.home_id(), crate::sandbox::folders::shared_key(&ctx));
    Ok(Arc::new(ProfileEnv { ctx, vars, sandbox_dir, home_id, shared_key }))
}

impl ProfileEnv {
    /// The identity of `task`'s sandbox under this profile (as `sandbox::identity_of` makes it, the home's digest
    /// worked out once a dispatch).
    ///
    /// # Errors
    /// A one-line reason for a task id or profile name that does not parse.
    pub(super) fn identity(&self, task: &str) -> Result<SandboxIdentity, String> {
        let task = TaskId::parse(task).map_err(|e| e.to_string())?;
        Ok(SandboxIdentity::new(task, self.ctx.profile.clone()).shared(&self.shared_key).in_home(&self.home_id))
    }
}
