//! The dispatcher's figures on PostgreSQL, beside SQLite's: dry tick at 10 000 and 100 000 ready tasks, 300 claims
//! at 10 000, and claims per second with three concurrent dispatchers (on both stores). The server comes from
//! `BERTH_TEST_POSTGRES_URL` (`.ci/run` starts one); each board is a database of its own, copied from a template
//! for each claim repetition.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use domain::board::KanbanStore;
use domain::board::{DispatchCaps, SpawnRecord, TickConfig, TickRequest};
use domain::ids::BoardSlug;
use kanban_postgres::PgKanbanStore;
use kanban_store::{BoardStore, SqliteKanbanStore};

use super::{Probe, median, ms, now, tick_cfg};

/// `url` with its database replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let root = base[scheme_end..].find('/').map_or(base, |i| &base[..i + scheme_end]);
    match query {
        Some(q) => format!("{root}/{db}?{q}"),
        None => format!("{root}/{db}"),
    }
}

pub struct Server {
    admin: String,
    made: Vec<String>,
}

impl Server {
    pub fn from_env() -> Option<Self> {
        let admin = std::env::var("BERTH_TEST_POSTGRES_URL").ok().filter(|u| !u.trim().is_empty())?;
        Some(Self { admin, made: Vec::new() })
    }

    fn sql(&self, sql: &str) {
        let mut c = postgres::Client::connect(&self.admin, postgres::NoTls).expect("connect to the bench server");
        c.batch_execute(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A fresh database (a copy of `template` when given); returns its URL.
    pub fn database(&mut self, name: &str, template: Option<&str>) -> String {
        self.sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        let create = match template {
            Some(t) => format!("CREATE DATABASE {name} TEMPLATE {t}"),
            None => format!("CREATE DATABASE {name}"),
        };
        // A template must have no sessions; a closed connection's backend may take a moment to go.
        let mut c = postgres::Client::connect(&self.admin, postgres::NoTls).expect("connect to the bench server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(e) = c.batch_execute(&create) {
            assert!(Instant::now() < deadline, "{create}: {e}");
            std::thread::sleep(Duration::from_millis(50)); // retry interval
        }
        self.made.push(name.to_owned());
        with_database(&self.admin, name)
    }

    /// A board database with `n` ready tasks over 100 profiles (and their `created` events), analyzed.
    fn board(&mut self, n: usize) -> (String, String) {
        let name = format!("berth_bench_{n}");
        let url = self.database(&name, None);
        drop(PgKanbanStore::open(&url, "bench").unwrap());
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute(&format!(
            "INSERT INTO berth.tasks (id, board, title, assignee, status, priority, created_at) \
             SELECT 't_' || lpad(to_hex(i), 8, '0'), 'default', 'bench', 'p' || (i % 100), 'ready', i % 5, \
             1700000000000 + i FROM generate_series(0, {last}) AS i; \
             INSERT INTO berth.task_events (task_id, kind, payload, created_at) \
             SELECT 't_' || lpad(to_hex(i), 8, '0'), 'created', '{{}}', 1700000000000 + i FROM generate_series(0, {last}) AS i;",
            last = n - 1
        ))
        .unwrap();
        c.simple_query("VACUUM ANALYZE").unwrap();
        (name, url)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        for name in std::mem::take(&mut self.made) {
            self.sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        }
    }
}

fn request<'a>(board: &'a BoardSlug, cfg: &'a TickConfig, claimer: &'a str) -> TickRequest<'a> {
    TickRequest {
        board,
        cfg,
        now: now(),
        probe: &Probe,
        claimer,
        claim_ttl: Duration::from_secs(900),
        spawn_lease: Duration::from_secs(20),
    }
}

/// One tick plus the recording of its spawns (no-op spawner); returns how many it claimed.
fn claim_and_record(store: &mut dyn BoardStore, req: &TickRequest<'_>) -> usize {
    let out = domain::dispatcher::apply(&mut BoxRef(store), req).unwrap();
    let records: Vec<SpawnRecord<'_>> = out
        .claimed
        .iter()
        .enumerate()
        .map(|(i, c)| SpawnRecord { task: &c.task_id, run_id: c.run_id, pid: 100_000 + i as u32, start: None, log: "" })
        .collect();
    store.record_spawned(&records, Duration::from_secs(20), now()).unwrap();
    out.claimed.len()
}

/// `&mut dyn BoardStore` as a sized `KanbanStore`, for the dispatcher's generic functions.
struct BoxRef<'a>(&'a mut dyn BoardStore);

impl KanbanStore for BoxRef<'_> {
    type Error = kanban_store::StoreError;
    fn check_board(&self, b: &BoardSlug) -> Result<(), Self::Error> {
        self.0.check_board(b)
    }
    fn task_brief(&self, id: &str) -> Result<domain::board::TaskBrief, Self::Error> {
        self.0.task_brief(id)
    }
    fn local_workers(&self, b: &BoardSlug, host: &str) -> Result<Vec<(i64, Option<i64>)>, Self::Error> {
        self.0.local_workers(b, host)
    }
    fn snapshot(&self, req: &TickRequest<'_>) -> Result<domain::board::BoardSnapshot, Self::Error> {
        self.0.snapshot(req)
    }
    fn tick(
        &mut self,
        req: &TickRequest<'_>,
        plan: &(dyn Fn(&domain::board::BoardSnapshot) -> domain::policy::dispatch::TickPlan + Sync),
    ) -> Result<domain::board::TickOutcome, Self::Error> {
        self.0.tick(req, plan)
    }
    fn record_spawned(
        &mut self,
        s: &[SpawnRecord<'_>],
        l: Duration,
        n: domain::time::Timestamp,
    ) -> Result<usize, Self::Error> {
        self.0.record_spawned(s, l, n)
    }
    fn record_spawn_failure(
        &mut self,
        id: &str,
        r: i64,
        e: &str,
        l: domain::board::Breaker,
        n: domain::time::Timestamp,
    ) -> Result<domain::board::FailureOutcome, Self::Error> {
        self.0.record_spawn_failure(id, r, e, l, n)
    }
}

/// Dry tick and 300 claims on PostgreSQL for `n` ready tasks: (dry ms, claims ms), medians.
pub fn dispatch_pg(server: &mut Server, n: usize) -> (f64, f64) {
    let board = BoardSlug::default_board();
    let cfg = tick_cfg();
    let (template, url) = server.board(n);
    let reps = if n >= 100_000 { 7 } else { 21 };
    let mut dry = Vec::new();
    {
        let store = PgKanbanStore::open(&url, "bench").unwrap();
        let req = request(&board, &cfg, "bench:1");
        // One untimed tick warms the connection's prepared statements and the server's cache.
        domain::dispatcher::plan(&store, &req).unwrap();
        for _ in 0..reps {
            let start = Instant::now();
            let plan = domain::dispatcher::plan(&store, &req).unwrap();
            dry.push(ms(start.elapsed()));
            assert_eq!(plan.spawns().count(), 300);
        }
    }
    let mut claims = Vec::new();
    for r in 0..5 {
        let copy = server.database(&format!("berth_bench_claims_{r}"), Some(&template));
        let mut store = PgKanbanStore::open(&copy, "bench").unwrap();
        let req = request(&board, &cfg, "bench:1");
        // The same warm-up as the dry ticks: statements are prepared once per connection, as in a gateway.
        domain::dispatcher::plan(&store, &req).unwrap();
        let start = Instant::now();
        let claimed = claim_and_record(&mut store, &req);
        claims.push(ms(start.elapsed()));
        assert_eq!(claimed, 300);
    }
    (median(&mut dry), median(&mut claims))
}

/// Claims per second with three dispatchers ticking concurrently, each on its own connection, on a board of 10 000
/// ready tasks without per-profile caps and 50 spawns per tick, until 3 000 tasks are claimed; also checks that no
/// task was claimed twice.
pub fn concurrent_claims(open: &(dyn Fn() -> Box<dyn BoardStore + Send> + Sync)) -> f64 {
    let board = BoardSlug::default_board();
    let cfg = TickConfig { caps: DispatchCaps { max_spawn: Some(50), ..DispatchCaps::default() }, ..tick_cfg() };
    const WANT: usize = 3_000;
    let claimed = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for d in 0..3 {
            let (claimed, cfg, board) = (&claimed, &cfg, &board);
            s.spawn(move || {
                let mut store = open();
                let claimer = format!("bench:{d}");
                while claimed.load(Ordering::SeqCst) < WANT {
                    let req = request(board, cfg, &claimer);
                    claimed.fetch_add(claim_and_record(store.as_mut(), &req), Ordering::SeqCst);
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let n = claimed.load(Ordering::SeqCst);
    assert!(n >= WANT);
    n as f64 / secs
}

/// The SQLite board file of `n` tasks as a fresh copy, for the concurrent run.
pub fn sqlite_copy(path: &Path, dir: &Path, name: &str) -> std::path::PathBuf {
    let copy = dir.join(name);
    std::fs::copy(path, &copy).unwrap();
    copy
}

pub fn open_sqlite(path: &Path) -> Box<dyn BoardStore + Send> {
    Box::new(SqliteKanbanStore::open(path).unwrap())
}

pub fn pg_concurrent(server: &mut Server) -> f64 {
    let (template, _) = server.board(10_000);
    let url = server.database("berth_bench_concurrent", Some(&template));
    concurrent_claims(&|| Box::new(PgKanbanStore::open(&url, "bench").unwrap()))
}
