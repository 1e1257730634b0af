//! The owner's side of an opt-out sandbox's lease (see `domain::policy::lease`): while a process uses a throw-away
//! sandbox, a task of its own rewrites the lease inside it every third of `terminal.docker_lease_seconds`, so a
//! reaper on another host sharing the engine can tell a live owner from a dead one.

use std::time::Duration;

use std::sync::Arc;

use domain::policy::lease::{LEASE_DIR, LEASE_NAME, Lease};
use domain::ports::Engine;
use domain::ports::{Clock, RuntimeError};

use crate::edge::context::{Ctx, SystemClock};

/// Renews the lease until dropped.
pub struct LeaseHolder(tokio::task::JoinHandle<()>);

impl Drop for LeaseHolder {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts renewing the lease of the container named `container` (it may not exist yet: the first renewal is retried
/// until it does) for this process, the owner its `berth.owner` label names.
pub fn hold(ctx: &Ctx, rt: &Arc<dyn Engine>, container: &str) -> LeaseHolder {
    let ttl = ctx.settings.terminal.docker_lease_seconds.duration();
    let (rt, container, owner) = (rt.clone(), container.to_owned(), crate::edge::context::owner_label());
    LeaseHolder(tokio::spawn(async move {
        let every = (ttl / 3).max(Duration::from_millis(200));
        let ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        loop {
            let lease = Lease { owner: owner.clone(), renewed: SystemClock.now(), ttl_secs };
            let pause = match rt.write_file(&container, LEASE_DIR, LEASE_NAME, lease.encode().as_bytes()).await {
                Ok(()) => every,
                // Not created yet (or already gone): look again soon.
                Err(RuntimeError::NotFound(_)) => Duration::from_millis(200).min(every),
                Err(e) => {
                    tracing::debug!("could not renew the lease of {container}: {e}");
                    Duration::from_secs(1).min(every)
                }
            };
            tokio::time::sleep(pause).await;
        }
    }))
}
