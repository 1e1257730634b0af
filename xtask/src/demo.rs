//! `cargo xtask demo`: the main job end to end from a fresh clone, in a temporary home. It builds berth, builds
//! the sandbox image when it is missing or outdated, makes two profiles and a handful of tasks with real commands,
//! runs the gateway until it has dispatched them all into their sandboxes under a cap of one running task per
//! profile, shows the board as it changes and each worker's output, then removes everything (`--keep` keeps the home
//! to explore, and says how).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the tasks may take in all before the demo gives up.
const DEADLINE: Duration = Duration::from_secs(300);

/// The demo's tasks: (assignee, title, command). Each runs in its own sandbox.
const TASKS: [(&str, &str, &str); 4] = [
    ("alpha", "greet", "echo \"hello from $(hostname)\"; sleep 2; echo done greeting"),
    ("alpha", "compute", "python3 -c 'print(\"6 x 7 =\", 6 * 7)' || echo 'no python3: 6 x 7 = 42'"),
    (
        "beta",
        "make a repo",
        "cd /workspace && git init -q demo && cd demo && echo hi > f && git add f && \
      git -c user.email=d@example.com -c user.name=demo commit -qm first && git log --oneline",
    ),
    ("beta", "count", "for i in 1 2 3; do echo \"step $i\"; sleep 1; done"),
];

/// Runs the demo; `keep` leaves the home (and prints how to use it).
pub fn run(keep: bool) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    // Not quiet: a first build compiles a few hundred crates for minutes, and cargo's own progress (a bar on a
    // terminal, a line per crate otherwise) shows that it is moving.
    say("building berth (cargo build -p berth; the first build takes several minutes, cargo shows its progress)");
    crate::run(Command::new(&cargo).args(["build", "-p", "berth", "--bin", "berth"]))?;
    let berth = target_dir().join("debug").join("berth");
    say("making sure the sandbox image is there (cargo xtask image)");
    crate::image::build(false)?;
    let home = std::env::temp_dir().join(format!("berth-demo-{}", std::process::id()));
    std::fs::create_dir_all(&home).map_err(|e| format!("cannot create {}: {e}", home.display()))?;
    let demo = Demo { berth, home };
    let result = demo.main_job();
    let ids = demo.task_ids();
    if keep {
        say(&format!(
            "kept the home: export BERTH_HOME={} and try `berth kanban ls`, `berth kanban show ID`",
            demo.home.display()
        ));
    } else {
        demo.clean_up(&ids);
    }
    result
}

struct Demo {
    berth: PathBuf,
    home: PathBuf,
}

impl Demo {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.berth);
        c.env("BERTH_HOME", &self.home).env_remove("BERTH_PROFILE").args(args).stdin(Stdio::null());
        c
    }

    /// Runs berth, echoing the command line; returns stdout.
    fn berth(&self, args: &[&str]) -> Result<String, String> {
        println!("$ berth {}", args.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "));
        let out = self.cmd(args).output().map_err(|e| format!("cannot run berth: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(format!("berth {args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(text)
    }

    fn main_job(&self) -> Result<(), String> {
        say(&format!("a temporary home: {}", self.home.display()));
        self.berth(&["profile", "create", "alpha"])?;
        self.berth(&["profile", "create", "beta"])?;
        self.berth(&["config", "set", "kanban.max_in_progress_per_profile", "1"])?;
        self.berth(&["config", "set", "kanban.dispatch_interval_seconds", "1"])?;
        for (who, title, command) in TASKS {
            print!("{}", self.berth(&["kanban", "create", title, "--assignee", who, "--command", command])?);
        }
        say("starting the gateway: it dispatches every second, one running task per profile");
        let log = self.home.join("gateway.log");
        let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut gateway = self
            .cmd(&["gateway", "run"])
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot start the gateway: {e}"))?;
        let waited = self.wait_for_board();
        stop(&mut gateway);
        waited?;
        say("the board");
        print!("{}", self.berth(&["kanban", "ls"])?);
        for id in self.task_ids() {
            say(&format!("what the worker of {id} wrote"));
            print!("{}", self.berth(&["kanban", "logs", &id])?);
        }
        Ok(())
    }

    /// Prints the board whenever it changes, until no task is left to run (or the deadline passes).
    fn wait_for_board(&self) -> Result<(), String> {
        let start = Instant::now();
        let mut last = String::new();
        loop {
            let out = self.cmd(&["kanban", "ls"]).output().map_err(|e| e.to_string())?;
            let board = String::from_utf8_lossy(&out.stdout).into_owned();
            if board != last {
                println!("--- after {:.0}s", start.elapsed().as_secs_f64());
                print!("{board}");
                last = board.clone();
            }
            let open = board.lines().skip(1).any(|l| {
                let status = l.split_whitespace().nth(1).unwrap_or("");
                !matches!(status, "done" | "blocked" | "archived")
            });
            if !open {
                return Ok(());
            }
            if start.elapsed() > DEADLINE {
                let log = std::fs::read_to_string(self.home.join("gateway.log")).unwrap_or_default();
                return Err(format!("the tasks did not finish within {}s; gateway log:\n{log}", DEADLINE.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn task_ids(&self) -> Vec<String> {
        let Ok(out) = self.cmd(&["kanban", "ls"]).output() else { return Vec::new() };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    }

    /// Removes the demo's sandboxes (any still there, found by their task ids) and its home.
    fn clean_up(&self, ids: &[String]) {
        for id in ids {
            let out = Command::new("docker")
                .args(["ps", "-aq", "--filter", &format!("label=hermes-task-id={id}")])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            for c in out.split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-f", c]).stdout(Stdio::null()).status();
            }
        }
        match std::fs::remove_dir_all(&self.home) {
            Ok(()) => say("removed the demo's sandboxes and its home (`cargo xtask demo --keep` keeps them)"),
            // Sandbox folders can be owned by root when the engine made them; docker can remove them.
            Err(_) => {
                let _ = Command::new("docker")
                    .args(["run", "--rm", "-v", &format!("{}:/h", self.home.display())])
                    .args([crate::IMAGE, "sh", "-c", "rm -rf /h/* /h/.[!.]*"])
                    .status();
                let _ = std::fs::remove_dir_all(&self.home);
            }
        }
    }
}

/// SIGTERM, then wait: the gateway stops ticking and exits.
fn stop(child: &mut Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new(".")).join("target"))
}

fn say(text: &str) {
    println!("\n== {text}");
}

/// Shell-quotes `a` so the printed line can be pasted back into a shell (`'` becomes `'\''`).
fn quote(a: &str) -> String {
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=".contains(c)) {
        a.to_owned()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn quoted_arguments_come_back_whole_through_a_shell() {
        let args = ["plain", "", "two words", r#"python3 -c 'print("6 x 7 =", 6 * 7)' || echo 'no'"#, "it's $HOME"];
        let line = args.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ");
        let out = std::process::Command::new("bash")
            .args(["-c", &format!(r#"for a in {line}; do printf '%s\0' "$a"; done"#)])
            .output()
            .expect("bash runs");
        let back: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().split_terminator('\0').collect();
        assert_eq!(back, args);
    }
}
