//! The CLI as a process: usage errors, exit codes, `--json`, profiles.

use std::process::Command;

use crate::support::Home;

#[test]
fn usage_errors_exit_2_with_one_line() {
    let home = Home::new();
    for args in [
        &["frobnicate"][..],
        &["-c", "nonsense", "config", "ls"][..],
        &["-c", "terminal.nope=1", "config", "ls"][..],
        &["-c", "terminal.timeout=soon", "config", "ls"][..],
        &["-p", "../etc", "config", "ls"][..],
        &["config", "get", "terminal.nope"][..],
        &["run", "-e", "1BAD=x", "--", "true"][..],
        &["profile", "create", "a/b"][..],
        &["profile", "rm", "default"][..],
    ] {
        let out = home.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    }
    let out = home.run(&["-p", "ghost", "run", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("berth profile create ghost"));
}

#[test]
fn help_and_version() {
    let home = Home::new();
    let help = home.ok(&["--help"]);
    for group in ["profile", "sandbox", "run", "config"] {
        assert!(help.contains(group), "{group} in help");
    }
    assert!(home.ok(&["--version"]).starts_with("berth "));
}

/// The bash completion script never offers file names for a profile, a task id or a setting-free value such as
/// `--assignee`, and its help says bash-completion is needed; `-t` is `--tty` only (`sandbox rm -t` is refused).
#[test]
fn completions_offer_no_file_names_for_profiles_and_ids_and_t_means_tty_only() {
    let home = Home::new();
    let script = home.ok(&["completions", "bash"]);
    let mut checked = 0;
    for flag in ["--assignee)", "--task)", "--profile)", "--board)", "--status)"] {
        for (i, _) in script.match_indices(flag) {
            let body: String = script[i..].lines().skip(1).take_while(|l| !l.trim().starts_with(";;")).collect();
            assert!(!body.contains("compgen -f"), "{flag} completes file names:\n{body}");
            checked += 1;
        }
    }
    assert!(checked > 10, "the script names these options ({checked} places)");
    let help = home.ok(&["completions", "--help"]);
    assert!(help.contains("bash-completion"), "{help}");
    let out = home.run(&["sandbox", "rm", "-t", "x"]);
    assert_eq!(out.status.code(), Some(2), "-t still means --task in sandbox rm");
    assert!(home.ok(&["sandbox", "rm", "--help"]).contains("--task <ID>"));
    assert!(home.ok(&["run", "--help"]).contains("-t, --tty"));
}

/// `--version` names the version, the commit berth was built from and the Engine API it negotiates, or says the
/// engine is unreachable: at once for a missing socket, within about 2 s for one that never answers.
#[test]
fn version_names_the_commit_and_the_engine_api_or_an_unreachable_engine() {
    let home = Home::on(&crate::support::Engine::docker());
    let out = home.ok(&["--version"]);
    let mut lines = out.lines();
    let first = lines.next().unwrap();
    let commit = first
        .strip_prefix(concat!("berth ", env!("CARGO_PKG_VERSION"), " (commit "))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()), "{out}");
    let mut known = Command::new("git");
    known.args(["cat-file", "-e", &format!("{commit}^{{commit}}")]).current_dir(crate::support::workspace());
    assert!(known.status().unwrap().success(), "{commit} is no commit here");
    let engine = lines.next().unwrap_or_default();
    assert!(engine.starts_with("engine: API 1.") && engine.contains(" at "), "{out}");
    let missing = home.cmd().env("DOCKER_HOST", "unix:///nonexistent/berth.sock").arg("--version").output().unwrap();
    assert!(missing.status.success());
    let text = String::from_utf8_lossy(&missing.stdout);
    assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("engine unreachable")), "{text}");
    // A socket that takes connections and never answers: bounded.
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("hung.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let started = std::time::Instant::now();
    let hung = home.cmd().env("DOCKER_HOST", format!("unix://{}", sock.display())).arg("--version").output().unwrap();
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&hung.stdout);
    assert!(text.contains("engine unreachable") && text.contains("no answer within 2s"), "{text}");
    assert!(took < std::time::Duration::from_secs(3), "--version took {took:?} on a hung engine");
}

#[test]
fn profiles_lifecycle() {
    let home = Home::new();
    let v = home.json(&["profile", "create", "alpha"]);
    assert_eq!(v["created"], true);
    let v = home.json(&["profile", "create", "alpha"]);
    assert_eq!(v["created"], false);
    let list = home.json(&["profile", "ls"]);
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(names.contains(&"alpha") && names.contains(&"default") && names.contains(&home.profile.as_str()));
    home.ok(&["profile", "rm", "alpha"]);
    assert_eq!(home.run(&["profile", "rm", "alpha"]).status.code(), Some(2));
}
