//! `berth worker …`: the processes a dispatcher starts (kept out of `cli.rs`, which holds the commands people type).

use clap::Subcommand;

use crate::cli_values::BoardArg;

#[derive(Debug, Subcommand)]
pub enum WorkerCmd {
    /// Run a claimed task's command in its sandbox, heartbeating, then complete or fail it.
    Run {
        /// Task id of the claimed task.
        task: String,
        #[command(flatten)]
        board: BoardArg,
        /// Append stdout and stderr to this file (created when missing, rotated past
        /// `kanban.worker_log_rotate_bytes`), before anything else.
        #[arg(long, value_name = "FILE")]
        log: Option<std::path::PathBuf>,
        /// Work in this directory (created when missing).
        #[arg(long, value_name = "DIR")]
        workdir: Option<std::path::PathBuf>,
        /// Wait until stdin closes before doing anything (a dispatcher closes it once it recorded its workers).
        #[arg(long)]
        after_stdin_closes: bool,
    },
    /// Run this home's `kanban.worker_command` tasks (started by the dispatcher; leaves when idle).
    #[command(hide = true)]
    Runner,
}
