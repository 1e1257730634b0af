//! How long an engine call may take, and what one that took too long says about the engine.
//!
//! An engine can answer its ping and hang on everything else (a wedged daemon, a stuck storage driver): each call is
//! then bounded, but a command makes several, and five 30 s bounds in a row once made `berth run` take 151 s. So:
//! until the engine has answered one call since connecting, a call gets the connect bound ([`CONNECT_TIMEOUT`]), as
//! the ping did; and once a call has run past its bound, the engine counts as stalled: for [`STALL_HOLD`] every
//! further call fails at once, naming the call that hung, instead of waiting out its own bound.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use domain::ports::RuntimeError;

use crate::{CALL_TIMEOUT_SECS, CONNECT_TIMEOUT, DockerRuntime, unavailable};

/// How long a stalled engine is not asked again (then the next call tries, with the connect bound): as long as the
/// ping may take, so a command fails at once while a long-lived process (the gateway) soon asks again.
const STALL_HOLD: Duration = CONNECT_TIMEOUT;

/// What a runtime (and its clones) saw of the engine since connecting.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// A call other than the ping was answered (with anything: an error is an answer too).
    answered: AtomicBool,
    /// Since when, and why, the engine counts as stalled.
    stalled: Mutex<Option<(Instant, String)>>,
}

/// `op` and `id` as one phrase: `inspect NAME`, or `list` alone (no trailing space).
pub(crate) fn what(op: &str, id: &str) -> String {
    if id.is_empty() { op.to_owned() } else { format!("{op} {id}") }
}

impl DockerRuntime {
    /// The bound of the next ordinary call: the connect bound until the engine has answered one.
    pub(crate) fn call_bound(&self) -> Duration {
        if self.health.answered.load(Ordering::Relaxed) {
            Duration::from_secs(CALL_TIMEOUT_SECS)
        } else {
            CONNECT_TIMEOUT
        }
    }

    /// Fails at once while the engine counts as stalled.
    pub(crate) fn check_stalled(&self) -> Result<(), RuntimeError> {
        let mut stalled = self.health.stalled.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*stalled {
            Some((since, why)) if since.elapsed() < STALL_HOLD => Err(unavailable(
                &self.endpoint,
                format!("the engine stopped answering ({why}); is the Docker daemon hung?"),
            )),
            Some(_) => {
                *stalled = None;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Notes a call that ran past `bound`: the engine counts as stalled; the call's own error.
    pub(crate) fn stalled(&self, op: &str, id: &str, bound: Duration) -> RuntimeError {
        let why = format!("{} got no answer within {}s", what(op, id), bound.as_secs());
        let mut stalled = self.health.stalled.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *stalled = Some((Instant::now(), why.clone()));
        self.health.answered.store(false, Ordering::Relaxed);
        unavailable(&self.endpoint, format!("{why}; is the Docker daemon hung?"))
    }

    /// Notes the outcome of a call that came back: an answer, or (bollard's own bound) a stall.
    pub(crate) fn note(&self, op: &str, id: &str, e: Option<&bollard::errors::Error>) -> Option<RuntimeError> {
        match e {
            Some(bollard::errors::Error::RequestTimeoutError) => {
                Some(self.stalled(op, id, Duration::from_secs(CALL_TIMEOUT_SECS)))
            }
            // No connection at all is no answer either; anything else came from the engine.
            Some(
                bollard::errors::Error::SocketNotFoundError(_)
                | bollard::errors::Error::IOError { .. }
                | bollard::errors::Error::HyperLegacyError { .. },
            ) => None,
            _ => {
                self.health.answered.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// Runs one engine call within its bound, failing at once while the engine is stalled; errors mapped.
    pub(crate) async fn call<T>(
        &self,
        op: &str,
        id: &str,
        fut: impl Future<Output = Result<T, bollard::errors::Error>>,
    ) -> Result<T, RuntimeError> {
        self.check_stalled()?;
        let bound = self.call_bound();
        match tokio::time::timeout(bound, fut).await {
            Ok(Ok(v)) => {
                self.note(op, id, None);
                Ok(v)
            }
            Ok(Err(e)) => Err(match self.note(op, id, Some(&e)) {
                Some(stalled) => stalled,
                None => self.map_err(op, id, e),
            }),
            Err(_) => Err(self.stalled(op, id, bound)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::what;

    #[test]
    fn a_call_without_an_id_is_named_without_a_trailing_space() {
        assert_eq!(what("list", ""), "list");
        assert_eq!(what("inspect", "c1"), "inspect c1");
    }
}
