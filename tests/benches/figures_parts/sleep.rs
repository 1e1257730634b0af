//! Sandboxes that sleep and wake (issue 42): a task's claim → its command's first output with a cold sandbox, a
//! pre-warmed one (`kanban.prewarm`) and a resumed one (after `berth sandbox suspend`), beside `docker run` and
//! `docker exec` of the same command, in interleaved rounds; and suspend and resume times against the snapshot's
//! size, beside the engine's own `docker commit` and `docker run` of the snapshot.
//!
//! The command prints the clock (`date +%s%N`, inside the container: the host's clock), so its first output's time
//! is read from the output itself: for a task, from the claim's event on the board; for `docker run|exec`, from
//! just before the CLI is started.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::figures_in_time::{Gateway, claimed_at};
use super::{Figure, IMAGE, berth, docker, median, ms, percentile, remove_profile_containers};

/// The command every side runs: as the built-in worker runs a task's command (`sh -c`).
const CMD: &str = "date +%s%N";

fn now_ns() -> i128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i128
}

/// The clock the command printed (nanoseconds since the epoch): the first 19-digit number in `text`.
fn printed_ns(text: &str) -> Option<i128> {
    text.split(|c: char| !c.is_ascii_digit()).find(|w| w.len() == 19).and_then(|w| w.parse().ok())
}

/// Removes, when the part ends or panics, what it made: the profiles' containers and snapshot images, and the
/// containers labelled with this run's label (the `docker run|exec` baselines).
struct Cleanup {
    profiles: Vec<String>,
    label: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let listed = |args: &[&str]| -> Vec<String> {
            String::from_utf8_lossy(&docker(args).stdout).split_whitespace().map(str::to_owned).collect()
        };
        for p in &self.profiles {
            remove_profile_containers(p);
            let images = listed(&["images", "-q", "--no-trunc", "--filter", &format!("label=hermes-profile={p}")]);
            for i in images {
                docker(&["rmi", "-f", &i]);
            }
        }
        for c in listed(&["ps", "-aq", "--filter", &format!("label={}", self.label)]) {
            docker(&["rm", "-f", &c]);
        }
        for i in listed(&["images", "-q", "--no-trunc", "--filter", &format!("label={}", self.label)]) {
            docker(&["rmi", "-f", &i]);
        }
    }
}

/// A scratch home with one profile; `berth -p PROFILE ARGS` on it.
struct Home {
    dir: tempfile::TempDir,
    profile: String,
}

impl Home {
    fn new(profile: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("profiles").join(profile)).unwrap();
        Self { dir, profile: profile.to_owned() }
    }

    fn cmd(&self) -> Command {
        let mut c = berth(self.dir.path());
        c.args(["-p", &self.profile]);
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(out.status.success(), "berth {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend(args);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    /// `kanban create` of a task of this profile running `command`; its id.
    fn create(&self, title: &str, command: &str, extra: &[&str]) -> String {
        let mut args = vec!["kanban", "create", title, "--assignee", &self.profile, "--command", command];
        args.extend(extra);
        self.json(&args)["id"].as_str().unwrap().to_owned()
    }

    fn board(&self) -> PathBuf {
        self.dir.path().join(kanban_store::BOARD_FILE)
    }

    fn status(&self, task: &str) -> Option<String> {
        let conn =
            rusqlite::Connection::open_with_flags(self.board(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
        conn.query_row("SELECT status FROM tasks WHERE id = ?1", [task], |r| r.get(0)).ok()
    }

    fn wait_status(&self, task: &str, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while self.status(task).as_deref() != Some(want) {
            assert!(
                Instant::now() < deadline,
                "task {task}: {:?}, not {want}, after 90 s; log: {}",
                self.status(task),
                self.log(task)
            );
            std::thread::sleep(Duration::from_millis(20)); // polling the board
        }
    }

    fn log(&self, task: &str) -> String {
        std::fs::read_to_string(self.dir.path().join("kanban").join("logs").join(format!("{task}.log")))
            .unwrap_or_default()
    }

    fn running_sandbox(&self, task: &str) -> bool {
        let filter = format!("label=hermes-task-id={task}");
        let profile = format!("label=hermes-profile={}", self.profile);
        !docker(&["ps", "-q", "--filter", &filter, "--filter", &profile]).stdout.is_empty()
    }

    /// One value of the board's (milliseconds): `sql` with the task's id as `?1`.
    fn board_ms(&self, sql: &str, task: &str) -> Option<i64> {
        let conn =
            rusqlite::Connection::open_with_flags(self.board(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
        conn.query_row(sql, [task], |r| r.get::<_, Option<i64>>(0)).ok().flatten()
    }

    /// A done task's claim → first output, with its steps; and how its worker got its sandbox (`created`,
    /// `attached`, …).
    fn first_output(&self, task: &str) -> (Steps, String) {
        self.wait_status(task, "done");
        let claimed = claimed_at(&self.board(), task).expect("a done task was claimed");
        let event = "SELECT created_at FROM task_events WHERE task_id = ?1 AND kind = 'spawned' ORDER BY id LIMIT 1";
        let spawned = self.board_ms(event, task).expect("a done task's worker was spawned");
        let run = "SELECT confirmed_at FROM task_runs WHERE task_id = ?1 ORDER BY id LIMIT 1";
        let confirmed = self.board_ms(run, task).expect("a done task's worker confirmed its run");
        let log = self.log(task);
        let printed = printed_ns(&log).unwrap_or_else(|| panic!("task {task} printed no clock: {log}"));
        let action = log
            .lines()
            .find_map(|l| l.split("] sandbox ").nth(1)?.rsplit_once('(')?.1.strip_suffix(')').map(str::to_owned))
            .unwrap_or_default();
        let since = |t: i64| (printed - i128::from(t) * 1_000_000) as f64 / 1e6;
        let steps = Steps {
            total: since(claimed),
            spawned: (spawned - claimed) as f64,
            confirmed: (confirmed - claimed) as f64,
            sandbox_and_exec: since(confirmed),
        };
        (steps, action)
    }
}

/// Where a task's claim → first output goes, from the board (ms): the claim to its `spawned` event (the gateway
/// starting the worker), to the worker's confirmation of its run (the worker process up, the board opened, the run
/// confirmed), then to the first output (settings, engine, sandbox acquired or resumed, exec).
#[derive(Clone, Copy, Default)]
struct Steps {
    total: f64,
    spawned: f64,
    confirmed: f64,
    sandbox_and_exec: f64,
}

/// `docker …` of the command; the time from just before the CLI starts to the clock it printed (ms).
fn docker_first_output(args: &[&str]) -> f64 {
    let start = now_ns();
    let out = Command::new("docker").args(args).args(["sh", "-c", CMD]).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    (printed_ns(&text).unwrap_or_else(|| panic!("docker {args:?} printed {text:?}")) - start) as f64 / 1e6
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Cold,
    Warm,
    Resumed,
    DockerRun,
    DockerExec,
}

const KINDS: [Kind; 5] = [Kind::Cold, Kind::Warm, Kind::Resumed, Kind::DockerRun, Kind::DockerExec];

/// Claim → first output, `rounds` interleaved rounds of the five (the order turning each round), after one round
/// not counted.
fn bench_first_output(rounds: usize, label: &str) -> Vec<Figure> {
    let home = Home::new(&format!("bench-wake-{}", std::process::id()));
    // The gateway: one task at a time, pre-warming the next one waiting on that cap.
    let mut gateway = home.cmd();
    gateway
        .args(["-c", "kanban.prewarm=1", "-c", "kanban.max_in_progress=1", "-c", "kanban.dispatch_interval_seconds=1"])
        .args(["gateway", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let gateway = Gateway(gateway.spawn().unwrap());
    let lbl = format!("{label}=1");
    let keep = docker(&["run", "-d", "--label", &lbl, IMAGE, "sleep", "infinity"]);
    assert!(keep.status.success(), "{}", String::from_utf8_lossy(&keep.stderr));
    let exec_into = String::from_utf8_lossy(&keep.stdout).trim().to_owned();
    let one = |kind: Kind, r: usize| -> Steps {
        let docker_only = |total| Steps { total, ..Steps::default() };
        match kind {
            Kind::Cold => {
                let t = home.create(&format!("cold {r}"), CMD, &[]);
                let (v, action) = home.first_output(&t);
                assert_eq!(action, "created", "cold task {t}: {}", home.log(&t));
                v
            }
            Kind::Warm => {
                // A task holding the cap until told, then the measured one waiting on it: pre-warmed meanwhile.
                let hold = home.create(&format!("hold {r}"), "until [ -e /workspace/go ]; do sleep 0.05; done", &[]);
                home.wait_status(&hold, "running");
                let t = home.create(&format!("warm {r}"), CMD, &[]);
                let deadline = Instant::now() + Duration::from_secs(60);
                while !home.running_sandbox(&t) {
                    assert!(Instant::now() < deadline, "task {t}'s sandbox was not pre-warmed within 60 s");
                    std::thread::sleep(Duration::from_millis(20)); // polling the engine
                }
                assert_eq!(home.status(&t).as_deref(), Some("ready"), "a pre-warmed task ran before its turn");
                home.ok(&["run", "--task", &hold, "--", "touch", "/workspace/go"]);
                let (v, action) = home.first_output(&t);
                assert_eq!(action, "attached", "pre-warmed task {t}: {}", home.log(&t));
                home.wait_status(&hold, "done");
                v
            }
            Kind::Resumed => {
                let t = home.create(&format!("resumed {r}"), CMD, &["--triage"]);
                home.ok(&["sandbox", "ensure", "--task", &t]);
                home.ok(&["sandbox", "suspend", "--task", &t]);
                home.ok(&["kanban", "promote", &t]);
                let (v, action) = home.first_output(&t);
                assert_eq!(action, "resumed", "resumed task {t}: {}", home.log(&t));
                v
            }
            Kind::DockerRun => docker_only(docker_first_output(&["run", "--rm", "--label", &lbl, IMAGE])),
            Kind::DockerExec => docker_only(docker_first_output(&["exec", &exec_into])),
        }
    };
    let mut seen: [Vec<Steps>; 5] = Default::default();
    let load_before = super::figures_slow_board::loadavg();
    for r in 0..=rounds {
        for k in 0..KINDS.len() {
            let i = (k + r) % KINDS.len();
            let v = one(KINDS[i], r);
            if r > 0 {
                seen[i].push(v);
            }
        }
    }
    let load_after = super::figures_slow_board::loadavg();
    drop(gateway);
    let stats = |v: &[Steps]| {
        let mut t: Vec<f64> = v.iter().map(|s| s.total).collect();
        (median(&mut t), percentile(&mut t, 0.9), t.iter().copied().fold(f64::MIN, f64::max))
    };
    // The steps of the berth sides, medians: claim → spawned, claim → confirmed, confirmed → first output.
    let steps = |v: &[Steps]| {
        let each = |f: fn(&Steps) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
        format!(
            "spawned {:.0}, confirmed {:.0}, then sandbox and exec {:.0}",
            each(|s| s.spawned),
            each(|s| s.confirmed),
            each(|s| s.sandbox_and_exec)
        )
    };
    let [cold, warm, resumed, run, exec] = seen.each_ref().map(|v| stats(v));
    let [cold_steps, warm_steps, resumed_steps, _, _] = seen.each_ref().map(|v| steps(v));
    let show = |s: (f64, f64, f64)| format!("{:.0} ({:.0}, {:.0})", s.0, s.1, s.2);
    let (c, w, rs, dr, de) = (show(cold), show(warm), show(resumed), show(run), show(exec));
    let all = format!(
        "medians (p90, max) over {rounds} interleaved rounds, ms: cold {c}, pre-warmed {w}, resumed {rs}, `docker run \
         --rm` {dr}, `docker exec` {de}; the command `sh -c '{CMD}'` prints the clock, read against the task's `claimed` event (docker: \
         against the time just before the CLI starts); `gateway run` with `kanban.max_in_progress=1`, \
         `kanban.prewarm=1`, the built-in worker, default sandbox settings; where the time goes, medians from the \
         claim (ms; from the board's `spawned` event and the run's confirmation by the worker): pre-warmed \
         {warm_steps}; cold {cold_steps}; resumed {resumed_steps}; load average {load_before} before, {load_after} \
         after"
    );
    vec![
        Figure {
            name: "a task's claim → first output, pre-warmed sandbox (`kanban.prewarm`)".into(),
            berth: warm.0,
            baseline: Some(exec.0),
            baseline_source: "`docker exec <id> sh -c 'date +%s%N'` into a running container, interleaved",
            unit: "ms (median)",
            ratio: Some(warm.0 / exec.0),
            target: "≤ 1.5× `docker exec`".into(),
            met: warm.0 / exec.0 <= 1.5,
            detail: format!(
                "the task waits on the cap (another task holds it) while the gateway starts its sandbox; {all}"
            ),
        },
        Figure {
            name: "a task's claim → first output, cold sandbox (created and started by its worker)".into(),
            berth: cold.0,
            baseline: Some(run.0),
            baseline_source: "`docker run --rm <image> sh -c 'date +%s%N'`, interleaved",
            unit: "ms (median)",
            ratio: Some(cold.0 / run.0),
            target: "(reported)".into(),
            met: true,
            detail: "see the pre-warmed row for every side's figures".into(),
        },
        Figure {
            name: "a task's claim → first output, resumed sandbox (after `berth sandbox suspend`)".into(),
            berth: resumed.0,
            baseline: Some(run.0),
            baseline_source: "`docker run --rm <image> sh -c 'date +%s%N'`, interleaved",
            unit: "ms (median)",
            ratio: Some(resumed.0 / run.0),
            target: "(reported)".into(),
            met: true,
            detail: "suspended right after `sandbox ensure`, nothing written in it; see the pre-warmed row".into(),
        },
    ]
}

/// Suspend and resume of a sandbox with `mb` MB written in its own layer, `rounds` interleaved rounds over the
/// sizes, each on a new sandbox; beside `docker commit` of the same container and `docker run -d` of the snapshot.
fn bench_suspend_sizes(sizes: &[u64], rounds: usize, label: &str) -> Vec<Figure> {
    let home = Home::new(&format!("bench-snap-{}", std::process::id()));
    let lbl = format!("{label}=1");
    let n = sizes.len();
    /// One size's times (ms) and snapshot layers (MB), a value per round.
    #[derive(Default)]
    struct Seen {
        suspend: Vec<f64>,
        commit: Vec<f64>,
        resume: Vec<f64>,
        run: Vec<f64>,
        layer_mb: Vec<f64>,
    }
    let mut seen: Vec<Seen> = (0..n).map(|_| Seen::default()).collect();
    let time = |c: &mut Command| -> (f64, String) {
        let start = Instant::now();
        let out = c.stdin(Stdio::null()).output().unwrap();
        let t = ms(start.elapsed());
        assert!(out.status.success(), "{c:?}: {}", String::from_utf8_lossy(&out.stderr));
        (t, String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    for r in 0..rounds {
        for k in 0..n {
            let i = (k + r) % n;
            let mb = sizes[i];
            let task = format!("snap{mb}r{r}");
            let id = home.json(&["sandbox", "ensure", "--task", &task])["id"].as_str().unwrap().to_owned();
            let write = format!("mkdir -p /opt/bench && head -c {}M /dev/urandom > /opt/bench/data && sync", mb);
            let out = docker(&["exec", "-u", "0", &id, "sh", "-c", &write]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            // The engine's own commit of the same container (paused, as berth's is), its image removed after.
            let change = format!("LABEL {label}=1");
            let (t, image) = time(Command::new("docker").args(["commit", "--pause=true", "--change", &change, &id]));
            seen[i].commit.push(t);
            docker(&["rmi", "-f", &image]);
            let (t, _) = time(home.cmd().args(["--json", "sandbox", "suspend", "--task", &task]));
            seen[i].suspend.push(t);
            let snapshots = home.json(&["sandbox", "snapshots"]);
            let row = snapshots.as_array().unwrap().iter().find(|s| s["task"] == task.as_str()).cloned();
            let row = row.unwrap_or_else(|| panic!("no snapshot of {task}: {snapshots}"));
            seen[i].layer_mb.push(row["layer_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6);
            let snap = row["id"].as_str().unwrap().to_owned();
            // The engine starting a container of the snapshot, then berth's resume (create and start from it).
            let (t, c) = time(Command::new("docker").args(["run", "-d", "--label", &lbl, &snap, "sleep", "infinity"]));
            seen[i].run.push(t);
            docker(&["rm", "-f", &c]);
            let (t, out) = time(home.cmd().args(["--json", "sandbox", "ensure", "--task", &task]));
            let action = serde_json::from_str::<serde_json::Value>(&out).unwrap()["action"].clone();
            assert_eq!(action, "resumed", "sandbox ensure of a suspended sandbox: {out}");
            seen[i].resume.push(t);
            home.ok(&["sandbox", "rm", "--task", &task]);
        }
    }
    let mut figures = Vec::new();
    for (mb, v) in sizes.iter().zip(&mut seen) {
        let layer = median(&mut v.layer_mb);
        let (s, c) = (median(&mut v.suspend), median(&mut v.commit));
        let (rs, rn) = (median(&mut v.resume), median(&mut v.run));
        let (s_max, r_max) =
            (v.suspend.iter().copied().fold(0.0, f64::max), v.resume.iter().copied().fold(0.0, f64::max));
        figures.push(Figure {
            name: format!("`berth sandbox suspend`, {mb} MB written in the sandbox (snapshot layer {layer:.0} MB)"),
            berth: s,
            baseline: Some(c),
            baseline_source: "`docker commit` (paused) of the same container just before, interleaved",
            unit: "ms (median)",
            ratio: Some(s / c),
            target: "(reported)".into(),
            met: true,
            detail: format!(
                "{rounds} rounds, each on a new sandbox, sizes interleaved; random bytes written to /opt (the \
                 container's own layer); the whole process (commit, label, container removed); max {s_max:.0} ms"
            ),
        });
        figures.push(Figure {
            name: format!("resume (`berth sandbox ensure` of it suspended), snapshot layer {layer:.0} MB"),
            berth: rs,
            baseline: Some(rn),
            baseline_source: "`docker run -d <snapshot> sleep infinity` just before, interleaved",
            unit: "ms (median)",
            ratio: Some(rs / rn),
            target: "(reported)".into(),
            met: true,
            detail: format!(
                "{rounds} rounds; the whole process (create from the snapshot with the sandbox's spec and labels, \
                 start); max {r_max:.0} ms"
            ),
        });
    }
    figures
}

/// The part's rows; everything made is labelled and removed, on success or not.
pub fn bench_sleep(quick: bool) -> Vec<Figure> {
    let label = format!("berth.bench.sleep.{}", std::process::id());
    let _cleanup = Cleanup {
        profiles: vec![format!("bench-wake-{}", std::process::id()), format!("bench-snap-{}", std::process::id())],
        label: label.clone(),
    };
    let mut figures = bench_first_output(if quick { 2 } else { 11 }, &label);
    let sizes: &[u64] = if quick { &[1, 100] } else { &[1, 100, 500] };
    figures.extend(bench_suspend_sizes(sizes, if quick { 1 } else { 5 }, &label));
    figures
}
