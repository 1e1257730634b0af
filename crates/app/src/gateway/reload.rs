//! Settings that reach a running gateway: the home's `config.yaml` and its profile's own, looked at every second
//! (each file's inode, size and change time: one `stat` each) and on SIGHUP, read again at once and applied from the
//! next tick. A file that cannot be read, a value that refuses, or a change to which board or host this gateway is
//! keeps the settings it had, said in one line of its log and in `gateway status`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use config_bridge::Value;
use domain::ports::Clock;

use super::status::GatewayState;
use crate::edge::context::{Ctx, SystemClock};

/// How often the gateway looks at its config files (one `stat` each) for a change to apply at the next tick.
const POLL: Duration = Duration::from_secs(1);

/// A running gateway's settings: what it runs on now (`live`, its tick period), the files it watches, and SIGHUP.
pub(super) struct Reloader {
    watch: SettingsWatch,
    live: Ctx,
    /// `kanban.dispatch_interval_seconds` as the gateway ticks at it.
    pub(super) period: Duration,
    poll: tokio::time::Interval,
    sighup: Option<tokio::signal::unix::Signal>,
}

impl Reloader {
    pub(super) fn new(ctx: &Ctx, period: Duration) -> Self {
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        Self { watch: SettingsWatch::new(ctx), live: ctx.clone(), period, poll, sighup }
    }

    /// Resolves once a read is due: a config file changed, or a SIGHUP came (cancel-safe: a `select!` branch).
    pub(super) async fn due(&mut self) {
        loop {
            let hup = async {
                match &mut self.sighup {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.poll.tick() => {
                    if self.watch.changed() {
                        self.watch.force();
                        return;
                    }
                }
                Some(()) = hup => {
                    tracing::info!("gateway: SIGHUP received; reading the settings again");
                    self.watch.force();
                    return;
                }
            }
        }
    }

    /// When a read is due: the settings read again, applied from the next tick (returned for the tick thread) when
    /// they read cleanly, else the old ones kept and the reason said in one line; either way recorded in `state`
    /// (written to the home, where `gateway status` reads it).
    pub(super) fn apply_if_due(&mut self, home: &Path, state: &mut GatewayState) -> Option<Ctx> {
        if !self.watch.take_forced() {
            return None;
        }
        let applied = match self.watch.read(&self.live) {
            Ok(applied) => {
                tracing::info!("gateway: {}", applied.line);
                self.live = applied.ctx.clone();
                let interval = super::interval_secs(&self.live);
                self.period = Duration::try_from_secs_f64(interval).unwrap_or(self.period);
                state.interval_seconds = Some(self.period.as_secs_f64());
                state.settings_read_at = Some(now_text());
                state.settings_error = None;
                state.settings_at_restart = applied.at_restart;
                Some(applied.ctx)
            }
            Err(why) => {
                let at = state.settings_read_at.as_deref().unwrap_or("its start");
                tracing::warn!("gateway: settings not applied, keeping those read at {at}: {why}");
                state.settings_error = Some(why);
                None
            }
        };
        super::write_state(home, state);
        applied
    }
}

/// What a file looked like: inode, size, modification time (seconds, nanoseconds).
type Stamp = (u64, u64, i64, i64);

fn stamp(path: &std::path::Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
}

/// Settings a gateway reads only at its start: its dashboard, whether it dispatches, its housekeeping and its host's
/// heartbeat. A change to one of them is applied at the restart, and said.
const AT_RESTART: [&str; 10] = [
    "kanban.dashboard_port",
    "kanban.dashboard_bind",
    "kanban.dashboard_allow_remote",
    "kanban.dispatch_in_gateway",
    "kanban.host_timeout_seconds",
    "terminal.docker_idle_stop_seconds",
    "terminal.docker_idle_stop_seconds_overrides",
    "terminal.docker_reap_interval_seconds",
    "terminal.docker_orphan_reaper",
    "kanban.retention_days",
];

/// The settings a gateway cannot change while it runs: which board it dispatches, and its host's name there.
const FIXED: [&str; 2] = ["kanban.database_url", "kanban.host_id"];

/// The config files of a running gateway, and what they looked like when it last read them.
struct SettingsWatch {
    files: [PathBuf; 2],
    seen: [Option<Stamp>; 2],
    /// A read is due (a file changed, or a SIGHUP asked for one).
    forced: bool,
}

/// A read that was applied: the new context and what changed.
struct Applied {
    ctx: Ctx,
    /// One line for the log: the keys that changed (with their values when they are numbers or flags).
    line: String,
    /// The changed settings that wait for a restart.
    at_restart: Vec<String>,
}

impl SettingsWatch {
    fn new(ctx: &Ctx) -> Self {
        let files = ctx.config_files();
        let seen = [stamp(&files[0]), stamp(&files[1])];
        Self { files, seen, forced: false }
    }

    /// Whether a file changed since the last look (what it saw is remembered either way).
    fn changed(&mut self) -> bool {
        let now = [stamp(&self.files[0]), stamp(&self.files[1])];
        let changed = now != self.seen;
        self.seen = now;
        changed
    }

    /// A change seen, or a SIGHUP: read at the next tick.
    fn force(&mut self) {
        self.forced = true;
    }

    /// Whether a read is due (a change seen, or a SIGHUP); resets it.
    fn take_forced(&mut self) -> bool {
        std::mem::take(&mut self.forced)
    }

    /// Reads the settings again over `live` (the gateway's now): the new context, or why the old one stays.
    ///
    /// # Errors
    /// One line naming the file and the reason.
    fn read(&self, live: &Ctx) -> Result<Applied, String> {
        let files = self.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ");
        let new = live.for_profile(&live.profile).map_err(|e| one_line(&e))?;
        for w in &new.resolved.warnings {
            tracing::warn!("{w}");
        }
        let mut changed = Vec::new();
        let mut at_restart = Vec::new();
        for (old, now) in live.resolved.entries().iter().zip(new.resolved.entries()) {
            if old.value == now.value {
                continue;
            }
            let key = now.setting.key;
            if FIXED.contains(&key) {
                return Err(format!(
                    "{key} changed in {files}: which board and host a gateway serves is fixed at its start; restart it"
                ));
            }
            if AT_RESTART.contains(&key) {
                at_restart.push(key.to_owned());
            }
            changed.push(match &now.value {
                Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Cap(_) | Value::CapMap(_) => {
                    format!("{key} {} -> {}", old.value.to_text(), now.value.to_text())
                }
                // Text, lists and maps may hold secrets (an environment for the sandbox): named, not shown.
                _ => key.to_owned(),
            });
        }
        let mut line = if changed.is_empty() {
            format!("settings read again from {files}: nothing changed")
        } else {
            format!("settings read again from {files}; from the next tick: {}", changed.join(", "))
        };
        if !at_restart.is_empty() {
            line.push_str(&format!(" ({} at the gateway's restart)", at_restart.join(", ")));
        }
        Ok(Applied { ctx: new, line, at_restart })
    }
}

/// The time of a read, as `gateway status` shows it.
fn now_text() -> String {
    SystemClock.now().to_rfc3339()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
