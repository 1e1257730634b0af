//! `berth kanban cron …`: the recurring schedules' commands, as clap derives (apart from `cli.rs`, which is long).

use clap::Subcommand;

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
