//! What the egress proxy's connections and DNS answers share: the policy, the denial log, and the task each
//! sandbox address last named in its proxy credentials.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use domain::egress::EgressPolicy;
use domain::ports::Clock;

use super::denial_log::{DenialLog, Key, Row};
use super::intercept::Registry;
use crate::edge::context::SystemClock;

/// What every connection shares: the policy, the log, and the task each sandbox address last named.
pub(super) struct Shared {
    pub policy: EgressPolicy,
    /// The credentials each sandbox registered (`terminal.docker_credentials`).
    pub credentials: std::sync::Arc<Registry>,
    log: DenialLog,
    tasks: Mutex<HashMap<IpAddr, String>>,
}

impl Shared {
    pub fn new(policy: EgressPolicy, log: DenialLog, credentials: std::sync::Arc<Registry>) -> Self {
        Self { policy, credentials, log, tasks: Mutex::new(HashMap::new()) }
    }

    /// Appends one denial (JSON line) and says it on stderr (`docker logs` of the proxy), unless the same denial
    /// was written moments ago: then it is counted, and its next row stands for it too.
    pub fn deny(&self, peer: IpAddr, kind: &str, destination: &str, reason: &str) {
        let task = self.task_of(peer);
        let key = Key {
            source: peer.to_string(),
            kind: kind.to_owned(),
            destination: destination.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(count) = self.log.admit(&key, &task, Instant::now()) {
            self.write(&Row { key: &key, task: &task, count });
        }
    }

    /// Writes a row for the repeats no later row stood for; the proxy calls it every window.
    pub fn flush_repeats(&self) {
        for (key, task, count) in self.log.due(Instant::now()) {
            self.write(&Row { key: &key, task: &task, count });
        }
    }

    fn write(&self, row: &Row<'_>) {
        let line = row.line(&SystemClock.now().to_rfc3339(), &self.policy.to_string());
        let k = row.key;
        let times = if row.count == 1 { String::new() } else { format!(" ({} times)", row.count) };
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
