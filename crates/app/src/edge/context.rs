//! What every command starts from: the home directory, the profile, the resolved settings, and the edge adapters
//! (system clock, profile directories, process probe).

use std::path::{Path, PathBuf};

use config_bridge::{EnvMap, Inputs, Resolved, Settings};
use domain::ids::ProfileName;
use domain::ports::{Clock, ProcessProbe, ProfileResolver};

/// The process probe lives with the rest of process supervision; it stays reachable by this path.
pub use crate::edge::process::ProcProbe;
use domain::time::Timestamp;

use crate::edge::error::Failure;

/// The resolved invocation context.
#[derive(Clone)]
pub struct Ctx {
    pub home: PathBuf,
    pub profile: ProfileName,
    pub env: EnvMap,
    /// The typed settings code reads (`ctx.settings.terminal.timeout`).
    pub settings: Settings,
    /// The same settings as table entries with their sources (`config ls|get|env`, the worker environment).
    pub resolved: Resolved,
    pub json: bool,
    /// The `-c` pairs as given: a profile's settings ([`Ctx::for_profile`]) and a re-read of the files take them too.
    pub overrides: Vec<(String, String)>,
}

impl Ctx {
    /// What a failure of a task of `assignee` does, at `limit` (`kanban.failure_limit`, or a dispatch's
    /// `--failure-limit`): the assignee's retry backoff (`kanban.retry_backoff_*`, per-profile overrides).
    pub fn breaker(&self, limit: u32, assignee: Option<&str>) -> domain::board::Breaker {
        domain::board::Breaker { limit, backoff: self.settings.retry_backoffs().of(assignee) }
    }

    /// Resolves home, profile and settings from the flags and the environment; warnings go to the log.
    ///
    /// # Errors
    /// A usage failure for a bad `-c`, profile name or unreadable config file.
    pub fn new(
        env: EnvMap,
        home: Option<PathBuf>,
        profile: Option<String>,
        overrides: &[String],
        json: bool,
    ) -> Result<Self, Failure> {
        Self::resolve(env, home, profile, overrides, json, true)
    }

    /// As [`Ctx::new`]; with `read_file` false the config file is not read at all: a worker takes every setting
    /// from the environment its dispatcher resolved, never from a file written after that.
    ///
    /// # Errors
    /// A usage failure for a bad `-c`, profile name or unreadable config file.
    pub fn resolve(
        env: EnvMap,
        home: Option<PathBuf>,
        profile: Option<String>,
        overrides: &[String],
        json: bool,
        read_file: bool,
    ) -> Result<Self, Failure> {
        let home = home
            .or_else(|| env.get("BERTH_HOME").filter(|h| !h.is_empty()).map(PathBuf::from))
            .or_else(|| env.get("HOME").map(|h| Path::new(h).join(".berth")))
            .ok_or_else(|| Failure::usage("cannot find a home directory: pass --home or set BERTH_HOME"))?;
        let home = std::path::absolute(&home).unwrap_or(home);
        let profile_raw =
            profile.or_else(|| env.get("BERTH_PROFILE").map(str::to_owned)).unwrap_or_else(|| "default".to_owned());
        let profile = ProfileName::parse(&profile_raw).map_err(|e| Failure::usage(e.to_string()))?;
        let overrides: Vec<(String, String)> = overrides
            .iter()
            .map(|o| config_bridge::parse_override(o))
            .collect::<Result<_, _>>()
            .map_err(Failure::usage_of)?;
        refuse_password_in_arguments(&overrides)?;
        let resolved = if read_file {
            resolve_files(&home, &profile, &env, &overrides)?
        } else {
            config_bridge::resolve(&Inputs {
                home: &home,
                file: None,
                profile_file: None,
                env: &env,
                overrides: &overrides,
            })
            .map_err(Failure::usage_of)?
        };
        for w in &resolved.warnings {
            tracing::warn!("{w}");
        }
        let settings = resolved.settings.clone();
        Ok(Self { home, profile, env, settings, resolved, json, overrides })
    }

    /// The context of `profile`'s work on this home: the home's file, then the profile's own, then this command's
    /// environment and `-c` (what a task of that profile runs with, whoever dispatches it).
    ///
    /// # Errors
    /// A one-line reason when a file cannot be read or a value refuses (a cap that is not a number).
    pub fn for_profile(&self, profile: &ProfileName) -> Result<Self, String> {
        let resolved = resolve_files(&self.home, profile, &self.env, &self.overrides).map_err(|f| f.message)?;
        if let Some(refusal) = resolved.refused.first() {
            return Err(refusal.clone());
        }
        let settings = resolved.settings.clone();
        Ok(Self { profile: profile.clone(), settings, resolved, ..self.clone() })
    }

    /// Every config file this context reads: the home's, and its profile's own.
    pub fn config_files(&self) -> [PathBuf; 2] {
        [self.config_path(), profile_config_path(&self.home, &self.profile)]
    }

    /// This host's identity on a board (`kanban.host_id`, else the hostname): written into claims and runs; only
    /// this host's workers are probed by pid or signalled.
    pub fn host_id(&self) -> String {
        let set = self.settings.kanban.host_id.trim();
        if set.is_empty() { hostname() } else { set.to_owned() }
    }

    /// This home's `berth.home` digest (of its canonical path, so two spellings of one home are one home): on every
    /// sandbox it makes and in its identity, so two homes on one engine never manage each other's sandboxes.
    pub fn home_id(&self) -> String {
        // A home that does not exist yet is named by its canonical parent, as it will be once made.
        let canonical = std::fs::canonicalize(&self.home)
            .or_else(|_| {
                let parent = self.home.parent().ok_or(std::io::ErrorKind::NotFound)?;
                let name = self.home.file_name().ok_or(std::io::ErrorKind::NotFound)?;
                std::fs::canonicalize(parent).map(|p| p.join(name))
            })
            .unwrap_or_else(|_| self.home.clone());
        domain::sandbox::home_digest(&canonical.to_string_lossy())
    }

    /// The PostgreSQL board's URL (`kanban.database_url`), or `None` for the SQLite file.
    pub fn database_url(&self) -> Option<&str> {
        Some(self.settings.kanban.database_url.trim()).filter(|u| !u.is_empty())
    }

    /// `kanban.database_timeout_seconds`: how long one round trip to a PostgreSQL board may wait for the server.
    pub fn database_timeout(&self) -> std::time::Duration {
        self.settings.kanban.database_timeout_seconds.duration()
    }

    /// The board database file (when the board is on SQLite).
    pub fn db_path(&self) -> PathBuf {
        kanban_store::board_path(&self.home)
    }

    pub fn config_path(&self) -> PathBuf {
        self.home.join("config.yaml")
    }

    pub fn profiles(&self) -> DirProfiles {
        DirProfiles { home: self.home.clone(), active: self.profile.clone() }
    }

    /// The Docker endpoint: `DOCKER_HOST`, else the default socket.
    pub fn docker_endpoint(&self) -> String {
        self.env.get("DOCKER_HOST").filter(|h| !h.is_empty()).unwrap_or(docker_adapter::DEFAULT_ENDPOINT).to_owned()
    }

    /// Fails unless the active profile exists.
    ///
    /// # Errors
    /// A usage failure naming the missing profile.
    pub fn require_profile(&self) -> Result<(), Failure> {
        if self.profiles().exists(self.profile.as_str()) {
            Ok(())
        } else {
            let profiles = self.profiles().list();
            let hint = domain::suggest::did_you_mean(self.profile.as_str(), profiles.iter().map(String::as_str));
            Err(Failure::usage(format!(
                "profile {:?} does not exist{hint}; create it with `berth profile create {}`",
                self.profile.as_str(),
                self.profile
            )))
        }
    }
}

/// A profile's own config file: `<home>/profiles/<name>/config.yaml` (in hermes-agent a profile is a home of its own,
/// with its own `config.yaml`).
pub fn profile_config_path(home: &Path, profile: &ProfileName) -> PathBuf {
    home.join("profiles").join(profile.as_str()).join("config.yaml")
}

/// Reads the home's file and the profile's own and resolves every setting over them.
fn resolve_files(
    home: &Path,
    profile: &ProfileName,
    env: &EnvMap,
    overrides: &[(String, String)],
) -> Result<Resolved, Failure> {
    let file_path = home.join("config.yaml");
    let profile_path = profile_config_path(home, profile);
    let doc = config_bridge::load_file(&file_path).map_err(Failure::usage_of)?;
    let profile_doc = config_bridge::load_file(&profile_path).map_err(Failure::usage_of)?;
    config_bridge::resolve(&Inputs {
        home,
        file: doc.as_ref().map(|d| (file_path.as_path(), d)),
        profile_file: profile_doc.as_ref().map(|d| (profile_path.as_path(), d)),
        env,
        overrides,
    })
    .map_err(Failure::usage_of)
}

/// Profiles as directories under `<home>/profiles/`; `default` always exists.
pub struct DirProfiles {
    pub home: PathBuf,
    pub active: ProfileName,
}

impl DirProfiles {
    pub fn dir(&self, name: &str) -> PathBuf {
        self.home.join("profiles").join(name)
    }

    /// Every profile name, sorted, `default` included.
    pub fn list(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.home.join("profiles"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| ProfileName::parse(n).is_ok())
            .collect();
        if !names.iter().any(|n| n == "default") {
            names.push("default".to_owned());
        }
        names.sort();
        names
    }
}

impl ProfileResolver for DirProfiles {
    fn active(&self) -> ProfileName {
        self.active.clone()
    }

    fn exists(&self, name: &str) -> bool {
        name == "default" || (ProfileName::parse(name).is_ok() && self.dir(name).is_dir())
    }

    fn list(&self) -> Vec<String> {
        DirProfiles::list(self)
    }
}

/// A board password in `-c kanban.database_url=…` sits in the process's arguments, which every local user reads
/// (`ps`, `/proc/<pid>/cmdline`), for as long as the process runs: refused, as `kanban migrate --to URL` refuses it.
fn refuse_password_in_arguments(overrides: &[(String, String)]) -> Result<(), Failure> {
    let holds_password =
        |(k, v): &(String, String)| k == "kanban.database_url" && kanban_postgres::redact_url(v.trim()) != v.trim();
    if overrides.iter().any(holds_password) {
        return Err(Failure::usage(
            "refusing a board password in -c kanban.database_url, where any local user can read it in the command \
             line: set KANBAN_DATABASE_URL in the environment or kanban.database_url in config.yaml; nothing was changed",
        ));
    }
    Ok(())
}

/// This host's name (claim locks and sandbox owner labels are host-scoped).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

/// `<host>:<pid>:<start>` of this process (read once).
pub fn owner_label() -> String {
    static LABEL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LABEL
        .get_or_init(|| {
            let pid = std::process::id();
            format!("{}:{pid}:{}", hostname(), ProcProbe.start_fingerprint(pid).unwrap_or(0))
        })
        .clone()
}

/// The wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp::from_millis(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}
