//! The arguments of `berth sandbox …` (the rest of the command line is in `cli.rs`).

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct TaskArg {
    /// Task id of the sandbox.
    #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID", default_value = "default")]
    pub task: String,
}

#[derive(Debug, Subcommand)]
pub enum SandboxCmd {
    /// Acquire a task's sandbox: attach to it, start it, recreate it on config drift, or create it.
    Ensure(TaskArg),
    /// List managed sandboxes of this profile (or of all profiles) in this home: another home's stay out.
    Ls {
        /// Every profile's sandboxes.
        #[arg(long)]
        all_profiles: bool,
        /// Also the size of each writable layer and host folder (slow on big ones).
        #[arg(long)]
        size: bool,
    },
    /// List the processes inside a sandbox (by container id, id prefix or name).
    Top {
        /// The sandbox's container id (at least 4 characters of it) or name.
        id: String,
        /// Look in every profile's sandboxes.
        #[arg(long)]
        all_profiles: bool,
    },
    /// A sandbox's own output, as `docker logs` shows it: what was written to its main process's stdout and stderr.
    ///
    /// The keep-alive writes nothing, so this is what a process sent there (e.g. `> /proc/1/fd/1`); `berth run`
    /// prints a command's output to its caller, and `berth kanban logs` shows a task worker's output.
    Logs {
        /// The sandbox's container id (at least 4 characters of it) or name; or give --task.
        #[arg(required_unless_present = "task", conflicts_with = "task")]
        id: Option<String>,
        /// The sandbox of this task (in this profile), instead of an id.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID")]
        task: Option<String>,
        /// Look for the id in every profile's sandboxes.
        #[arg(long)]
        all_profiles: bool,
        /// Only the last N lines.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "N", allow_negative_numbers = true, value_parser = crate::cli_values::lines)]
        tail: Option<usize>,
        /// Keep printing new output until the sandbox stops (or Ctrl-C).
        #[arg(short, long)]
        follow: bool,
    },
    /// What the egress proxies refused (`terminal.docker_egress`): time, task, source, destination and reason.
    Denials {
        /// Only this task's denials.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID")]
        task: Option<String>,
        /// Only the last N.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "N", allow_negative_numbers = true, value_parser = crate::cli_values::lines)]
        tail: Option<usize>,
    },
    /// Release a task's sandbox: persist mode keeps it running; opt-out mode (or --force) stops and removes it.
    Release {
        #[command(flatten)]
        task: TaskArg,
        /// Stop and remove in any mode.
        #[arg(long)]
        force: bool,
        /// Keep the sandbox's host folder (its /root and /workspace) when the sandbox is removed.
        #[arg(long)]
        keep_files: bool,
    },
    /// Stop a sandbox without removing it (as idle stop does): its container and host folder stay, and the next
    /// `berth run` or worker of its task starts it again.
    Stop {
        /// The sandbox's container id (at least 4 characters of it) or name, as `sandbox ls` shows it; or give --task.
        #[arg(conflicts_with = "task")]
        id: Option<String>,
        /// The sandbox of this task (in this profile), instead of an id.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID")]
        task: Option<String>,
        /// Look in every profile's sandboxes.
        #[arg(long)]
        all_profiles: bool,
    },
    /// Stop and remove a task's sandbox in any mode, with its host folder (unless --keep-files).
    Rm {
        /// The sandbox's container id (at least 4 characters of it) or name, as `sandbox ls` shows it; or give
        /// --task.
        #[arg(conflicts_with = "task")]
        id: Option<String>,
        /// The sandbox of this task (in this profile), instead of an id; no default: `--task default` for the
        /// default task's.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID")]
        task: Option<String>,
        /// Keep the sandbox's host folder (its /root and /workspace under terminal.sandbox_dir).
        #[arg(long)]
        keep_files: bool,
    },
    /// Snapshot a sandbox's files to a local image (`berth-snapshot/<sandbox>:<name>`, never pushed), labelled as
    /// the sandbox's; it keeps running. Its host folder (/root, /workspace) is a mount, not in the image.
    Snapshot {
        /// The sandbox's container id (at least 4 characters of it) or name; or give --task.
        #[arg(conflicts_with = "task")]
        id: Option<String>,
        /// The sandbox of this task (in this profile), instead of an id.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID")]
        task: Option<String>,
        /// The snapshot's name (its image tag); default: the time it is taken.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "NAME")]
        name: Option<String>,
    },
    /// List this profile's sandbox snapshots: name, sandbox, task, the layer it adds, its size and age.
    Snapshots {
        /// Every profile's snapshots.
        #[arg(long)]
        all_profiles: bool,
    },
    /// Suspend a sandbox: snapshot its files, then remove its container (processes and memory end; the host folder
    /// stays). It stays in `sandbox ls` as `suspended`; the next `berth run`, worker or `sandbox ensure` of its task
    /// resumes it from the snapshot.
    Suspend {
        /// The sandbox's container id (at least 4 characters of it) or name; or give --task.
        #[arg(conflicts_with = "task")]
        id: Option<String>,
        /// The sandbox of this task (in this profile), instead of an id.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID")]
        task: Option<String>,
    },
    /// Start a task's sandbox from another task's current files: the source's container is committed (or its
    /// snapshot taken when suspended) and its host folder copied; the source is left as it was.
    Fork {
        /// The task whose sandbox is copied.
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID")]
        task: String,
        /// The task whose sandbox starts from the copy (it must have none yet).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID")]
        to: String,
    },
    /// Remove stale stopped sandboxes (exited, created or dead longer than 2 × max(60, lifetime)), and host folders
    /// whose sandbox and task are both gone.
    Reap {
        /// List what would be removed, with a reason per container or folder; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Every profile's sandboxes, not only this profile's.
        #[arg(long)]
        all_profiles: bool,
        /// Age threshold in seconds (default: from terminal.lifetime_seconds).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "SECONDS", allow_negative_numbers = true, value_parser = crate::cli_values::age_seconds)]
        max_age: Option<i64>,
    },
}
