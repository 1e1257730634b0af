//! A private PostgreSQL cluster, for outages (a frozen or stopped server): the shared test server must never be
//! stopped. Used by the test suite (`crate::pg`) and by the figures bench (`tests/benches/figures.rs`), which has no
//! test server of its own to stop.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The newest PostgreSQL server programs (`/usr/lib/postgresql/*/bin`), when they and the `postgres` user exist.
pub(crate) fn server_bin() -> Option<PathBuf> {
    let bin = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
        .max();
    let user = Command::new("id").args(["-u", "postgres"]).output().is_ok_and(|o| o.status.success());
    bin.filter(|_| user)
}

/// A private PostgreSQL cluster, for outages (the shared test server must never be stopped).
pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl Cluster {
    /// initdb + pg_ctl start of a throwaway cluster run by the `postgres` user (its programs in `bin`, from
    /// [`server_bin`]), listening only on a socket in its own temporary directory.
    pub(crate) fn start_with(bin: PathBuf) -> Self {
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
        cluster
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
