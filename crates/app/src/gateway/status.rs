//! `berth gateway status`: the state a running gateway records in its home (`GatewayState`), the status view built
//! from it (`GatewayStatus`, what `--json` prints and `berth status` embeds), and that view as text.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::edge::output;

/// What a gateway records in `gateway.json` as it runs: written at its start, after each tick, and at its stop.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GatewayState {
    pub pid: Option<u32>,
    /// RFC 3339.
    pub started_at: Option<String>,
    pub home: Option<String>,
    pub interval_seconds: Option<f64>,
    pub dispatching: Option<bool>,
    pub ticks: Option<u64>,
    pub last_tick: Option<LastTick>,
    /// RFC 3339; written once it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<String>,
    /// When the settings it runs on were read (RFC 3339): its start, or the last change of a config file it applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_read_at: Option<String>,
    /// Why the last change of a config file was not applied (the settings read before stay), while it is so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_error: Option<String>,
    /// Changed settings it reads only at its start: applied at its restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings_at_restart: Vec<String>,
}

/// The gateway's last tick: when, each board's summary, and how many workers it started in all.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LastTick {
    pub at: String,
    pub boards: BTreeMap<String, BoardTick>,
    pub spawned: usize,
}

/// One board in a tick: what its dispatch did (`spawned`, `crashed`, `reclaimed`), or its error, or that it sits in
/// quarantine. Only the fields that apply are written.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BoardTick {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned: Option<usize>,
    /// The crashed workers' tasks, as the dispatch report lists them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crashed: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimed: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<bool>,
}

impl BoardTick {
    /// A board whose tick failed (`quarantined` when it is now kept out for a while).
    pub fn failed(error: String, quarantined: bool) -> Self {
        Self { error: Some(error), quarantined: quarantined.then_some(true), ..Self::default() }
    }
}

/// `gateway status`: whether a gateway holds the home now, and what its state file says.
#[derive(Clone, Debug, Serialize)]
pub struct GatewayStatus {
    pub running: bool,
    /// `running` or `stopped`.
    pub state: &'static str,
    /// The running gateway's pid (`null` once stopped).
    pub pid: Option<u32>,
    pub started_at: Option<String>,
    pub interval_seconds: Option<f64>,
    /// A stopped gateway dispatches nothing, whatever its last state file said.
    pub dispatching: Option<bool>,
    pub ticks: Option<u64>,
    pub last_tick: Option<LastTick>,
    /// When it stopped (`null` while it runs).
    pub stopped_at: Option<String>,
    /// The pid of the home's runner (`board/runner.rs`), which holds the `kanban.worker_command` tasks and
    /// outlives the gateway; `null` when none serves the home.
    pub runner_pid: Option<u32>,
    /// When the settings the gateway runs on were read (its start, or the last config change it applied).
    pub settings_read_at: Option<String>,
    /// Why the last config change was not applied (`null` when it was).
    pub settings_error: Option<String>,
    /// Changed settings that wait for the gateway's restart.
    pub settings_at_restart: Vec<String>,
}

impl GatewayStatus {
    /// The status of a home whose lock is held (`running`) or not, from the state its gateway last wrote.
    pub fn of(running: bool, state: Option<GatewayState>, runner_pid: Option<u32>) -> Self {
        let s = state.unwrap_or_default();
        Self {
            running,
            state: if running { "running" } else { "stopped" },
            pid: if running { s.pid } else { None },
            started_at: s.started_at,
            interval_seconds: s.interval_seconds,
            dispatching: if running { s.dispatching } else { Some(false) },
            ticks: s.ticks,
            last_tick: s.last_tick,
            stopped_at: if running { None } else { s.stopped_at },
            runner_pid,
            settings_read_at: s.settings_read_at,
            settings_error: if running { s.settings_error } else { None },
            settings_at_restart: if running { s.settings_at_restart } else { Vec::new() },
        }
    }
}

fn or_dash(v: &Json) -> String {
    match v {
        Json::Null => "-".to_owned(),
        Json::String(s) => s.clone(),
        Json::Bool(true) => "yes".to_owned(),
        Json::Bool(false) => "no".to_owned(),
        other => other.to_string(),
    }
}

/// A field as its `--json` form words it (`-` when unset, `yes`/`no` for a flag).
fn shown<T: Serialize>(v: &T) -> String {
    or_dash(&serde_json::to_value(v).unwrap_or(Json::Null))
}

/// Prints the status as aligned lines: every field `--json` has, in words.
pub fn print_text(v: &GatewayStatus) {
    let state = if v.running { format!("yes (pid {})", shown(&v.pid)) } else { "no: stopped".to_owned() };
    output::painted_line(&format!("running:      {state}"));
    output::line(&format!("started at:   {}", shown(&v.started_at)));
    let interval = v.interval_seconds.map_or_else(|| "-".to_owned(), |s| format!("{} s", shown(&s)));
    output::line(&format!("interval:     {interval}"));
    output::line(&format!("dispatching:  {}", shown(&v.dispatching)));
    output::line(&format!("ticks:        {}", shown(&v.ticks)));
    match &v.last_tick {
        None => output::line("last tick:    -"),
        Some(last) => {
            output::line(&format!("last tick:    {} (spawned {})", last.at, last.spawned));
            for (slug, board) in &last.boards {
                let board = serde_json::to_value(board).unwrap_or(Json::Null);
                let fields: Vec<String> =
                    board.as_object().into_iter().flatten().map(|(k, v)| format!("{k} {}", or_dash(v))).collect();
                output::line(&format!("  board {slug}: {}", fields.join(", ")));
            }
        }
    }
    if !v.running {
        output::line(&format!("stopped at:   {}", shown(&v.stopped_at)));
    }
    if v.running {
        output::line(&format!("settings:     read at {}", shown(&v.settings_read_at)));
        if let Some(why) = &v.settings_error {
            output::line(&format!("  not applied: {why}"));
        }
        if !v.settings_at_restart.is_empty() {
            output::line(&format!("  at restart:  {}", v.settings_at_restart.join(", ")));
        }
    }
    let runner = v.runner_pid.map_or_else(|| "no".to_owned(), |pid| format!("yes (pid {pid})"));
    output::line(&format!("runner:       {runner}"));
}
