//! The CLI as a process: usage errors, exit codes, `--json`, profiles.

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
