//! What the egress proxy's connections and DNS answers share: the policy, the denial log, and the task each
//! sandbox address last named in its proxy credentials.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use domain::egress::EgressPolicy;
use domain::ports::Clock;

use super::denial_log::{DenialLog, Key, Row};
use crate::edge::context::SystemClock;

/// What every connection shares: the policy, the log, and the task each sandbox address last named.
pub(super) struct Shared {
    pub policy: EgressPolicy,
    log: DenialLog,
    tasks: Mutex<HashMap<IpAddr, String>>,
}

impl Shared {
    pub fn new(policy: EgressPolicy, log: DenialLog) -> Self {
        Self { policy, log, tasks: Mutex::new(HashMap::new()) }
    }

    /// Appends one denial (JSON line) and says it on stderr (`docker logs` of the proxy), unless the same denial
    /// was written moments ago: then it is counted, and the count goes with its next row.
    pub fn deny(&self, peer: IpAddr, kind: &str, destination: &str, reason: &str) {
        let task = self.task_of(peer);
        let key = Key {
            source: peer.to_string(),
            kind: kind.to_owned(),
            destination: destination.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(repeated) = self.log.admit(&key, &task, Instant::now()) {
            self.write(&Row { key: &key, task: &task, repeated });
        }
    }

    /// Writes the counts of repeats no later row carried; the proxy calls it every window.
    pub fn flush_repeats(&self) {
        for (key, task, repeated) in self.log.due(Instant::now()) {
            self.write(&Row { key: &key, task: &task, repeated });
        }
    }

    fn write(&self, row: &Row<'_>) {
        let line = row.line(&SystemClock.now().to_rfc3339(), &self.policy.to_string());
        let k = row.key;
        let times = if row.repeated > 0 { format!(" (and {} more like it)", row.repeated) } else { String::new() };
        eprintln!("denied {} {} from {} ({}): {}{times}", k.kind, k.destination, k.source, row.task, k.reason);
        self.log.write(&line);
    }

    fn task_of(&self, peer: IpAddr) -> String {
        self.tasks.lock().ok().and_then(|t| t.get(&peer).cloned()).unwrap_or_default()
    }

    pub fn note_task(&self, peer: IpAddr, task: String) {
        if let Ok(mut t) = self.tasks.lock() {
            t.insert(peer, task);
        }
    }
}
