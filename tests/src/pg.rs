//! A fresh PostgreSQL database per test, on the server `BERTH_TEST_POSTGRES_URL` names (`.ci/run` starts a
//! throwaway cluster and sets it). Without it a test fails under `CI=true` and is skipped, saying so, elsewhere.

use std::sync::atomic::{AtomicU32, Ordering};

/// The test server's URL, if any.
///
/// # Panics
/// Under `CI=true` when it is not set: CI must run the PostgreSQL half of the suite.
pub fn server_url() -> Option<String> {
    match std::env::var("BERTH_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "BERTH_TEST_POSTGRES_URL is not set: CI must run the board tests on PostgreSQL (.ci/run starts a server)"
            );
            crate::support::skip("BERTH_TEST_POSTGRES_URL is not set (`bash .ci/run` starts a PostgreSQL server)");
            None
        }
    }
}

/// A database created for one test and dropped (with its connections) when this goes.
pub struct TestDb {
    pub url: String,
    admin_url: String,
    name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// `url` with its database name replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_at = base[scheme_end..].find('/').map(|i| i + scheme_end);
    let root = path_at.map_or(base, |i| &base[..i]);
    match query {
        Some(q) => format!("{root}/{db}?{q}"),
        None => format!("{root}/{db}"),
    }
}

impl TestDb {
    /// A new empty database on the test server; `None` when there is no server (outside CI).
    pub fn create() -> Option<Self> {
        let admin_url = server_url()?;
        let name = format!("berth_t{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
        let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).expect("connect to the test server");
        admin.batch_execute(&format!("CREATE DATABASE {name}")).expect("create a test database");
        Some(Self { url: with_database(&admin_url, &name), admin_url, name })
    }

    /// A plain client on this database (for the test's own checks and arrangements).
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).expect("connect to the test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&self.admin_url, postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

pub(crate) use crate::pg_cluster::Cluster;

impl Cluster {
    /// A private cluster (see [`Cluster::start_with`]); `None` (skipped, said on stderr) without the server
    /// binaries or the `postgres` user, except under CI.
    pub(crate) fn start() -> Option<Self> {
        let Some(bin) = crate::pg_cluster::server_bin() else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but no PostgreSQL server binaries (/usr/lib/postgresql/*/bin) or no postgres user"
            );
            crate::support::skip("no PostgreSQL server binaries or no postgres user (apt-get install postgresql)");
            return None;
        };
        Some(Self::start_with(bin))
    }
}
