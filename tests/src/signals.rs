//! Signals reach only berth's own workers: every stop path verifies the worker's start before signalling, a worker
//! finishing its own task is not killed by it, the gateway stops workers beside its ticks and reaps them, and a
//! timed-out command is killed inside its sandbox's namespace, never by host pid.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::support::{Home, berth_bin, require_docker, signal_group, wait_until};

/// `/proc/<pid>/stat` of a process: (state, ppid, starttime).
fn stat(pid: u32) -> Option<(char, u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.first()?.chars().next()?, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// Alive and not a zombie.
fn running(pid: u32) -> bool {
    stat(pid).is_some_and(|(s, _, _)| !matches!(s, 'Z' | 'X'))
}

/// An unrelated process, leading a process group of its own (as a worker would), killed on drop.
struct Stranger(Child);

impl Stranger {
    fn start() -> Self {
        use std::os::unix::process::CommandExt;
        let child = Command::new("sleep").arg("300").process_group(0).stdin(Stdio::null()).spawn().unwrap();
        Self(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn db(home: &Home) -> rusqlite::Connection {
    rusqlite::Connection::open(home.path().join("berth-kanban.db")).unwrap()
}

/// The worker pid recorded on a task.
fn worker_pid(home: &Home, id: &str) -> i64 {
    let v = home.json(&["kanban", "show", id]);
    v["task"]["worker_pid"].as_i64().unwrap_or_else(|| panic!("a worker was spawned: {v}"))
}

/// Runs of a task that ended (crashed, timed out, reclaimed...).
fn ended_runs(home: &Home, id: &str) -> i64 {
    db(home)
        .query_row("SELECT count(*) FROM task_runs WHERE task_id = ?1 AND ended_at IS NOT NULL", [id], |r| r.get(0))
        .unwrap()
}

fn task_status(home: &Home, id: &str) -> String {
    home.json(&["kanban", "show", id])["task"]["status"].as_str().unwrap().to_owned()
}

/// A running task whose real worker is dead and whose row names `stranger` with a wrong start: what a board
/// looks like after the worker's pid was reused by an unrelated process.
fn running_task_with_reused_pid(home: &Home, stranger: &Stranger, extra: &[&str]) -> String {
    let mut args = vec!["kanban", "create", "reused", "--assignee", &home.profile, "--command", "true"];
    args.extend_from_slice(extra);
    let id = home.json(&args)["id"].as_str().unwrap().to_owned();
    home.json(&["-c", "kanban.worker_command=sleep 300", "kanban", "dispatch", "--task", &id]);
    let worker = worker_pid(home, &id);
    signal_group(home, worker, Signal::KILL);
    let worker = u32::try_from(worker).unwrap();
    wait_until("the real worker to exit", Duration::from_secs(10), || !running(worker));
    let (_, _, start) = stat(stranger.pid()).unwrap();
    let wrong = i64::try_from(start).unwrap() + 12345;
    let n = db(home)
        .execute(
            "UPDATE tasks SET worker_pid = ?2, worker_start = ?3 WHERE id = ?1",
            rusqlite::params![id, stranger.pid(), wrong],
        )
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(task_status(home, &id), "running");
    id
}

#[test]
fn an_unrelated_process_with_a_dead_workers_pid_survives_every_stop_path() {
    let home = Home::new();
    let mut stranger = Stranger::start();
    wait_until("the stranger to start", Duration::from_secs(5), || stat(stranger.pid()).is_some());

    for (verb, args, after) in [
        ("complete", vec!["--result", "x"], "done"),
        ("block", vec!["--reason", "x"], "blocked"),
        ("reclaim", vec!["--reason", "x"], "ready"),
        ("archive", vec![], "archived"),
    ] {
        let id = running_task_with_reused_pid(&home, &stranger, &[]);
        let mut cmd = vec!["kanban", verb, id.as_str()];
        cmd.extend(args);
        home.ok(&cmd);
        assert_eq!(task_status(&home, &id), after, "{verb}");
        assert!(stranger.alive(), "`kanban {verb}` signalled an unrelated process with a reused pid");
    }

    // The dispatch tick's housekeeping (max runtime passed, claim expired) and the gateway's.
    let id = running_task_with_reused_pid(&home, &stranger, &["--max-runtime", "1"]);
    db(&home).execute("UPDATE tasks SET claim_expires = 0 WHERE id = ?1", [&id]).unwrap();
    std::thread::sleep(Duration::from_millis(1100)); // scenario: the 1 s max runtime really passes
    home.ok(&["-c", "kanban.worker_command=true", "kanban", "dispatch"]);
    assert!(stranger.alive(), "the dispatch tick signalled an unrelated process with a reused pid");
    assert!(ended_runs(&home, &id) >= 1, "the tick took the task from the dead worker");

    let id = running_task_with_reused_pid(&home, &stranger, &["--max-runtime", "1"]);
    let gw = Gateway::start(&home, &["-c", "kanban.worker_command=true"]);
    wait_until("the gateway to take the task back", Duration::from_secs(15), || ended_runs(&home, &id) >= 1);
    gw.stop();
    assert!(stranger.alive(), "the gateway signalled an unrelated process with a reused pid");
}

#[test]
fn a_worker_with_the_right_start_is_still_stopped() {
    // The other side of the verification: a live worker whose start matches is stopped by `kanban block`.
    let home = Home::new();
    let id = home.json(&["kanban", "create", "live", "--assignee", &home.profile, "--command", "true"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    home.json(&["-c", "kanban.worker_command=sleep 300", "kanban", "dispatch", "--task", &id]);
    let pid = u32::try_from(worker_pid(&home, &id)).unwrap();
    assert!(running(pid));
    home.ok(&["kanban", "block", &id]);
    wait_until("the worker to be stopped", Duration::from_secs(10), || !running(pid));
}

#[test]
fn a_worker_command_completing_its_own_task_is_not_killed_by_it() {
    let home = Home::new();
    let out = home.path().join("after-complete");
    let command =
        format!("{} kanban complete {{task_id}} --result self; echo rc=$? > {}", berth_bin().display(), out.display());
    let id = home.json(&["kanban", "create", "self", "--assignee", &home.profile, "--command", "true"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    home.json(&["-c", &format!("kanban.worker_command={command}"), "kanban", "dispatch", "--task", &id]);
    wait_until("the worker to finish its own task and go on", Duration::from_secs(20), || out.exists());
    wait_until("the worker's line", Duration::from_secs(5), || {
        std::fs::read_to_string(&out).is_ok_and(|s| s.ends_with('\n'))
    });
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "rc=0", "the completing command was killed");
    assert_eq!(task_status(&home, &id), "done");
}

/// A gateway at a 1 s interval, its gateway lines at debug, with the `extra` arguments.
struct Gateway(crate::support::Gateway);

impl Gateway {
    fn start(home: &Home, extra: &[&str]) -> Self {
        let mut cmd = home.cmd();
        cmd.env("BERTH_LOG", "info,berth::gateway=debug")
            .args(["-c", "kanban.dispatch_interval_seconds=1"])
            .args(extra);
        Self(crate::support::Gateway::start_with(home, &mut cmd))
    }

    fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// SIGTERM; it exits 0.
    fn stop(self) {
        let (code, _, err) = self.0.stop();
        assert_eq!(code, Some(0), "{err}");
    }
}

/// Zombie children of `parent`.
fn zombies_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| stat(*p).is_some_and(|(s, pp, _)| s == 'Z' && pp == parent))
        .collect()
}

#[test]
fn a_gateway_stopping_three_timed_out_workers_keeps_ticking_every_second_and_reaps_them() {
    let home = Home::new();
    // Workers that ignore SIGTERM: each stop needs the whole grace period and a SIGKILL.
    let mut ids = Vec::new();
    for i in 0..3 {
        let v = home.json(&[
            "kanban",
            "create",
            &format!("stubborn {i}"),
            "--assignee",
            &home.profile,
            "--command",
            "true",
            "--max-runtime",
            "1",
        ]);
        ids.push(v["id"].as_str().unwrap().to_owned());
    }
    let gw = Gateway::start(&home, &["-c", "kanban.worker_command=trap '' TERM; sleep 300"]);
    let gateway_pid = gw.pid();
    let timed_out = || -> i64 {
        db(&home).query_row("SELECT count(*) FROM task_runs WHERE outcome = 'timed_out'", [], |r| r.get(0)).unwrap_or(0)
    };
    // (when the test saw the line, when the gateway logged it, in seconds of the day)
    // Tick times: the gateway bumps `ticks` in its state file at the end of every tick; polled every 10 ms.
    let ticks_now = || -> Option<u64> {
        let raw = std::fs::read_to_string(home.path().join("gateway.json")).ok()?;
        serde_json::from_str::<serde_json::Value>(&raw).ok()?["ticks"].as_u64()
    };
    let mut ticks: Vec<Instant> = Vec::new();
    let mut last = 0;
    let mut first_stop: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(40);
    // Watch the ticks until the first three stops have had their whole grace period (5 s) and then some.
    loop {
        assert!(Instant::now() < deadline, "three workers did not time out in time; ticks: {}", ticks.len());
        if let Some(n) = ticks_now()
            && n > last
        {
            last = n;
            ticks.push(Instant::now());
        }
        if first_stop.is_none() && timed_out() >= 3 {
            first_stop = Some(Instant::now());
        }
        if first_stop.is_some_and(|t| t.elapsed() > Duration::from_secs(7)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10)); // scenario: the 10 ms sampling of the tick times
    }
    let from = first_stop.unwrap() - Duration::from_secs(2);
    let window: Vec<Instant> = ticks.iter().copied().filter(|t| *t >= from).collect();
    assert!(window.len() >= 6, "too few ticks while stopping: {}", window.len());
    let gaps: Vec<Duration> = window.windows(2).map(|w| w[1] - w[0]).collect();
    let worst = gaps.iter().copied().max().unwrap();
    eprintln!("tick gaps while stopping three workers: {gaps:?}");
    assert!(worst <= Duration::from_millis(1500), "ticks {worst:?} apart while workers were being stopped: {gaps:?}");

    // The stopped workers are gone and reaped: no zombie children of the gateway.
    let runs: Vec<u32> = {
        let conn = db(&home);
        let mut q = conn.prepare("SELECT worker_pid FROM task_runs WHERE outcome = 'timed_out'").unwrap();
        q.query_map([], |r| r.get::<_, u32>(0)).unwrap().map(Result::unwrap).collect()
    };
    assert!(runs.len() >= 3);
    wait_until("stopped workers to be killed and reaped", Duration::from_secs(10), || {
        runs.iter().all(|p| !running(*p)) && zombies_of(gateway_pid).is_empty()
    });
    gw.stop();
    for id in &ids {
        // Whatever is still running when the test ends is not left behind.
        if let Some(pid) = home.json(&["kanban", "show", id])["task"]["worker_pid"].as_i64() {
            signal_group(&home, pid, Signal::KILL);
        }
    }
}

#[test]
fn a_timed_out_command_and_its_children_die_inside_the_sandbox_without_host_pids() {
    require_docker();
    let home = Home::new();
    // berth in a pid namespace of its own, as when it runs in a container with the engine's socket mounted: the
    // host pids the engine reports mean nothing there, so only a kill inside the sandbox can work.
    let mut cmd = Command::new("unshare");
    for (k, v) in home.cmd().get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd
        .args(["--pid", "--fork", "--mount-proc", "--"])
        .arg(berth_bin())
        .args(["run", "--task", "ns", "--timeout", "2", "--", "sh", "-c", "sleep 1001 & sleep 1002 & sleep 1003"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124), "{}", String::from_utf8_lossy(&out.stderr));
    let ps = home.ok(&[
        "run",
        "--task",
        "ns",
        "--",
        "sh",
        "-c",
        "for d in /proc/[0-9]*; do tr '\\000' ' ' < $d/cmdline; echo; done",
    ]);
    assert!(!ps.contains("sleep 100"), "the timed-out command's processes survive in the sandbox:\n{ps}");
}
