//! Berth's pure core, in two halves of one shape: the sandbox half (identity and spec, the engine's ports, the
//! reuse/cleanup/reaper policies, the sandbox service) and the board half (`board`: its values, rows, one port,
//! events, transition table and rules; the dispatch planner in `policy::dispatch`; the dispatcher service).
//!
//! This crate does no IO, never reads the clock and knows nothing of Docker, SQLite or an async runtime.

pub mod board;
pub mod container;
pub mod dispatcher;
pub mod egress;
pub mod ids;
pub mod label;
pub mod policy;
pub mod ports;
pub mod sandbox;
pub mod service;
pub mod sha256;
pub mod suggest;
pub mod time;

#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
