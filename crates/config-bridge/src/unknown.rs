//! Keys of the config file berth does not know: warned about (a typo is otherwise ignored without a word), except
//! the keys hermes-agent itself reads from the same file, which berth leaves to it.

use std::path::Path;

use serde_yaml_ng::Value as Yaml;

use crate::table::{SETTINGS, find};

/// The sections berth reads; every other top-level section belongs to hermes-agent (model, display, mcp_servers, …).
const SECTIONS: [&str; 2] = ["terminal", "kanban"];

/// Keys hermes-agent reads in berth's sections that berth has no setting for (its local shell, its other backends,
/// its decomposer, its review and profile allowlists, its subscriptions and diagnostics), as 0.19's `DEFAULT_CONFIG`,
/// config bridge and readers name them, and 0.20–0.21's (`docker_snap_compat`, `done_sub_retention_days`,
/// `acceptance_checks`);
/// `docs/settings.md` lists them.
const HERMES_KEYS: &[&str] = &[
    "terminal.backend",
    "terminal.env_type",
    "terminal.persistent_shell",
    "terminal.sudo_password",
    "terminal.env_passthrough",
    "terminal.shell_init_files",
    "terminal.auto_source_bashrc",
    "terminal.home_mode",
    "terminal.daemon_term_grace_seconds",
    "terminal.credential_files",
    "terminal.docker_snap_compat",
    "kanban.reconcile_orphans",
    "kanban.auto_subscribe_on_create",
    "kanban.auto_promote_children",
    "kanban.diagnostics",
    "kanban.done_sub_retention_days",
    "kanban.acceptance_checks",
    "kanban.orchestrator_profile",
    "kanban.auto_decompose",
    "kanban.auto_decompose_per_tick",
    "kanban.dispatch_profiles",
    "kanban.review_dispatch",
];

/// hermes-agent's other terminal backends take keys of their own (`ssh_host`, `modal_image`, `vercel_runtime`, …).
const HERMES_BACKEND_PREFIXES: [&str; 5] = ["ssh_", "singularity_", "modal_", "daytona_", "vercel_"];

fn hermes_knows(section: &str, name: &str) -> bool {
    let key = format!("{section}.{name}");
    HERMES_KEYS.contains(&key.as_str())
        || (section == "terminal" && HERMES_BACKEND_PREFIXES.iter().any(|p| name.starts_with(p)))
}

/// One warning per key of `doc` (the file at `path`, merges applied) that neither berth nor hermes-agent reads,
/// with the nearest setting when there is one; and one for a top-level section that looks like a misspelled
/// `terminal` or `kanban`.
pub(crate) fn warnings(path: &Path, doc: &Yaml) -> Vec<String> {
    let Some(top) = doc.as_mapping() else { return Vec::new() };
    let mut out = Vec::new();
    for (k, v) in top {
        let Some(section) = k.as_str() else { continue };
        if !SECTIONS.contains(&section) {
            if let Some(near) = domain::suggest::closest(section, SECTIONS) {
                out.push(format!("{}: unknown section {section:?} (did you mean {near}?); ignored", path.display()));
            }
            continue;
        }
        for name in v.as_mapping().into_iter().flat_map(|m| m.keys()).filter_map(Yaml::as_str) {
            let key = format!("{section}.{name}");
            if find(&key).is_some() || hermes_knows(section, name) {
                continue;
            }
            let hint = domain::suggest::did_you_mean(&key, SETTINGS.iter().map(|s| s.key));
            out.push(format!(
                "{}: unknown setting {key}{hint}; ignored (`berth config ls` lists the settings)",
                path.display()
            ));
        }
    }
    out
}

/// An example of the JSON a list or map setting takes, as a `config set` line.
pub(crate) fn json_example(key: &str, kind: crate::Kind) -> Option<String> {
    let example = match (key, kind) {
        ("terminal.docker_volumes", _) => r#"["/host/dir:/container/dir:ro"]"#,
        ("terminal.docker_extra_args", _) => r#"["--gpus", "all"]"#,
        ("terminal.docker_forward_env", _) => r#"["GITHUB_TOKEN"]"#,
        ("terminal.docker_idle_stop_seconds_overrides", _) => r#"{"PROFILE": 900}"#,
        ("terminal.docker_credentials", _) => r#"{"GITHUB_TOKEN": ["api.github.com"]}"#,
        ("terminal.docker_credentials_overrides", _) => r#"{"PROFILE": {"GITHUB_TOKEN": ["api.github.com"]}}"#,
        ("terminal.docker_suspend_after_seconds_overrides", _) => r#"{"PROFILE": 3600}"#,
        (_, crate::Kind::List) => r#"["first", "second"]"#,
        (_, crate::Kind::Map) => r#"{"NAME": "value"}"#,
        (_, crate::Kind::CapMap) => r#"{"PROFILE": 2}"#,
        _ => return None,
    };
    Some(format!("e.g. berth config set {key} '{example}'"))
}
