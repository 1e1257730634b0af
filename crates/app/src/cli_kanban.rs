//! `berth kanban` subcommands kept apart from `cli.rs` (which is long): a person's review of a task's work
//! (`review|approve|request-changes`, flattened into `KanbanCmd`) and the recurring schedules (`kanban cron …`).

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum ReviewCmd {
    /// Send a running task (its worker is stopped) or a done one to review.
    Review {
        /// Task id (on any board).
        id: String,
        /// What to look at, recorded with the event.
        #[arg(long)]
        note: Option<String>,
    },
    /// Approve a task in review: done, its children promoted.
    Approve {
        /// Task id (on any board).
        id: String,
    },
    /// Send a task in review back to run, with a note its next run is given (BERTH_REVIEW_NOTE) and `show` prints.
    RequestChanges {
        /// Task id (on any board).
        id: String,
        /// What to change.
        #[arg(long)]
        note: String,
    },
}

impl ReviewCmd {
    /// The task it names.
    pub fn id_mut(&mut self) -> &mut String {
        match self {
            Self::Review { id, .. } | Self::Approve { id } | Self::RequestChanges { id, .. } => id,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum CronCmd {
    /// Add a schedule: at each slot the gateway makes one task for the assignee running the command (a slot missed
    /// while no gateway ran is made once when one runs again).
    #[command(group(clap::ArgGroup::new("recurrence").required(true).args(["every", "cron"])))]
    Add {
        /// The schedule's name on its board (letters, digits, `.`, `_`, `-`); its tasks are created by `cron:NAME`.
        name: String,
        /// A slot every DURATION (`30s`, `5m`, `2h`, `1d`), counted from the epoch: `5m` is :00, :05, … UTC.
        #[arg(long, value_name = "DURATION", value_parser = crate::cli_values::duration)]
        every: Option<std::time::Duration>,
        /// A slot at each minute a cron expression names, in UTC: "m h dom mon dow" (e.g. "*/15 9-17 * * mon-fri";
        /// also @hourly, @daily, @weekly, @monthly, @yearly).
        #[arg(long, value_name = "EXPR", value_parser = crate::cli_values::cron_expr)]
        cron: Option<String>,
        /// Profile that works on each task (must exist unless --allow-unknown-assignee).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "PROFILE")]
        assignee: String,
        /// Accept an assignee profile that does not exist (yet): its tasks wait until it is created.
        #[arg(long)]
        allow_unknown_assignee: bool,
        /// Shell command each task runs (as `kanban create --command`).
        #[arg(long)]
        command: String,
        /// Board slug (default: `default`).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "SLUG", default_value = "default")]
        board: String,
    },
    /// List a board's schedules with their last and next slots.
    Ls {
        /// Board slug (default: `default`).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "SLUG", default_value = "default")]
        board: String,
    },
    /// Remove a schedule: it makes no more tasks (those it made stay).
    Rm {
        /// The schedule's name.
        name: String,
        /// Board slug (default: `default`).
        #[arg(long, value_hint = clap::ValueHint::Other, value_name = "SLUG", default_value = "default")]
        board: String,
    },
}
