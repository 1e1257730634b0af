//! The berth binary.
fn main() {}
