//! The pure policies: synchronous functions of a snapshot (and `now`) that return decisions with reasons.

pub mod cleanup;
pub mod dispatch;
pub mod folders;
pub mod idle;
pub mod lease;
pub mod reaper;
pub mod retention;
pub mod reuse;

#[cfg(test)]
mod tests;
