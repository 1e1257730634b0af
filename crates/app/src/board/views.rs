//! The board's typed views: a task as listings show it (its row, its worker judged), a run with its number, and
//! `kanban show`'s whole answer. Each is built once from the store's rows; `--json` prints it as it is, the text
//! tables read the same value, and the dashboard serves it (masked), so no output assembles these objects by key.

use domain::board::liveness::Liveness;
use domain::board::{Event, Run, Task};
use serde::Serialize;

/// A task as `kanban ls` and `kanban show` give it: its row (timestamps as RFC 3339), then whether its worker is
/// alive and how it was judged (`null` for a task that is not running).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TaskRow {
    #[serde(flatten)]
    pub task: Task,
    pub worker_alive: Option<bool>,
    pub worker: Option<Liveness>,
    /// The recurring schedule that made it (`kanban cron`), if one did.
    pub schedule: Option<String>,
    /// The status as the text listings word it (`running (worker gone)`, `running (starting)`, …); not in JSON.
    #[serde(skip)]
    pub shown_status: String,
}

/// One of a task's runs: `run_id` (`id`) is board-wide, `number` counts the task's own runs from 1 (what
/// `kanban logs --run` takes).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunRow {
    #[serde(flatten)]
    pub run: Run,
    pub number: usize,
}

impl RunRow {
    /// A task's runs, numbered in the order the store gives them (oldest first).
    pub(crate) fn numbered(runs: Vec<Run>) -> Vec<Self> {
        runs.into_iter().enumerate().map(|(n, run)| Self { run, number: n + 1 }).collect()
    }
}

/// Where a task's worker log is and its last lines.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct LogTail {
    pub path: String,
    pub last_lines: Vec<String>,
}

/// `kanban show`: the task, its events and runs, its log, its workspace folder and the egress policy its sandbox
/// gets under its assignee.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TaskShow {
    pub task: TaskRow,
    pub events: Vec<Event>,
    pub runs: Vec<RunRow>,
    pub log: LogTail,
    pub workspace: Option<String>,
    pub egress: Option<String>,
}

/// `kanban board create`: the board, and whether this call made it (`false`: it was there).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct BoardCreated {
    pub board: domain::board::Board,
    pub created: bool,
}

/// `kanban rm`: the task removed and its board.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Removed {
    pub removed: String,
    pub board: String,
}

/// `kanban check`: the board file, whether it is sound, and what the integrity check said (`["ok"]` when sound).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Checked {
    pub path: std::path::PathBuf,
    pub ok: bool,
    pub findings: Vec<String>,
}

/// `kanban prune`: whether it only looked, the retention in force, and each finished task's expired output.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PruneReport {
    pub dry_run: bool,
    pub retention_secs: Option<i64>,
    pub tasks: Vec<crate::board::retention::Pruned>,
}

/// `kanban logs --json`: a task's worker log (or one run's part of it, `run` the task's own number and `run_id` the
/// board-wide id), a line at a time.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TaskLogLines<'a> {
    pub task: &'a str,
    pub path: String,
    pub run: Option<i64>,
    pub run_id: Option<i64>,
    pub lines: Vec<&'a str>,
}

/// One board's part of `kanban dispatch --all-boards --json`: its slug and its tick's report (the report is the
/// streamed dispatch report's JSON, the very text `kanban dispatch --json` prints for one board).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct BoardReport<'a> {
    pub board: &'a str,
    pub report: serde_json::Value,
}

/// A worker a dispatch started (or, dry, would start): its task, its profile and its sandbox (empty when dry).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SpawnedRow<'a> {
    pub task_id: &'a str,
    pub assignee: &'a str,
    pub workspace: &'a str,
}

/// A claimed task whose worker could not be started, with the reason.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SpawnFailedRow<'a> {
    pub task_id: &'a str,
    pub error: &'a str,
}

/// A started worker's process.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct WorkerRow<'a> {
    pub task_id: &'a str,
    pub pid: u32,
}

/// `kanban migrate`: the SQLite file copied, the PostgreSQL board it went into (password masked), and each table's
/// row count.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Migrated {
    pub from: String,
    pub to: String,
    pub copied: serde_json::Value,
}
