//! The edge every surface stands on: the invocation context (settings, home, profile), errors and their exit codes,
//! output (tables, JSON, progress), logging and its redaction, process supervision, and small pieces of the
//! operator's cockpit that every command shares.

pub mod context;
pub mod error;
pub mod exec_errors;
pub mod handover;
pub mod log_format;
pub mod open;
pub mod output;
pub mod private_files;
pub mod process;
pub mod random;
pub mod redact;
pub mod remove_tree;
pub mod socket_line;
pub mod state_file;
pub mod terminal_text;
pub mod version;
pub mod watch;
