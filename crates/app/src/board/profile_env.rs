//! A profile's own settings for its workers: hermes keeps a profile's settings in `profiles/<name>/config.yaml`, and
//! a task's sandbox is the one its assignee's file describes, whoever dispatches it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use domain::ids::ProfileName;

use crate::edge::context::Ctx;

/// What the workers of one profile get beyond the dispatch's shared environment: the profile's `terminal.*` settings
/// as it resolves them (its own `profiles/<name>/config.yaml` over the home's). The board's `kanban.*` settings stay
/// the dispatcher's: one board, one set of rules.
pub(super) struct ProfileEnv {
    /// The profile's context: its sandbox's identity and folder.
    pub(super) ctx: Ctx,
    pub(super) vars: Vec<(String, String)>,
    /// Its `terminal.sandbox_dir` checked (it holds no home, is inside no other).
    pub(super) sandbox_dir: Result<(), String>,
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

fn resolve(ctx: &Ctx, assignee: &str) -> Result<Arc<ProfileEnv>, String> {
    let name = ProfileName::parse(assignee).map_err(|e| e.to_string())?;
    let ctx = ctx.for_profile(&name)?;
    let vars = ctx
        .resolved
        .entries()
        .iter()
        .filter(|e| e.setting.section() == "terminal")
        .map(|e| (e.setting.env_var(), e.value.to_text()))
        .collect();
    let sandbox_dir = crate::sandbox::mounts::check_sandbox_dir(&ctx.home, &ctx.settings.terminal.sandbox_dir);
    Ok(Arc::new(ProfileEnv { ctx, vars, sandbox_dir }))
}
