//! The claim protocol under fire: dispatchers SIGKILLed at random points of their ticks, then ordinary ticks. No
//! task may stay `running` without a live worker past the spawn lease, none may run twice, and the board must
//! finish. Workers are cheap (`kanban.worker_command`), so no Docker is involved.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use domain::board::TaskStatus;
use domain::ids::BoardSlug;
use kanban_store::SqliteKanbanStore;

use crate::support::{Home, berth_bin, wait_until};

const TASKS: usize = 200;
const KILLS: usize = 20;
/// The spawn lease of this test (the default is 20 s; a short one keeps the test fast, the protocol is the same).
const LEASE_SECS: u64 = 3;

/// A small deterministic generator (xorshift), so a failure replays with the same kill points.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn store(home: &Home) -> SqliteKanbanStore {
    SqliteKanbanStore::open_read_only(&home.path().join("berth-kanban.db")).unwrap()
}

/// Running tasks whose worker `kanban ls` reports gone (it checks them as the tick does), by id.
fn gone(home: &Home) -> Vec<String> {
    let ls = home.json(&["kanban", "ls", "--status", "running"]);
    ls.as_array()
        .unwrap()
        .iter()
        .filter(|t| t["worker_alive"] == false)
        .map(|t| {
            let id = t["id"].as_str().unwrap();
            let log = std::fs::read_to_string(home.path().join("kanban/logs").join(format!("{id}.log")));
            format!("{}\nlog: {log:?}", home.ok(&["kanban", "show", id]))
        })
        .collect()
}

fn dispatch(home: &Home) {
    home.ok(&["kanban", "dispatch", "--json"]);
}

/// Lines of the file each worker appends its pid to when its command starts: how often each task really ran.
fn starts(dir: &Path) -> BTreeMap<String, Vec<i64>> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        let pids = std::fs::read_to_string(e.path()).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect();
        m.insert(name.trim_end_matches(".starts").to_owned(), pids);
    }
    m
}

#[test]
fn sigkilled_dispatchers_never_strand_or_double_run_a_task() {
    sigkilled_dispatchers(false);
}

/// The same through the home's runner (`kanban.worker_exit_outcome`): it starts a task's worker the moment the
/// launcher asks, before the dispatcher records it, so a kill between the two leaves a live worker no record names.
/// That worker confirms its own run on the board (its pid and start with the confirmation, in one write, so the crash
/// rules see it from then on); a claim nobody started lapses with its spawn lease as before.
#[test]
fn sigkilled_dispatchers_of_the_runners_tasks_never_strand_or_double_run_a_task() {
    sigkilled_dispatchers(true);
}

fn sigkilled_dispatchers(exit_outcome: bool) {
    let home = Home::new();
    let marks = home.path().join("starts");
    std::fs::create_dir_all(&marks).unwrap();
    // Each worker records that it started (`$$`: the worker the run records, under the home's runner the script
    // whose shell runs the command, or becomes it), lives a second, and completes its task: with exit outcomes by
    // exiting 0, else by its own `kanban complete` (hermes's protocol).
    let worker = if exit_outcome {
        format!("echo $$ >> {}/{{task_id}}.starts; sleep 1", marks.display())
    } else {
        format!(
            "echo $$ >> {}/{{task_id}}.starts; sleep 1; {} kanban complete {{task_id}} >/dev/null 2>&1",
            marks.display(),
            berth_bin().display()
        )
    };
    for (k, v) in [
        ("kanban.worker_exit_outcome", if exit_outcome { "true" } else { "false" }),
        ("kanban.worker_command", worker.as_str()),
        ("kanban.spawn_lease_seconds", &LEASE_SECS.to_string()),
        // Stranded claims hold these slots until their lease ends: the stall the lease bounds.
        ("kanban.max_in_progress", "60"),
        // Lease expiries count as failures; none of them may block a task here.
        ("kanban.failure_limit", "100"),
    ] {
        home.ok(&["config", "set", k, v]);
    }
    for i in 0..TASKS {
        home.ok(&["kanban", "create", &format!("c{i}"), "--assignee", &home.profile]);
    }

    // 20 dispatchers, each SIGKILLed at a random point of its tick (each tick claims up to 10 of the 200 tasks, then
    // starts their workers and records them): before, during and after the claim transaction and the spawns.
    let mut rng = Rng(0xc1a1_3500_dead_beef);
    // What the kills left: runs whose dispatcher died before recording a worker. Some of those workers were started
    // and confirm on their own; the others were never started: their claims wait for nobody.
    let unrecorded_runs = || {
        let s = store(&home);
        let b = BoardSlug::default_board();
        let mut unrecorded = Vec::new();
        for t in s.tasks(&b, None, None).unwrap() {
            let events = s.events(&t.id, 0).unwrap();
            for r in s.runs(&t.id).unwrap() {
                if !events.iter().any(|e| e.kind == "spawned" && e.run_id == Some(r.id)) {
                    unrecorded.push((t.id.clone(), r.id));
                }
            }
        }
        unrecorded
    };
    // At least KILLS kills; more (bounded) until one landed between a claim and its spawn record, which a fast
    // dispatcher on a loaded machine can make rare.
    // A stranded claim (a run whose worker was never started, so nothing will confirm it) is what the lease is for:
    // kill until there is one. A started worker confirms within moments of its dispatcher's death, hence the grace.
    let stranded = || {
        // scenario: the grace a started worker has to confirm; a claim still unconfirmed after it is stranded.
        std::thread::sleep(Duration::from_millis(500));
        let s = store(&home);
        unrecorded_runs().iter().any(|(id, run)| {
            s.runs(id).unwrap().into_iter().any(|r| r.id == *run && r.confirmed_at.is_none() && r.outcome.is_none())
        })
    };
    // Kill points within a tick's own time here: a fast machine's tick (20 ms through a warm runner) ends before most
    // points of a fixed range. One tick, not killed, is timed first (and leaves its ten tasks done as any tick would).
    let timed = Instant::now();
    home.ok(&["kanban", "dispatch", "--max", "10", "--json"]);
    let tick_ms = u64::try_from(timed.elapsed().as_millis()).unwrap_or(120).clamp(10, 120);
    for attempt in 0..KILLS * 8 {
        if attempt >= KILLS && stranded() {
            break;
        }
        let mut child = home
            .cmd()
            .args(["kanban", "dispatch", "--max", "10", "--json"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // scenario: a random kill point.
        std::thread::sleep(Duration::from_millis(2 + rng.below(tick_ms)));
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let last_kill = Instant::now();
    // The tasks were started by the home's runner (a `berth worker run` would have been its fallback).
    let runner_log = home.path().join("kanban/logs/runner.log");
    assert!(runner_log.exists(), "the home's runner was started: {}", runner_log.display());

    let unrecorded = unrecorded_runs();
    let b = BoardSlug::default_board();
    assert!(!unrecorded.is_empty(), "no kill landed between a claim and its spawn record; the test proves nothing");

    // Wait out the lease, then one tick.
    let lease = Duration::from_secs(LEASE_SECS);
    // scenario: the spawn lease lapses (measured from the last kill).
    std::thread::sleep((lease + Duration::from_millis(1)).saturating_sub(last_kill.elapsed()));
    let tick_at = last_kill.elapsed();
    dispatch(&home);
    let recovered = last_kill.elapsed();
    let gone_now = gone(&home);
    assert!(gone_now.is_empty(), "after one tick past the lease, running without a live worker: {gone_now:?}");
    // Every unrecorded run was either confirmed by its own worker or expired and requeued: none is left claimed.
    let s = store(&home);
    let (mut self_confirmed, mut expired) = (0, 0);
    for (id, run) in &unrecorded {
        let r = s.runs(id).unwrap().into_iter().find(|r| r.id == *run).unwrap();
        if r.confirmed_at.is_some() {
            self_confirmed += 1;
        } else {
            assert_eq!(r.outcome.as_deref(), Some("lease_expired"), "{id}: run {run} is still held: {r:?}");
            expired += 1;
        }
    }
    drop(s);
    eprintln!(
        "{KILLS} kills left {} runs unrecorded: {self_confirmed} confirmed by their own worker, {expired} stranded \
         claims requeued; spawn lease {LEASE_SECS} s; the tick at {tick_at:?} after the last kill recovered the board \
         by {recovered:?} (its own spawns included)",
        unrecorded.len()
    );
    assert!(expired > 0, "no kill stranded a claim; the test proves nothing");
    assert!(recovered < lease + Duration::from_secs(5), "recovery took {recovered:?}");

    // Ordinary ticks until the board is done.
    wait_until("every task done", Duration::from_secs(60), || {
        let gone_now = gone(&home);
        assert!(gone_now.is_empty(), "running without a live worker: {gone_now:?}");
        let open = store(&home).tasks(&b, None, None).unwrap().iter().filter(|t| t.status != TaskStatus::Done).count();
        if open > 0 {
            dispatch(&home);
        }
        if open == 0 { Ok(()) } else { Err(format!("{open} tasks still not done")) }
    });
    eprintln!("all {TASKS} tasks done {:?} after the last kill", last_kill.elapsed());

    // Every task ran exactly once, by the worker that confirmed its run; no two runs of a task ever overlapped.
    let ran = starts(&marks);
    let s = store(&home);
    for t in s.tasks(&b, None, None).unwrap() {
        let pids = ran.get(&t.id).cloned().unwrap_or_default();
        assert_eq!(pids.len(), 1, "{} ran {} times", t.id, pids.len());
        let runs = s.runs(&t.id).unwrap();
        let confirmed: Vec<_> = runs.iter().filter(|r| r.confirmed_at.is_some()).collect();
        assert_eq!(confirmed.len(), 1, "{}: {} confirmed runs: {runs:?}", t.id, confirmed.len());
        assert_eq!(confirmed[0].worker_pid, Some(pids[0]), "{}: the worker that ran is the one that confirmed", t.id);
        assert_eq!(confirmed[0].outcome.as_deref(), Some("completed"));
        for pair in runs.windows(2) {
            let ended = pair[0].ended_at.expect("an earlier run ended");
            assert!(ended <= pair[1].started_at, "{}: runs {} and {} overlap", t.id, pair[0].id, pair[1].id);
        }
        for r in runs.iter().filter(|r| r.confirmed_at.is_none()) {
            assert_eq!(r.outcome.as_deref(), Some("lease_expired"), "{}: unconfirmed run {r:?}", t.id);
        }
    }
}

#[test]
fn ls_and_show_check_the_worker_and_a_second_worker_for_a_run_runs_nothing() {
    let home = Home::new();
    let marks = home.path().join("ran");
    // `$$`: the run's worker (the home's runner makes the command the worker once its run is confirmed).
    home.ok(&["config", "set", "kanban.worker_command", &format!("echo $$ >> {}; exec sleep 60", marks.display())]);
    let id = home.json(&["kanban", "create", "w", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    let pid = wait_until("the worker's confirmation", Duration::from_secs(20), || {
        let t = &home.json(&["kanban", "show", &id])["task"];
        t["confirmed_at"].as_str().and(t["worker_pid"].as_i64())
    });
    let row = |home: &Home| home.json(&["kanban", "ls"])[0].clone();
    assert_eq!((row(&home)["status"].as_str(), row(&home)["worker_alive"].as_bool()), (Some("running"), Some(true)));

    // Another `worker run` for the same (already confirmed) run refuses and runs nothing.
    let again = home.run(&["worker", "run", &id]);
    assert_eq!(again.status.code(), Some(1), "{}", String::from_utf8_lossy(&again.stderr));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.starts_with("berth: ") && err.contains("no longer claimed") && err.lines().count() == 1, "{err}");

    // The worker dies without a word: ls and show say so at once, without writing anything.
    let events = home.json(&["kanban", "show", &id])["events"].as_array().unwrap().len();
    let killed = std::process::Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status().unwrap();
    assert!(killed.success());
    wait_until("ls to report the dead worker", Duration::from_secs(20), || {
        (row(&home)["worker_alive"] == false).then_some(())
    });
    let text = home.ok(&["kanban", "ls"]);
    assert!(text.contains("running (worker gone)"), "{text}");
    assert!(home.ok(&["kanban", "show", &id]).contains("status:    running (worker gone)"));
    let show = home.json(&["kanban", "show", &id]);
    assert_eq!(show["task"]["worker_alive"], false);
    assert_eq!(show["task"]["status"], "running", "ls and show wrote nothing");
    assert_eq!(show["events"].as_array().unwrap().len(), events, "ls and show wrote nothing");
    // The tick agrees: a crash.
    let report = home.json(&["kanban", "dispatch", "--max", "0"]);
    assert_eq!(report["crashed"], serde_json::json!([id]));
    let ran = std::fs::read_to_string(&marks).unwrap();
    assert_eq!(ran.lines().collect::<Vec<_>>(), [pid.to_string()], "only the confirmed worker ran");
}

/// The dispatcher's record confirms its workers' runs and says so through the gate, so a worker command's worker
/// goes on without a board round trip; but only when the word comes promptly: a worker told so later than a third
/// of min(host timeout, claim TTL) after its start (its dispatcher was held up, and the run may have been taken)
/// confirms its run itself, and one whose run has ended runs nothing.
#[test]
fn a_dispatchers_confirmation_holds_only_when_it_reaches_the_worker_promptly() {
    let home = Home::new();
    let marks = home.path().join("ran");
    let command = format!("kanban.worker_command=echo $BERTH_KANBAN_RUN_ID >> {}", marks.display());
    home.ok(&["config", "set", "kanban.worker_command", &command["kanban.worker_command=".len()..]]);
    // A window of a third of a second.
    home.ok(&["config", "set", "kanban.host_timeout_seconds", "1"]);
    let id = home.json(&["kanban", "create", "w", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    let ran = |_: &Home| std::fs::read_to_string(&marks).unwrap_or_default();
    wait_until("the worker command", Duration::from_secs(20), || (!ran(&home).is_empty()).then_some(()));
    let show = home.json(&["kanban", "show", &id]);
    let confirmations: Vec<&serde_json::Value> =
        show["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "confirmed").collect();
    assert_eq!(confirmations.len(), 1, "one confirmation, the dispatcher's: {show}");
    assert_eq!(confirmations[0]["payload"]["by"], "dispatcher", "{show}");
    let run = confirmations[0]["run_id"].as_i64().expect("the confirmation names its run");
    assert_eq!(ran(&home).trim(), run.to_string());
    // The worker exited without completing: the next tick ends that run as crashed and the task waits as ready.
    wait_until("the crash verdict", Duration::from_secs(20), || {
        home.json(&["kanban", "dispatch", "--max", "0"]);
        (home.json(&["kanban", "show", &id])["task"]["status"] == "ready").then_some(())
    });

    // A worker of that ended run, told "confirmed" at once, trusts its dispatcher (this is why the word is only
    // ever sent right after the record that confirmed the run) ...
    let worker = |delay: Duration| {
        let mut cmd = home.cmd();
        // A worker reads no config file: its settings come as its dispatcher gives them.
        cmd.args(["-c", &command, "-c", "kanban.host_timeout_seconds=1", "worker", "run", &id, "--after-stdin-closes"])
            .env("BERTH_KANBAN_RUN_ID", run.to_string())
            .env("BERTH_KANBAN_BOARD", "default")
            .env("BERTH_PROFILE", &home.profile)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("berth worker run starts");
        std::thread::sleep(delay); // scenario: the word "confirmed" comes this late
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"c").unwrap();
        child.wait_with_output().unwrap()
    };
    let prompt = worker(Duration::ZERO);
    assert!(prompt.status.success(), "{}", String::from_utf8_lossy(&prompt.stderr));
    assert_eq!(ran(&home).lines().count(), 2, "the prompt word was trusted: {}", ran(&home));
    // ... but told late, it asks the board, finds its run ended and runs nothing.
    let late = worker(Duration::from_millis(1500));
    let err = String::from_utf8_lossy(&late.stderr);
    assert_eq!(late.status.code(), Some(2), "{err}");
    assert!(err.contains("is ready, not running"), "{err}");
    assert_eq!(ran(&home).lines().count(), 2, "a late word ran the command: {}", ran(&home));
}
