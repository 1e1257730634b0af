//! `berth config …` and `berth profile …`, their `--json` output as typed views.

use config_bridge::{Entry, Source};
use domain::ids::ProfileName;
use domain::ports::ProfileResolver;
use serde::Serialize;

use crate::cli::{ConfigCmd, ProfileCmd};
use crate::edge::context::Ctx;
use crate::edge::error::{Exit, Failure};
use crate::edge::output;

/// One setting as `config ls` and `config get` print it: its value (typed as the setting is; a string may be
/// masked), where the value came from, and the variable that sets it.
#[derive(Serialize)]
struct EntryView {
    key: &'static str,
    value: serde_json::Value,
    /// `default`, `file`, `env` or `cli`.
    source: &'static str,
    /// The file or the variable the value came from (null for a default or a `-c` override).
    source_detail: Option<String>,
    env: String,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl EntryView {
    /// The view of `e`, a string value passed through `shown` (masking, or not when the value is asked for).
    fn of(e: &Entry, shown: impl Fn(&str) -> String) -> Self {
        let source_detail = match &e.source {
            Source::File(p) => Some(p.display().to_string()),
            Source::Env(v) => Some(v.clone()),
            _ => None,
        };
        let value = match e.value.to_json() {
            serde_json::Value::String(text) => serde_json::Value::String(shown(&text)),
            other => other,
        };
        Self {
            key: e.setting.key,
            value,
            source: e.source.kind(),
            source_detail,
            env: e.setting.env_var(),
            kind: e.setting.kind.as_str(),
        }
    }
}

/// What `config set` wrote: the key, its value as written (a string masked) and the file.
#[derive(Serialize)]
struct SetView<'a> {
    key: &'a str,
    value: serde_json::Value,
    file: String,
}

/// What `config unset` did: whether the file held the key.
#[derive(Serialize)]
struct UnsetView<'a> {
    key: &'a str,
    removed: bool,
}

/// `config env`: each variable a worker gets and its value, in the settings' order (a JSON object).
struct EnvView<'a>(&'a [(String, String)]);

impl Serialize for EnvView<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// What `profile create` did: the profile, whether it was new, and its folder.
#[derive(Serialize)]
struct ProfileCreatedView<'a> {
    profile: &'a str,
    created: bool,
    dir: String,
}

/// What `profile rm` did.
#[derive(Serialize)]
struct ProfileRemovedView<'a> {
    profile: &'a str,
    removed: bool,
}

/// `text`, the value of `key`, as a listing shows it: every registered secret masked, and the board server's
/// password wherever the URL or key-value string holds it (in the query, percent-encoded, too), registered or not.
fn masked(key: &str, text: &str) -> String {
    let text = crate::edge::redact::redact(text);
    match key {
        "kanban.database_url" => kanban_postgres::redact_url(&text),
        _ => text,
    }
}

/// `berth config …`.
///
/// # Errors
/// A usage failure for unknown keys or invalid values (the file is left untouched).
pub fn command(ctx: &Ctx, cmd: &ConfigCmd) -> Result<u8, Failure> {
    match cmd {
        ConfigCmd::Ls => {
            // A listing hides secrets (the board server's password); `config get` and `config env` give the value.
            let entries = ctx.resolved.entries();
            if ctx.json {
                let rows: Vec<EntryView> =
                    entries.iter().map(|e| EntryView::of(e, |t| masked(e.setting.key, t))).collect();
                output::json(&rows);
            } else {
                let rows: Vec<Vec<String>> = entries
                    .iter()
                    .map(|e| {
                        vec![e.setting.key.to_owned(), masked(e.setting.key, &e.value.to_text()), e.source.describe()]
                    })
                    .collect();
                output::table(&["KEY", "VALUE", "SOURCE"], &rows);
                output::line(config_bridge::PRECEDENCE_NOTE);
            }
        }
        ConfigCmd::Get { key, reveal } => {
            config_bridge::find(key)
                .ok_or_else(|| Failure::usage_of(config_bridge::ConfigError::UnknownKey(key.clone())))?;
            let e = ctx.resolved.entry(key);
            // Masked unless asked: a value printed to a terminal ends up in scrollback and screen shares.
            let shown = |text: &str| if *reveal { text.to_owned() } else { masked(e.setting.key, text) };
            if ctx.json {
                output::json(&EntryView::of(e, shown));
            } else {
                output::line(&shown(&e.value.to_text()));
            }
        }
        ConfigCmd::Set { key, value } => set(ctx, key, &value_of(key, value)?)?,
        ConfigCmd::Unset { key } => {
            let removed = config_bridge::unset_in_file(&ctx.config_path(), key).map_err(|e| match e {
                config_bridge::ConfigError::UnknownKey(_) | config_bridge::ConfigError::SharedByAnchors { .. } => {
                    Failure::usage_of(e)
                }
                other => Failure::other(other.to_string()),
            })?;
            if ctx.json {
                output::json(&UnsetView { key, removed });
            } else {
                output::line(&if removed {
                    format!("removed {key}")
                } else {
                    format!("{key} was not set in the file")
                });
            }
        }
        ConfigCmd::Env => {
            let env = ctx.resolved.worker_env();
            if ctx.json {
                output::json(&EnvView(&env));
            } else {
                for (k, v) in env {
                    output::line(&format!("export {k}={}", config_bridge::shell_quote(&v)));
                }
            }
        }
    }
    Ok(Exit::OK)
}

/// `berth config set KEY VALUE`: checked by the table's rules and the edge's (mounts, the board URL), then written.
/// The value `config set` was given: its argument, or with `-` the first line of standard input. A board password
/// in the argument is refused (every local user reads a command line while it runs); `-` keeps it out of argv.
fn value_of(key: &str, value: &str) -> Result<String, Failure> {
    if value == "-" {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| Failure::other(format!("cannot read the value from standard input: {e}")))?;
        return Ok(line.trim_end_matches(['\n', '\r']).to_owned());
    }
    if key == "kanban.database_url" && kanban_postgres::redact_url(value.trim()) != value.trim() {
        return Err(Failure::usage(
            "refusing a board password on the command line, where any local user can read it: give `-` and the URL \
             on standard input (`berth config set kanban.database_url - < url.txt`); nothing was changed",
        ));
    }
    Ok(value.to_owned())
}

fn set(ctx: &Ctx, key: &str, value: &str) -> Result<(), Failure> {
    // The mount rules are checked before the file is touched, so a refused value never lands in it.
    let parsed = config_bridge::validate(key, value).map_err(Failure::usage_of)?;
    crate::sandbox::mounts::check_setting(ctx, key, &parsed)?;
    // A board URL the client cannot read is refused here, not on the next command.
    if let (config_bridge::Value::Str(url), "kanban.database_url") = (&parsed, key)
        && !url.trim().is_empty()
    {
        kanban_postgres::check_url(url.trim()).map_err(Failure::usage_of)?;
    }
    let v = config_bridge::set_in_file(&ctx.config_path(), key, value).map_err(|e| match e {
        config_bridge::ConfigError::Write { .. }
        | config_bridge::ConfigError::Read { .. }
        | config_bridge::ConfigError::Yaml { .. }
        | config_bridge::ConfigError::NotAMapping { .. } => Failure::other(e.to_string()),
        other => Failure::usage_of(other),
    })?;
    // Echoed masked: the password was just typed, it need not be printed back (nor is it registered yet).
    let text = masked(key, &v.to_text());
    if ctx.json {
        let value = match v.to_json() {
            serde_json::Value::String(_) => serde_json::Value::String(text),
            other => other,
        };
        output::json(&SetView { key, value, file: ctx.config_path().display().to_string() });
    } else {
        output::line(&format!("{key} = {text} (in {})", ctx.config_path().display()));
    }
    // The profile's own file wins over the home's for this profile: said, or the change looks lost.
    let profile_file = crate::edge::context::profile_config_path(&ctx.home, &ctx.profile);
    if ctx.resolved.entry(key).source == Source::File(profile_file.clone()) {
        tracing::warn!(
            "{} sets {key} too, which wins over the home's file for profile {}",
            profile_file.display(),
            ctx.profile
        );
    }
    Ok(())
}

/// `berth profile …`.
///
/// # Errors
/// A usage failure for invalid or missing names.
pub fn profile(ctx: &Ctx, cmd: &ProfileCmd) -> Result<u8, Failure> {
    let profiles = ctx.profiles();
    match cmd {
        ProfileCmd::Create { name } => {
            let name = ProfileName::parse(name).map_err(Failure::usage_of)?;
            let dir = profiles.dir(name.as_str());
            let existed = dir.is_dir();
            std::fs::create_dir_all(&dir)
                .map_err(|e| Failure::other(format!("cannot create {}: {e}", dir.display())))?;
            if ctx.json {
                output::json(&ProfileCreatedView {
                    profile: name.as_str(),
                    created: !existed,
                    dir: dir.display().to_string(),
                });
            } else {
                output::line(&format!("{} profile {name}", if existed { "kept existing" } else { "created" }));
            }
        }
        ProfileCmd::Ls => {
            let names = profiles.list();
            if ctx.json {
                output::json(&names);
            } else {
                for n in names {
                    output::line(&n);
                }
            }
        }
        ProfileCmd::Rm { name } => {
            let name = ProfileName::parse(name).map_err(Failure::usage_of)?;
            if name.as_str() == "default" {
                return Err(Failure::usage("the default profile cannot be removed"));
            }
            if !profiles.exists(name.as_str()) {
                return Err(Failure::usage(format!("profile {name} does not exist")));
            }
            let dir = profiles.dir(name.as_str());
            std::fs::remove_dir_all(&dir)
                .map_err(|e| Failure::other(format!("cannot remove {}: {e}", dir.display())))?;
            if ctx.json {
                output::json(&ProfileRemovedView { profile: name.as_str(), removed: true });
            } else {
                output::line(&format!("removed profile {name}"));
            }
            warn_orphaned_tasks(ctx, name.as_str());
        }
    }
    Ok(Exit::OK)
}

/// After `profile rm NAME`: says on stderr when unfinished tasks are still assigned to NAME, since the dispatcher now
/// skips them (they can never run) and nothing else would tell.
fn warn_orphaned_tasks(ctx: &Ctx, name: &str) {
    let Ok(Some(store)) = crate::edge::open::open_read_only(ctx) else { return };
    let Ok(boards) = store.boards() else { return };
    let mut left = Vec::new();
    for board in boards {
        let Ok(slug) = domain::ids::BoardSlug::parse(&board.slug) else { continue };
        let Ok(tasks) = store.tasks(&slug, None, Some(name)) else { continue };
        left.extend(
            tasks
                .into_iter()
                .filter(|t| !matches!(t.status, domain::board::TaskStatus::Done | domain::board::TaskStatus::Archived))
                .map(|t| t.id),
        );
    }
    if let Some(first) = left.first() {
        eprintln!(
            "berth: warning: {} unfinished task(s) still assigned to {name} (e.g. {first}) will not run until a \
             profile of that name exists again; `berth kanban assign ID PROFILE` moves one",
            left.len()
        );
    }
}
