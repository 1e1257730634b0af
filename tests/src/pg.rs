//! A fresh PostgreSQL database per test, on the server `BERTH_TEST_POSTGRES_URL` names (`.ci/run` starts a
//! throwaway cluster and sets it). Without it a test fails under `CI=true` and is skipped, saying so, elsewhere.

use std::path::PathBuf;
use std::process::{Command, Stdio};
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

/// A private PostgreSQL cluster, for outages (the shared test server must never be stopped).
pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl Cluster {
    /// initdb + pg_ctl start of a throwaway cluster run by the `postgres` user, listening only on a socket in its
    /// own temporary directory. `None` (skipped, said on stderr) without the server binaries, except under CI.
    pub(crate) fn start() -> Option<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
            .max();
        let user = Command::new("id").args(["-u", "postgres"]).output().is_ok_and(|o| o.status.success());
        let Some(bin) = bin.filter(|_| user) else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but no PostgreSQL server binaries (/usr/lib/postgresql/*/bin) or no postgres user"
            );
            crate::support::skip("no PostgreSQL server binaries or no postgres user (apt-get install postgresql)");
            return None;
        };
        let dir = tempfile::Builder::new().prefix("berth-eo-pg.").tempdir().unwrap();
        let chown = Command::new("chown").args(["postgres:", &dir.path().display().to_string()]).status().unwrap();
        assert!(chown.success(), "chown of the cluster's directory");
        let cluster = Self { dir, bin, port: 5432 };
        let d = cluster.dir.path().display().to_string();
        let initdb = cluster.as_postgres(&format!(
            "'{}/initdb' -D '{d}/data' -U berth --auth=trust -E UTF8 >'{d}/initdb.log' 2>&1",
            cluster.bin.display()
        ));
        assert!(initdb, "initdb failed: {}", std::fs::read_to_string(format!("{d}/initdb.log")).unwrap_or_default());
        cluster.server_start();
        Some(cluster)
    }

    fn as_postgres(&self, script: &str) -> bool {
        Command::new("su")
            .args(["postgres", "-s", "/bin/sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn pg_ctl(&self, args: &str) -> bool {
        let d = self.dir.path().display();
        self.as_postgres(&format!("'{}/pg_ctl' -D '{d}/data' {args}", self.bin.display()))
    }

    pub(crate) fn server_start(&self) {
        let d = self.dir.path().display();
        let ok = self.pg_ctl(&format!(
            "-l '{d}/server.log' -w -o \"-p {} -k {d} -c listen_addresses='' -c max_connections=400 -c fsync=off\" start",
            self.port
        ));
        assert!(ok, "the private PostgreSQL server did not start: {}", self.server_log());
    }

    /// A fast shutdown: every session is ended with "terminating connection due to administrator command".
    pub(crate) fn server_stop(&self) {
        assert!(self.pg_ctl("-m fast -w stop"), "the private PostgreSQL server did not stop: {}", self.server_log());
    }

    pub(crate) fn server_log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        log.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// The server's processes (the postmaster and every backend it forked), for a test that freezes them.
    pub(crate) fn pids(&self) -> Vec<i32> {
        let pidfile = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).unwrap_or_default();
        let Some(main) = pidfile.lines().next().and_then(|l| l.trim().parse::<i32>().ok()) else { return Vec::new() };
        let mut pids = vec![main];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // The parent pid is the second field after the command's closing parenthesis.
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
            if ppid == Some(main) {
                pids.push(pid);
            }
        }
        pids
    }

    pub(crate) fn url(&self) -> String {
        let socket = self.dir.path().display().to_string().replace('/', "%2F");
        format!("postgres://berth@{socket}:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Immediate: nothing of it is kept; the directory goes with the TempDir.
        let _ = self.pg_ctl("-m immediate stop");
    }
}
