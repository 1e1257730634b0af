//! Waking on a PostgreSQL board: which writes notify `berth_board` (a task created, claimed, finished, edited or
//! removed; never a heartbeat, a worker's confirmation or a tick with nothing to do), and `PgBoardListener`, which
//! counts the notifications and listens again after its connection is cut.

use std::time::Duration;

use domain::board::{TickConfig, TickRequest};
use domain::ids::BoardSlug;
use domain::time::Timestamp;
use kanban_postgres::{BOARD_CHANNEL, PgBoardListener, PgKanbanStore};
use kanban_store::{BoardStore, Confirmation, NewTask, TaskEdit};
use postgres::fallible_iterator::FallibleIterator;

use crate::pg::TestDb;
use crate::support::wait_until;

/// Counts the notifications on the board's channel that `op` caused. After `op` returns, a second connection sends a
/// fence on the same channel; the server delivers notifications in commit order, so everything `op` committed
/// arrives before the fence, and nothing needs a timeout to be sure that nothing came.
struct Notes {
    listener: postgres::Client,
    fence: postgres::Client,
}

impl Notes {
    fn new(db: &TestDb) -> Self {
        let mut listener = db.client();
        listener.batch_execute(&format!("LISTEN {BOARD_CHANNEL}")).unwrap();
        Self { listener, fence: db.client() }
    }

    fn count(&mut self, what: &str, op: impl FnOnce()) -> usize {
        op();
        self.fence.execute("SELECT pg_notify($1, 'fence')", &[&BOARD_CHANNEL]).unwrap();
        let mut notes = self.listener.notifications();
        let mut iter = notes.timeout_iter(Duration::from_secs(30));
        let mut n = 0;
        loop {
            let note = iter.next().unwrap().unwrap_or_else(|| panic!("{what}: the fence never arrived"));
            if note.payload() == "fence" {
                return n;
            }
            n += 1;
        }
    }
}

#[test]
fn the_board_notifies_on_changes_that_matter_to_dispatch_and_never_on_heartbeats() {
    let Some(db) = TestDb::create() else { return };
    let mut s = PgKanbanStore::open(&db.url, "h").unwrap();
    let mut notes = Notes::new(&db);
    let board = BoardSlug::default_board();
    let t0 = Timestamp::from_millis(1_700_000_000_000);
    let new = |title: &str, parents: &[&str]| NewTask {
        title: title.to_owned(),
        assignee: Some("alpha".to_owned()),
        parents: parents.iter().map(|p| (*p).to_owned()).collect(),
        ..NewTask::default()
    };
    let cfg = TickConfig { profiles: ["alpha".to_owned()].into(), failure_limit: 3, ..TickConfig::default() };
    let probe = domain::test_util::FakeProcessProbe::default();
    probe.set_alive(4242, true);
    let req = TickRequest {
        board: &board,
        cfg: &cfg,
        now: t0,
        probe: &probe,
        claimer: "h:1",
        claim_ttl: Duration::from_secs(900),
        spawn_lease: Duration::from_secs(20),
    };

    assert_eq!(notes.count("create", || drop(s.create_task(&board, "t_a", &new("a", &[]), t0).unwrap())), 1);
    // A task and its links in one transaction: the server folds the identical notifications into one.
    assert_eq!(
        notes.count("create a child", || drop(s.create_task(&board, "t_b", &new("b", &["t_a"]), t0).unwrap())),
        1
    );
    assert_eq!(notes.count("create", || drop(s.create_task(&board, "t_c", &new("c", &[]), t0).unwrap())), 1);
    let mut claimed = Vec::new();
    assert_eq!(
        notes.count("a tick claiming two", || claimed = domain::dispatcher::apply(&mut s, &req).unwrap().claimed),
        1
    );
    assert_eq!(claimed.len(), 2, "t_a and t_c were claimed in that one tick");
    let run_a = claimed.iter().find(|c| c.task_id == "t_a").unwrap().run_id;
    let conf = Confirmation { task: "t_a", run_id: run_a, pid: 4242, start: Some(1), host: "h" };

    // What a running worker writes wakes no one.
    assert_eq!(notes.count("confirm", || drop(s.confirm_run(&conf, Duration::from_secs(900), t0).unwrap())), 0);
    assert_eq!(notes.count("heartbeat", || s.heartbeat("t_a", None, t0).unwrap()), 0);
    assert_eq!(notes.count("heartbeat with a note", || s.heartbeat("t_a", Some("half way"), t0).unwrap()), 0);
    let beat = || assert!(s.heartbeat_run("t_a", run_a, Duration::from_secs(900), t0).unwrap());
    assert_eq!(notes.count("worker heartbeat", beat), 0);
    // Nor does a tick with nothing to do, or a dry run: a gateway's wake-up after its own tick is the last one.
    assert_eq!(
        notes.count("idle tick", || assert!(domain::dispatcher::apply(&mut s, &req).unwrap().claimed.is_empty())),
        0
    );
    assert_eq!(notes.count("dry run", || drop(domain::board::KanbanStore::snapshot(&s, &req).unwrap())), 0);

    // A finished task frees a slot (and here promotes its child); edits, blocks and removals change what is ready.
    assert_eq!(notes.count("complete", || drop(s.complete("t_a", Some(run_a), Some("ok"), Some(0), t0).unwrap())), 1);
    let edit = TaskEdit { priority: Some(5), ..TaskEdit::default() };
    assert_eq!(notes.count("edit", || drop(s.edit("t_b", &edit, t0).unwrap())), 1);
    assert_eq!(notes.count("block", || assert!(s.block("t_b", None, None, t0).unwrap().is_none())), 1);
    assert_eq!(notes.count("unblock", || drop(s.unblock("t_b", t0).unwrap())), 1);
    assert_eq!(notes.count("remove", || drop(s.remove("t_c", t0).unwrap())), 1);

    // A rolled-back transaction notifies no one.
    let mut c = db.client();
    let rolled_back = || {
        let mut tx = c.transaction().unwrap();
        tx.execute("UPDATE berth.tasks SET status = 'blocked' WHERE id = 't_b'", &[]).unwrap();
        tx.rollback().unwrap();
    };
    assert_eq!(notes.count("rollback", rolled_back), 0);
}

/// The backend pids of this database's listeners.
fn listener_pids(c: &mut postgres::Client) -> Vec<i32> {
    c.query(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'berth-listen'",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[test]
fn the_listener_counts_changes_listens_again_after_its_connection_is_cut_and_ends_when_dropped() {
    let Some(db) = TestDb::create() else { return };
    let mut s = PgKanbanStore::open(&db.url, "h").unwrap();
    let mut admin = db.client();
    let board = BoardSlug::default_board();
    let t0 = Timestamp::from_millis(1_700_000_000_000);
    let task = |title: &str| NewTask { title: title.to_owned(), ..NewTask::default() };

    let listener = PgBoardListener::start(&db.url).unwrap();
    wait_until("the listener to listen", Duration::from_secs(20), || listener.listening());
    let first = listener_pids(&mut admin);
    assert_eq!(first.len(), 1, "one connection of its own");
    let v0 = listener.version();
    s.create_task(&board, "t_1", &task("one"), t0).unwrap();
    wait_until("a new task to count", Duration::from_secs(20), || listener.version() > v0);

    // The server ends its connection: it listens again on a new one, and that counts as a change (whatever happened
    // in between was announced to no one).
    let v1 = listener.version();
    let cut: bool = admin.query_one("SELECT pg_terminate_backend($1)", &[&first[0]]).unwrap().get(0);
    assert!(cut);
    wait_until("a new connection", Duration::from_secs(20), || {
        listener.listening() && listener_pids(&mut admin).iter().any(|p| !first.contains(p))
    });
    wait_until("the reconnection to count", Duration::from_secs(20), || listener.version() > v1);
    let v2 = listener.version();
    s.create_task(&board, "t_2", &task("two"), t0).unwrap();
    wait_until("a change after the reconnection to count", Duration::from_secs(20), || listener.version() > v2);

    drop(listener);
    wait_until("the dropped listener's connection to close", Duration::from_secs(20), || {
        listener_pids(&mut admin).is_empty()
    });
}
