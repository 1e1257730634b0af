//! Berth's settings: one table ([`table::SETTINGS`]) and every surface derived from it.
//!
//! Surfaces: the config file (`<home>/config.yaml`, hermes-compatible), the environment (`TERMINAL_*`/`KANBAN_*`),
//! `-c key=value`, the environment handed to workers, the generated `docs/settings.md`, and the list of variables
//! hermetic tests clear. This is the only crate that reads those variables.

mod edit;
pub mod table;
pub mod typed;
pub mod value;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use domain::kanban::DispatchCaps;
use domain::sandbox::SandboxSettings;
use serde_yaml_ng::Value as Yaml;
use thiserror::Error;

pub use table::{Kanban, Kind, SETTINGS, Setting, Settings, Terminal, env_var_for, find};
pub use typed::{Cpus, FloatDays, FloatSeconds, FromValue, MAX_SECONDS, MemoryMb, PositiveSeconds, Seconds};
pub use value::{Invalid, Value, parse_bool, parse_text};

/// A refused value as a refusal quotes it: at most 64 characters, saying how many more there were.
fn shown_raw(raw: &str) -> String {
    let n = raw.chars().count();
    if n <= 64 {
        return format!("{raw:?}");
    }
    let head: String = raw.chars().take(64).collect();
    format!("{head:?}… ({} more characters)", n - 64)
}

/// Errors of the config surfaces.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("unknown setting {0:?} (see `berth config ls`)")]
    UnknownKey(String),
    #[error("invalid value {} for {key}: {why}", shown_raw(raw))]
    InvalidValue { key: String, raw: String, why: Invalid },
    #[error("-c expects KEY=VALUE, got {0:?}")]
    BadOverride(String),
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read config file {path}: {source}")]
    Yaml {
        path: PathBuf,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("cannot read config file {path}: the top level is not a mapping")]
    NotAMapping { path: PathBuf },
    #[error("cannot write config file {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    File(PathBuf),
    Env(String),
    Cli,
}

impl Source {
    /// A short label for tables and JSON (`default`, `file`, `env`, `cli`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::File(_) => "file",
            Self::Env(_) => "env",
            Self::Cli => "cli",
        }
    }

    /// A longer description (`env TERMINAL_TIMEOUT`, `file /x/config.yaml`).
    pub fn describe(&self) -> String {
        match self {
            Self::Default => "default".to_owned(),
            Self::File(p) => format!("file {}", p.display()),
            Self::Env(v) => format!("env {v}"),
            Self::Cli => "-c".to_owned(),
        }
    }
}

/// A snapshot of environment variables: the one place berth reads the process environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvMap(pub BTreeMap<String, String>);

impl EnvMap {
    /// Reads the process environment (non-UTF-8 variables are skipped).
    pub fn from_process() -> Self {
        Self(std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect())
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self(pairs.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
    }
}

/// One resolved setting.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub setting: &'static Setting,
    pub value: Value,
    pub source: Source,
}

/// Every setting resolved, with the warnings met on the way.
#[derive(Clone, Debug)]
pub struct Resolved {
    entries: Vec<Entry>,
    /// The same values, typed: what code reads.
    pub settings: Settings,
    pub warnings: Vec<String>,
}

/// The inputs of a resolution.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// Berth's home (expands `{home}` in defaults).
    pub home: &'a Path,
    /// The parsed config file, if any, and its path.
    pub file: Option<(&'a Path, &'a Yaml)>,
    pub env: &'a EnvMap,
    /// `-c key=value` pairs, in order (the last one wins).
    pub overrides: &'a [(String, String)],
}

/// Splits a `-c KEY=VALUE` argument.
///
/// # Errors
/// [`ConfigError::BadOverride`] without `=`; [`ConfigError::UnknownKey`] for a key not in the table.
pub fn parse_override(arg: &str) -> Result<(String, String), ConfigError> {
    let (k, v) = arg.split_once('=').ok_or_else(|| ConfigError::BadOverride(arg.to_owned()))?;
    let k = k.trim();
    find(k).ok_or_else(|| ConfigError::UnknownKey(k.to_owned()))?;
    Ok((k.to_owned(), v.to_owned()))
}

/// Reads and parses a config file; a missing file is `Ok(None)`.
///
/// # Errors
/// [`ConfigError::Read`] when the file exists but cannot be read, [`ConfigError::Yaml`] when it is not YAML.
pub fn load_file(path: &Path) -> Result<Option<Yaml>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ConfigError::Read { path: path.to_owned(), source }),
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    serde_yaml_ng::from_str(&text).map(Some).map_err(|source| ConfigError::Yaml { path: path.to_owned(), source })
}

fn yaml_lookup<'a>(doc: &'a Yaml, s: &Setting) -> Option<&'a Yaml> {
    doc.get(s.section())?.get(s.name())
}

/// The largest `/dev/shm` a sandbox may ask for (1 TiB): more is a typo, and the engine would take it.
const MAX_SHM_BYTES: i64 = 1 << 40;

/// Checks rules beyond the kind: the range of the row's type (e.g. `kanban.failure_limit` ≥ 1, durations ≤
/// [`MAX_SECONDS`]) and the text settings whose form is checked by the domain.
fn check_range(s: &Setting, v: &Value) -> Result<(), Invalid> {
    table::check_type(s.key, v)?;
    match (s.key, v) {
        ("terminal.cwd", Value::Str(s)) => {
            domain::sandbox::container_cwd(s).map(|_| ()).map_err(|e| Invalid(e.to_string()))
        }
        ("terminal.docker_shm_size", Value::Str(s)) if !matches!(s.trim(), "" | "0") => {
            match domain::sandbox::parse_bytes(s) {
                None => Err(Invalid::from("not a size such as 1g or 512m")),
                Some(n) if n > MAX_SHM_BYTES => Err(Invalid::from("larger than 1t")),
                Some(_) => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// Strictly parses a value for `key` (used by `-c` and `config set`).
///
/// # Errors
/// [`ConfigError::UnknownKey`] or [`ConfigError::InvalidValue`].
pub fn validate(key: &str, raw: &str) -> Result<Value, ConfigError> {
    let s = find(key).ok_or_else(|| ConfigError::UnknownKey(key.to_owned()))?;
    let invalid = |why: Invalid| ConfigError::InvalidValue { key: key.to_owned(), raw: raw.to_owned(), why };
    let v = parse_text(s.kind, raw).map_err(invalid)?;
    check_range(s, &v).map_err(invalid)?;
    // Only for what the user just typed: a file or environment value with a bad flag is refused at run, where
    // falling back to no extra args would silently start a sandbox without the GPUs or limits asked for.
    if let (Value::List(args), "terminal.docker_extra_args") = (&v, key) {
        domain::sandbox::check_extra_args(args).map_err(|e| invalid(Invalid(e.to_string())))?;
    }
    Ok(v)
}

fn default_value(s: &Setting, home: &Path) -> Value {
    let text = s.default.replace("{home}", &home.display().to_string());
    parse_text(s.kind, &text).unwrap_or_else(|e| panic!("default of {} does not parse: {e}", s.key))
}

/// Resolves every setting: default < file < environment < `-c`.
///
/// Invalid file and environment values give a warning (naming key, source and value) and the default is used;
/// invalid caps mean "no cap". Invalid `-c` values are errors, since the user just typed them.
///
/// # Errors
/// [`ConfigError`] for a bad `-c` pair.
pub fn resolve(inputs: &Inputs<'_>) -> Result<Resolved, ConfigError> {
    let mut warnings = Vec::new();
    let mut entries = Vec::with_capacity(SETTINGS.len());
    for s in SETTINGS {
        let default = default_value(s, inputs.home);
        let mut entry = Entry { setting: s, value: default.clone(), source: Source::Default };
        let mut lenient =
            |parsed: Result<Option<Value>, Invalid>, source: Source, raw: String, entry: &mut Entry| match parsed
                .and_then(|v| match v {
                    Some(v) => check_range(s, &v).map(|()| Some(v)),
                    None => Ok(None),
                }) {
                Ok(Some(v)) => {
                    entry.value = expand_home(v, inputs.home, inputs.env);
                    entry.source = source;
                }
                Ok(None) => {}
                Err(why) => {
                    let fallback = if s.kind == Kind::Cap { "no cap" } else { "using the default" };
                    warnings.push(format!(
                        "invalid {} value {raw:?} for {} ({why}); {fallback}",
                        source.describe(),
                        s.key
                    ));
                    entry.value = default.clone();
                    entry.source = Source::Default;
                }
            };
        if let Some((path, doc)) = inputs.file
            && let Some(y) = yaml_lookup(doc, s)
        {
            let raw = serde_yaml_ng::to_string(y).unwrap_or_default().trim().to_owned();
            lenient(value::from_yaml(s.kind, y), Source::File(path.to_owned()), raw, &mut entry);
        }
        let var = s.env_var();
        if let Some(raw) = inputs.env.get(&var) {
            // An empty variable counts as unset, except where empty is meaningful (text, caps).
            if !raw.is_empty() || matches!(s.kind, Kind::Str | Kind::Cap) {
                lenient(parse_text(s.kind, raw).map(Some), Source::Env(var.clone()), raw.to_owned(), &mut entry);
            }
        }
        for (k, raw) in inputs.overrides.iter().filter(|(k, _)| k == s.key) {
            entry.value = expand_home(validate(k, raw)?, inputs.home, inputs.env);
            entry.source = Source::Cli;
        }
        entries.push(entry);
    }
    for (k, _) in inputs.overrides {
        find(k).ok_or_else(|| ConfigError::UnknownKey(k.clone()))?;
    }
    // Every value went through `check_range`, which is the typed conversion, so this fails only on a bad default
    // (which the table's tests refuse).
    let settings = Settings::from_values(entries.iter().map(|e| &e.value))
        .map_err(|(key, why)| ConfigError::InvalidValue { key: key.to_owned(), raw: entry_text(&entries, key), why })?;
    Ok(Resolved { entries, settings, warnings })
}

fn entry_text(entries: &[Entry], key: &str) -> String {
    entries.iter().find(|e| e.setting.key == key).map(|e| e.value.to_text()).unwrap_or_default()
}

/// Expands `{home}` (berth's home) and a leading `~/` (the user's home, from `HOME`) in text values.
fn expand_home(v: Value, home: &Path, env: &EnvMap) -> Value {
    match v {
        Value::Str(s) => {
            let s = s.replace("{home}", &home.display().to_string());
            match (s.strip_prefix("~/"), env.get("HOME")) {
                (Some(rest), Some(user_home)) => Value::Str(format!("{}/{rest}", user_home.trim_end_matches('/'))),
                _ => Value::Str(s),
            }
        }
        other => other,
    }
}

impl Resolved {
    /// Every entry, in table order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry of `key`.
    ///
    /// # Panics
    /// When `key` is not in the table (a programming error: keys are literals).
    pub fn entry(&self, key: &str) -> &Entry {
        self.entries.iter().find(|e| e.setting.key == key).unwrap_or_else(|| panic!("no setting {key}"))
    }

    pub fn value(&self, key: &str) -> &Value {
        &self.entry(key).value
    }

    /// The environment handed to workers (and printed by `config env`): every setting as its variable.
    pub fn worker_env(&self) -> Vec<(String, String)> {
        self.entries.iter().map(|e| (e.setting.env_var(), e.value.to_text())).collect()
    }
}

impl Settings {
    /// The sandbox settings the domain's spec builder takes.
    pub fn sandbox(&self) -> SandboxSettings {
        let t = &self.terminal;
        SandboxSettings {
            image: t.docker_image.clone(),
            cwd: t.cwd.clone(),
            persist_across_processes: t.docker_persist_across_processes,
            recreate_on_config_change: t.docker_recreate_on_config_change,
            orphan_reaper: t.docker_orphan_reaper,
            lifetime_seconds: t.lifetime_seconds.get().cast_signed(),
            timeout_seconds: t.timeout.get(),
            cpu: t.container_cpu.get(),
            memory_mb: t.container_memory.get().cast_signed(),
            disk_mb: t.container_disk.cast_signed(),
            container_persistent: t.container_persistent,
            sandbox_dir: t.sandbox_dir.clone(),
            volumes: t.docker_volumes.clone(),
            env: t.docker_env.clone(),
            forward_env: t.docker_forward_env.clone(),
            extra_args: t.docker_extra_args.clone(),
            network: t.docker_network,
            run_as_host_user: t.docker_run_as_host_user,
            mount_cwd_to_workspace: t.docker_mount_cwd_to_workspace,
            shm_size: t.docker_shm_size.clone(),
        }
    }

    /// The dispatcher caps (`max_spawn` from config; `dispatch --max` replaces it).
    pub fn caps(&self) -> DispatchCaps {
        let k = &self.kanban;
        DispatchCaps {
            max_in_progress: k.max_in_progress,
            max_spawn: k.max_spawn,
            per_profile: k.max_in_progress_per_profile,
            per_profile_overrides: k.max_in_progress_per_profile_overrides.clone(),
        }
    }

    /// `kanban.default_assignee` trimmed; `None` when empty or whitespace.
    pub fn default_assignee(&self) -> Option<String> {
        Some(self.kanban.default_assignee.trim().to_owned()).filter(|s| !s.is_empty())
    }
}

/// Every variable a hermetic test must clear so the caller's shell cannot leak settings into it.
pub fn hermetic_vars() -> Vec<String> {
    let mut vars: Vec<String> = SETTINGS.iter().map(Setting::env_var).collect();
    vars.extend(["BERTH_HOME", "BERTH_PROFILE", "BERTH_LOG"].map(String::from));
    vars
}

/// Quotes a value as one word for a POSIX shell (`config env`, values substituted into `kanban.worker_command`).
/// A NUL byte cannot be passed to a shell at all, so it is dropped rather than failing the whole line.
pub fn shell_quote(s: &str) -> String {
    let s = s.replace('\0', "");
    shlex::try_quote(&s).map_or_else(|_| String::new(), std::borrow::Cow::into_owned)
}

/// Holds an exclusive lock on the config file's sibling `.config.yaml.lock` while a read-modify-write runs, so
/// concurrent `config set`s of different keys all land (the config file itself is replaced by rename, so it cannot
/// carry the lock).
fn lock_for(path: &Path) -> Result<std::fs::File, ConfigError> {
    let write_err = |source| ConfigError::Write { path: path.to_owned(), source };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(write_err)?;
    let name = format!(".{}.lock", path.file_name().and_then(|n| n.to_str()).unwrap_or("config.yaml"));
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(name)).map_err(write_err)?;
    file.lock().map_err(write_err)?;
    Ok(file)
}

/// Writes `doc` into `path`: the file as it was with only `section.name` changed (set to `value`, or removed) when
/// the in-place editor can do that, else the whole document serialized anew.
fn write_edit(path: &Path, doc: &Yaml, section: &str, name: &str, value: Option<&Yaml>) -> Result<(), ConfigError> {
    let original = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(ConfigError::Read { path: path.to_owned(), source }),
    };
    match edit::edited(&original, section, name, value, doc) {
        Some(text) => write_text(path, &text),
        None => {
            let text =
                serde_yaml_ng::to_string(doc).map_err(|source| ConfigError::Yaml { path: path.to_owned(), source })?;
            write_text(path, &text)
        }
    }
}

/// The file an edit of `path` changes: a symlink is followed (to its final target, as `echo >> config.yaml` would),
/// so the edit lands in the target and the link stays a link.
fn edit_target(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    // As many links as the kernel follows; a loop ends here and fails at the read or the write.
    for _ in 0..40 {
        let Ok(next) = std::fs::read_link(&p) else { break };
        p = match p.parent() {
            Some(dir) if next.is_relative() => dir.join(next),
            _ => next,
        };
    }
    p
}

/// Writes `text` to a unique temporary file next to `path`, with the mode and owner `path` has, and renames it over
/// `path`; the temporary is removed on any failure, so nothing is left behind. When the owner cannot be given to
/// the new file (another user's file, writable by us), the file is rewritten in place instead, so it stays theirs.
fn write_text(path: &Path, text: &str) -> Result<(), ConfigError> {
    use std::io::Write as _;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let write = || -> std::io::Result<()> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut tmp = tempfile::Builder::new().prefix(".config.yaml.").suffix(".tmp").tempfile_in(dir)?;
        if let Ok(old) = std::fs::metadata(path) {
            let owned = std::os::unix::fs::fchown(tmp.as_file(), Some(old.uid()), Some(old.gid()));
            if owned.is_err() && tmp.as_file().metadata()?.uid() != old.uid() {
                drop(tmp);
                let mut file = std::fs::OpenOptions::new().write(true).truncate(true).open(path)?;
                file.write_all(text.as_bytes())?;
                return file.sync_all();
            }
            tmp.as_file().set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o7777))?;
        }
        tmp.write_all(text.as_bytes())?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    write().map_err(|source| ConfigError::Write { path: path.to_owned(), source })
}

/// `config set`: validates the value, then writes it into the file, keeping every other section and key.
///
/// # Errors
/// An unknown key or invalid value (the file is not touched), or an unreadable/unwritable file.
pub fn set_in_file(path: &Path, key: &str, raw: &str) -> Result<Value, ConfigError> {
    let value = validate(key, raw)?;
    let path = &edit_target(path);
    let s = find(key).ok_or_else(|| ConfigError::UnknownKey(key.to_owned()))?;
    let _lock = lock_for(path)?;
    let mut doc = load_file(path)?.unwrap_or(Yaml::Mapping(Default::default()));
    let Yaml::Mapping(root) = &mut doc else {
        return Err(ConfigError::NotAMapping { path: path.to_owned() });
    };
    let section = root.entry(Yaml::String(s.section().to_owned())).or_insert_with(|| Yaml::Mapping(Default::default()));
    if !section.is_mapping() {
        *section = Yaml::Mapping(Default::default());
    }
    if let Yaml::Mapping(m) = section {
        m.insert(Yaml::String(s.name().to_owned()), value.to_yaml());
    }
    write_edit(path, &doc, s.section(), s.name(), Some(&value.to_yaml()))?;
    Ok(value)
}

/// `config unset`: removes the key from the file; returns whether it was there.
///
/// # Errors
/// An unknown key, or an unreadable/unwritable file.
pub fn unset_in_file(path: &Path, key: &str) -> Result<bool, ConfigError> {
    let s = find(key).ok_or_else(|| ConfigError::UnknownKey(key.to_owned()))?;
    let path = &edit_target(path);
    let _lock = lock_for(path)?;
    let Some(mut doc) = load_file(path)? else { return Ok(false) };
    let removed = doc.get_mut(s.section()).and_then(Yaml::as_mapping_mut).and_then(|m| m.remove(s.name())).is_some();
    if removed {
        write_edit(path, &doc, s.section(), s.name(), None)?;
    }
    Ok(removed)
}

/// Berth's precedence and where hermes-agent differs, for `config ls` and the settings reference.
pub const PRECEDENCE_NOTE: &str = "precedence: default < config file < environment < -c; hermes-agent differs: there \
a `terminal:` key in config.yaml overrides its TERMINAL_* variable, here the environment wins over the file";

/// Renders `docs/settings.md` from the table.
/// The sandbox lifecycle from create to reap, with the settings of each step (the README carries the same story).
const LIFECYCLE_DOC: &str = "
## Sandbox lifecycle

From create to reap, and the settings of each step:

1. **Create**: the first `berth run`/`sandbox ensure` of a task creates its sandbox (`terminal.docker_image`, the
   resource and mount settings); with `terminal.container_persistent` its `/root` and `/workspace` live in the host
   folder `<terminal.sandbox_dir>/docker/<profile>/<task>-<digest>`.
2. **Reuse**: later processes attach to it, start it when stopped, recreate it on drift
   (`terminal.docker_recreate_on_config_change`). With `terminal.docker_persist_across_processes: false` each process
   gets a throw-away sandbox, removed with its folder at release (`berth run --keep-files` keeps the folder).
3. **Idle stop**: `terminal.docker_idle_stop_seconds` (0: off; per profile
   `terminal.docker_idle_stop_seconds_overrides`): the gateway stops (never removes) a running persistent sandbox
   with nothing inside but its keep-alive for that long.
4. **Remove**: `berth sandbox rm` removes the sandbox and its folder (`--keep-files` keeps it; a task on a board keeps
   its folder), as root through a one-shot helper container when the sandbox's root user left files there, never
   through a symlink.
5. **Reap**: at each process's first sandbox (`terminal.docker_orphan_reaper`) and on every gateway cleanup pass
   (`terminal.docker_reap_interval_seconds`, 0: `max(60, terminal.lifetime_seconds)`): stopped sandboxes older than
   `2 × max(60, terminal.lifetime_seconds)`, and running throw-away ones whose owner died: on this host by pid, on
   another host sharing the engine by a lease the owner renews inside the sandbox every third of
   `terminal.docker_lease_seconds` (hosts need clocks in step).
6. **Folders**: the same pass (and `berth sandbox reap`) removes sandbox folders no container claims and no board task
   owns, once untouched for the reaper's threshold.
7. **Finished tasks' output**: a done task's workspace folder and worker log stay `kanban.retention_days` (0: until
   archived), or until the task is archived or removed, whichever comes first; `berth kanban prune [--dry-run]` does
   it now, the gateway on each cleanup pass (one line per pass).
";

pub fn settings_doc() -> String {
    let mut s = String::from(
        "# Settings\n\n<!-- Generated from crates/config-bridge/src/table.rs by `cargo test`; do not edit. -->\n\n\
         Precedence: default < config file (`<home>/config.yaml`) < environment < `berth -c key=value`.\n\
         hermes-agent differs: there a `terminal:` key in `config.yaml` overrides its `TERMINAL_*` variable; in berth \
         the environment wins over the file (`berth config ls` shows which source each value came from).\n\
         Booleans accept true/false/1/0/yes/no/on/off in any case.\n\
         Lists and maps are JSON in the environment and `-c` (`[\"a\",\"b\"]`, `{\"k\":\"v\"}`), native YAML in the file.\n\
         Invalid file or environment values warn and fall back to the default; an invalid cap means no cap.\n\n\
         | key | environment variable | type | default | meaning |\n|---|---|---|---|---|\n",
    );
    let mut rows = String::new();
    for e in SETTINGS {
        let default = if e.default.is_empty() { "(unset)".to_owned() } else { format!("`{}`", e.default) };
        let _ = writeln!(
            rows,
            "| `{}` | `{}` | {} | {} | {} |",
            e.key,
            e.env_var(),
            e.kind.as_str(),
            default,
            e.doc.replace('|', "\\|")
        );
    }
    s.push_str(&rows);
    s.push_str(LIFECYCLE_DOC);
    s.push_str(
        "\n## `terminal.docker_extra_args`\n\n\
         Berth creates sandboxes through the Engine API, so each `docker run` flag is mapped onto the create call. \
         Flags mapped (values as `docker run` takes them, `--flag value` or `--flag=value`):\n\n",
    );
    for flag in domain::sandbox::MAPPED_FLAGS {
        let _ = writeln!(s, "- `{flag}`");
    }
    s.push_str(
        "\nAny other flag is refused with one line naming it, and nothing is created: client-side flags (`--rm`, \
         `-d`, `-i`, `-t`, `--env-file`, `--pull`, …) and flags that would break the sandbox (`--name`, \
         `--entrypoint`). With `terminal.docker_network: false`, a `--network` other than `none` is refused too.\n",
    );
    s
}

#[cfg(test)]
mod tests;
