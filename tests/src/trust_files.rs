//! The second trust round (issue 23), berth's own small files in its home: a FIFO where `gateway.json` belongs
//! hangs no command, and a symlink planted at its temporary name is not written through.

use std::time::{Duration, Instant};

use crate::support::{Gateway, Home};

#[test]
fn a_fifo_or_a_symlink_at_the_gateways_state_file_is_neither_waited_on_nor_written_through() {
    let home = Home::new();
    let state = home.path().join("gateway.json");
    rustix::fs::mknodat(rustix::fs::CWD, &state, rustix::fs::FileType::Fifo, 0o600.into(), 0).unwrap();
    let mut status =
        home.cmd().args(["gateway", "status", "--json"]).stdout(std::process::Stdio::null()).spawn().unwrap();
    let started = Instant::now();
    let done = crate::support::wait_exit(&mut status, Duration::from_secs(10));
    // No gateway runs: it answers at once, `stopped` (exit 3).
    assert!(
        done.is_some_and(|s| s.code() == Some(3)),
        "gateway status on a FIFO: {done:?} after {:?}",
        started.elapsed()
    );
    // A symlink where the old temporary name was: the gateway's state replaces the FIFO, the link's target is kept.
    let victim = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(victim.path(), "not berth's").unwrap();
    std::os::unix::fs::symlink(victim.path(), home.path().join("gateway.json.tmp")).unwrap();
    let gw = Gateway::start(&home, &["-c", "kanban.dispatch_in_gateway=false"]);
    assert_eq!(std::fs::read_to_string(victim.path()).unwrap(), "not berth's", "written through the symlink");
    assert!(std::fs::symlink_metadata(&state).unwrap().is_file(), "the state file is a regular file again");
    gw.stop();
}

/// `terminal.docker_shm_size` takes Docker's sizes only (no `1e3`, no 8 EiB), and a refusal quotes at most 64
/// characters of a 300-digit value.
#[test]
fn sizes_and_long_numbers_are_refused_in_one_short_line() {
    let home = Home::new();
    for bad in ["1e3", "8EiB", "9223372036854775807", "inf"] {
        let out = home.run(&["config", "set", "terminal.docker_shm_size", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("terminal.docker_shm_size"), "{bad}: {err}");
    }
    home.ok(&["config", "set", "terminal.docker_shm_size", "1.5g"]);
    let long = "9".repeat(300);
    let out = home.run(&["config", "set", "terminal.timeout", &long]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.len() < 200 && err.contains("more characters"), "{err}");
}
