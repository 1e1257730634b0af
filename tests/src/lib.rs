//! Berth's cross-crate tests, by concern: the CLI as a process, sandboxes on the real Docker Engine, config
//! surfaces, and tidy checks of the workspace itself. Everything lives in test modules of this one crate.

/// Each scenario once per store, on a home of each: `sqlite::NAME` and `postgres::NAME` (the latter skipped, said,
/// without a test server outside CI). A test module calls it with the names of its `fn NAME(home: Home)`.
#[cfg(test)]
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(crate::support::Home::new()); } )*
        }
        mod postgres {
            $( #[test] fn $name() { if let Some(home) = crate::support::Home::on_postgres() { super::$name(home); } } )*
        }
    };
}

#[cfg(test)]
mod pg;
#[cfg(test)]
mod pg_cluster;
#[cfg(test)]
mod support;

#[cfg(test)]
mod board_port;
#[cfg(test)]
mod browser;
#[cfg(test)]
mod claims;
#[cfg(test)]
mod cli;
#[cfg(test)]
mod cockpit;
#[cfg(test)]
mod config;
#[cfg(test)]
mod credentials;
#[cfg(test)]
mod dashboard;
#[cfg(test)]
mod docker;
#[cfg(test)]
mod edges;
#[cfg(test)]
mod egress;
#[cfg(test)]
mod exactly_once;
#[cfg(test)]
mod fair;
#[cfg(test)]
mod fault;
#[cfg(test)]
mod gateway;
#[cfg(test)]
mod guide;
#[cfg(test)]
mod hermes;
#[cfg(test)]
mod hermes_path;
#[cfg(test)]
mod homes;
#[cfg(test)]
mod idempotency;
#[cfg(test)]
mod in_time;
#[cfg(test)]
mod kanban;
#[cfg(test)]
mod lifecycle;
#[cfg(test)]
mod mistakes;
#[cfg(test)]
mod multihost;
#[cfg(test)]
mod parity;
#[cfg(test)]
mod pg_board;
#[cfg(test)]
mod pg_bound;
#[cfg(test)]
mod pg_wake;
#[cfg(test)]
mod recurring;
#[cfg(test)]
mod review;
#[cfg(test)]
mod signals;
#[cfg(test)]
mod sleep;
#[cfg(test)]
mod slow_board;
#[cfg(test)]
mod tidy;
#[cfg(test)]
mod trust;
#[cfg(test)]
mod trust_board;
#[cfg(test)]
mod trust_dashboard;
#[cfg(test)]
mod trust_engine;
#[cfg(test)]
mod trust_files;
#[cfg(test)]
mod trust_gaps;
#[cfg(test)]
mod trust_infra;
#[cfg(test)]
mod trust_mounts;
#[cfg(test)]
mod trust_sandbox;
#[cfg(test)]
mod trust_secrets;
#[cfg(test)]
mod trust_timeout;
#[cfg(test)]
mod trust_views;
