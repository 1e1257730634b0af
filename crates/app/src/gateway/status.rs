//! `berth gateway status` as text: every field `--json` has, one per line, in words.

use serde_json::Value as Json;

use crate::edge::output;

fn or_dash(v: &Json) -> String {
    match v {
        Json::Null => "-".to_owned(),
        Json::String(s) => s.clone(),
        Json::Bool(true) => "yes".to_owned(),
        Json::Bool(false) => "no".to_owned(),
        other => other.to_string(),
    }
}

/// Prints the status object `v` (the `--json` form) as aligned lines.
pub fn print_text(v: &Json) {
    let running = v["running"].as_bool().unwrap_or(false);
    let state = if running { format!("yes (pid {})", or_dash(&v["pid"])) } else { "no: stopped".to_owned() };
    output::painted_line(&format!("running:      {state}"));
    output::line(&format!("started at:   {}", or_dash(&v["started_at"])));
    let interval = match &v["interval_seconds"] {
        Json::Null => "-".to_owned(),
        s => format!("{s} s"),
    };
    output::line(&format!("interval:     {interval}"));
    output::line(&format!("dispatching:  {}", or_dash(&v["dispatching"])));
    output::line(&format!("ticks:        {}", or_dash(&v["ticks"])));
    let last = &v["last_tick"];
    if last.is_null() {
        output::line("last tick:    -");
    } else {
        output::line(&format!("last tick:    {} (spawned {})", or_dash(&last["at"]), or_dash(&last["spawned"])));
        for (slug, board) in last["boards"].as_object().into_iter().flatten() {
            let fields: Vec<String> =
                board.as_object().into_iter().flatten().map(|(k, v)| format!("{k} {}", or_dash(v))).collect();
            output::line(&format!("  board {slug}: {}", fields.join(", ")));
        }
    }
    if !running {
        output::line(&format!("stopped at:   {}", or_dash(&v["stopped_at"])));
    }
}
