//! The command line: every group, command and flag, as clap derives.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Long-lived, leak-free Docker sandboxes for agent workers, and a task board dispatched onto them.
#[derive(Debug, Parser)]
#[command(name = "berth", version, about, propagate_version = true)]
pub struct Cli {
    /// Berth's home directory (default: $BERTH_HOME, else ~/.berth).
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// Profile to act as (default: $BERTH_PROFILE, else `default`).
    #[arg(short = 'p', long, global = true, value_name = "PROFILE")]
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
}

#[derive(Debug, Subcommand)]
pub enum ProfileCmd {
    /// Create a profile.
    Create { name: String },
    /// List profiles.
    Ls,
    /// Remove a profile (its running sandboxes are not touched; `default` cannot be removed).
    Rm { name: String },
}

#[derive(Debug, Args)]
pub struct TaskArg {
    /// Task id of the sandbox (default: `default`).
    #[arg(long, short = 't', value_name = "ID", default_value = "default")]
    pub task: String,
}

#[derive(Debug, Subcommand)]
pub enum SandboxCmd {
    /// Acquire a task's sandbox: attach to it, start it, recreate it on config drift, or create it.
    Ensure(TaskArg),
    /// List managed sandboxes of this profile (or of all profiles).
    Ls {
        /// Every profile's sandboxes.
        #[arg(long)]
        all_profiles: bool,
    },
    /// Release a task's sandbox: persist mode keeps it running; opt-out mode (or --force) stops and removes it.
    Release {
        #[command(flatten)]
        task: TaskArg,
        /// Stop and remove in any mode.
        #[arg(long)]
        force: bool,
    },
    /// Stop and remove a task's sandbox in any mode.
    Rm(TaskArg),
    /// Remove stale stopped sandboxes (exited, created or dead longer than 2 × max(60, lifetime)).
    Reap {
        /// List what would be removed, with a reason per container; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Every profile's sandboxes, not only this profile's.
        #[arg(long)]
        all_profiles: bool,
        /// Age threshold in seconds (default: from terminal.lifetime_seconds).
        #[arg(long, value_name = "SECONDS")]
        max_age: Option<i64>,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub task: TaskArg,
    /// Kill the command after this many seconds (exit 124); default terminal.timeout; 0 means none.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Working directory inside the sandbox (default terminal.cwd).
    #[arg(long, short = 'w', value_name = "DIR")]
    pub workdir: Option<String>,
    /// Extra environment for this command only (repeatable).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// The command and its arguments (no implicit shell).
    #[arg(required = true, last = true, value_name = "CMD")]
    pub argv: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Every setting with its value and where it came from.
    Ls,
    /// One setting's value and source.
    Get { key: String },
    /// Validate and write a setting into <home>/config.yaml.
    Set { key: String, value: String },
    /// Remove a setting from <home>/config.yaml.
    Unset { key: String },
    /// The `export` lines the gateway hands to workers.
    Env,
}
