//! New task ids: `t_` and twelve hex digits of 48 random bits.

use domain::ports::Clock;

use crate::edge::context::SystemClock;

/// A fresh task id: `t_` and 12 hex digits (48 random bits: collisions stay negligible on large boards).
pub(crate) fn new_task_id() -> String {
    task_id_of(new_task_bits())
}

/// A new task id's 48 random bits.
pub(super) fn new_task_bits() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(u128::try_from(SystemClock.now().as_millis()).unwrap_or(0));
    h.write_u32(std::process::id());
    h.finish() & 0xffff_ffff_ffff
}

/// The task id of 48 bits: `t_` and twelve hex digits (fixed width, so ids sort as their numbers).
pub(super) fn task_id_of(bits: u64) -> String {
    format!("t_{:012x}", bits & 0xffff_ffff_ffff)
}
