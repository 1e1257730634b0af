//! Berth's pure core: value types, the ports, the reuse/cleanup/reaper/dispatch policies, the task-status
//! transition table, and the sandbox and dispatcher services.
//!
//! This crate does no IO, never reads the clock and knows nothing of Docker, SQLite or an async runtime.

pub mod container;
pub mod dispatcher;
pub mod egress;
pub mod ids;
pub mod kanban;
pub mod label;
pub mod liveness;
pub mod policy;
pub mod ports;
pub mod sandbox;
pub mod service;
pub mod sha256;
pub mod suggest;
pub mod time;
pub mod transitions;

#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
