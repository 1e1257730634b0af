//! The one table of settings: key, type, default and doc. Every other surface is derived from it.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use crate::typed::{
    Cpus, CredentialOverrides, Credentials, EgressOverrides, FloatDays, FloatSeconds, FromValue, MemoryMb,
    PositiveSeconds, Seconds,
};
use crate::value::{Invalid, Value};
use domain::egress::EgressPolicy;

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
    /// An optional cap: a positive whole number; unset, 0 or negative mean "no cap" (not a number is refused).
    Cap,
    /// A map of positive caps by profile (JSON object in the environment).
    CapMap,
    /// An egress policy: `all`, `none`, or destinations (a YAML list, or text separated by commas).
    Egress,
    /// A nested JSON object (a YAML mapping in the config file), its shape checked by the setting's type.
    Json,
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
            Self::Json => "JSON object",
            Self::Egress => "egress",
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

/// One macro call declares every setting once: its section, name, Rust type (which fixes its kind and range),
/// default and doc. It generates the [`SETTINGS`] rows every text surface reads, and the typed [`Settings`] struct
/// code reads (`settings.terminal.docker_orphan_reaper`), so a misspelled setting is a compile error.
macro_rules! settings {
    ($( $section:ident : $Section:ident {
        $( $name:ident : $ty:ty = $default:literal, $doc:literal; )*
    } )*) => {
        /// Every setting berth reads, sorted by key.
        pub static SETTINGS: &[Setting] = &[ $( $( Setting {
            key: concat!(stringify!($section), ".", stringify!($name)),
            kind: <$ty as FromValue>::KIND,
            default: $default,
            doc: $doc,
        }, )* )* ];

        $(
            #[doc = concat!("The `", stringify!($section), ".*` settings, typed.")]
            #[derive(Clone, Debug, PartialEq)]
            pub struct $Section {
                $( #[doc = $doc] pub $name: $ty, )*
            }
        )*

        /// Every setting, typed: what code reads.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Settings {
            $( pub $section: $Section, )*
        }

        impl Settings {
            /// Builds the typed settings from values in table order; a value that does not convert (never the
            /// case for values that went through resolution, which checks each with the same conversion) is
            /// reported with its key.
            ///
            /// # Errors
            /// The key and the reason of the first value that does not convert.
            pub(crate) fn from_values<'a>(
                values: impl IntoIterator<Item = &'a Value>,
            ) -> Result<Self, (&'static str, Invalid)> {
                let mut values = values.into_iter();
                let mut rows = SETTINGS.iter();
                let mut next = || -> Result<(&'static str, &'a Value), (&'static str, Invalid)> {
                    let row = rows.next().ok_or(("", Invalid::from("fewer rows than fields")))?;
                    let value = values.next().ok_or((row.key, Invalid::from("no value")))?;
                    Ok((row.key, value))
                };
                Ok(Self { $( $section: $Section { $( $name: {
                    let (key, value) = next()?;
                    <$ty as FromValue>::from_value(value).map_err(|why| (key, why))?
                }, )* }, )* })
            }
        }

        /// Checks a value against the type of its row (the range check of `config set`, `-c`, file and
        /// environment).
        pub(crate) fn check_type(key: &str, value: &Value) -> Result<(), Invalid> {
            match key {
                $( $( k if k == concat!(stringify!($section), ".", stringify!($name)) => {
                    <$ty as FromValue>::from_value(value).map(|_| ())
                } )* )*
                _ => Ok(()),
            }
        }
    };
}

settings! {
    kanban: Kanban {
        board_retry_seconds: Seconds = "300", "How long a worker keeps retrying its writes to the board (its confirmation, heartbeats, outcome) while the board is unreachable, before it gives up; a command that finished meanwhile is recorded when the board is back, never run again. Also how long a worker whose container engine connection broke under its running command keeps asking the engine to kill that command before its task is requeued (past it the run fails, counted), so a retry never runs beside it.";
        claim_ttl_seconds: PositiveSeconds = "900", "Seconds a dispatcher's claim on a task lasts before housekeeping re-checks the worker.";
        dashboard_allow_remote: bool = "false", "Let the dashboard listen on an address other than loopback (`kanban.dashboard_bind`); without it such a bind is refused. Every route still needs the start's token.";
        dashboard_bind: String = "127.0.0.1", "The address the dashboard listens on; an address that is not loopback needs `kanban.dashboard_allow_remote`.";
        dashboard_port: u16 = "0", "The port of the dashboard `berth gateway run` serves (board, task logs, actions, `/api`, `/metrics`); 0 serves none. `berth dashboard` uses it too, 0 there meaning any free port.";
        database_timeout_seconds: PositiveSeconds = "30", "On a PostgreSQL board, how long berth waits for the server to answer any one request (a query, a commit, a wait for change notifications) before it reports the board unavailable and drops that connection; connecting waits at most this and the URL's `connect_timeout` (10 s unless set). A server that accepts connections and never answers, or goes silent mid-session, costs a command this, never a hang.";
        database_url: String = "", "Where the board lives: empty keeps it in `<home>/berth-kanban.db` (SQLite); a `postgres://user:password@host:port/db` URL puts it on PostgreSQL, shared by gateways on several hosts.";
        default_assignee: String = "", "Profile that unassigned ready tasks are routed to at dispatch time; empty or whitespace means unset.";
        dispatch_in_gateway: bool = "true", "Whether `berth gateway run` dispatches the boards; false leaves the gateway idle.";
        dispatch_interval_seconds: FloatSeconds = "60", "Seconds between the gateway's dispatch ticks (floor 1).";
        dispatch_stale_timeout_seconds: Seconds = "14400", "Running tasks older than this without a fresh heartbeat are requeued; 0 disables.";
        failure_limit: NonZeroU32 = "2", "Consecutive failures (a command's non-zero exit, spawn failures, crashes, timeouts) after which a task is blocked with `gave_up`. A fault of the container engine is not the task's and never counts: the engine unreachable, a call past its bound (it answers its ping and hangs), or a server error (HTTP 5xx other than 501) ends the run as `infra_unavailable`, requeues the task and backs the gateway off; a 4xx or 501 (a missing image, a setting the engine refuses or lacks) counts, as no retry changes it. A sandbox stopped or removed under the running command (`berth sandbox stop|rm`, `docker stop`, the engine's restart) is not the task's either: the run ends `sandbox_stopped` and the task is requeued; its next run starts the sandbox again.";
        host_id: String = "", "This host's identity on a shared board (claims, runs, liveness): empty means the hostname. Each host sharing a PostgreSQL board needs its own.";
        host_timeout_seconds: Seconds = "30", "On a shared board, how long a host may go without a heartbeat (its gateway and its workers renew one every few seconds) before its running tasks are taken for dead and run again elsewhere; 0 never.";
        max_in_progress: Option<u32> = "", "Most running workers, all boards together: on this host (SQLite), or on the whole board, every host together (PostgreSQL); unset means no cap.";
        max_in_progress_per_profile: Option<u32> = "", "Most running workers per assignee, all boards together: on this host (SQLite), or over every host of a PostgreSQL board; unset means no cap.";
        max_in_progress_per_profile_overrides: BTreeMap<String, u32> = "{}", "Per-profile caps that replace `kanban.max_in_progress_per_profile`, e.g. {\"alpha\": 4}.";
        max_spawn: Option<u32> = "", "Most workers started in one dispatch tick; `dispatch --max` wins over it.";
        prewarm: u64 = "0", "How many ready tasks waiting on a cap (in plan order) get their sandbox created and started, or resumed, by the gateway before their turn, so their first command starts at once; 0 is off. A warm sandbox counts toward no cap. Off on a shared (PostgreSQL) board, where another host may claim the task.";
        rate_limit_per_minute: u32 = "0", "Most tasks of a board started in any 60 s (its runs claimed, by every host of a PostgreSQL board together, counted from the board); 0 is no limit. A task past it waits (`deferred_rate_limited` in `kanban dispatch --explain`) until the oldest start leaves the window; when it binds, the starts go round-robin across the profiles (fair share, see the guide's board chapter).";
        rate_limit_per_minute_overrides: BTreeMap<String, u32> = "{}", "Per-profile start-rate limits: most tasks of that assignee started on a board in any 60 s, beside `kanban.rate_limit_per_minute`; 0 is none, e.g. {\"alpha\": 3}.";
        retention_days: FloatDays = "7", "Days a finished (done) task keeps its workspace folder and worker log as its output; archiving or removing the task removes them at once; 0 keeps them until then. Applied by the gateway's cleanup pass and `berth kanban prune`.";
        retry_backoff_max_seconds: Seconds = "600", "The longest pause before a failed task's next try (see `kanban.retry_backoff_seconds`).";
        retry_backoff_max_seconds_overrides: BTreeMap<String, u32> = "{}", "Per-profile longest pauses that replace `kanban.retry_backoff_max_seconds` for that assignee's tasks, e.g. {\"alpha\": 60}.";
        retry_backoff_seconds: Seconds = "10", "The pause before a failed task's first retry, doubled after each further failure up to `kanban.retry_backoff_max_seconds`, and drawn within its upper half per task (jitter); 0 retries at once. `show` names the next try's time.";
        retry_backoff_seconds_overrides: BTreeMap<String, u32> = "{}", "Per-profile first pauses that replace `kanban.retry_backoff_seconds` for that assignee's tasks, e.g. {\"alpha\": 2}.";
        sandbox_affinity_seconds: Seconds = "120", "On a shared (PostgreSQL) board, how long a task that failed on one host waits for that host (which holds its sandbox and files) before any host may retry it; 0 is off.";
        spawn_lease_seconds: PositiveSeconds = "20", "Seconds a new claim waits for its worker to confirm the run (record its own pid); past it the task is requeued as a failure.";
        tempfail_cooldown_seconds: Seconds = "60", "How long a task whose command exited 75 (EX_TEMPFAIL, hermes's rate-limit exit) waits before it runs again; the snooze counts no failure.";
        worker_command: String = "", "Worker command template ({task_id}, {assignee}, {board}, each substituted as one shell-quoted word; a template of plain words runs without a shell); empty runs the built-in `berth worker run`.";
        worker_exit_outcome: bool = "false", "Whether a `kanban.worker_command`'s exit status is its task's outcome, as the built-in worker's is: exit 0 completes the task (the last line of output its result), any other code fails it through `kanban.failure_limit`. A command that recorded its own outcome first (`berth kanban complete|block`) keeps it. Such tasks run under the home's runner (`berth worker runner`), with no berth process of their own. Off (hermes's protocol), a command records its outcome itself, and one that exits without doing so is judged crashed.";
        worker_log_backup_count: NonZeroU32 = "1", "Rotated worker logs kept per task.";
        worker_log_rotate_bytes: u64 = "2097152", "A worker log larger than this is rotated before the next spawn.";
    }
    terminal: Terminal {
        container_cpu: Cpus = "1", "CPU cores per sandbox; 0 means no limit.";
        container_disk: u64 = "51200", "Disk limit per sandbox in MB (needs overlay2 on XFS with pquota; otherwise ignored with a warning).";
        container_memory: MemoryMb = "5120", "Memory limit per sandbox in MB; 0 means no limit.";
        container_persistent: bool = "true", "Bind-mount per-sandbox /root and /workspace directories under `terminal.sandbox_dir`; false uses tmpfs.";
        cwd: String = "/root", "Working directory of commands inside the sandbox: an absolute path, or hermes's placeholders `.`, `auto`, `cwd`, `~` (all mean /root).";
        docker_allow_host_access: bool = "false", "Allow what reaches the host past the sandbox's own namespaces: mounting the container engine's socket or containerd's (or a folder holding one or a hard link of one, however deep), the engines' own folders (/var/lib/docker, /run/containerd, ...), another berth home or another home's sandboxes folder on this machine (or a folder inside or holding one), a named volume that binds any of these, anything under /proc, /sys or /dev or on a kernel filesystem (proc, sysfs, cgroup, devtmpfs, devpts, debugfs, …), the host's system folders /etc, /boot, /lib/modules and /var/log (what is inside them or holds them), or a folder too big or deep to check (over 100000 entries or 64 levels) via docker_volumes or docker_extra_args, and the docker_extra_args that reach the host past any mount (--privileged, a --cap-add beyond the engine's defaults, but for those that act only inside the sandbox's own namespaces (SYS_PTRACE, NET_ADMIN, NET_RAW, SYS_NICE, IPC_LOCK, which need it only for NET_ADMIN and NET_RAW behind an egress allowlist), a --security-opt …=unconfined or no-new-privileges=false, a --cgroup-parent, a --device, a host namespace such as --pid host or --network host; list under docker_extra_args below); berth's home and sandbox folders stay refused always.";
        docker_allow_host_mounts: bool = "false", "The older name of `terminal.docker_allow_host_access`: either one true allows it.";
        docker_credentials: Credentials = "{}", "Host variables kept out of the sandbox, each with the destinations it may be sent to (the docker_egress syntax), e.g. {\"GITHUB_TOKEN\": [\"api.github.com\"]}: the sandbox holds a placeholder (`berth-cred-…`), and berth's egress proxy puts the real value (read from the host's environment, as docker_forward_env) in the headers of requests to those destinations only, terminating their TLS with the home's egress CA. Needs a docker_egress allowlist. See the guide's egress page (docs/egress.md).";
        docker_credentials_overrides: CredentialOverrides = "{}", "Per-profile credentials that replace `terminal.docker_credentials`, e.g. {\"alpha\": {\"OPENAI_API_KEY\": [\"api.openai.com\"]}}.";
        docker_egress: EgressPolicy = "all", "Where a sandbox may connect: `all` (the network, as `docker_network: true`), `none` (no network), or a list of destinations (host names, `*.` wildcards, addresses and CIDRs, each with an optional `:port`), reached only through berth's egress proxy on an internal network; every refusal is logged (`berth sandbox denials`). See the guide's egress page (docs/egress.md).";
        docker_egress_ca_file: String = "", "A PEM file of extra certificate authorities (private ones) that berth's egress proxy trusts for a credential's destinations besides the host's roots; also added to the trust bundle of sandboxes with credentials.";
        docker_egress_network: String = "bridge", "The network berth's egress proxy reaches out through (its other leg is the sandboxes' internal network); a Docker network name.";
        docker_egress_overrides: EgressOverrides = "{}", "Per-profile egress policies that replace `terminal.docker_egress`, e.g. {\"alpha\": \"pypi.org, files.pythonhosted.org\"}.";
        docker_env: BTreeMap<String, String> = "{}", "Environment variables stored in the sandbox's config (not secrets: use docker_forward_env).";
        docker_extra_args: Vec<String> = "[]", "Extra `docker run` flags, applied last and mapped onto the Engine API (list below); a flag with no API form is refused.";
        docker_forward_env: Vec<String> = "[]", "Names of host variables passed to each command at exec time, never stored in the container.";
        docker_idle_stop_seconds: Seconds = "0", "Stop (not remove) a running persistent sandbox after this many seconds with nothing inside but its keep-alive, as the gateway sees it; 0 is off (hermes parity). See the guide's sandbox lifecycle (docs/sandboxes.md).";
        docker_idle_stop_seconds_overrides: BTreeMap<String, u32> = "{}", "Per-profile idle-stop periods that replace `terminal.docker_idle_stop_seconds`, e.g. {\"alpha\": 900}.";
        docker_image: String = "berth-sandbox:latest", "Image of new sandboxes (must exist locally or be pullable).";
        docker_lease_seconds: PositiveSeconds = "60", "Time-to-live of an opt-out sandbox's lease: its owner renews it inside the sandbox every third of this, and a reaper on any host sharing the engine treats a sandbox whose owner on another host let it lapse this long as orphaned.";
        docker_mount_cwd_to_workspace: bool = "false", "Bind-mount the caller's working directory at /workspace (refused when it is, holds or lies in berth's home; a worker's working directory is its own sandbox folder).";
        docker_network: bool = "true", "Give sandboxes network access; false runs them with --network=none.";
        docker_orphan_reaper: bool = "true", "Once per process, before the first sandbox creation, remove this profile's stale stopped sandboxes.";
        docker_persist_across_processes: bool = "true", "Keep sandboxes running across processes and reuse them; false makes one per process, removed at release.";
        docker_reap_interval_seconds: Seconds = "0", "Seconds between the gateway's cleanup passes (orphan reaper, gone sandboxes' folders); 0 derives it: max(60, `terminal.lifetime_seconds`).";
        docker_recreate_on_config_change: bool = "true", "Recreate a reused sandbox whose create spec (image, env, mounts, resources, args) changed.";
        docker_run_as_host_user: bool = "false", "Run sandbox commands as the calling user's uid:gid.";
        docker_shared_container_key: String = "", "When set, trusted profiles share one sandbox per task: the `hermes-profile` label becomes `<key[:50]>-<sha256(key)[:12]>`, as in hermes 0.21.";
        docker_shm_size: String = "1g", "Size of /dev/shm in sandboxes (hermes 0.21's default), as Docker writes sizes (512m, 1.5g), at most 1t; empty or 0 keeps Docker's 64m.";
        docker_snapshot_keep: NonZeroU32 = "1", "Snapshots kept per sandbox (`berth sandbox snapshot|suspend`, local images never pushed): taking one removes the sandbox's oldest past this many; a suspended sandbox's newest is always kept.";
        docker_suspend_after_seconds: Seconds = "0", "Suspend (snapshot the files, then remove the container; the host folder stays) a persistent sandbox after this many seconds with nothing inside but its keep-alive, or stopped this long, as the gateway sees it; the next `berth run`, worker or `sandbox ensure` resumes it from its snapshot. 0 is off. See the guide's sandbox lifecycle (docs/sandboxes.md).";
        docker_suspend_after_seconds_overrides: BTreeMap<String, u32> = "{}", "Per-profile suspend periods that replace `terminal.docker_suspend_after_seconds`, e.g. {\"alpha\": 3600}.";
        docker_volumes: Vec<String> = "[]", "Extra mounts, each `host:container[:options]`.";
        lifetime_seconds: Seconds = "300", "Idle lifetime of a sandbox handle; the orphan reaper removes stopped sandboxes after 2 × max(60, this).";
        sandbox_dir: String = "{home}/sandboxes", "Where persistent sandbox directories live on the host; an absolute path that is not `/`, does not hold berth's home, and is not inside another berth home or another home's sandboxes folder.";
        timeout: Seconds = "180", "Seconds a command may run before it is killed (exit 124).";
    }
}
