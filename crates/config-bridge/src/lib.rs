//! Berth's settings: one table ([`table::SETTINGS`]) and every surface derived from it.
//!
//! Surfaces: the config file (`<home>/config.yaml`, hermes-compatible, YAML merge keys applied), the environment
//! (`TERMINAL_*`/`KANBAN_*`), `-c key=value`, the environment handed to workers, the generated `docs/settings.md`
//! (`docs.rs`), `config set`/`unset` on the file (`edit.rs`), and the list of variables hermetic tests clear. This
//! is the only crate that reads those variables.

mod docs;
mod edit;
pub mod table;
pub mod typed;
mod unknown;
pub mod value;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use domain::board::DispatchCaps;
use domain::sandbox::SandboxSettings;
use serde_yaml_ng::Value as Yaml;
use thiserror::Error;

pub use docs::{PRECEDENCE_NOTE, settings_doc};
pub use edit::{set_in_file, unset_in_file};
pub use table::{Kanban, Kind, SETTINGS, Setting, Settings, Terminal, env_var_for, find};
pub use typed::{
    Cpus, EgressOverrides, FloatDays, FloatSeconds, FromValue, MAX_SECONDS, MemoryMb, PositiveSeconds, Seconds,
};
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
    #[error("unknown setting {0:?}{hint} (see `berth config ls`)", hint = domain::suggest::did_you_mean(.0, SETTINGS.iter().map(|s| s.key)))]
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
    #[error(
        "cannot change {key} in {path} without dropping its YAML anchors, aliases or merge keys (what it changes is \
         shared through them); edit the file by hand, or give the value with -c or the environment",
        path = path.display()
    )]
    /// The edit cannot be made in place, and rewriting the file would expand its shared nodes and drop its comments.
    SharedByAnchors { path: PathBuf, key: String },
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
    /// Values that refuse every command but `config` (one line each): a cap that is not a number would otherwise
    /// mean no cap at all.
    pub refused: Vec<String>,
}

/// The inputs of a resolution.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// Berth's home (expands `{home}` in defaults).
    pub home: &'a Path,
    /// The parsed config file, if any, and its path.
    pub file: Option<(&'a Path, &'a Yaml)>,
    /// The profile's own file (`<home>/profiles/<name>/config.yaml`, a hermes profile's home), read over `file`.
    pub profile_file: Option<(&'a Path, &'a Yaml)>,
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
    let text = match read_regular(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ConfigError::Read { path: path.to_owned(), source }),
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    serde_yaml_ng::from_str(&text).map(Some).map_err(|source| ConfigError::Yaml { path: path.to_owned(), source })
}

/// A config file's text, opened without waiting (a FIFO put in its place would hold every berth command, and a
/// running gateway, at the open) and read only when it is a regular file.
fn read_regular(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits().cast_signed())
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// `doc` with its YAML merge keys (`<<: *base`, `<<: [*a, *b]`) applied, as hermes-agent's PyYAML reads them: keys
/// written in a mapping win over merged ones, earlier merged mappings over later ones, and a merged mapping's own
/// merges are applied first. A merge the document cannot take (a scalar after `<<`) is a warning and the file is read
/// without merges.
fn with_merge_keys(path: &Path, doc: &Yaml, warnings: &mut Vec<String>) -> Yaml {
    let mut merged = doc.clone();
    match flatten_merges(&mut merged) {
        Ok(()) => merged,
        Err(why) => {
            warnings.push(format!("{}: a YAML merge key (<<) {why}; read without merges", path.display()));
            doc.clone()
        }
    }
}

/// Applies merge keys bottom-up (the parser bounds a document's depth, so the recursion is bounded too).
pub(crate) fn flatten_merges(node: &mut Yaml) -> Result<(), &'static str> {
    match node {
        Yaml::Mapping(m) => {
            for v in m.values_mut() {
                flatten_merges(v)?;
            }
            let sources = match m.remove("<<") {
                None => return Ok(()),
                Some(Yaml::Mapping(one)) => vec![one],
                Some(Yaml::Sequence(many)) => many
                    .into_iter()
                    .map(|v| match v {
                        Yaml::Mapping(one) => Ok(one),
                        _ => Err("lists something other than mappings"),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("is followed by neither a mapping nor a list of mappings"),
            };
            for source in sources {
                for (k, v) in source {
                    m.entry(k).or_insert(v);
                }
            }
            Ok(())
        }
        Yaml::Sequence(items) => items.iter_mut().try_for_each(flatten_merges),
        Yaml::Tagged(t) => flatten_merges(&mut t.value),
        _ => Ok(()),
    }
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
    // A list or map is JSON: the refusal shows the shape it takes.
    let v = parse_text(s.kind, raw).map_err(|why| match unknown::json_example(key, s.kind) {
        Some(example) => invalid(Invalid(format!("{why}; {example}"))),
        None => invalid(why),
    })?;
    check_range(s, &v).map_err(invalid)?;
    // `terminal.docker_extra_args` are the engine's flags: the edge reads them with the engine's parser (`config
    // set` before writing, a sandbox's create before creating), not this table.
    Ok(v)
}

fn default_value(s: &Setting, home: &Path) -> Value {
    let text = s.default.replace("{home}", &home.display().to_string());
    parse_text(s.kind, &text).unwrap_or_else(|e| panic!("default of {} does not parse: {e}", s.key))
}

/// The settings a profile's own file may not set: which board the home's commands and workers use, and this host's
/// name on it, are the home's (a profile's worker on another board than its dispatcher's would record nothing).
pub const HOME_ONLY: [&str; 2] = ["kanban.database_url", "kanban.host_id"];

/// Resolves every setting: default < file < the profile's file < environment < `-c`.
///
/// Invalid file and environment values give a warning (naming key, source and value) and the default is used; a
/// cap below 1 means "no cap", as in hermes-agent. A cap that is not a number (or a per-profile cap map that does
/// not parse) is in [`Resolved::refused`] instead: dropping the cap would start more workers than meant. Invalid `-c`
/// values are errors, since the user just typed them. Keys of the file neither berth nor hermes-agent reads are
/// warnings.
///
/// # Errors
/// [`ConfigError`] for a bad `-c` pair.
pub fn resolve(inputs: &Inputs<'_>) -> Result<Resolved, ConfigError> {
    let mut warnings = Vec::new();
    let mut refused = Vec::new();
    let merged = inputs.file.map(|(path, doc)| (path, with_merge_keys(path, doc, &mut warnings)));
    if let Some((path, doc)) = &merged {
        warnings.extend(unknown::warnings(path, doc));
    }
    let profile_merged = inputs.profile_file.map(|(path, doc)| (path, with_merge_keys(path, doc, &mut warnings)));
    if let Some((path, doc)) = &profile_merged {
        warnings.extend(unknown::warnings(path, doc));
        for key in HOME_ONLY {
            if find(key).and_then(|s| yaml_lookup(doc, s)).is_some() {
                warnings.push(format!(
                    "{}: {key} is the home's (set it in the home's config.yaml); ignored here",
                    path.display()
                ));
            }
        }
    }
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
                Err(why) if refuses(s.kind, &raw) => refused.push(format!(
                    "invalid value {raw:?} for {} in {} ({why}): {} is never dropped silently; fix it with `berth \
                     config set {} VALUE` or `berth config unset {}`",
                    s.key,
                    source.describe(),
                    if s.kind == Kind::Json { "a credential" } else { "a cap" },
                    s.key,
                    s.key
                )),
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
        if let Some((path, doc)) = &merged
            && let Some(y) = yaml_lookup(doc, s)
        {
            let raw = serde_yaml_ng::to_string(y).unwrap_or_default().trim().to_owned();
            lenient(value::from_yaml(s.kind, y), Source::File((*path).to_owned()), raw, &mut entry);
        }
        if let Some((path, doc)) = &profile_merged
            && !HOME_ONLY.contains(&s.key)
            && let Some(y) = yaml_lookup(doc, s)
        {
            let raw = serde_yaml_ng::to_string(y).unwrap_or_default().trim().to_owned();
            lenient(value::from_yaml(s.kind, y), Source::File((*path).to_owned()), raw, &mut entry);
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
    Ok(Resolved { entries, settings, warnings, refused })
}

/// Whether an invalid value of `kind` refuses commands rather than falling back: a cap that is not a whole number
/// (hermes-agent's "below 1" stays "no cap"), a per-profile cap map, or credentials (falling back to none would put
/// nothing in their place, silently).
fn refuses(kind: Kind, raw: &str) -> bool {
    match kind {
        Kind::Cap => !raw.trim().trim_matches(['\'', '"']).parse::<i64>().is_ok_and(|n| n < 1),
        Kind::CapMap | Kind::Json => true,
        _ => false,
    }
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

    /// `terminal.docker_extra_args` when `-c` set it: what the user just typed, which the edge reads at once with the
    /// engine's parser (a file or environment value with a bad flag is refused at create, where falling back to no
    /// extra args would silently start a sandbox without the GPUs or limits asked for).
    pub fn extra_args_from_cli(&self) -> Option<&[String]> {
        let e = self.entry("terminal.docker_extra_args");
        (e.source == Source::Cli).then_some(self.settings.terminal.docker_extra_args.as_slice())
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
            egress: t.docker_egress.clone(),
            credentials: t.docker_credentials.0.clone(),
            run_as_host_user: t.docker_run_as_host_user,
            mount_cwd_to_workspace: t.docker_mount_cwd_to_workspace,
            shm_size: t.docker_shm_size.clone(),
        }
    }

    /// `terminal.docker_allow_host_access`, or its older name `terminal.docker_allow_host_mounts`.
    pub fn allows_host_access(&self) -> bool {
        self.terminal.docker_allow_host_access || self.terminal.docker_allow_host_mounts
    }

    /// The egress policy of `profile`'s sandboxes: its override, else `terminal.docker_egress`; `none` whenever
    /// `terminal.docker_network` is false.
    pub fn egress_for(&self, profile: &str) -> domain::egress::EgressPolicy {
        let t = &self.terminal;
        if !t.docker_network {
            return domain::egress::EgressPolicy::None;
        }
        t.docker_egress_overrides.0.get(profile).cloned().unwrap_or_else(|| t.docker_egress.clone())
    }

    /// The credentials of `profile`'s sandboxes: its override, else `terminal.docker_credentials`.
    pub fn credentials_for(&self, profile: &str) -> domain::egress::credentials::Credentials {
        let t = &self.terminal;
        t.docker_credentials_overrides.0.get(profile).cloned().unwrap_or_else(|| t.docker_credentials.0.clone())
    }

    /// The dispatcher caps (`max_spawn` from config; `dispatch --max` replaces it).
    pub fn caps(&self) -> DispatchCaps {
        let k = &self.kanban;
        DispatchCaps {
            max_in_progress: k.max_in_progress,
            max_spawn: k.max_spawn,
            per_profile: k.max_in_progress_per_profile,
            per_profile_overrides: k.max_in_progress_per_profile_overrides.clone(),
            rate_per_minute: Some(k.rate_limit_per_minute).filter(|n| *n > 0),
            rate_overrides: k.rate_limit_per_minute_overrides.clone(),
        }
    }

    /// Each profile's retry backoff: the defaults, and for every profile named in either override map its own
    /// base and longest pause (each the override, or the default where it has none).
    pub fn retry_backoffs(&self) -> domain::board::RetryBackoffs {
        let k = &self.kanban;
        let default = domain::board::RetryBackoff {
            base: k.retry_backoff_seconds.duration(),
            max: k.retry_backoff_max_seconds.duration(),
        };
        let secs = |s: &u32| std::time::Duration::from_secs(u64::from(*s));
        let (bases, maxes) = (&k.retry_backoff_seconds_overrides, &k.retry_backoff_max_seconds_overrides);
        let per_profile = bases
            .keys()
            .chain(maxes.keys())
            .map(|p| {
                let backoff = domain::board::RetryBackoff {
                    base: bases.get(p).map_or(default.base, secs),
                    max: maxes.get(p).map_or(default.max, secs),
                };
                (p.clone(), backoff)
            })
            .collect();
        domain::board::RetryBackoffs { default, per_profile }
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

#[cfg(test)]
mod tests;
