//! The command line: every group, command and flag, as clap derives.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use crate::cli_values::{BoardArg, SandboxCmd, TaskArg};
pub use crate::cli_worker::WorkerCmd;

/// Long-lived, leak-free Docker sandboxes for coding-agent workers, and a task board dispatched onto them.
///
/// Each task gets its own container, reused across processes and removed when the task is done; the board hands
/// tasks to workers under per-profile caps, and the gateway keeps dispatching it.
#[derive(Debug, Parser)]
#[command(
    name = "berth",
    version,
    propagate_version = true,
    after_help = "Start here:\n  berth run --task demo -- sh -c 'echo hi > /tmp/x'   run a command in the task's sandbox\n  \
                  berth kanban create 'job' --assignee alpha --command 'make test'\n  \
                  berth kanban dispatch && berth kanban logs -f ID\n\nMore: berth help COMMAND, and the guide (docs/)."
)]
pub struct Cli {
    /// Berth's home directory (default: $BERTH_HOME, else ~/.berth).
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Profile to act as (default: $BERTH_PROFILE, else `default`).
    #[arg(short = 'p', long, global = true, value_hint = clap::ValueHint::Other, value_name = "PROFILE")]
    pub profile: Option<String>,

    /// Override a setting for this command (repeatable), e.g. `-c terminal.timeout=30`.
    #[arg(short = 'c', long = "config", global = true, value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,

    /// Print results as JSON on stdout.
    #[arg(long, global = true)]
    pub json: bool,

    /// More logging on stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage profiles (the identities workers run under).
    #[command(subcommand)]
    Profile(ProfileCmd),
    /// Manage sandboxes (the task containers).
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// Run a command in a task's sandbox (acquired first: attached, started or created).
    Run(RunArgs),
    /// Read and change settings.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// The task board and its dispatcher.
    #[command(subcommand)]
    Kanban(KanbanCmd),
    /// Worker processes (started by the dispatcher).
    #[command(subcommand)]
    Worker(WorkerCmd),
    /// The long-running service that dispatches the boards.
    #[command(subcommand)]
    Gateway(GatewayCmd),
    /// Serve the dashboard (board, task logs, actions, JSON API, /metrics) without a gateway, until SIGTERM/SIGINT.
    ///
    /// Prints its URL with the home's token (kept in `<home>/dashboard.token`; `gateway token --rotate` replaces it).
    /// The gateway serves the same dashboard when `kanban.dashboard_port` is set.
    Dashboard {
        /// Address (default `kanban.dashboard_bind`: 127.0.0.1); not loopback needs `kanban.dashboard_allow_remote`.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ADDR")]
        bind: Option<String>,
        /// The port (default: `kanban.dashboard_port`; 0 takes any free port).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "PORT", allow_negative_numbers = true, value_parser = crate::cli_values::port)]
        port: Option<u16>,
    },
    /// The egress proxy of a `terminal.docker_egress` allowlist (berth runs it in its own container).
    #[command(hide = true)]
    EgressProxy {
        /// The policy, as `terminal.docker_egress` writes it.
        #[arg(long)]
        policy: String,
        /// The denial log to append to.
        #[arg(long)]
        log: std::path::PathBuf,
        /// The address to serve on (its address on the internal network); every address when absent.
        #[arg(long)]
        listen: Option<std::net::IpAddr>,
    },
    /// Hands one sandbox's credentials (JSON on stdin) to the egress proxy of this container (berth runs it there).
    #[command(hide = true)]
    EgressCredentials,
    /// Print a shell completion script (bash, zsh, fish, …).
    ///
    /// For example: `berth completions bash > ~/.local/share/bash-completion/completions/berth`; bash loads it from
    /// there only with the `bash-completion` package installed (else `source` it from ~/.bashrc). Commands, flags and
    /// fixed values complete; task ids, setting keys and profile names do not (and never complete as file names).
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// One screen on everything: the gateway, the hosts, each board's counts, the sandboxes, the last problems.
    Status,
    /// Print berth's man page (roff), e.g. `berth man > ~/.local/share/man/man1/berth.1`.
    Man,
}

#[derive(Debug, Subcommand)]
pub enum GatewayCmd {
    /// Run the gateway in the foreground until SIGTERM or SIGINT (SIGHUP: read its settings again).
    Run,
    /// Whether a gateway runs for this home, since when, and its last tick.
    Status,
    /// Print the dashboard's token: kept in `<home>/dashboard.token` (0600) across restarts, made when missing.
    Token {
        /// Replace it with a new one; a running dashboard refuses the old one within a second.
        #[arg(long)]
        rotate: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProfileCmd {
    /// Create a profile.
    Create {
        /// Profile name: up to 64 letters, digits, `_`, `.` and `-`, not starting with `.` or `-`.
        name: String,
    },
    /// List profiles.
    Ls,
    /// Remove a profile (its running sandboxes are not touched; `default` cannot be removed).
    Rm {
        /// Profile name.
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Task id of the sandbox.
    #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID", default_value = "default")]
    pub task: String,
    /// Forward standard input to the command (the default when stdin is not a terminal); closed at end of input.
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Allocate a TTY for the command (implies -i; stdin must be a terminal): raw mode here, window-size changes
    /// forwarded.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Kill the command after this many seconds (exit 124); default terminal.timeout; 0 means none.
    #[arg(long, value_hint = clap::ValueHint::Other, value_name = "SECONDS", allow_negative_numbers = true, value_parser = crate::cli_values::timeout_seconds)]
    pub timeout: Option<u64>,
    /// In opt-out mode (terminal.docker_persist_across_processes: false), keep the sandbox's host folder when the
    /// throw-away sandbox is removed.
    #[arg(long)]
    pub keep_files: bool,
    /// Working directory inside the sandbox (default terminal.cwd).
    #[arg(long, short = 'w', value_name = "DIR")]
    pub workdir: Option<String>,
    /// Extra environment for this command only (repeatable).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// The command and its arguments (no implicit shell), after `--` or, as `docker exec` takes it, after the
    /// options: everything from the first word that is not an option is the command's.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub argv: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Every setting with its value and where it came from.
    Ls,
    /// One setting's value and source (the board server's password masked, as `config ls` shows it).
    Get {
        /// Setting key, e.g. `terminal.timeout` (`berth config ls` lists them all).
        key: String,
        /// Show a password in the value in clear.
        #[arg(long)]
        reveal: bool,
    },
    /// Validate and write a setting into <home>/config.yaml.
    Set {
        /// Setting key, e.g. `terminal.timeout`.
        key: String,
        /// The new value, checked by the setting's type and rules; `-` reads it from standard input (a board URL
        /// with its password must come that way).
        // Negative numbers are values here (`config set k -5`), left for the table's rules to judge.
        #[arg(allow_negative_numbers = true, allow_hyphen_values = true)]
        value: String,
    },
    /// Remove a setting from <home>/config.yaml.
    Unset {
        /// Setting key.
        key: String,
    },
    /// The `export` lines the gateway hands to workers.
    Env,
}

#[derive(Debug, Subcommand)]
pub enum BoardCmd {
    /// Create a board (an existing one is kept).
    Create {
        /// Board slug: up to 64 letters (taken lowercase), digits, `-` and `_`, starting with a letter or digit.
        slug: String,
        /// Display name.
        #[arg(long)]
        name: Option<String>,
    },
    /// List boards.
    Ls,
}

#[derive(Debug, Subcommand)]
pub enum KanbanCmd {
    /// Manage boards.
    #[command(subcommand)]
    Board(BoardCmd),
    /// Put a task on a board, or many at once with --from.
    Create {
        /// One line saying what the task is.
        #[arg(required_unless_present = "from")]
        title: Option<String>,
        /// Create every task of FILE (`-`: stdin) in one transaction, all or none: one JSON object per line with
        /// the flags' fields (title, body, command, assignee, priority, parents, max_runtime_seconds, max_retries,
        /// triage, review, idempotency_key).
        #[arg(
            long,
            value_name = "FILE",
            conflicts_with_all = ["title", "assignee", "body", "command", "parents", "priority", "triage", "review", "max_runtime", "max_retries", "at", "in_", "idempotency_key"]
        )]
        from: Option<String>,
        /// Profile that works on it (must exist unless --allow-unknown-assignee).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "PROFILE")]
        assignee: Option<String>,
        /// Accept an assignee profile that does not exist (yet): its tasks wait until it is created.
        #[arg(long)]
        allow_unknown_assignee: bool,
        /// Longer description, for the worker.
        #[arg(long)]
        body: Option<String>,
        /// Shell command the built-in worker runs in the task's sandbox (required unless kanban.worker_command is set).
        #[arg(long)]
        command: Option<String>,
        /// A task that must be done first (repeatable).
        #[arg(long = "parent", value_hint = clap::ValueHint::Other, value_name = "ID")]
        parents: Vec<String>,
        /// Higher runs first.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = crate::cli_values::priority)]
        priority: i64,
        /// Start in triage instead of ready.
        #[arg(long)]
        triage: bool,
        /// A successful run ends in review, not done: `kanban approve` or `kanban request-changes` decide.
        #[arg(long)]
        review: bool,
        /// Kill and requeue a run that takes longer than this many seconds.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "SECONDS", allow_negative_numbers = true, value_parser = crate::cli_values::runtime_seconds)]
        max_runtime: Option<i64>,
        /// Failures before the task is blocked (overrides kanban.failure_limit).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "N", allow_negative_numbers = true, value_parser = crate::cli_values::retries)]
        max_retries: Option<i64>,
        #[command(flatten)]
        when: crate::cli_values::When,
        /// Create it once: a create with the same key on the same board returns that task and changes nothing.
        #[arg(long, value_name = "KEY", value_parser = crate::cli_values::idempotency_key)]
        idempotency_key: Option<String>,
        #[command(flatten)]
        board: BoardArg,
    },
    /// Recurring tasks: a schedule makes one task per slot (UTC), created by the gateway.
    #[command(subcommand)]
    Cron(crate::cli_kanban::CronCmd),
    /// Set when a waiting task (ready, todo, triage, blocked) may start; `--now` clears its time.
    #[command(group(clap::ArgGroup::new("when").required(true).args(["at", "in_", "now"])))]
    Schedule {
        /// Task id (on any board).
        id: String,
        #[command(flatten)]
        when: crate::cli_values::When,
        /// Start as soon as it can (clears its time).
        #[arg(long)]
        now: bool,
    },
    /// List tasks.
    Ls {
        /// Only tasks in this status: triage, todo, ready, running, blocked, review, done or archived.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "STATUS")]
        status: Option<String>,
        /// Only tasks assigned to this profile.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "PROFILE")]
        assignee: Option<String>,
        /// Every board's tasks (with a BOARD column), instead of one board's.
        #[arg(long, conflicts_with = "board")]
        all_boards: bool,
        /// Also archived tasks (hidden unless asked for, here or with `--status archived`).
        #[arg(long)]
        archived: bool,
        #[command(flatten)]
        board: BoardArg,
    },
    /// A task with its events and runs, its log file and the log's last lines.
    Show {
        /// Task id (on any board).
        id: String,
    },
    /// What a task's worker wrote (stdout and stderr of every run, in one file).
    Logs {
        /// Task id (on any board).
        id: String,
        /// Keep printing as the log grows, like `tail -f`; ends when the run ends.
        #[arg(short, long)]
        follow: bool,
        /// Only the last N lines.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "N", allow_negative_numbers = true, value_parser = crate::cli_values::lines)]
        tail: Option<usize>,
        /// Only what the task's run N wrote (the run's id, as `kanban show`, the log and the dashboard print it).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "N", allow_negative_numbers = true, value_parser = crate::cli_values::run_number)]
        run: Option<i64>,
    },
    /// Set (or with no profile, clear) a task's assignee.
    Assign {
        /// Task id (on any board).
        id: String,
        /// Profile to assign; none clears the assignee.
        profile: Option<String>,
        /// Accept a profile that does not exist (yet): its tasks wait until it is created.
        #[arg(long)]
        allow_unknown_assignee: bool,
    },
    /// Change a task's title, body, command, priority, assignee or max runtime (recorded as an `edited` event).
    Edit {
        /// Task id (on any board).
        id: String,
        /// New title.
        #[arg(long)]
        title: Option<String>,
        /// New body (empty clears it).
        #[arg(long)]
        body: Option<String>,
        /// New command for the built-in worker (empty clears it).
        #[arg(long)]
        command: Option<String>,
        /// New priority (higher runs first).
        #[arg(long, allow_negative_numbers = true, value_parser = crate::cli_values::priority)]
        priority: Option<i64>,
        /// New assignee profile (empty clears it).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "PROFILE")]
        assignee: Option<String>,
        /// Accept an assignee profile that does not exist (yet).
        #[arg(long)]
        allow_unknown_assignee: bool,
        /// New max runtime in seconds.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "SECONDS", allow_negative_numbers = true, value_parser = crate::cli_values::runtime_seconds)]
        max_runtime: Option<i64>,
    },
    /// Remove a task from its board: its worker is stopped and its sandbox removed (a `removed` event stays).
    Rm {
        /// Task id (on any board).
        id: String,
    },
    /// Mark a task done (review, for a task created with --review).
    Complete {
        /// Task id (on any board).
        id: String,
        /// What came of it (shown by `kanban show`).
        #[arg(long)]
        result: Option<String>,
    },
    /// Block a task (its worker, if any, is stopped).
    Block {
        /// Task id (on any board).
        id: String,
        /// Why, recorded with the block event (as hermes takes it: `kanban block ID "reason"`).
        #[arg(value_name = "REASON", conflicts_with = "reason")]
        why: Option<String>,
        /// Why, recorded with the block event.
        #[arg(long)]
        reason: Option<String>,
        /// What it waits for: dependency (back to todo while a parent is open), needs-input, capability, transient.
        /// The same kind and reason a second time sends the task to triage.
        #[arg(long, value_name = "KIND", value_parser = crate::cli_values::block_kind)]
        kind: Option<domain::board::BlockKind>,
    },
    /// Take a task out of triage: ready, or todo while a parent is unfinished.
    Promote {
        /// Task id (on any board).
        id: String,
    },
    /// Review: `kanban review`, `approve`, `request-changes` (`cli_kanban.rs`).
    #[command(flatten)]
    Review(crate::cli_kanban::ReviewCmd),
    /// Unblock a task.
    Unblock {
        /// Task id (on any board).
        id: String,
    },
    /// Archive a task (its worker, if any, is stopped; its workspace folder and log are removed).
    Archive {
        /// Task id (on any board).
        id: String,
    },
    /// Remove finished tasks' workspace folders and worker logs once kept kanban.retention_days (archived tasks' at
    /// once); the tasks stay on their boards. The gateway does this on its cleanup pass.
    Prune {
        /// List what would be removed, with a reason per task; remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Take a running task back to ready (its worker is stopped).
    Reclaim {
        /// Task id (on any board).
        id: String,
        /// Why, recorded with the reclaim event.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Record a heartbeat for a running task.
    Heartbeat {
        /// Task id (on any board).
        id: String,
        /// A short progress note, recorded with the heartbeat.
        #[arg(long)]
        note: Option<String>,
    },
    /// Print a task's events, following new ones until it is done, blocked or archived.
    Tail {
        /// Task id (on any board).
        id: String,
        /// Seconds between polls.
        #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = crate::cli_values::interval_seconds)]
        interval: f64,
        /// Print the events so far and exit.
        #[arg(long)]
        no_follow: bool,
    },
    /// Check the whole board file (every page, read-only); opening a board only checks its header and tables.
    Check,
    /// Copy this home's SQLite board (tasks, events, runs, links, ids) into an empty PostgreSQL board and verify
    /// the counts; the SQLite file is left as it was. Then set `kanban.database_url` to use it.
    Migrate {
        /// The PostgreSQL board to copy into, e.g. postgres://berth@db-host:5432/berth (a password here is
        /// refused: any local user reads a command line); `-` reads it from the first line of stdin, and without
        /// `--to` it is `kanban.database_url` (e.g. KANBAN_DATABASE_URL).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "URL")]
        to: Option<String>,
    },
    /// Run one dispatch tick: housekeeping, then start workers for ready tasks within the caps.
    Dispatch {
        /// Report exactly what a tick would do; write nothing, start nothing, signal nothing.
        #[arg(long)]
        dry_run: bool,
        /// Most workers to start in this tick (overrides kanban.max_spawn).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "N", allow_negative_numbers = true, value_parser = crate::cli_values::workers)]
        max: Option<u32>,
        /// Failures before a task is blocked (overrides kanban.failure_limit).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "N", allow_negative_numbers = true, value_parser = crate::cli_values::failure_limit)]
        failure_limit: Option<u32>,
        /// A reason code per task.
        #[arg(long)]
        explain: bool,
        /// Dispatch exactly this task, or say why not.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID")]
        task: Option<String>,
        /// One tick on every board, as the gateway does (caps hold across boards).
        #[arg(long, conflicts_with_all = ["board", "task"])]
        all_boards: bool,
        #[command(flatten)]
        board: BoardArg,
    },
}
