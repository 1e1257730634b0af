//! Measures every PRODUCT §9 figure in one run, side by side with its baseline, and writes `BENCHMARKS.md` and
//! `benchmarks.json` at the workspace root. Run it with `cargo xtask bench` (release build, real Docker Engine).
//!
//! Baselines are measured here where they can be (the Docker CLI, the upstream shell reap loop); the upstream
//! dispatcher's figures cannot be run on this machine and are quoted from PRODUCT.md, marked as such.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use docker_adapter::DockerRuntime;
use domain::ids::{BoardSlug, ProfileName, TaskId};
use domain::kanban::{DispatchCaps, TickConfig};
use domain::policy::reaper::ReapScope;
use domain::ports::{ContainerRuntime, ProcessProbe};
use domain::sandbox::{CreateSpec, HostFacts, SandboxIdentity, SandboxMode, build_create_spec};
use domain::service::{self, AcquireRequest};
use domain::time::Timestamp;
use kanban_store::{SpawnRecord, SqliteKanbanStore, TickRequest};
use serde_json::{Value as Json, json};

#[path = "figures_parts/pg.rs"]
mod figures_pg;

const IMAGE: &str = "berth-sandbox:latest";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn berth_bin() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    let bin = target.join("release").join("berth");
    assert!(
        bin.exists(),
        "{} is missing: `cargo build --release -p app` first (cargo xtask bench does)",
        bin.display()
    );
    bin
}

fn now() -> Timestamp {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    Timestamp::from_millis(d.as_millis() as i64)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[idx]
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).stdin(Stdio::null()).output().expect("docker CLI")
}

/// A `berth` command on a scratch home with every setting variable cleared.
fn berth(home: &Path) -> Command {
    let mut c = Command::new(berth_bin());
    for var in config_bridge::hermetic_vars() {
        c.env_remove(var);
    }
    c.env("BERTH_HOME", home).env("TERMINAL_CONTAINER_DISK", "0").stdin(Stdio::null());
    c
}

fn time_cmd(cmd: &mut Command) -> f64 {
    let start = Instant::now();
    let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output().unwrap();
    let t = ms(start.elapsed());
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    t
}

/// The first argument that makes this benchmark binary a peak-memory helper instead of the benchmark.
const PEAK_RSS_HELPER: &str = "__peak_rss_of";

/// Peak resident memory (KiB) of a command, measured by a helper (this binary re-executed) whose only child is
/// that command, so getrusage(RUSAGE_CHILDREN) reports that command alone.
fn peak_rss_kib(cmd: &mut Command) -> i64 {
    let mut helper = Command::new(std::env::current_exe().unwrap());
    helper.arg(PEAK_RSS_HELPER).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => helper.env(k, v),
            None => helper.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        helper.current_dir(dir);
    }
    let out = helper.stdin(Stdio::null()).stderr(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().parse().unwrap_or_else(|_| panic!("the peak-memory helper printed {text:?}"))
}

/// The helper side of [`peak_rss_kib`]: runs `argv`, then prints its children's peak resident memory in KiB.
fn peak_rss_helper(argv: &[String]) -> ! {
    let _ = Command::new(&argv[0]).args(&argv[1..]).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap();
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    println!("{}", usage.max_rss());
    std::process::exit(0);
}

/// One row of the report.
struct Figure {
    name: String,
    berth: f64,
    baseline: Option<f64>,
    baseline_source: &'static str,
    unit: &'static str,
    /// "lower" when smaller is better (times, memory).
    ratio: Option<f64>,
    target: String,
    met: bool,
    detail: String,
}

impl Figure {
    fn json(&self) -> Json {
        json!({"figure": self.name, "berth": self.berth, "baseline": self.baseline, "baseline_source": self.baseline_source,
            "unit": self.unit, "ratio": self.ratio, "target": self.target, "met": self.met, "detail": self.detail})
    }
}

fn settings(home: &Path) -> config_bridge::Settings {
    let env = config_bridge::EnvMap::default();
    config_bridge::resolve(&config_bridge::Inputs { home, file: None, env: &env, overrides: &[] }).unwrap().settings
}

fn spec_for(home: &Path, task: &str, profile: &str) -> (SandboxIdentity, CreateSpec) {
    let identity = SandboxIdentity::new(TaskId::parse(task).unwrap(), ProfileName::parse(profile).unwrap());
    let mut st = settings(home).sandbox();
    st.disk_mb = 0;
    let built =
        build_create_spec(&identity, SandboxMode::Persist, identity.persistent_name(), &st, &HostFacts::default())
            .expect("the default settings make a spec");
    for d in &built.host_dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    (identity, built.spec)
}

fn remove_profile_containers(profile: &str) {
    let out = docker(&["ps", "-aq", "--filter", &format!("label=hermes-profile={profile}")]);
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect();
    for chunk in ids.chunks(50) {
        let mut args = vec!["rm", "-f"];
        args.extend(chunk.iter().map(String::as_str));
        docker(&args);
    }
}

/// Creates `n` labeled containers for `profile`: exited (`true` ran and ended) or just created.
async fn make_containers(rt: &DockerRuntime, home: &Path, profile: &str, n: usize, exited: bool) {
    let specs: Vec<CreateSpec> = (0..n)
        .map(|i| {
            let (_, mut spec) = spec_for(home, &format!("c{i}"), profile);
            spec.cmd = vec!["true".into()];
            spec
        })
        .collect();
    for chunk in specs.chunks(8) {
        service::join_all(chunk.iter().map(|spec| async move {
            let id = rt.create(spec).await.unwrap();
            if exited {
                rt.start(&id).await.unwrap();
            }
        }))
        .await;
    }
    if exited {
        // Wait until every one has exited.
        loop {
            let out = docker(&["ps", "-q", "--filter", &format!("label=hermes-profile={profile}")]);
            if out.stdout.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct Probe;

impl ProcessProbe for Probe {
    fn start_fingerprint(&self, _pid: u32) -> Option<u64> {
        None
    }
    fn is_alive(&self, _pid: u32, _fingerprint: Option<u64>) -> bool {
        true
    }
}

/// A profile name unique to this bench run, so only its own containers are ever removed.
fn bench_profile(kind: &str) -> String {
    format!("bench{kind}{}", std::process::id())
}

fn bench_run_vs_exec(home: &Path, rounds: usize) -> Vec<Figure> {
    let profile = bench_profile("run");
    std::fs::create_dir_all(home.join("profiles").join(&profile)).unwrap();
    let berth = |home: &Path| {
        let mut c = berth(home);
        c.args(["-p", &profile]);
        c
    };
    let created = berth(home).args(["sandbox", "ensure", "--task", "b", "--json"]).output().unwrap();
    let id = serde_json::from_slice::<Json>(&created.stdout).unwrap()["id"].as_str().unwrap().to_owned();
    // Warm both paths once.
    time_cmd(berth(home).args(["run", "--task", "b", "--", "true"]));
    time_cmd(Command::new("docker").args(["exec", &id, "true"]));
    let (mut b, mut d) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        b.push(time_cmd(berth(home).args(["run", "--task", "b", "--", "true"])));
        d.push(time_cmd(Command::new("docker").args(["exec", &id, "true"])));
    }
    let (bm, dm) = (median(&mut b), median(&mut d));
    let mut rss: Vec<f64> =
        (0..5).map(|_| peak_rss_kib(berth(home).args(["run", "--task", "b", "--", "true"])) as f64 / 1024.0).collect();
    let rss = median(&mut rss);
    vec![
        Figure {
            name: "`berth run --task b -- true` on a running sandbox".into(),
            berth: bm,
            baseline: Some(dm),
            baseline_source: "`docker exec <id> true`, measured alternately in this run",
            unit: "ms (median)",
            ratio: Some(bm / dm),
            target: "ratio ≤ 1.0".into(),
            met: bm / dm <= 1.0,
            detail: format!(
                "{rounds} alternating runs each; berth p90 {:.1} ms, docker p90 {:.1} ms",
                percentile(&mut b, 0.9),
                percentile(&mut d, 0.9)
            ),
        },
        Figure {
            name: "peak memory of `berth run`".into(),
            berth: rss,
            baseline: None,
            baseline_source: "",
            unit: "MiB (max RSS, median of 5)",
            ratio: None,
            target: "(reported)".into(),
            met: true,
            detail: String::new(),
        },
    ]
}

async fn bench_acquire(rt: &DockerRuntime, home: &Path, n: usize) -> Figure {
    let (identity, spec) = spec_for(home, "acq", &bench_profile("acq"));
    let req = AcquireRequest { identity, spec, persist_across_processes: true, recreate_on_config_change: true };
    service::acquire(rt, &req).await.unwrap();
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let got = service::acquire(rt, &req).await.unwrap();
        v.push(ms(start.elapsed()));
        assert_eq!(got.action, service::AcquireAction::Attached);
    }
    let p99 = percentile(&mut v, 0.99);
    let m = median(&mut v);
    Figure {
        name: "acquire a running sandbox in the library".into(),
        berth: m,
        baseline: None,
        baseline_source: "",
        unit: "ms (median)",
        ratio: None,
        target: "≤ 2 ms".into(),
        met: m <= 2.0,
        detail: format!("{n} acquires (list + inspect over the Engine API); p99 {p99:.2} ms"),
    }
}

async fn bench_reap(rt: &DockerRuntime, home: &Path, rounds: usize) -> Vec<Figure> {
    let profile = &bench_profile("reap");
    let (mut ours, mut loop_) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        make_containers(rt, home, profile, 100, true).await;
        let t = time_cmd(berth(home).args(["-p", profile, "sandbox", "reap", "--max-age", "0"]));
        assert!(
            docker(&["ps", "-aq", "--filter", &format!("label=hermes-profile={profile}")]).stdout.is_empty(),
            "berth reaped all"
        );
        ours.push(t);
        make_containers(rt, home, profile, 100, true).await;
        let script = format!(
            "for id in $(docker ps -a --filter label=hermes-agent=1 --filter status=exited --filter label=hermes-profile={profile} --format '{{{{.ID}}}}'); do \
             docker inspect --format '{{{{.State.FinishedAt}}}}' \"$id\" >/dev/null; docker rm -f \"$id\" >/dev/null; done"
        );
        loop_.push(time_cmd(Command::new("sh").args(["-c", &script])));
        assert!(
            docker(&["ps", "-aq", "--filter", &format!("label=hermes-profile={profile}")]).stdout.is_empty(),
            "the loop reaped all"
        );
    }
    let (o, l) = (median(&mut ours), median(&mut loop_));

    // A sweep with nothing to reap over 200 labeled (young, never started) containers.
    let idle = &bench_profile("idle");
    make_containers(rt, home, idle, 200, false).await;
    let scope = ReapScope { profile_label: Some(idle.into()), max_age_secs: 600, host: None };
    let mut sweeps = Vec::new();
    for _ in 0..30 {
        let start = Instant::now();
        let r = service::reap(rt, now(), &scope, &Probe, false).await.unwrap();
        sweeps.push(ms(start.elapsed()));
        assert!(r.removed.is_empty() && r.skipped.len() == 200);
    }
    remove_profile_containers(idle);
    let s = median(&mut sweeps);
    vec![
        Figure {
            name: "reap 100 stale containers".into(),
            berth: o,
            baseline: Some(l),
            baseline_source: "upstream's method: `docker ps` + per-container `docker inspect` + `docker rm -f` in a shell loop, same 100 containers recreated",
            unit: "ms (median)",
            ratio: Some(l / o),
            target: "baseline/berth ≥ 5×".into(),
            met: l / o >= 5.0,
            detail: format!("{rounds} rounds each; berth = `berth sandbox reap --max-age 0` as a process"),
        },
        Figure {
            name: "sweep with nothing to reap over 200 labeled containers".into(),
            berth: s,
            baseline: None,
            baseline_source: "",
            unit: "ms (median)",
            ratio: None,
            target: "≤ 50 ms".into(),
            met: s <= 50.0,
            detail: "in the library, 30 sweeps over 200 young `created` containers; the listing decides them, so no inspect is needed".into(),
        },
    ]
}

/// Builds a board file with `n` ready tasks over 100 profiles by bulk insert.
fn board_file(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join(format!("board-{n}.db"));
    if path.exists() {
        return path;
    }
    drop(SqliteKanbanStore::open(&path).unwrap());
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut task = tx
            .prepare("INSERT INTO tasks (id, board, title, assignee, status, priority, created_at) VALUES (?1, 'default', 'bench', ?2, 'ready', ?3, ?4)")
            .unwrap();
        let mut ev = tx
            .prepare("INSERT INTO task_events (task_id, kind, payload, created_at) VALUES (?1, 'created', '{}', ?2)")
            .unwrap();
        for i in 0..n {
            let id = format!("t_{i:08x}");
            task.execute(rusqlite::params![
                id,
                format!("p{}", i % 100),
                (i % 5) as i64,
                1_700_000_000_000i64 + i as i64
            ])
            .unwrap();
            ev.execute(rusqlite::params![id, 1_700_000_000_000i64 + i as i64]).unwrap();
        }
    }
    tx.commit().unwrap();
    conn.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
    path
}

fn tick_cfg() -> TickConfig {
    TickConfig {
        caps: DispatchCaps { per_profile: Some(3), ..DispatchCaps::default() },
        profiles: (0..100).map(|i| format!("p{i}")).collect(),
        failure_limit: 2,
        ..TickConfig::default()
    }
}

fn bench_dispatch(dir: &Path) -> (Vec<Figure>, Json) {
    let board = BoardSlug::default_board();
    let cfg = tick_cfg();
    let mut growth: BTreeMap<usize, Json> = BTreeMap::new();
    let mut figures = Vec::new();
    for n in [1_000usize, 10_000, 100_000] {
        let path = board_file(dir, n);
        let store = SqliteKanbanStore::open_read_only(&path).unwrap();
        let req = TickRequest {
            board: &board,
            cfg: &cfg,
            now: now(),
            probe: &Probe,
            claimer: "bench:1",
            claim_ttl: Duration::from_secs(900),
            spawn_lease: Duration::from_secs(20),
        };
        let reps = if n >= 100_000 { 7 } else { 21 };
        let mut dry = Vec::new();
        for _ in 0..reps {
            let start = Instant::now();
            let plan = domain::dispatcher::plan(&store, &req).unwrap();
            dry.push(ms(start.elapsed()));
            assert_eq!(plan.spawns().count(), 300);
        }
        drop(store);
        // Claims: a fresh copy of the board each repetition; tick (one transaction) + 300 recorded spawns.
        let mut claims = Vec::new();
        for r in 0..5 {
            let copy = dir.join(format!("claims-{n}-{r}.db"));
            std::fs::copy(&path, &copy).unwrap();
            let mut store = SqliteKanbanStore::open(&copy).unwrap();
            let start = Instant::now();
            let out = domain::dispatcher::apply(&mut store, &req).unwrap();
            let records: Vec<SpawnRecord<'_>> = out
                .claimed
                .iter()
                .enumerate()
                .map(|(i, c)| SpawnRecord {
                    task: &c.task_id,
                    run_id: c.run_id,
                    pid: 100_000 + i as u32,
                    start: None,
                    log: "",
                })
                .collect();
            store.record_spawned(&records, Duration::from_secs(20), now()).unwrap();
            claims.push(ms(start.elapsed()));
            assert_eq!(out.claimed.len(), 300);
            drop(store);
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", copy.display()));
            }
        }
        let (d, c) = (median(&mut dry), median(&mut claims));
        growth.insert(n, json!({"dry_run_ms": d, "claim_300_ms": c}));
        match n {
            10_000 => {
                figures.push(Figure {
                    name: "dispatch dry run, 10 000 ready tasks, 100 profiles, cap 3".into(),
                    berth: d,
                    baseline: Some(577.0),
                    baseline_source: "upstream `dispatch_once`, as reported in PRODUCT.md (not re-measured here; 163 ms with its later cache)",
                    unit: "ms (median)",
                    ratio: Some(577.0 / d),
                    target: "≤ 15 ms".into(),
                    met: d <= 15.0,
                    detail: format!("{reps} ticks (snapshot read + plan) on an on-disk board"),
                });
                figures.push(Figure {
                    name: "claim and record 300 spawns (no-op spawner), 10 000 ready tasks".into(),
                    berth: c,
                    baseline: Some(1166.0),
                    baseline_source: "upstream, as reported in PRODUCT.md (not re-measured here; 717 ms with its later cache)",
                    unit: "ms (median)",
                    ratio: Some(1166.0 / c),
                    target: "≤ 50 ms".into(),
                    met: c <= 50.0,
                    detail: "one tick transaction (claims) plus one transaction recording the 300 workers, on disk (WAL), 5 repetitions".into(),
                });
            }
            100_000 => figures.push(Figure {
                name: "dispatch dry run, 100 000 ready tasks".into(),
                berth: d,
                baseline: Some(5400.0),
                baseline_source: "upstream, as reported in PRODUCT.md (not re-measured here)",
                unit: "ms (median)",
                ratio: Some(5400.0 / d),
                target: "≤ 150 ms".into(),
                met: d <= 150.0,
                detail: format!("{reps} ticks; claiming 300 here took {c:.1} ms"),
            }),
            _ => {}
        }
    }
    // The same figures on PostgreSQL, and claims per second with three concurrent dispatchers on both stores.
    let Some(mut server) = figures_pg::Server::from_env() else {
        eprintln!("bench: BERTH_TEST_POSTGRES_URL is not set; the PostgreSQL figures are not measured");
        return (figures, json!(growth));
    };
    for n in [10_000usize, 100_000] {
        let (d, c) = figures_pg::dispatch_pg(&mut server, n);
        if let Some(g) = growth.get_mut(&n) {
            g["pg_dry_run_ms"] = json!(d);
            g["pg_claim_300_ms"] = json!(c);
        }
        if n == 10_000 {
            figures.push(Figure {
                name: "PostgreSQL: dispatch dry run, 10 000 ready tasks, 100 profiles, cap 3".into(),
                berth: d,
                baseline: None,
                baseline_source: "",
                unit: "ms (median)",
                ratio: None,
                target: "≤ 30 ms".into(),
                met: d <= 30.0,
                detail: "21 ticks (snapshot read in a read-only transaction + plan), loopback server, warm connection"
                    .into(),
            });
            figures.push(Figure {
                name: "PostgreSQL: claim and record 300 spawns (no-op spawner), 10 000 ready tasks".into(),
                berth: c,
                baseline: None,
                baseline_source: "",
                unit: "ms (median)",
                ratio: None,
                target: "≤ 100 ms".into(),
                met: c <= 100.0,
                detail: "one tick transaction under the advisory lock (set-based claims) plus one recording the 300 workers; 5 repetitions, each on a fresh copy of the board".into(),
            });
        } else {
            figures.push(Figure {
                name: "PostgreSQL: dispatch dry run, 100 000 ready tasks".into(),
                berth: d,
                baseline: None,
                baseline_source: "",
                unit: "ms (median)",
                ratio: None,
                target: "(reported)".into(),
                met: true,
                detail: format!("7 ticks; claiming 300 here took {c:.1} ms"),
            });
        }
    }
    let sqlite_board = figures_pg::sqlite_copy(&board_file(dir, 10_000), dir, "concurrent.db");
    let sqlite_rate = figures_pg::concurrent_claims(&|| figures_pg::open_sqlite(&sqlite_board));
    let pg_rate = figures_pg::pg_concurrent(&mut server);
    for (store, rate) in [("SQLite", sqlite_rate), ("PostgreSQL", pg_rate)] {
        figures.push(Figure {
            name: format!("{store}: claims per second, three concurrent dispatchers, 10 000 ready tasks"),
            berth: rate,
            baseline: None,
            baseline_source: "",
            unit: "claims/s",
            ratio: None,
            target: "(reported)".into(),
            met: true,
            detail: "three threads, each its own connection, ticking (≤ 50 spawns per tick) and recording until 3 000 claims; every claim unique (compare-and-swap)".into(),
        });
    }
    (figures, json!(growth))
}

fn bench_concurrent_ensure(rounds: usize) -> Figure {
    let mut v = Vec::new();
    for _ in 0..rounds {
        let home = tempfile::tempdir().unwrap();
        let profile = bench_profile("race");
        std::fs::create_dir_all(home.path().join("profiles").join(&profile)).unwrap();
        let start = Instant::now();
        let children: Vec<_> = (0..20)
            .map(|_| {
                berth(home.path())
                    .args(["-p", &profile, "sandbox", "ensure", "--task", "race", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut ids = std::collections::BTreeSet::new();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            ids.insert(serde_json::from_slice::<Json>(&out.stdout).unwrap()["id"].as_str().unwrap().to_owned());
        }
        v.push(ms(start.elapsed()));
        assert_eq!(ids.len(), 1, "exactly one container");
        remove_profile_containers(&profile);
    }
    let m = median(&mut v);
    Figure {
        name: "20 concurrent `berth sandbox ensure` on one identity".into(),
        berth: m,
        baseline: None,
        baseline_source: "",
        unit: "ms (median wall time for all 20)",
        ratio: None,
        target: "≤ 3000 ms, exactly one container".into(),
        met: m <= 3000.0,
        detail: format!("{rounds} rounds, each from no container; every round ended with exactly one container"),
    }
}

fn bench_gateway_memory() -> Figure {
    let home = tempfile::tempdir().unwrap();
    let mut child = berth(home.path())
        .args(["-c", "kanban.dispatch_interval_seconds=1", "gateway", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(6));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    let (rss, hwm) = (field("VmRSS:"), field("VmHWM:"));
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    child.wait().unwrap();
    Figure {
        name: "idle gateway resident memory".into(),
        berth: rss,
        baseline: None,
        baseline_source: "",
        unit: "MiB (VmRSS after 6 s, 5 ticks)",
        ratio: None,
        target: "≤ 30 MiB".into(),
        met: rss <= 30.0,
        detail: format!("peak (VmHWM) {hwm:.1} MiB"),
    }
}

fn machine() -> Json {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let engine = String::from_utf8_lossy(
        &docker(&["version", "--format", "{{.Server.Version}} (API {{.Server.APIVersion}})"]).stdout,
    )
    .trim()
    .to_owned();
    let kernel = String::from_utf8_lossy(&Command::new("uname").arg("-r").output().unwrap().stdout).trim().to_owned();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let date =
        String::from_utf8_lossy(&Command::new("date").arg("-u").arg("+%Y-%m-%dT%H:%M:%SZ").output().unwrap().stdout)
            .trim()
            .to_owned();
    json!({"cpu": cpu, "cores": cores, "kernel": kernel, "docker": engine, "date": date})
}

fn report(figures: &[Figure], growth: &Json, machine: &Json) -> String {
    let mut s = String::from(
        "# Benchmarks\n\n<!-- Written by `cargo xtask bench` (tests/benches/figures.rs); numbers are from the run below. -->\n\n",
    );
    s += &format!(
        "Machine: {} ({} cores), kernel {}, Docker Engine {}.\nDate: {}.\nCommand: `cargo xtask bench` (release build, real daemon, local image `{IMAGE}`).\n\n",
        machine["cpu"].as_str().unwrap_or(""),
        machine["cores"],
        machine["kernel"].as_str().unwrap_or(""),
        machine["docker"].as_str().unwrap_or(""),
        machine["date"].as_str().unwrap_or("")
    );
    s += "| figure | berth | baseline | ratio | target | met | how |\n|---|---|---|---|---|---|---|\n";
    for f in figures {
        let baseline = f.baseline.map(|b| format!("{b:.1} ({})", f.baseline_source)).unwrap_or_else(|| "—".into());
        let ratio = f.ratio.map(|r| format!("{r:.2}")).unwrap_or_else(|| "—".into());
        s += &format!(
            "| {} | {:.2} {} | {} | {} | {} | {} | {} |\n",
            f.name,
            f.berth,
            f.unit,
            baseline,
            ratio,
            f.target,
            if f.met { "yes" } else { "**no**" },
            f.detail
        );
    }
    s += "\nRatios: for `berth run` it is berth ÷ docker (lower is better); for the reap and dispatch rows it is baseline ÷ berth (higher is better).\n";
    s += "\n## Growth of the dispatcher with board size, SQLite and PostgreSQL side by side\n\n| ready tasks | SQLite dry-run tick (ms, median) | SQLite claim + record 300 (ms, median) | PostgreSQL dry-run tick (ms, median) | PostgreSQL claim + record 300 (ms, median) |\n|---|---|---|---|---|\n";
    let cell = |v: &Json| v.as_f64().map(|x| format!("{x:.2}")).unwrap_or_else(|| "—".into());
    if let Some(m) = growth.as_object() {
        for (n, v) in m {
            s += &format!(
                "| {n} | {} | {} | {} | {} |\n",
                cell(&v["dry_run_ms"]),
                cell(&v["claim_300_ms"]),
                cell(&v["pg_dry_run_ms"]),
                cell(&v["pg_claim_300_ms"])
            );
        }
    }
    let misses: Vec<&str> = figures.iter().filter(|f| !f.met).map(|f| f.name.as_str()).collect();
    s += "\n## Misses\n\n";
    if misses.is_empty() {
        s += "None in this run.\n";
    } else {
        for m in misses {
            s += &format!("- {m}\n");
        }
    }
    s
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(PEAK_RSS_HELPER) {
        peak_rss_helper(&args[2..]);
    }
    let quick = std::env::args().any(|a| a == "--quick");
    if std::env::args().any(|a| a == "--dispatch-only") {
        // The dispatcher's rows only (no Docker, no files written): for iterating on a store.
        let dir = tempfile::tempdir().unwrap();
        let (figures, growth) = bench_dispatch(dir.path());
        print!("{}", report(&figures, &growth, &machine()));
        return;
    }
    assert!(docker(&["image", "inspect", IMAGE]).status.success(), "image {IMAGE} is missing: `cargo xtask image`");
    let home = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let docker_rt = rt.block_on(DockerRuntime::connect(docker_adapter::DEFAULT_ENDPOINT)).expect("a Docker daemon");
    let mut figures = Vec::new();

    eprintln!("bench: berth run vs docker exec …");
    figures.extend(bench_run_vs_exec(home.path(), if quick { 11 } else { 31 }));
    eprintln!("bench: library acquire …");
    figures.push(rt.block_on(bench_acquire(&docker_rt, home.path(), if quick { 50 } else { 200 })));
    eprintln!("bench: reaping …");
    figures.extend(rt.block_on(bench_reap(&docker_rt, home.path(), if quick { 1 } else { 3 })));
    eprintln!("bench: dispatch …");
    let (dispatch, growth) = bench_dispatch(home.path());
    figures.extend(dispatch);
    eprintln!("bench: 20 concurrent ensures …");
    figures.push(bench_concurrent_ensure(if quick { 1 } else { 3 }));
    eprintln!("bench: idle gateway memory …");
    figures.push(bench_gateway_memory());
    for kind in ["run", "acq", "reap", "idle"] {
        remove_profile_containers(&bench_profile(kind));
    }

    let machine = machine();
    let md = report(&figures, &growth, &machine);
    std::fs::write(workspace().join("BENCHMARKS.md"), &md).unwrap();
    let j = json!({"machine": machine, "figures": figures.iter().map(Figure::json).collect::<Vec<_>>(), "dispatch_growth": growth});
    std::fs::write(workspace().join("benchmarks.json"), serde_json::to_string_pretty(&j).unwrap() + "\n").unwrap();
    print!("{md}");
}
