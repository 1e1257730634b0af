//! The draining rate on PostgreSQL beside a peer queue on the same server in the same run: berth with 1, 2 and 3
//! gateways (each its own home and `kanban.host_id`, as hosts are), every task's worker command `true` with its exit
//! status as the outcome (`kanban.worker_exit_outcome`), against pgqueuer 1.6 from PyPI (installed into a virtual
//! environment under `target/`, never the system Python) with 1, 2 and 3 worker processes draining the same number
//! of jobs, one `true` process per job: the same work on both sides, at the same concurrency per process (pgqueuer's
//! default batch of 10 a worker, a cap of 10 tasks a gateway). Three more berth rows, 1, 2 and 3 gateways, drain tasks
//! whose command completes its own task (`berth kanban complete {task_id}`, hermes's protocol: a berth process more a
//! task). Each row is reported by its best round, beside the peer's best. Also `kanban create --from` (bulk create)
//! on both stores, beside pgqueuer's batch enqueue.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::figures_pg::Server;
use super::{Figure, berth_bin, median, workspace};

/// Slots a gateway (`kanban.max_in_progress` is this times the gateways), as pgqueuer's default batch of 10 jobs a
/// worker process.
const SLOTS: usize = 10;
const PEER_VERSION: &str = "1.6.0";

/// The peer's virtual environment (made and filled on first use); its python.
fn peer_python() -> PathBuf {
    let venv = workspace().join("target").join("bench-peer-venv");
    let python = venv.join("bin").join("python");
    let ready = Command::new(&python)
        .args(["-c", &format!("import pgqueuer, sys; sys.exit(pgqueuer.__version__ != {PEER_VERSION:?})")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        let base = std::env::var("BERTH_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
        let made = Command::new(&base).arg("-m").arg("venv").arg(&venv).status().expect("python3 for the peer");
        assert!(made.success(), "cannot make the peer's venv at {}", venv.display());
        let pip = Command::new(venv.join("bin").join("pip"))
            .args(["install", "-q", &format!("pgqueuer=={PEER_VERSION}"), "asyncpg"])
            .status()
            .expect("pip");
        assert!(pip.success(), "cannot install pgqueuer {PEER_VERSION} into {}", venv.display());
    }
    python
}

/// libpq's form of a `postgres://` URL whose host is a socket directory (`%2F…`), for asyncpg.
fn asyncpg_dsn(url: &str) -> String {
    let Some((before, after)) = url.split_once('@') else { return url.to_owned() };
    let Some((hostport, db)) = after.split_once('/') else { return url.to_owned() };
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "5432"));
    if !host.starts_with("%2F") {
        return url.replace("postgres://", "postgresql://");
    }
    let host = host.replace("%2F", "/");
    format!("{}@/{db}?host={host}&port={port}", before.replace("postgres://", "postgresql://"))
}

/// What one peer run measured.
struct Peer {
    drain: f64,
    /// CPU per job during the drain ([`busy_seconds`]), ms.
    cpu_ms: f64,
    enqueue_batch: f64,
    enqueue_one: f64,
}

fn peer_run(server: &mut Server, python: &Path, jobs: usize, workers: usize, round: usize) -> Peer {
    let url = server.database(&format!("berth_bench_peer_{workers}_{round}"), None);
    let script = workspace().join("tests/benches/figures_parts/peer_pgqueuer.py");
    let out = Command::new(python)
        .arg(script)
        .args([asyncpg_dsn(&url), jobs.to_string(), workers.to_string()])
        .output()
        .expect("the peer runs");
    assert!(out.status.success(), "peer failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the peer's JSON line");
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Peer {
        drain: f("drain_per_s"),
        cpu_ms: f("drain_cpu_s") * 1000.0 / jobs as f64,
        enqueue_batch: f("enqueue_batch_per_s"),
        enqueue_one: f("enqueue_one_per_s"),
    }
}

/// How a drained task's command ends its task.
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    /// `true`, its exit status the outcome (`kanban.worker_exit_outcome`): the peer's work.
    Exit,
    /// `berth kanban complete {task_id}`: the command records its own outcome (hermes's protocol).
    Complete,
}

/// A berth command for `home`, with the settings every drain home shares.
fn berth_on(home: &Path, url: &str, host: &str, ending: Ending, gateways: usize) -> Command {
    let mut c = Command::new(berth_bin());
    for var in config_bridge::hermetic_vars() {
        c.env_remove(var);
    }
    let (command, exit) = match ending {
        Ending::Exit => ("true".to_owned(), "true"),
        Ending::Complete => (format!("{} kanban complete {{task_id}}", berth_bin().display()), "false"),
    };
    c.env("BERTH_HOME", home).env("BERTH_PROFILE", "drain").stdin(Stdio::null());
    for (k, v) in [
        ("kanban.database_url", url),
        ("kanban.host_id", host),
        ("kanban.worker_command", command.as_str()),
        ("kanban.worker_exit_outcome", exit),
        ("kanban.max_in_progress", &(SLOTS * gateways).to_string()),
        ("kanban.dispatch_interval_seconds", "1"),
    ] {
        c.arg("-c").arg(format!("{k}={v}"));
    }
    c
}

/// What one berth drain measured.
struct Drain {
    rate: f64,
    /// Median claim → completion of a task (its slot time), ms.
    slot_ms: f64,
    /// CPU per task from the gateways' start to the last completion ([`busy_seconds`]), ms.
    cpu_ms: f64,
    create_rate: f64,
    /// The drain's homes, removed when the whole run ends (see `bench_drain`).
    _homes: Vec<tempfile::TempDir>,
}

/// `n` trivial tasks created in one `kanban create --from`, then drained by `gateways` gateways.
fn drain_run(server: &mut Server, gateways: usize, n: usize, ending: Ending, round: usize) -> Drain {
    let ended = match ending {
        Ending::Exit => "exit",
        Ending::Complete => "complete",
    };
    let url = server.database(&format!("berth_bench_drain_{gateways}_{ended}_{round}"), None);
    let homes: Vec<tempfile::TempDir> = (0..gateways).map(|_| tempfile::tempdir().unwrap()).collect();
    for h in &homes {
        std::fs::create_dir_all(h.path().join("profiles").join("drain")).unwrap();
    }
    let file = homes[0].path().join("tasks.jsonl");
    let lines: Vec<String> =
        (0..n).map(|i| format!(r#"{{"title":"job {i}","command":"true","assignee":"drain"}}"#)).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let t = Instant::now();
    let out = berth_on(homes[0].path(), &url, "h0", ending, gateways)
        .args(["kanban", "create", "--from"])
        .arg(&file)
        .output()
        .unwrap();
    let create_rate = n as f64 / t.elapsed().as_secs_f64();
    assert!(out.status.success(), "bulk create: {}", String::from_utf8_lossy(&out.stderr));
    let cpu = busy_seconds();
    let mut children: Vec<Child> = homes
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let log = std::fs::File::create(h.path().join("gateway.log")).unwrap();
            berth_on(h.path(), &url, &format!("h{i}"), ending, gateways)
                .args(["gateway", "run"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap()
        })
        .collect();
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let done = |c: &mut postgres::Client| -> i64 {
        c.query_one("SELECT count(*) FROM berth.tasks WHERE status = 'done'", &[]).unwrap().get(0)
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while done(&mut c) < n as i64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50)); // polling the board for the end of the drain
    }
    let cpu_ms = (busy_seconds() - cpu) * 1000.0 / n as f64;
    for child in &mut children {
        if let Some(pid) = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
    for child in &mut children {
        child.wait().unwrap();
    }
    assert_eq!(done(&mut c), n as i64, "every task done within the deadline");
    let row = c
        .query_one(
            "SELECT (SELECT min(created_at) FROM berth.task_events WHERE kind = 'claimed'), \
             (SELECT max(created_at) FROM berth.task_events WHERE kind = 'completed'), \
             (SELECT count(*) FROM berth.task_runs), \
             (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ended_at - started_at)::float8 FROM berth.task_runs)",
            &[],
        )
        .unwrap();
    let (first, last, runs, slot_ms): (i64, i64, i64, f64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(runs, n as i64, "every task ran once");
    Drain { rate: n as f64 * 1000.0 / (last - first).max(1) as f64, slot_ms, cpu_ms, create_rate, _homes: homes }
}

/// The busy CPU time so far, seconds: with `BERTH_BENCH_CPUACCT` (a cgroup v1 `cpuacct` folder holding the bench,
/// its PostgreSQL server and so every process of both sides) that group's, so other work on a shared machine is not
/// counted; else the whole machine's: every state of `/proc/stat`'s `cpu` line but idle and iowait (as the peer's
/// script measures its own drain). A drain here is CPU-bound, so CPU per task is what its rate follows.
fn busy_seconds() -> f64 {
    if let Some(group) = std::env::var_os("BERTH_BENCH_CPUACCT") {
        let usage = std::fs::read_to_string(Path::new(&group).join("cpuacct.usage")).unwrap_or_default();
        return usage.trim().parse::<f64>().unwrap_or(0.0) / 1e9;
    }
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    let busy: f64 = fields.iter().sum::<f64>() - fields.get(3).unwrap_or(&0.0) - fields.get(4).unwrap_or(&0.0);
    // USER_HZ: 100 on every Linux this runs on (the kernel's ABI for /proc/stat).
    busy / 100.0
}

/// Bulk create on SQLite: `n` tasks in one `kanban create --from`, tasks per second.
fn sqlite_create(n: usize) -> f64 {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("profiles").join("drain")).unwrap();
    let file = home.path().join("tasks.jsonl");
    let lines: Vec<String> =
        (0..n).map(|i| format!(r#"{{"title":"job {i}","command":"true","assignee":"drain"}}"#)).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let mut c = Command::new(berth_bin());
    for var in config_bridge::hermetic_vars() {
        c.env_remove(var);
    }
    c.env("BERTH_HOME", home.path()).env("BERTH_PROFILE", "drain").args(["kanban", "create", "--from"]).arg(&file);
    let t = Instant::now();
    let out = c.output().unwrap();
    assert!(out.status.success(), "bulk create: {}", String::from_utf8_lossy(&out.stderr));
    n as f64 / t.elapsed().as_secs_f64()
}

/// Whose CPU the rows count (see [`busy_seconds`]).
fn cpu_source() -> &'static str {
    if std::env::var_os("BERTH_BENCH_CPUACCT").is_some() {
        "the bench's own processes and server, from their cgroup"
    } else {
        "the whole machine's"
    }
}

/// The greatest of `v` (a row's best round).
fn best(v: impl IntoIterator<Item = f64>) -> f64 {
    v.into_iter().fold(0.0, f64::max)
}

/// The drain and bulk-create rows; none without a PostgreSQL server.
pub fn bench_drain(quick: bool) -> Vec<Figure> {
    let Some(mut server) = Server::from_env() else {
        eprintln!("bench: drain rows skipped: BERTH_TEST_POSTGRES_URL is not set");
        return Vec::new();
    };
    let python = peer_python();
    let (n, reps) = if quick { (300, 1) } else { (1000, 3) };
    // The rows: 1, 2 and 3 gateways doing the peer's work, then 1, 2 and 3 with hermes's protocol; the peer with 1, 2
    // and 3 worker processes.
    let setups = [
        (1, Ending::Exit),
        (2, Ending::Exit),
        (3, Ending::Exit),
        (1, Ending::Complete),
        (2, Ending::Complete),
        (3, Ending::Complete),
    ];
    let peer_workers = [1, 2, 3];
    let mut berth: Vec<Vec<Drain>> = setups.iter().map(|_| Vec::new()).collect();
    let mut peers: Vec<Vec<Peer>> = peer_workers.iter().map(|_| Vec::new()).collect();
    // Interleaved, so a busy moment of the machine falls on both sides. Nothing is removed between drains (each has
    // its own database and homes, removed when the run ends): on a filesystem without a journal, ext4 checks every
    // new inode against those freed in the last seconds, so removing a drain's thousands of files and its database
    // right before the next drain made that drain's every new file cost a scan, a cost of the bench's own cleanup.
    for rep in 0..reps {
        for (k, ((g, ending), runs)) in setups.iter().zip(&mut berth).enumerate() {
            eprintln!("bench: drain {n} tasks, {g} gateway(s), round {}", rep + 1);
            runs.push(drain_run(&mut server, *g, n, *ending, rep));
            if let (Some(w), Some(p)) = (peer_workers.get(k), peers.get_mut(k)) {
                eprintln!("bench: peer drain {n} jobs, {w} worker process(es), round {}", rep + 1);
                p.push(peer_run(&mut server, &python, n, *w, rep));
            }
        }
    }
    let peer_best: Vec<f64> = peers.iter().map(|p| best(p.iter().map(|p| p.drain))).collect();
    let peer_rate = best(peer_best.iter().copied());
    let peer_shown: Vec<String> = peer_workers
        .iter()
        .zip(&peers)
        .map(|(w, p)| {
            let rounds: Vec<String> = p.iter().map(|p| format!("{:.0}", p.drain)).collect();
            let mut cpu: Vec<f64> = p.iter().map(|p| p.cpu_ms).collect();
            format!("{w} worker(s) {} jobs/s at {:.1} ms of CPU a job", rounds.join(", "), median(&mut cpu))
        })
        .collect();
    let mut figures = Vec::new();
    for ((g, ending), runs) in setups.iter().zip(&berth) {
        let rate = best(runs.iter().map(|d| d.rate));
        let mut slots: Vec<f64> = runs.iter().map(|d| d.slot_ms).collect();
        let mut cpu: Vec<f64> = runs.iter().map(|d| d.cpu_ms).collect();
        let shown: Vec<String> = runs.iter().map(|d| format!("{:.0}", d.rate)).collect();
        // The issue's targets: half the peer's best for its own work, 0.3 of it with a berth process more a task.
        let (how, command, target) = match ending {
            Ending::Exit => ("", "`true`, its exit status the outcome (`kanban.worker_exit_outcome`)", 0.5),
            Ending::Complete => {
                (", each completing itself", "`berth kanban complete {task_id}` (hermes's protocol)", 0.3)
            }
        };
        let slots_total = SLOTS * g;
        let cpu_of = cpu_source();
        figures.push(Figure {
            name: format!("PostgreSQL: drain {n} trivial tasks with {g} gateway(s), {slots_total} slots{how}"),
            berth: rate,
            baseline: Some(peer_rate),
            baseline_source: "pgqueuer 1.6's best on the same server in the same run (1, 2 or 3 worker processes, batches of 10), one `true` process per job",
            unit: "tasks/s (best round)",
            ratio: Some(rate / peer_rate),
            target: format!("≥ {:.0} % of the peer's best", target * 100.0),
            met: rate >= target * peer_rate,
            detail: format!(
                "{reps} round(s) interleaved with the peer (berth {} tasks/s; peer {}); first claim to last completion, from the board's events; each task a `kanban.worker_command` of {command}; median slot time (claim to completion) {:.0} ms; CPU per task {:.1} ms ({cpu_of}; median); every task ran once",
                shown.join(", "),
                peer_shown.join("; "),
                median(&mut slots),
                median(&mut cpu),
            ),
        });
    }
    let peers: Vec<&Peer> = peers.iter().flatten().collect();
    let mut create: Vec<f64> = berth.iter().flatten().map(|d| d.create_rate).collect();
    let create_rate = median(&mut create);
    let mut batch: Vec<f64> = peers.iter().map(|p| p.enqueue_batch).collect();
    let mut one: Vec<f64> = peers.iter().map(|p| p.enqueue_one).collect();
    let batch_rate = median(&mut batch);
    figures.push(Figure {
        name: format!("PostgreSQL: `berth kanban create --from FILE`, {n} tasks in one transaction"),
        berth: create_rate,
        baseline: Some(batch_rate),
        baseline_source: "pgqueuer 1.6's batch enqueue of as many jobs, same server, same run",
        unit: "tasks/s (median)",
        ratio: Some(create_rate / batch_rate),
        target: "≥ 2000 tasks/s".into(),
        met: create_rate >= 2000.0,
        detail: format!(
            "{} runs, the whole process (start, checks, one transaction); pgqueuer's one-at-a-time enqueue: {:.0} jobs/s",
            create.len(),
            median(&mut one)
        ),
    });
    let mut sqlite: Vec<f64> = (0..reps.max(3)).map(|_| sqlite_create(n)).collect();
    let sqlite_rate = median(&mut sqlite);
    figures.push(Figure {
        name: format!("SQLite: `berth kanban create --from FILE`, {n} tasks in one transaction"),
        berth: sqlite_rate,
        baseline: None,
        baseline_source: "",
        unit: "tasks/s (median)",
        ratio: None,
        target: "≥ 2000 tasks/s".into(),
        met: sqlite_rate >= 2000.0,
        detail: format!("{} runs, the whole process", sqlite.len()),
    });
    figures
}
