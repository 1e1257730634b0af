//! The PostgreSQL board's own edges: the one-line refusals (unreachable, foreign schema, newer schema) that leave
//! the server as it was, a board of an earlier schema migrated in place, and `kanban migrate --to`, which copies a
//! SQLite board with its ids and verifies counts.

use std::time::Duration;

use domain::ids::BoardSlug;
use domain::policy::dispatch::Decision;
use domain::time::Timestamp;
use kanban_postgres::PgKanbanStore;
use kanban_store::{BoardStore, Confirmation, NewTask, RunEnd, SqliteKanbanStore, StoreError};
use postgres::fallible_iterator::FallibleIterator;

use crate::pg::TestDb;
use crate::support::Home;

fn server_error(r: Result<PgKanbanStore, StoreError>) -> String {
    match r {
        Err(StoreError::Server(m)) => m,
        Err(other) => panic!("expected a server error, got {other:?}"),
        Ok(_) => panic!("expected a server error, the board opened"),
    }
}

#[test]
fn a_foreign_or_newer_schema_and_an_unreachable_server_are_refused_untouched() {
    let Some(db) = TestDb::create() else { return };
    let mut c = db.client();
    c.batch_execute("CREATE SCHEMA berth; CREATE TABLE berth.theirs (x int); INSERT INTO berth.theirs VALUES (7);")
        .unwrap();
    let m = server_error(PgKanbanStore::open(&db.url, "h"));
    assert!(m.contains("was not made by berth") && !m.contains('\n'), "{m}");
    let tables: i64 = c.query_one("SELECT count(*) FROM pg_tables WHERE schemaname = 'berth'", &[]).unwrap().get(0);
    assert_eq!(tables, 1, "nothing was added to the foreign schema");
    assert_eq!(c.query_one("SELECT x FROM berth.theirs", &[]).unwrap().get::<_, i32>(0), 7);

    let Some(db) = TestDb::create() else { return };
    drop(PgKanbanStore::open(&db.url, "h").unwrap());
    let mut c = db.client();
    c.batch_execute("UPDATE berth.meta SET version = 99").unwrap();
    let m = server_error(PgKanbanStore::open(&db.url, "h"));
    assert!(m.contains("newer than this berth understands"), "{m}");
    assert_eq!(c.query_one("SELECT version FROM berth.meta", &[]).unwrap().get::<_, i64>(0), 99);

    let m = server_error(PgKanbanStore::open("postgres://berth@127.0.0.1:1/none", "h"));
    assert!(m.starts_with("cannot reach the board database at postgres://berth@127.0.0.1:1/none"), "{m}");
    let m = server_error(PgKanbanStore::open("postgres://berth:s3cret@127.0.0.1:1/none", "h"));
    assert!(!m.contains("s3cret"), "the password never reaches a message: {m}");
}

/// A board made by an earlier berth (schema version 2, before the change notifications) is migrated in place on
/// the next open: its tasks are kept and from then on its changes notify `berth_board`.
#[test]
fn a_board_from_before_the_notifications_is_migrated_and_then_notifies() {
    let Some(db) = TestDb::create() else { return };
    let mut c = db.client();
    c.batch_execute(
        "CREATE SCHEMA berth; CREATE TABLE berth.meta (application TEXT NOT NULL, version BIGINT NOT NULL); \
         INSERT INTO berth.meta VALUES ('berth-kanban', 2);",
    )
    .unwrap();
    for sql in &kanban_postgres::MIGRATIONS[..2] {
        c.batch_execute(sql).unwrap();
    }
    c.batch_execute(
        "INSERT INTO berth.boards VALUES ('default', 'default', 0, 0); \
         INSERT INTO berth.tasks (id, board, title, status, created_at) VALUES ('t_old', 'default', 'old', 'ready', 0);",
    )
    .unwrap();
    c.batch_execute(&format!("LISTEN {}", kanban_postgres::BOARD_CHANNEL)).unwrap();

    let mut s = PgKanbanStore::open(&db.url, "h").unwrap();
    let version: i64 = c.query_one("SELECT version FROM berth.meta", &[]).unwrap().get(0);
    assert_eq!(version, kanban_postgres::MIGRATIONS.len() as i64);
    assert_eq!(BoardStore::task(&s, "t_old").unwrap().title, "old");
    s.assign("t_old", Some("alpha"), Timestamp::from_millis(1)).unwrap();
    let mut notes = c.notifications();
    let note = notes.timeout_iter(Duration::from_secs(30)).next().unwrap();
    assert_eq!(note.map(|n| n.channel().to_owned()).as_deref(), Some(kanban_postgres::BOARD_CHANNEL));
}

/// A SQLite board with a finished task (claimed, confirmed, failed once, completed), a blocked one, a linked child,
/// a removed task (its events outlive it) and a second board.
fn busy_sqlite_board(path: &std::path::Path) {
    let mut s = SqliteKanbanStore::open(path).unwrap();
    let t0 = Timestamp::from_millis(1_700_000_000_000);
    let b = BoardSlug::default_board();
    let new = |title: &str, parents: &[&str]| NewTask {
        title: title.to_owned(),
        assignee: Some("alpha".to_owned()),
        parents: parents.iter().map(|p| (*p).to_owned()).collect(),
        ..NewTask::default()
    };
    s.create_task(&b, "t_a", &new("a", &[]), t0).unwrap();
    s.create_task(&b, "t_b", &new("b", &["t_a"]), t0).unwrap();
    let keyed = NewTask { idempotency_key: Some("c-key".to_owned()), ..new("c", &[]) };
    s.create_task(&b, "t_c", &keyed, t0).unwrap();
    s.create_task(&b, "t_gone", &new("gone", &[]), t0).unwrap();
    BoardStore::create_board(&mut s, &BoardSlug::parse("side").unwrap(), Some("Side"), t0).unwrap();
    s.create_task(&BoardSlug::parse("side").unwrap(), "t_side", &new("side", &[]), t0).unwrap();
    let cfg = domain::board::TickConfig {
        profiles: ["alpha".to_owned()].into(),
        failure_limit: 3,
        ..domain::board::TickConfig::default()
    };
    for round in 0..2 {
        let req = domain::board::TickRequest {
            board: &b,
            cfg: &cfg,
            now: t0,
            probe: &domain::test_util::FakeProcessProbe::default(),
            claimer: "src:1",
            claim_ttl: Duration::from_secs(900),
            spawn_lease: Duration::from_secs(20),
        };
        let out = domain::dispatcher::apply(&mut s, &req).unwrap();
        let a = out.claimed.iter().find(|c| c.task_id == "t_a").unwrap();
        let c = Confirmation { task: "t_a", run_id: a.run_id, pid: 4242, start: Some(1), host: "src-host" };
        s.confirm_run(&c, Duration::from_secs(900), t0).unwrap();
        if round == 0 {
            let end = RunEnd { outcome: "failed", error: "exit 1", exit_code: Some(1), retry_at: None };
            s.fail("t_a", Some(a.run_id), &end, domain::board::Breaker::at_once(3), t0).unwrap();
        } else {
            s.complete("t_a", Some(a.run_id), Some("ok"), Some(0), t0).unwrap();
        }
    }
    s.block("t_c", None, Some("waiting"), t0).unwrap();
    s.remove("t_gone", t0).unwrap();
    let nightly = kanban_store::NewCron {
        name: "nightly".into(),
        cron: Some("0 3 * * *".into()),
        assignee: "alpha".into(),
        command: "make nightly".into(),
        ..kanban_store::NewCron::default()
    };
    s.add_cron(&b, &nightly, t0).unwrap();
    s.cron_made(&b, "nightly", t0).unwrap();
}

#[test]
fn kanban_migrate_copies_a_board_with_its_ids_events_and_runs_and_leaves_the_file_alone() {
    let Some(db) = TestDb::create() else { return };
    let home = Home::new();
    let file = home.path().join(kanban_store::BOARD_FILE);
    busy_sqlite_board(&file);
    let before = std::fs::read(&file).unwrap();
    let v = home.json(&["kanban", "migrate", "--to", &db.url]);
    assert_eq!(v["copied"]["tasks"], 4, "{v}");
    assert_eq!(v["copied"]["task_runs"], 3, "{v}");
    assert_eq!(v["copied"]["boards"], 2, "{v}");
    assert_eq!(v["copied"]["schedules"], 1, "{v}");

    // Read both boards back through the one trait: every task, event and run is the same, ids included.
    let src = SqliteKanbanStore::open_read_only(&file).unwrap();
    let dst = PgKanbanStore::open(&db.url, "h").unwrap();
    assert_eq!(BoardStore::boards(&src).unwrap(), dst.boards().unwrap());
    let mut runs = 0;
    let mut events = 0;
    for board in src.boards().unwrap() {
        let slug = BoardSlug::parse(&board.slug).unwrap();
        let tasks = src.tasks(&slug, None, None).unwrap();
        assert_eq!(dst.tasks(&slug, None, None).unwrap(), tasks);
        for t in &tasks {
            assert_eq!(BoardStore::task(&dst, &t.id).unwrap(), BoardStore::task(&src, &t.id).unwrap());
            let e = src.events(&t.id, 0).unwrap();
            assert_eq!(dst.events(&t.id, 0).unwrap(), e);
            let r = src.runs(&t.id).unwrap();
            assert_eq!(dst.runs(&t.id).unwrap(), r);
            events += e.len();
            runs += r.len();
        }
    }
    assert_eq!(runs, 3, "t_a's failed and completed runs, t_c's blocked one");
    let default = BoardSlug::default_board();
    assert_eq!(dst.crons(&default).unwrap(), src.crons(&default).unwrap(), "the schedules, their last slots too");
    assert!(events > 10);
    // The removed task's log stayed with its events.
    assert_eq!(src.events("t_gone", 0).unwrap(), dst.events("t_gone", 0).unwrap());
    assert!(dst.events("t_gone", 0).unwrap().iter().any(|e| e.kind == "removed"));
    assert_eq!(std::fs::read(&file).unwrap(), before, "the SQLite file is left byte for byte");

    // New rows continue after the copied ids; the home then works on the copy through the one setting.
    let mut home = home;
    home.board_url = Some(db.url.clone());
    let id = home.json(&["kanban", "create", "after the move", "--command", "true"])["id"].as_str().unwrap().to_owned();
    let last_event = dst.events(&id, 0).unwrap()[0].id;
    let copied_max = src.events("t_a", 0).unwrap().iter().map(|e| e.id).max().unwrap();
    assert!(last_event > copied_max);
    let again = home.json(&["kanban", "create", "c again", "--command", "true", "--idempotency-key", "c-key"]);
    assert_eq!(again["id"], "t_c", "the copied key still names its task");
    assert_eq!(home.json(&["kanban", "ls"]).as_array().unwrap().len(), 4);

    // A second copy into a board that now holds tasks is refused, with nothing changed.
    home.board_url = None;
    let out = home.run(&["kanban", "migrate", "--to", &db.url]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("berth: ") && err.contains("already holds tasks") && err.lines().count() == 1, "{err}");
    assert_eq!(dst.tasks(&BoardSlug::default_board(), None, None).unwrap().len(), 4);
}

/// Sandbox affinity on a shared board: a task that failed on host A is left to A (which holds its sandbox) by host
/// B for `sandbox_affinity_secs`, A retries it at once, and past the window B may take it; `kanban show`'s runs say
/// where each one ran.
#[test]
fn a_failed_task_is_retried_first_on_the_host_holding_its_sandbox() {
    let Some(db) = TestDb::create() else { return };
    let mut a = PgKanbanStore::open(&db.url, "host-a").unwrap();
    let mut b = PgKanbanStore::open(&db.url, "host-b").unwrap();
    let board = BoardSlug::default_board();
    let t0 = Timestamp::from_millis(1_700_000_000_000);
    let new = NewTask { title: "retry me".into(), assignee: Some("alpha".into()), ..NewTask::default() };
    a.create_task(&board, "t_r", &new, t0).unwrap();
    let cfg = domain::board::TickConfig {
        profiles: ["alpha".to_owned()].into(),
        failure_limit: 5,
        sandbox_affinity_secs: 120,
        ..domain::board::TickConfig::default()
    };
    let probe = domain::test_util::FakeProcessProbe::default();
    let tick = |store: &mut PgKanbanStore, host: &str, at: Timestamp| {
        let claimer = format!("{host}:1");
        let req = domain::board::TickRequest {
            board: &board,
            cfg: &cfg,
            now: at,
            probe: &probe,
            claimer: &claimer,
            claim_ttl: Duration::from_secs(900),
            spawn_lease: Duration::from_secs(20),
        };
        domain::dispatcher::apply(store, &req).unwrap()
    };
    let run_and_fail = |store: &mut PgKanbanStore, host: &str, run: i64, at: Timestamp| {
        let c = Confirmation { task: "t_r", run_id: run, pid: 77, start: Some(1), host };
        store.confirm_run(&c, Duration::from_secs(900), at).unwrap();
        let end = RunEnd { outcome: "failed", error: "exit 1", exit_code: Some(1), retry_at: None };
        store.fail("t_r", Some(run), &end, domain::board::Breaker::at_once(5), at).unwrap();
    };
    let secs = |s: u64| t0.plus(Duration::from_secs(s));

    let first = tick(&mut a, "host-a", t0);
    run_and_fail(&mut a, "host-a", first.claimed[0].run_id, secs(1));
    let on_b = tick(&mut b, "host-b", secs(11));
    assert!(on_b.claimed.is_empty(), "host B leaves the retry to host A");
    assert_eq!(on_b.plan.decisions[0].decision, Decision::DeferredSandboxElsewhere { wait_secs: 110 });
    let again = tick(&mut a, "host-a", secs(12));
    assert_eq!(again.claimed.len(), 1, "host A retries it at once");
    run_and_fail(&mut a, "host-a", again.claimed[0].run_id, secs(13));
    let later = tick(&mut b, "host-b", secs(13 + 121));
    assert_eq!(later.claimed.len(), 1, "past the window host B takes it");
    let hosts: Vec<Option<String>> = a.runs("t_r").unwrap().into_iter().map(|r| r.worker_host).collect();
    assert_eq!(hosts, [Some("host-a".to_owned()), Some("host-a".to_owned()), None]);
}

/// The race that resurrected finished tasks: a tick reads a running task, its worker completes the run and exits
/// (on another connection: workers do not take the tick's lock), and only then does the tick judge the worker gone.
/// The crash verdict is guarded by the run it judged, so it changes nothing: the task stays done, nothing runs again.
#[test]
fn a_crash_verdict_on_a_run_its_worker_completed_meanwhile_changes_nothing() {
    let Some(db) = TestDb::create() else { return };
    let b = BoardSlug::default_board();
    let t0 = Timestamp::from_millis(1_700_000_000_000);
    let mut s = PgKanbanStore::open(&db.url, "h").unwrap();
    let task = NewTask { title: "once".into(), assignee: Some("alpha".into()), ..NewTask::default() };
    s.create_task(&b, "t_once", &task, t0).unwrap();
    let cfg = domain::board::TickConfig {
        profiles: ["alpha".to_owned()].into(),
        failure_limit: 3,
        host: "h".into(),
        host_timeout: Duration::from_secs(30),
        ..domain::board::TickConfig::default()
    };
    let probe = domain::test_util::FakeProcessProbe::default();
    let req = domain::board::TickRequest {
        board: &b,
        cfg: &cfg,
        now: t0,
        probe: &probe,
        claimer: "h:1",
        claim_ttl: Duration::from_secs(900),
        spawn_lease: Duration::from_secs(20),
    };
    let run = domain::dispatcher::apply(&mut s, &req).unwrap().claimed[0].run_id;
    let c = Confirmation { task: "t_once", run_id: run, pid: 4242, start: Some(1), host: "h" };
    s.confirm_run(&c, Duration::from_secs(900), t0).unwrap();

    // The worker (pid 4242) is not alive in the probe: the tick will judge it crashed. Between the snapshot and the
    // write, the worker completes its run on a connection of its own.
    let worker = std::sync::Mutex::new(PgKanbanStore::open(&db.url, "h").unwrap());
    let completed = std::sync::atomic::AtomicBool::new(false);
    let plan = |snap: &domain::board::BoardSnapshot| {
        if !completed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            worker.lock().unwrap().complete("t_once", Some(run), Some("ok"), Some(0), t0).unwrap();
        }
        domain::policy::dispatch::plan_tick(t0, snap, &cfg)
    };
    let out = domain::board::KanbanStore::tick(&mut s, &req, &plan).unwrap();
    assert!(completed.load(std::sync::atomic::Ordering::SeqCst));
    assert!(out.plan.housekeeping.is_empty(), "the verdict was not applied: {:?}", out.plan.housekeeping);
    assert!(out.claimed.is_empty(), "the finished task was not claimed again");
    let t = s.task("t_once").unwrap();
    assert_eq!(t.status, domain::board::TaskStatus::Done);
    let kinds: Vec<String> = s.events("t_once", 0).unwrap().into_iter().map(|e| e.kind).collect();
    assert!(!kinds.iter().any(|k| k == "crashed"), "{kinds:?}");
    // The worker's completion retried (its reply lost to an outage) is a no-op; from an old run it is refused.
    s.complete("t_once", Some(run), Some("ok"), Some(0), t0).unwrap();
    assert!(matches!(
        s.complete("t_once", Some(run - 1), None, Some(0), t0),
        Err(StoreError::Moved { .. } | StoreError::NoTask(_))
    ));
    assert_eq!(s.events("t_once", 0).unwrap().iter().filter(|e| e.kind == "completed").count(), 1);
}

/// A worker on another host is judged by that host's heartbeat, never by this host's process table: alive while its
/// host beats (though its pid means nothing here), taken over as `host_lost` once the host is silent past the host
/// timeout, without counting as the task's failure.
#[test]
fn a_remote_worker_lives_by_its_hosts_heartbeat_and_a_silent_hosts_task_is_taken_over() {
    let Some(db) = TestDb::create() else { return };
    let b = BoardSlug::default_board();
    let t0 = Timestamp::from_millis(1_700_000_000_000);
    let mut a = PgKanbanStore::open(&db.url, "host-a").unwrap();
    let mut here = PgKanbanStore::open(&db.url, "host-b").unwrap();
    let task = NewTask { title: "remote".into(), assignee: Some("alpha".into()), ..NewTask::default() };
    a.create_task(&b, "t_remote", &task, t0).unwrap();
    let cfg = |host: &str| domain::board::TickConfig {
        profiles: ["alpha".to_owned()].into(),
        failure_limit: 3,
        host: host.into(),
        host_timeout: Duration::from_secs(2),
        ..domain::board::TickConfig::default()
    };
    let probe = domain::test_util::FakeProcessProbe::default(); // no pid is alive anywhere
    let (cfg_a, cfg_b) = (cfg("host-a"), cfg("host-b"));
    let req = |cfg| domain::board::TickRequest {
        board: &b,
        cfg,
        now: t0,
        probe: &probe,
        claimer: "x:1",
        claim_ttl: Duration::from_secs(900),
        spawn_lease: Duration::from_secs(20),
    };
    let run = domain::dispatcher::apply(&mut a, &req(&cfg_a)).unwrap().claimed[0].run_id;
    a.renew_host("host-a", t0).unwrap();
    let c = Confirmation { task: "t_remote", run_id: run, pid: 4242, start: Some(1), host: "host-a" };
    a.confirm_run(&c, Duration::from_secs(900), t0).unwrap();

    // From host-b, while host-a beats: alive, nothing happens (pid 4242 is not alive here, and that says nothing).
    let out = domain::dispatcher::apply(&mut here, &req(&cfg_b)).unwrap();
    assert!(out.plan.housekeeping.is_empty(), "{:?}", out.plan.housekeeping);
    assert_eq!(here.task("t_remote").unwrap().status, domain::board::TaskStatus::Running);

    // host-a falls silent past the timeout (by the server's clock): host-b takes the task over.
    let mut c = db.client();
    c.execute("UPDATE berth.hosts SET seen_at = seen_at - 10000 WHERE id = 'host-a'", &[]).unwrap();
    let out = domain::dispatcher::apply(&mut here, &req(&cfg_b)).unwrap();
    assert_eq!(out.plan.housekeeping.len(), 1, "{:?}", out.plan.housekeeping);
    assert!(
        matches!(&out.plan.housekeeping[0].1, domain::policy::dispatch::Housekeeping::HostLost { host } if host == "host-a")
    );
    let t = here.task("t_remote").unwrap();
    assert_eq!(t.consecutive_failures, 0, "a lost host is not the task's failure");
    let runs = here.runs("t_remote").unwrap();
    assert_eq!(runs[0].outcome.as_deref(), Some("host_lost"));
    assert!(out.claimed.iter().any(|c| c.task_id == "t_remote"), "claimed again by host-b in the same tick");
    // host-a's worker, back from its pause, cannot record anything for the run taken from it.
    assert!(matches!(a.complete("t_remote", Some(run), None, Some(0), t0), Err(StoreError::Moved { .. })));
}

/// A `kanban.worker_command` on a PostgreSQL board holds no board password in its environment. Its own `kanban complete` still records the run (through its worker's socket);
/// one about another task is refused in one line and changes nothing. Before, the command's environment carried
/// `KANBAN_DATABASE_URL` with the password.
#[test]
fn a_worker_command_holds_no_board_password_and_completes_through_its_worker() {
    let Some(mut home) = Home::on_postgres() else { return };
    // The test server trusts local connections: the password is never asked for, so it only marks what leaks.
    let secret = "pw-s3cret-91";
    home.board_url = home.board_url.take().map(|u| u.replacen("://berth@", &format!("://berth:{secret}@"), 1));
    assert!(home.board_url.as_deref().unwrap().contains(secret), "the test URL holds a password");
    let other = home.json(&["kanban", "create", "not mine", "--command", "true"])["id"].as_str().unwrap().to_owned();
    let (env, refused) = (home.path().join("env.txt"), home.path().join("refused.txt"));
    let bin = crate::support::berth_bin();
    let worker = format!(
        "env > {env}; {bin} kanban complete {other} > {refused} 2>&1; \
         echo exit=$? >> {refused}; {bin} kanban complete {{task_id}} --result by-the-worker",
        env = env.display(),
        refused = refused.display(),
        bin = bin.display()
    );
    home.ok(&["config", "set", "kanban.worker_command", &worker]);
    let id = home.json(&["kanban", "create", "mine", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    crate::support::wait_until("the worker command completes its task", Duration::from_secs(60), || {
        home.json(&["kanban", "show", &id])["task"]["status"] == "done"
    });
    let shown = home.json(&["kanban", "show", &id]);
    assert_eq!(shown["task"]["result"], "by-the-worker", "{shown}");
    let env = std::fs::read_to_string(&env).unwrap();
    assert!(env.contains("KANBAN_DATABASE_URL=postgres://berth@"), "the command still names the board: {env}");
    assert!(!env.contains(secret), "the board password reached the worker command: {env}");
    let refused = std::fs::read_to_string(&refused).unwrap();
    assert!(refused.contains("takes requests about its own task only") && refused.contains("exit=2"), "{refused}");
    assert_eq!(refused.lines().count(), 2, "one line of refusal: {refused}");
    let other = home.json(&["kanban", "show", &other]);
    assert!(other["task"]["status"] != "done" && other["runs"].as_array().unwrap().is_empty(), "untouched: {other}");
}

/// On a PostgreSQL board, a worker command's own writes (`kanban complete`) go through the home's runner on its kept
/// connection, not on a new connection each, with a gateway and without; the gateway's relay (for the built-in
/// worker's writes) performs a write only for the process the task's current run records as its worker (the
/// kernel's word for the peer, not the request's): asked by anyone else, it does nothing and the task stays as it
/// was.
#[test]
fn a_gateways_workers_write_through_its_kept_connection_and_only_they_do() {
    use std::io::{BufRead, Write};
    let Some(home) = Home::on_postgres() else { return };
    let bin = crate::support::berth_bin();
    let go = home.path().join("go");
    let worker = format!(
        // Bounded: a test that fails before it makes the file leaves no worker waiting for ever.
        "i=0; while [ ! -e {go} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; \
         {bin} kanban complete {{task_id}} --result relayed",
        go = go.display(),
        bin = bin.display()
    );
    home.ok(&["config", "set", "kanban.worker_command", &worker]);
    let ids = assigned_tasks(&home, "r", 3);
    let gw = crate::support::Gateway::start(&home, &[]);
    let socket = home.path().join("kanban/sockets/gateway.sock");
    let running = crate::support::wait_until("a running task", Duration::from_secs(30), || {
        home.json(&["kanban", "ls"]).as_array().unwrap().iter().find(|t| t["status"] == "running").cloned()
    });
    let id = running["id"].as_str().unwrap().to_owned();
    let run = crate::support::wait_until("its run", Duration::from_secs(10), || {
        home.json(&["kanban", "show", &id])["runs"].as_array().and_then(|r| r.last()).and_then(|r| r["id"].as_i64())
    });
    // The right task and run, the right board, asked by this test rather than the task's worker: nothing done.
    let board = {
        let url = kanban_postgres::without_password(home.board_url.as_deref().unwrap());
        domain::sha256::hex_digest(url.as_bytes())
    };
    let mut conn = std::os::unix::net::UnixStream::connect(&socket).expect("the gateway's relay socket");
    let req =
        serde_json::json!({"board": board, "op": "complete", "task": id, "run": run, "text": "forged", "host": "h"});
    writeln!(conn, "{req}").unwrap();
    let mut reply = String::new();
    std::io::BufReader::new(&conn).read_line(&mut reply).unwrap();
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert!(reply["task"].is_null(), "the relay wrote for a process that is not the worker: {reply}");
    assert_eq!(home.json(&["kanban", "show", &id])["task"]["status"], "running");
    // Let the workers finish: each completion goes through the runner.
    std::fs::write(&go, "").unwrap();
    for id in &ids {
        crate::support::wait_until("the task done", Duration::from_secs(60), || {
            home.json(&["kanban", "show", id])["task"]["status"] == "done"
        });
        assert_eq!(home.json(&["kanban", "show", id])["task"]["result"], "relayed");
        let log = home.ok(&["kanban", "logs", id]);
        assert!(log.contains("the command's complete recorded through the runner"), "{id}: {log}");
    }
    drop(gw);
    // No gateway: a one-shot dispatch's task goes to the same runner.
    let id = home.json(&["kanban", "create", "alone", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    crate::support::wait_until("the task done without a gateway", Duration::from_secs(60), || {
        home.json(&["kanban", "show", &id])["task"]["status"] == "done"
    });
    let log = home.ok(&["kanban", "logs", &id]);
    assert!(log.contains("the command's complete recorded through the runner"), "{log}");
}

/// A plain worker command (no shell syntax in its template) runs with no `sh` between it and berth (the home's runner
/// makes it the run's worker once the run is confirmed); the socket it reaches the runner through is abstract (no file in the home) and its name drawn at random (no other
/// user can take it first); and a task it completes through the gateway has its sandbox removed by the gateway's
/// releaser before the completion is answered (a gateway killed in between answers nothing, and the command then
/// removes it itself).
#[test]
fn a_plain_worker_command_runs_without_a_shell_and_the_gateway_removes_the_sandbox_it_completed() {
    let Some(home) = Home::on_postgres() else { return };
    let bin = crate::support::berth_bin();
    let script = home.path().join("work.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat /proc/$PPID/comm > \"$0.parent.$1\"\necho \"$BERTH_WORKER_SOCKET\" > \"$0.socket.$1\"\n\
             {bin} run --task \"$1\" -- true || exit 3\n{bin} kanban complete \"$1\" --result plain || exit 4\n\
             docker ps -aq --filter label=hermes-task-id=\"$1\" --filter label=hermes-profile={profile} \
             > \"$0.left.$1\"\n",
            bin = bin.display(),
            profile = home.profile
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    home.ok(&["config", "set", "kanban.worker_command", &format!("{} {{task_id}}", script.display())]);
    let ids = assigned_tasks(&home, "p", 2);
    let gw = crate::support::Gateway::start(&home, &[]);
    for id in &ids {
        crate::support::wait_until("the task done", Duration::from_secs(90), || {
            home.json(&["kanban", "show", id])["task"]["status"] == "done"
        });
        let read = |what: &str| std::fs::read_to_string(format!("{}.{what}.{id}", script.display())).unwrap();
        // The task is done once the gateway's write commits; its command writes this after the answer.
        crate::support::wait_until("the command's last file", Duration::from_secs(30), || {
            std::path::Path::new(&format!("{}.left.{id}", script.display())).exists()
        });
        assert_eq!(read("parent").trim(), "berth", "the command's parent is the runner, not a shell");
        let socket = read("socket");
        let drawn = socket.trim().rsplit('/').next().unwrap_or_default();
        assert!(socket.starts_with("@berth-worker/"), "an abstract socket: {socket}");
        assert!(drawn.len() == 32 && drawn.chars().all(|c| c.is_ascii_hexdigit()), "a name drawn at random: {socket}");
        assert_eq!(read("left"), "", "the completion was answered only once its sandbox was gone");
        let log = home.ok(&["kanban", "logs", id]);
        assert!(log.contains("the command's complete recorded through the runner"), "{id}: {log}");
    }
    let sockets = home.path().join("kanban/sockets").read_dir().unwrap().flatten();
    assert!(!sockets.into_iter().any(|e| e.file_name() != "gateway.sock" && e.file_name() != "runner.sock"));
    crate::support::wait_until("the completed tasks' sandboxes removed", Duration::from_secs(30), || {
        home.containers().is_empty()
    });
    drop(gw);
}

/// With `kanban.worker_exit_outcome` on a PostgreSQL board, the home's runner records each command's exit (0 a
/// completion with the last line its result, anything else a failure) on its one kept connection; no `berth` runs
/// in the command, nor a berth worker per task.
#[test]
fn a_commands_exit_status_is_recorded_by_the_homes_runner() {
    let Some(home) = Home::on_postgres() else { return };
    let fail = home.path().join("fail");
    home.ok(&["config", "set", "kanban.worker_exit_outcome", "true"]);
    let command = format!("sh -c '[ -e {}-$0 ] && exit 1; echo exit-$0' {{task_id}}", fail.display());
    home.ok(&["config", "set", "kanban.worker_command", &command]);
    let ids = assigned_tasks(&home, "x", 4);
    std::fs::write(format!("{}-{}", fail.display(), ids[3]), "").unwrap();
    let gw = crate::support::Gateway::start(&home, &[]);
    for id in &ids[..3] {
        crate::support::wait_until("the task done", Duration::from_secs(60), || {
            home.json(&["kanban", "show", id])["task"]["status"] == "done"
        });
        assert_eq!(home.json(&["kanban", "show", id])["task"]["result"], format!("exit-{id}").as_str());
        let log = home.ok(&["kanban", "logs", id]);
        assert!(log.contains("the command exited 0: completed"), "{id}: {log}");
    }
    // Recorded by the home's runner: it is there, idle, until it leaves.
    assert!(crate::support::runner_of(&home).is_some(), "no runner for {}", home.path().display());
    let run = crate::support::wait_until("the failed run", Duration::from_secs(60), || {
        let v = home.json(&["kanban", "show", &ids[3]]);
        v["runs"].as_array().and_then(|r| r.first()).filter(|r| !r["outcome"].is_null()).cloned()
    });
    assert_eq!((&run["outcome"], &run["exit_code"]), (&"failed".into(), &1.into()), "{run}");
    assert_eq!(run["error"], "command exited with 1", "{run}");
    drop(gw);
}

/// `n` tasks named `<prefix><i>`, assigned to the home's profile; their ids.
fn assigned_tasks(home: &Home, prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let v = home.json(&["kanban", "create", &format!("{prefix}{i}"), "--assignee", &home.profile]);
            v["id"].as_str().unwrap().to_owned()
        })
        .collect()
}
