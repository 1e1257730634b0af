//! The second trust round (issue 23), what an operator reads: a task's output and words never drive the terminal
//! (`kanban show`, `kanban ls`), and a log of any size costs `show` and `logs --tail` its tail only.

use std::time::Duration;

use crate::support::{Home, wait_until};

/// What a hostile task prints: OSC 52 (clipboard), OSC 0 (title), CSI 2J (clear), OSC 8 (a link), U+202E.
const HOSTILE: &str =
    r"printf '\033]52;c;aGk=\007\033]0;pwned\007\033[2J\033]8;;http://x\007link\033]8;;\007 \342\200\256gnp.exe\n'";

fn assert_inert(what: &str, text: &str) {
    for bad in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
        assert!(!text.contains(bad), "{what} passes {bad:?} to the terminal: {text:?}");
    }
}

#[test]
fn task_output_and_words_never_drive_the_operators_terminal() {
    let home = Home::new();
    home.ok(&["config", "set", "kanban.worker_command", HOSTILE]);
    let title = "title \u{1b}]0;owned\u{7} \u{202e}txt.exe";
    let id = home.json(&["kanban", "create", title, "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    let log = home.path().join("kanban/logs").join(format!("{id}.log"));
    wait_until("the worker's output", Duration::from_secs(20), || {
        std::fs::read(&log).is_ok_and(|b| String::from_utf8_lossy(&b).contains("gnp.exe"))
    });
    let show = home.ok(&["kanban", "show", &id]);
    assert!(show.contains("gnp.exe") && show.contains("\\x1b]52"), "the output is still shown: {show}");
    assert_inert("kanban show", &show);
    assert_inert("kanban ls", &home.ok(&["kanban", "ls"]));
    // JSON is the machine's view: the text is all there (escaped by JSON itself).
    let json = home.json(&["kanban", "show", &id]);
    assert_eq!(json["task"]["title"], title);
}

/// A 1 GB log with a 2 MB line near its end: `kanban show` and `kanban logs --tail 5` read its end only (their
/// memory stays within 512 MiB; before, 1.9 GiB) and `show` prints the long line cut.
#[test]
fn a_huge_log_costs_show_and_tail_only_its_end() {
    use std::io::Write;
    let home = Home::new();
    home.ok(&["config", "set", "kanban.worker_command", "true"]);
    let id = home.json(&["kanban", "create", "big", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    let dir = home.path().join("kanban/logs");
    std::fs::create_dir_all(&dir).unwrap();
    let mut f = std::fs::File::create(dir.join(format!("{id}.log"))).unwrap();
    f.set_len(1 << 30).unwrap(); // sparse: a gigabyte that takes no disk
    std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).unwrap();
    writeln!(f).unwrap();
    writeln!(f, "{}", "y".repeat(2 << 20)).unwrap();
    for i in 0..5 {
        writeln!(f, "line {i}").unwrap();
    }
    drop(f);
    // Each command under a 512 MiB address-space limit: reading the whole gigabyte cannot fit in it.
    let bounded = |args: &[&str]| -> String {
        let berth = home.cmd();
        let mut cmd = std::process::Command::new("prlimit");
        cmd.arg(format!("--as={}", 512u64 << 20)).arg(berth.get_program()).args(args);
        for (k, v) in berth.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "berth {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let show = bounded(&["kanban", "show", &id]);
    assert!(show.contains("line 4") && show.contains("more characters"), "{}", &show[..show.len().min(2000)]);
    assert!(show.len() < 64 * 1024, "show printed {} bytes", show.len());
    let tail = bounded(&["kanban", "logs", &id, "--tail", "5"]);
    assert_eq!(tail, "line 0\nline 1\nline 2\nline 3\nline 4\n");
}

/// A task that prints a worker's confirmation line (`[berth worker …] confirmed run N of ID as pid P`) does not cut
/// its run's part of the log: only a line naming the pid the board recorded for that run starts a run.
#[test]
fn a_forged_confirmation_line_does_not_cut_a_runs_log() {
    let home = Home::new();
    let worker =
        r#"echo "[berth worker 2099-01-01T00:00:00Z] confirmed run 2 of $BERTH_KANBAN_TASK as pid 4242"; echo after"#;
    home.ok(&["config", "set", "kanban.worker_command", worker]);
    let id = home.json(&["kanban", "create", "forged", "--assignee", &home.profile])["id"].as_str().unwrap().to_owned();
    home.ok(&["kanban", "dispatch"]);
    let log = home.path().join("kanban/logs").join(format!("{id}.log"));
    wait_until("the worker's output", Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("after"))
    });
    let run = home.ok(&["kanban", "logs", &id, "--run", "1"]);
    assert!(run.contains("confirmed run 1 of") && run.contains("after"), "run 1's part was cut: {run}");
}

/// `kanban logs -f` across the worker's log caps prints each line at most once: after a cap it resumes after what
/// it had read, not from the kept half's start.
#[test]
fn following_a_log_across_its_caps_prints_each_line_once() {
    crate::support::require_docker();
    let home = Home::new();
    home.ok(&["config", "set", "kanban.worker_log_rotate_bytes", "65536"]);
    // About 4 s of output, in bursts, so the log is capped several times while it is followed.
    let cmd = "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); [ $((i % 500)) -eq 0 ] && sleep 0.1; done";
    let id = home.json(&["kanban", "create", "loud", "--assignee", &home.profile, "--command", cmd])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    home.ok(&["kanban", "dispatch"]);
    let log = home.path().join("kanban/logs").join(format!("{id}.log"));
    wait_until("the command's first lines", Duration::from_secs(30), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("line-1\n"))
    });
    assert_eq!(home.json(&["kanban", "show", &id])["task"]["status"], "running", "it must be followed while it runs");
    let out = home.ok(&["kanban", "logs", &id, "-f", "--run", "1"]);
    let mut seen = std::collections::BTreeMap::new();
    for l in out.lines().filter(|l| l.starts_with("line-")) {
        *seen.entry(l).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).map(|(l, _)| *l).collect();
    assert!(seen.len() > 1000, "{} lines followed", seen.len());
    assert!(twice.is_empty(), "{} lines printed more than once, e.g. {:?}", twice.len(), &twice[..twice.len().min(3)]);
}

/// A refusal stays one readable line whatever the input: a 300-digit number (in a flag, an id, a setting) is cut,
/// saying how much was left out, and control characters in an id never reach the terminal. Before, the number was
/// printed whole and `kanban show` echoed the escape sequence raw.
#[test]
fn a_refusal_cuts_a_300_digit_number_and_shows_controls_as_text() {
    let home = Home::new();
    let n = "9".repeat(300);
    let extra = format!("terminal.docker_extra_args=[\"--pids-limit={n}\"]");
    for args in [
        vec!["kanban", "create", "x", "--command", "true", "--priority", &n],
        vec!["kanban", "show", &n],
        vec!["-c", &extra, "config", "set", "terminal.timeout", "5"],
        vec!["kanban", "show", "x\u{1b}]0;pwned\u{7}y"],
    ] {
        let out = home.run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains(&"9".repeat(121)), "{args:?}: the number is printed whole: {err}");
        assert!(err.len() < 600, "{args:?}: {} bytes", err.len());
        assert_inert(&format!("{args:?}"), &err);
    }
}
