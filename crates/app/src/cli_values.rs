//! The command line's value flags (numbers, times, durations, keys), checked where they are typed, and clap's
//! refusals as one line each.
//!
//! clap's own number parsing says "invalid digit found in string" and takes `-1` for a flag; these parsers accept
//! negative input as a value (so the range is what refuses it) and say what the flag expects.

use clap::error::{ContextKind, ContextValue, ErrorKind};

fn whole(raw: &str, expected: &str) -> Result<i64, String> {
    raw.trim().parse::<i64>().map_err(|_| format!("expected {expected}"))
}

/// `--priority`: any whole number.
///
/// # Errors
/// What the flag expects, when `raw` is not a whole number.
pub fn priority(raw: &str) -> Result<i64, String> {
    whole(raw, "a whole number, higher runs first (e.g. 10 or -5)")
}

/// `--max-runtime`: whole seconds, at least 1.
///
/// # Errors
/// What the flag expects, when `raw` is not a whole number from 1.
pub fn runtime_seconds(raw: &str) -> Result<i64, String> {
    const EXPECTED: &str = "a whole number of seconds, at least 1";
    whole(raw, EXPECTED).and_then(|n| if n >= 1 { Ok(n) } else { Err(format!("expected {EXPECTED}")) })
}

/// `--at`: an RFC 3339 time with its zone (`2026-12-01T03:00:00Z`, `2026-12-01T04:00:00+01:00`).
///
/// # Errors
/// What the flag expects, when `raw` is not such a time.
pub fn at(raw: &str) -> Result<domain::time::Timestamp, String> {
    domain::time::Timestamp::parse_docker(raw)
        .ok_or_else(|| "expected an RFC 3339 time with its zone, e.g. 2026-12-01T03:00:00Z".to_owned())
}

/// `--in`: a duration, a whole number with a unit (`30s`, `5m`, `2h`, `1d`; bare seconds too).
///
/// # Errors
/// What the flag expects, when `raw` is not such a duration.
pub fn duration(raw: &str) -> Result<std::time::Duration, String> {
    const EXPECTED: &str = "expected a duration such as 30s, 5m, 2h or 1d";
    let raw = raw.trim();
    let (number, unit) = raw.split_at(raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len()));
    let n: u64 = number.parse().map_err(|_| EXPECTED.to_owned())?;
    let secs = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(EXPECTED.to_owned()),
    };
    n.checked_mul(secs)
        .filter(|s| *s <= 10 * 365 * 86_400)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("{EXPECTED}, at most ten years"))
}

/// `--idempotency-key`: one non-empty line of at most 200 characters (the board core's rule).
///
/// # Errors
/// What the flag expects, when `raw` is not such a key.
pub fn idempotency_key(raw: &str) -> Result<String, String> {
    match domain::board::rules::check_idempotency_key(raw) {
        Ok(()) => Ok(raw.to_owned()),
        Err(domain::board::StoreError::Invalid(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}

/// `kanban cron add --cron`: a five-field cron expression (the board core's parser), kept as typed.
///
/// # Errors
/// What is wrong with it, naming the field.
pub fn cron_expr(raw: &str) -> Result<String, String> {
    match domain::board::recurring::CronExpr::parse(raw) {
        Ok(_) => Ok(raw.trim().to_owned()),
        Err(domain::board::StoreError::Invalid(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}

/// `--max-retries`: a count of failures, at least 1.
///
/// # Errors
/// What the flag expects, when `raw` is not a whole number from 1.
pub fn retries(raw: &str) -> Result<i64, String> {
    const EXPECTED: &str = "a whole number of failures, at least 1";
    whole(raw, EXPECTED).and_then(|n| if n >= 1 { Ok(n) } else { Err(format!("expected {EXPECTED}")) })
}

/// `kanban dispatch --max`: how many workers, from 0.
///
/// # Errors
/// What the flag expects, out of range or not a number.
pub fn workers(raw: &str) -> Result<u32, String> {
    let expected = format!("expected a whole number of workers from 0 to {}", u32::MAX);
    whole(raw, "").ok().and_then(|n| u32::try_from(n).ok()).ok_or(expected)
}

/// `kanban dispatch --failure-limit`: failures before a task is blocked, from 1.
///
/// # Errors
/// What the flag expects, out of range or not a number.
pub fn failure_limit(raw: &str) -> Result<u32, String> {
    let expected = format!("expected a whole number of failures from 1 to {}", u32::MAX);
    whole(raw, "").ok().and_then(|n| u32::try_from(n).ok()).filter(|n| *n >= 1).ok_or(expected)
}

/// `run --timeout`: whole seconds, 0 for none.
///
/// # Errors
/// What the flag expects, when `raw` is negative or not a number.
pub fn timeout_seconds(raw: &str) -> Result<u64, String> {
    let expected = "expected a whole number of seconds, 0 for none";
    whole(raw, expected).ok().and_then(|n| u64::try_from(n).ok()).ok_or_else(|| expected.to_owned())
}

/// `--tail N` (logs, denials): how many lines, from 0.
///
/// # Errors
/// What the flag expects, when `raw` is negative or not a number.
pub fn lines(raw: &str) -> Result<usize, String> {
    let expected = "expected a whole number of lines, 0 or more (e.g. 20)";
    whole(raw, expected).ok().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| expected.to_owned())
}

/// `kanban logs --run N`: a task's run number, from 1 (as `kanban show` numbers them).
///
/// # Errors
/// What the flag expects, when `raw` is below 1 or not a number.
pub fn run_number(raw: &str) -> Result<i64, String> {
    let expected = "expected a run number from 1 (1 = the task's first run, as `kanban show` lists them)";
    whole(raw, expected).ok().filter(|n| *n >= 1).ok_or_else(|| expected.to_owned())
}

/// `--port`: a TCP port, 0 for any free one.
///
/// # Errors
/// What the flag expects, out of range or not a number.
pub fn port(raw: &str) -> Result<u16, String> {
    let expected = "expected a port from 0 to 65535 (0 takes any free port)";
    whole(raw, expected).ok().and_then(|n| u16::try_from(n).ok()).ok_or_else(|| expected.to_owned())
}

/// `sandbox reap --max-age`: whole seconds, from 0.
///
/// # Errors
/// What the flag expects, when `raw` is negative or not a number.
pub fn age_seconds(raw: &str) -> Result<i64, String> {
    let expected = "expected a whole number of seconds, 0 or more";
    whole(raw, expected).ok().filter(|n| *n >= 0).ok_or_else(|| expected.to_owned())
}

/// `kanban tail --interval`: seconds between polls, above 0 (fractions allowed).
///
/// # Errors
/// What the flag expects, when `raw` is not a number above 0.
pub fn interval_seconds(raw: &str) -> Result<f64, String> {
    let expected = "expected a number of seconds above 0 (e.g. 1 or 0.5)";
    raw.trim().parse::<f64>().ok().filter(|n| n.is_finite() && *n > 0.0).ok_or_else(|| expected.to_owned())
}

fn context(e: &clap::Error, kind: ContextKind) -> Option<String> {
    match e.get(kind)? {
        ContextValue::String(s) => Some(s.clone()),
        ContextValue::Strings(v) => v.first().cloned(),
        _ => None,
    }
}

/// One line for the refusals clap would print over several: a flag's bad value (naming the flag and what it
/// expects), and a subcommand people reach for that berth does not have. `None` leaves clap's own text.
pub fn one_line(e: &clap::Error, cli: &clap::Command) -> Option<String> {
    match e.kind() {
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => {
            let arg = context(e, ContextKind::InvalidArg)?;
            // `--priority <PRIORITY>` names the flag; a positional is its `<NAME>`.
            let flag = if arg.starts_with('-') { arg.split(' ').next().unwrap_or(&arg).to_owned() } else { arg };
            let value = context(e, ContextKind::InvalidValue)?;
            let why = match std::error::Error::source(e) {
                Some(why) => why.to_string(),
                // A flag given no value at all (`--task` last on the line) has no list of values to offer.
                None => match context_list(e, ContextKind::ValidValue) {
                    Some(list) if !list.is_empty() => format!("expected one of {list}"),
                    _ => "a value is required".to_owned(),
                },
            };
            Some(format!("invalid value {value:?} for {flag}: {why}"))
        }
        // A missing or an unexpected argument: clap prints five lines; one says the same (found by a new user,
        // issue 25: `berth run`, `kanban show`, `config set KEY` without their arguments).
        ErrorKind::MissingRequiredArgument => {
            Some(format!("missing {}; usage: {}", context_list(e, ContextKind::InvalidArg)?, usage(e)?))
        }
        ErrorKind::UnknownArgument => {
            let arg = context(e, ContextKind::InvalidArg)?;
            let near =
                context(e, ContextKind::SuggestedArg).map(|s| format!(" (did you mean {s}?)")).unwrap_or_default();
            Some(format!("unexpected argument {arg:?}{near}; usage: {}", usage(e)?))
        }
        ErrorKind::InvalidSubcommand if context(e, ContextKind::InvalidSubcommand).as_deref() == Some("retry") => Some(
            "there is no `retry`: `berth kanban unblock ID` gives a blocked task back to the dispatcher; a failed run \
             is retried by the dispatcher by itself (until kanban.failure_limit failures block the task)"
                .to_owned(),
        ),
        // A command berth does not have: clap prints seven lines and, for `gateway start`, suggests `status`.
        ErrorKind::InvalidSubcommand => {
            let word = context(e, ContextKind::InvalidSubcommand)?;
            let usage = usage(e)?;
            // The parent's path, from its usage line (`berth sandbox [OPTIONS] <COMMAND>`).
            let path: Vec<&str> =
                usage.trim_matches('`').split(' ').take_while(|w| w.starts_with(char::is_alphabetic)).collect();
            let names = subcommands(cli, &path);
            let near = synonym(&word)
                .filter(|s| names.iter().any(|n| n == s))
                .map(str::to_owned)
                .or_else(|| context(e, ContextKind::SuggestedSubcommand))
                .map(|s| format!(" (did you mean {s}?)"))
                .unwrap_or_default();
            Some(format!("unknown command {word:?} for `{}`{near}; its commands: {}", path.join(" "), names.join(", ")))
        }
        _ => None,
    }
}

/// The command people coming from other tools type for one of berth's.
fn synonym(word: &str) -> Option<&'static str> {
    match word {
        "list" => Some("ls"),
        "remove" | "delete" | "del" => Some("rm"),
        "start" | "serve" | "up" => Some("run"),
        _ => None,
    }
}

/// The visible subcommands of the command at `path` (`["berth", "sandbox"]`) of `cli`.
fn subcommands(cli: &clap::Command, path: &[&str]) -> Vec<String> {
    let mut cmd = cli;
    for name in path.iter().skip(1) {
        match cmd.find_subcommand(name) {
            Some(sub) => cmd = sub,
            None => return Vec::new(),
        }
    }
    cmd.get_subcommands().filter(|c| !c.is_hide_set()).map(|c| c.get_name().to_owned()).collect()
}

/// clap's usage line without its `Usage: ` (e.g. `berth run --task <ID> <CMD>...`).
fn usage(e: &clap::Error) -> Option<String> {
    let ContextValue::StyledStr(text) = e.get(ContextKind::Usage)? else { return None };
    let text = text.to_string();
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(format!("`{}`", line.trim_start_matches("Usage:").trim()))
}

fn context_list(e: &clap::Error, kind: ContextKind) -> Option<String> {
    match e.get(kind)? {
        ContextValue::Strings(v) => Some(v.join(", ")),
        ContextValue::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// `kanban block --kind`: one of the kinds, or a one-line refusal naming them.
///
/// # Errors
/// The refusal.
pub fn block_kind(raw: &str) -> Result<domain::board::BlockKind, String> {
    raw.parse()
}

/// `--board SLUG` of the kanban commands that work on one board.
#[derive(Debug, clap::Args)]
pub struct BoardArg {
    /// Board slug (default: `default`).
    #[arg(long, value_hint = clap::ValueHint::Other, value_name = "SLUG", default_value = "default")]
    pub board: String,
}

/// When a task may start: `--at` a time or `--in` a while from now.
#[derive(Debug, clap::Args)]
pub struct When {
    /// Not started before this time (RFC 3339, e.g. 2026-12-01T03:00:00Z).
    #[arg(long, value_name = "TIME", conflicts_with = "in_", value_parser = crate::cli_values::at)]
    pub at: Option<domain::time::Timestamp>,
    /// Not started before this long from now (30s, 5m, 2h, 1d).
    #[arg(long = "in", id = "in_", value_name = "DURATION", value_parser = crate::cli_values::duration)]
    pub in_: Option<std::time::Duration>,
}

impl When {
    /// The time it names, `now` being now.
    pub fn at(&self, now: domain::time::Timestamp) -> Option<domain::time::Timestamp> {
        self.at.or_else(|| self.in_.map(|d| now.plus(d)))
    }
}

// The arguments of `berth sandbox …` (the rest of the command line is in `cli.rs`).

#[derive(Debug, clap::Args)]
pub struct TaskArg {
    /// Task id of the sandbox.
    #[arg(long, value_hint = clap::ValueHint::Other, value_name = "ID", default_value = "default")]
    pub task: String,
}

#[derive(Debug, clap::Subcommand)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_the_flags() {
        assert_eq!(priority("-5"), Ok(-5));
        assert!(priority("high").unwrap_err().contains("whole number"));
        assert!(runtime_seconds("0").is_err() && runtime_seconds("1") == Ok(1));
        assert!(retries("-1").is_err());
        assert!(workers("-1").is_err() && workers("0") == Ok(0));
        assert!(failure_limit("0").is_err());
        assert!(timeout_seconds("-1").is_err() && timeout_seconds("0") == Ok(0));
        assert!(lines("-3").is_err() && lines("0") == Ok(0));
        assert!(run_number("0").is_err() && run_number("1") == Ok(1));
        assert!(port("70000").is_err() && port("0") == Ok(0));
        assert!(age_seconds("-5").is_err() && age_seconds("0") == Ok(0));
        assert!(
            interval_seconds("0").is_err() && interval_seconds("nan").is_err() && interval_seconds("0.5") == Ok(0.5)
        );
    }
}
