//! What the egress proxy's connections and DNS answers share: the policy, the denial log, and the task each
//! sandbox address last named in its proxy credentials.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use domain::egress::EgressPolicy;
use domain::ports::Clock;

use crate::edge::context::SystemClock;

/// What every connection shares: the policy, the log, and the task each sandbox address last named.
pub(super) struct Shared {
    pub policy: EgressPolicy,
    log: Mutex<Option<std::fs::File>>,
    tasks: Mutex<HashMap<IpAddr, String>>,
}

impl Shared {
    pub fn new(policy: EgressPolicy, log: Option<std::fs::File>) -> Self {
        Self { policy, log: Mutex::new(log), tasks: Mutex::new(HashMap::new()) }
    }

    /// Appends one denial (JSON line) and says it on stderr (`docker logs` of the proxy).
    pub fn deny(&self, peer: IpAddr, kind: &str, destination: &str, reason: &str) {
        let task = self.task_of(peer);
        let line = serde_json::json!({
            "time": SystemClock.now().to_rfc3339(),
            "task": task,
            "source": peer.to_string(),
            "kind": kind,
            "destination": destination,
            "reason": reason,
            "policy": self.policy.to_string(),
        });
        eprintln!("denied {kind} {destination} from {peer} ({task}): {reason}");
        if let Ok(mut guard) = self.log.lock()
            && let Some(file) = guard.as_mut()
        {
            let _ = std::io::Write::write_all(file, format!("{line}\n").as_bytes());
        }
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
