//! Automation.
fn main() {}
