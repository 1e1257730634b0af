//! `berth kanban review|approve|request-changes`: a person's review of a task's work, flattened into `KanbanCmd`.

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
