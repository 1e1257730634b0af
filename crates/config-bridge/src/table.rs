//! The one table of settings: key, type, default and doc. Every other surface is derived from it.

/// The type of a setting, which fixes how its text is parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// true/false/1/0/yes/no/on/off, any case.
    Bool,
    /// A whole number.
    Int,
    /// A number.
    Float,
    /// Free text.
    Str,
    /// A list of strings (JSON array in the environment).
    List,
    /// A map of strings (JSON object in the environment).
    Map,
    /// An optional cap: a positive whole number; unset, 0, negative or not a number mean "no cap".
    Cap,
    /// A map of positive caps by profile (JSON object in the environment).
    CapMap,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bool => "bool",
            Self::Int => "int",
            Self::Float => "float",
            Self::Str => "string",
            Self::List => "list",
            Self::Map => "map",
            Self::Cap => "cap",
            Self::CapMap => "map of caps",
        }
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// `section.snake_name`, as in a hermes `config.yaml`.
    pub key: &'static str,
    pub kind: Kind,
    /// The default in the environment's text form (`{home}` expands to berth's home).
    pub default: &'static str,
    pub doc: &'static str,
}

impl Setting {
    /// The environment variable: the key upper-cased with `.` → `_` (`terminal.timeout` → `TERMINAL_TIMEOUT`).
    pub fn env_var(&self) -> String {
        env_var_for(self.key)
    }

    /// The section (`terminal`, `kanban`).
    pub fn section(&self) -> &'static str {
        self.key.split_once('.').map_or(self.key, |(s, _)| s)
    }

    /// The name within the section.
    pub fn name(&self) -> &'static str {
        self.key.split_once('.').map_or(self.key, |(_, n)| n)
    }
}

/// Derives an environment variable name from a key.
pub fn env_var_for(key: &str) -> String {
    key.replace('.', "_").to_ascii_uppercase()
}

/// Finds a row by key.
pub fn find(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.key == key)
}

macro_rules! settings {
    ($( $key:literal, $kind:ident, $default:literal, $doc:literal; )*) => {
        /// Every setting berth reads, sorted by key.
        pub static SETTINGS: &[Setting] = &[ $( Setting { key: $key, kind: Kind::$kind, default: $default, doc: $doc }, )* ];
    };
}

settings! {
    "kanban.claim_ttl_seconds", Int, "900", "Seconds a dispatcher's claim on a task lasts before housekeeping re-checks the worker.";
    "kanban.default_assignee", Str, "", "Profile that unassigned ready tasks are routed to at dispatch time; empty or whitespace means unset.";
    "kanban.dispatch_in_gateway", Bool, "true", "Whether `berth gateway run` dispatches the boards; false leaves the gateway idle.";
    "kanban.dispatch_interval_seconds", Float, "60", "Seconds between the gateway's dispatch ticks (floor 1).";
    "kanban.dispatch_stale_timeout_seconds", Int, "14400", "Running tasks older than this without a fresh heartbeat are requeued; 0 disables.";
    "kanban.failure_limit", Int, "2", "Consecutive failures (spawn failures, crashes, timeouts) after which a task is blocked with `gave_up`.";
    "kanban.max_in_progress", Cap, "", "Most running workers on this host, all boards together; unset means no cap.";
    "kanban.max_in_progress_per_profile", Cap, "", "Most running workers per assignee, all boards of this host together; unset means no cap.";
    "kanban.max_in_progress_per_profile_overrides", CapMap, "{}", "Per-profile caps that replace `kanban.max_in_progress_per_profile`, e.g. {\"alpha\": 4}.";
    "kanban.max_spawn", Cap, "", "Most workers started in one dispatch tick; `dispatch --max` wins over it.";
    "kanban.spawn_lease_seconds", Int, "20", "Seconds a new claim waits for its worker to confirm the run (record its own pid); past it the task is requeued as a failure.";
    "kanban.worker_command", Str, "", "Worker command template ({task_id}, {assignee}, {board}); empty runs the built-in `berth worker run`.";
    "kanban.worker_log_backup_count", Int, "1", "Rotated worker logs kept per task.";
    "kanban.worker_log_rotate_bytes", Int, "2097152", "A worker log larger than this is rotated before the next spawn.";
    "terminal.container_cpu", Float, "1", "CPU cores per sandbox; 0 means no limit.";
    "terminal.container_disk", Int, "51200", "Disk limit per sandbox in MB (needs overlay2 on XFS with pquota; otherwise ignored with a warning).";
    "terminal.container_memory", Int, "5120", "Memory limit per sandbox in MB; 0 means no limit.";
    "terminal.container_persistent", Bool, "true", "Bind-mount per-sandbox /root and /workspace directories under `terminal.sandbox_dir`; false uses tmpfs.";
    "terminal.cwd", Str, "/root", "Working directory of commands inside the sandbox: an absolute path, or hermes's placeholders `.`, `auto`, `cwd`, `~` (all mean /root).";
    "terminal.docker_allow_host_mounts", Bool, "false", "Allow mounting the container engine's socket (or a folder holding it) via docker_volumes or docker_extra_args; berth's home and sandbox folders stay refused always.";
    "terminal.docker_env", Map, "{}", "Environment variables stored in the sandbox's config (not secrets: use docker_forward_env).";
    "terminal.docker_extra_args", List, "[]", "Extra `docker run` flags, applied last and mapped onto the Engine API (list below); a flag with no API form is refused.";
    "terminal.docker_forward_env", List, "[]", "Names of host variables passed to each command at exec time, never stored in the container.";
    "terminal.docker_idle_stop_seconds", Int, "0", "Stop (not remove) a running persistent sandbox after this many seconds with nothing inside but its keep-alive, as the gateway sees it; 0 is off (hermes parity). See the README's sandbox lifecycle.";
    "terminal.docker_idle_stop_seconds_overrides", CapMap, "{}", "Per-profile idle-stop periods that replace `terminal.docker_idle_stop_seconds`, e.g. {\"alpha\": 900}.";
    "terminal.docker_image", Str, "berth-sandbox:latest", "Image of new sandboxes (must exist locally or be pullable).";
    "terminal.docker_mount_cwd_to_workspace", Bool, "false", "Bind-mount the caller's working directory at /workspace (refused when it is, holds or lies in berth's home; a worker's working directory is its own sandbox folder).";
    "terminal.docker_network", Bool, "true", "Give sandboxes network access; false runs them with --network=none.";
    "terminal.docker_orphan_reaper", Bool, "true", "Once per process, before the first sandbox creation, remove this profile's stale stopped sandboxes.";
    "terminal.docker_persist_across_processes", Bool, "true", "Keep sandboxes running across processes and reuse them; false makes one per process, removed at release.";
    "terminal.docker_reap_interval_seconds", Int, "0", "Seconds between the gateway's cleanup passes (orphan reaper, gone sandboxes' folders); 0 derives it: max(60, `terminal.lifetime_seconds`).";
    "terminal.docker_recreate_on_config_change", Bool, "true", "Recreate a reused sandbox whose create spec (image, env, mounts, resources, args) changed.";
    "terminal.docker_run_as_host_user", Bool, "false", "Run sandbox commands as the calling user's uid:gid.";
    "terminal.docker_shared_container_key", Str, "", "When set, trusted profiles share one sandbox per task: the `hermes-profile` label becomes `<key[:50]>-<sha256(key)[:12]>`, as in hermes 0.21.";
    "terminal.docker_shm_size", Str, "1g", "Size of /dev/shm in sandboxes (hermes 0.21's default); empty or 0 keeps Docker's 64m.";
    "terminal.docker_volumes", List, "[]", "Extra mounts, each `host:container[:options]`.";
    "terminal.lifetime_seconds", Int, "300", "Idle lifetime of a sandbox handle; the orphan reaper removes stopped sandboxes after 2 × max(60, this).";
    "terminal.sandbox_dir", Str, "{home}/sandboxes", "Where persistent sandbox directories live on the host; an absolute path that is not `/` and does not hold berth's home.";
    "terminal.timeout", Int, "180", "Seconds a command may run before it is killed (exit 124).";
}
