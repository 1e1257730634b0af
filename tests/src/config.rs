//! Config surfaces through the real binary: file, environment, `-c`, `config set|unset|env`.

use crate::support::Home;

#[test]
fn env_off_reports_false_from_the_environment() {
    let home = Home::new();
    let out = home
        .cmd()
        .env("TERMINAL_DOCKER_ORPHAN_REAPER", "off")
        .args(["config", "get", "terminal.docker_orphan_reaper", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"], false);
    assert_eq!(v["source"], "env");
    assert_eq!(v["source_detail"], "TERMINAL_DOCKER_ORPHAN_REAPER");
}

#[test]
fn config_set_refuses_a_bad_cap_and_leaves_the_file_alone() {
    let home = Home::new();
    home.ok(&["config", "set", "kanban.max_in_progress_per_profile", "2"]);
    let path = home.path().join("config.yaml");
    let before = std::fs::read(&path).unwrap();
    let out = home.run(&["config", "set", "kanban.max_in_progress_per_profile", "abc"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let v = home.json(&["config", "get", "kanban.max_in_progress_per_profile"]);
    assert_eq!((v["value"].as_i64(), v["source"].as_str()), (Some(2), Some("file")));
    home.ok(&["config", "unset", "kanban.max_in_progress_per_profile"]);
    let v = home.json(&["config", "get", "kanban.max_in_progress_per_profile"]);
    assert_eq!(v["source"], "default");
}

#[test]
fn a_hermes_config_yaml_drives_berth() {
    let home = Home::new();
    std::fs::write(
        home.path().join("config.yaml"),
        "model:\n  default: x\nterminal:\n  backend: docker\n  timeout: 42\n  docker_persist_across_processes: false\nkanban:\n  max_in_progress_per_profile: 3\nplatform_toolsets:\n  cli: [a, b]\n",
    )
    .unwrap();
    let v = home.json(&["config", "ls"]);
    let get = |k: &str| v.as_array().unwrap().iter().find(|e| e["key"] == k).unwrap().clone();
    assert_eq!(get("terminal.timeout")["value"], 42);
    assert_eq!(get("terminal.timeout")["source"], "file");
    assert_eq!(get("terminal.docker_persist_across_processes")["value"], false);
    assert_eq!(get("kanban.max_in_progress_per_profile")["value"], 3);
    // Precedence: env beats the file, -c beats env.
    let out = home
        .cmd()
        .env("TERMINAL_TIMEOUT", "50")
        .args(["-c", "terminal.timeout=60", "config", "get", "terminal.timeout"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "60");
    let out = home.cmd().env("TERMINAL_TIMEOUT", "50").args(["config", "get", "terminal.timeout"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "50");
}

#[test]
fn invalid_env_values_warn_and_fall_back() {
    let home = Home::new();
    // A cap below 1 is hermes-agent's "no cap" (one that is not a number refuses commands: tests/src/mistakes.rs).
    let out = home
        .cmd()
        .env("KANBAN_MAX_IN_PROGRESS_PER_PROFILE", "-3")
        .args(["config", "get", "kanban.max_in_progress_per_profile", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"], serde_json::Value::Null);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("KANBAN_MAX_IN_PROGRESS_PER_PROFILE") && err.contains("-3") && err.contains("no cap"),
        "{err}"
    );
}

#[test]
fn config_env_round_trips_into_a_worker() {
    let home = Home::new();
    home.ok(&["config", "set", "terminal.docker_env", r#"{"A":"1"}"#]);
    let v = home.json(&["-c", "kanban.max_in_progress=4", "config", "env"]);
    assert_eq!(v["KANBAN_MAX_IN_PROGRESS"], "4");
    assert_eq!(v["TERMINAL_DOCKER_ENV"], r#"{"A":"1"}"#);
    // A process given exactly that environment (and no config file) resolves the same values.
    let other = Home::new();
    let mut cmd = other.cmd();
    for (k, val) in v.as_object().unwrap() {
        cmd.env(k, val.as_str().unwrap());
    }
    let out = cmd.args(["config", "ls", "--json"]).output().unwrap();
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = home.json(&["-c", "kanban.max_in_progress=4", "config", "ls"]);
    for (g, w) in got.as_array().unwrap().iter().zip(want.as_array().unwrap()) {
        if g["key"] == "terminal.sandbox_dir" {
            continue; // Derived from each home.
        }
        assert_eq!(g["value"], w["value"], "{}", g["key"]);
    }
    let text = home.ok(&["config", "env"]);
    assert!(text.contains("export TERMINAL_DOCKER_ENV='{\"A\":\"1\"}'"), "{text}");
}

/// `config ls` and `config get` (text and JSON) hide the board server's password; `config get --reveal` and
/// `config env` (what workers are handed) give the value.
#[test]
fn config_ls_hides_the_board_password_and_get_reveal_gives_it() {
    let home = Home::new();
    let url = "postgres://berth:s3cret-pw@db.example/board";
    let with = |args: &[&str]| home.cmd().env("KANBAN_DATABASE_URL", url).args(args).output().unwrap();
    let ls = String::from_utf8(with(&["config", "ls"]).stdout).unwrap();
    assert!(ls.contains("postgres://berth:***@db.example/board") && !ls.contains("s3cret-pw"), "{ls}");
    let json = String::from_utf8(with(&["config", "ls", "--json"]).stdout).unwrap();
    assert!(json.contains("berth:***@") && !json.contains("s3cret-pw"), "{json}");
    let get = String::from_utf8(with(&["config", "get", "kanban.database_url"]).stdout).unwrap();
    assert_eq!(get.trim(), "postgres://berth:***@db.example/board");
    let reveal = with(&["config", "get", "kanban.database_url", "--reveal"]).stdout;
    assert_eq!(String::from_utf8(reveal).unwrap().trim(), url);
    assert!(String::from_utf8(with(&["config", "env"]).stdout).unwrap().contains(url));
    // A password in the query, after another parameter and percent-encoded: masked in every listing too.
    let url = "postgres://berth@db.example/board?application_name=b&password=q%2Fs3cret-pw";
    let with = |args: &[&str]| home.cmd().env("KANBAN_DATABASE_URL", url).args(args).output().unwrap();
    for args in [&["config", "ls"][..], &["config", "ls", "--json"], &["config", "get", "kanban.database_url"]] {
        let out = String::from_utf8(with(args).stdout).unwrap();
        assert!(out.contains("password=***") && !out.contains("s3cret-pw"), "{args:?}: {out}");
    }
}

/// YAML merge keys are read as hermes-agent reads them (issue 23): a `terminal:` section that merges a shared anchor
/// gets its values, and a key written beside the merge wins.
#[test]
fn yaml_merge_keys_in_config_yaml_are_applied() {
    let home = Home::new();
    let file =
        "defaults: &base\n  timeout: 30\n  lifetime_seconds: 900\nterminal:\n  <<: *base\n  lifetime_seconds: 600\n";
    std::fs::write(home.path().join("config.yaml"), file).unwrap();
    let out = home.run(&["config", "get", "terminal.timeout", "--json"]);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&v["value"], &v["source"]), (&serde_json::json!(30), &serde_json::json!("file")), "{v}");
    assert_eq!(home.json(&["config", "get", "terminal.lifetime_seconds"])["value"], 600);
}

/// `config set` on a file with YAML anchors, aliases and merge keys (issue 38 item 12) keeps them and every comment:
/// a key written in the section changes in place, a key only reached through a merge is added beside the merge, a
/// section that is an alias becomes a merge of it plus the key. An edit that would reach another mapping through an
/// anchor, or that only a rewrite could make, is refused in one line (exit 2), the file byte for byte as it was.
#[test]
fn config_set_keeps_yaml_anchors_merges_and_comments() {
    let home = Home::new();
    let path = home.path().join("config.yaml");
    let read = || std::fs::read_to_string(&path).unwrap();
    let get = |key: &str| home.json(&["config", "get", key])["value"].clone();

    let merged = "# shared\ndefaults: &base\n  timeout: 30 # s\n  lifetime_seconds: 900\nterminal:\n  <<: *base\n  # mine\n  lifetime_seconds: 600\n";
    std::fs::write(&path, merged).unwrap();
    home.ok(&["config", "set", "terminal.lifetime_seconds", "700"]);
    assert_eq!(read(), merged.replace("600", "700"), "the written key changed in place");
    home.ok(&["config", "set", "terminal.timeout", "45"]);
    assert_eq!(read(), format!("{}  timeout: 45\n", merged.replace("600", "700")), "added beside the merge");
    assert_eq!((get("terminal.timeout"), get("terminal.lifetime_seconds")), (45.into(), 700.into()));

    let aliased = "# one for all\nshared: &shared\n  timeout: 30 # s\nterminal: *shared\n";
    std::fs::write(&path, aliased).unwrap();
    home.ok(&["config", "set", "terminal.lifetime_seconds", "50"]);
    let want = "# one for all\nshared: &shared\n  timeout: 30 # s\nterminal:\n  <<: *shared\n  lifetime_seconds: 50\n";
    assert_eq!(read(), want, "the alias kept as a merge");
    assert_eq!((get("terminal.timeout"), get("terminal.lifetime_seconds")), (30.into(), 50.into()));

    let shared = "terminal: &term\n  timeout: 30 # s\nother:\n  <<: *term\n";
    for (file, args) in [
        (shared, &["config", "set", "terminal.timeout", "45"][..]),
        (aliased, &["config", "unset", "terminal.timeout"][..]),
    ] {
        std::fs::write(&path, file).unwrap();
        let out = home.run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains("anchors") && err.contains("terminal.timeout"), "{args:?}: {err}");
        assert_eq!(read(), file, "{args:?}: the file untouched");
    }
}

/// Every key hermes-agent 0.19–0.21 reads in `terminal:` and `kanban:` (its `DEFAULT_CONFIG`, its config bridge and
/// its readers; issue 41) draws no warning, among them its stock `kanban.auto_subscribe_on_create`; a typo still
/// does.
#[test]
fn every_key_hermes_reads_draws_no_warning() {
    let home = Home::new();
    let file = "\
terminal:
  backend: docker
  env_type: docker
  modal_mode: auto
  credential_files: []
  docker_snap_compat: false
  singularity_image: docker://x
  daytona_image: x
  ssh_host: h
  sudo_password: ''
  persistent_shell: true
kanban:
  auto_subscribe_on_create: true
  auto_promote_children: true
  diagnostics: {}
  done_sub_retention_days: 30
  acceptance_checks: []
  review_dispatch: true
  auto_decompose: false
";
    std::fs::write(home.path().join("config.yaml"), file).unwrap();
    let out = home.run(&["config", "ls"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "hermes's keys warned about:\n{err}");
    std::fs::write(home.path().join("config.yaml"), "kanban:\n  auto_subscribe_on_creat: true\n").unwrap();
    let err = String::from_utf8_lossy(&home.run(&["config", "ls"]).stderr).into_owned();
    assert!(err.contains("unknown setting kanban.auto_subscribe_on_creat"), "{err}");
}
