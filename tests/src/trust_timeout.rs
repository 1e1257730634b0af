//! The second trust round (issue 23), `--timeout`: the kill of a timed-out command is prompt and leaves nothing of
//! it in the sandbox, a child that dropped its environment (`env -i … &`) and a fork bomb included.

use std::time::{Duration, Instant};

use crate::support::{Home, require_docker};

/// The processes of the sandbox of task `task` other than its init, keep-alive and this `ps`.
fn leftovers(home: &Home, task: &str) -> Vec<String> {
    let ps = home.ok(&["run", "--task", task, "--", "ps", "-eo", "pid=,stat=,args="]);
    ps.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains("sleep infinity") && !l.contains("ps -eo") && !l.contains(" Z "))
        .filter(|l| !l.starts_with("1 "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_timed_out_command_is_killed_at_once_with_everything_it_started() {
    require_docker();
    let home = Home::new();
    // The sandbox first, so the timing below is the command's alone.
    home.ok(&["run", "--task", "to", "--", "true"]);
    let started = Instant::now();
    let out = home.run(&[
        "run",
        "--task",
        "to",
        "--timeout",
        "3",
        "--",
        "sh",
        "-c",
        r#"env -i sh -c "sleep 100" & yes > /dev/null"#,
    ]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(124), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(took < Duration::from_secs(6), "the timeout took {took:?}");
    let left = leftovers(&home, "to");
    assert!(left.is_empty(), "left in the sandbox: {left:?}");
}

#[test]
fn a_timed_out_fork_bomb_leaves_nothing() {
    require_docker();
    let home = Home::new();
    home.ok(&["run", "--task", "fb", "--", "true"]);
    // A bounded bomb (the sandbox's pids limit bounds it too): every process forks two more and sleeps.
    let bomb = r#"b() { b & b & sleep 100; }; b"#;
    let out = home.run(&["run", "--task", "fb", "--timeout", "2", "--", "bash", "-c", bomb]);
    assert_eq!(out.status.code(), Some(124), "{}", String::from_utf8_lossy(&out.stderr));
    let left = leftovers(&home, "fb");
    assert!(left.is_empty(), "{} processes left in the sandbox: {:?}", left.len(), &left[..left.len().min(5)]);
}
