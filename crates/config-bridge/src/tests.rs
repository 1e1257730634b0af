//! Tests of the settings table and its surfaces: file, environment, `-c`, `config set`, worker env, docs.

use std::path::Path;

use super::*;

const HOME: &str = "/h";

fn resolve_with(file: Option<&str>, env: &[(&str, &str)], overrides: &[(&str, &str)]) -> Resolved {
    let doc: Option<Yaml> = file.map(|f| serde_yaml_ng::from_str(f).unwrap());
    let env = EnvMap::from_pairs(env.iter().copied());
    let overrides: Vec<(String, String)> = overrides.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let path = Path::new("/h/config.yaml");
    resolve(&Inputs { home: Path::new(HOME), file: doc.as_ref().map(|d| (path, d)), env: &env, overrides: &overrides })
        .unwrap()
}

/// A sample value of each kind, in text form, different from every default.
fn sample(kind: Kind) -> &'static str {
    match kind {
        Kind::Bool => "maybe-not",
        Kind::Int => "7",
        Kind::Float => "2.5",
        Kind::Str => "sample-text",
        Kind::List => r#"["a","b:c"]"#,
        Kind::Map => r#"{"K":"v"}"#,
        Kind::Cap => "3",
        Kind::CapMap => r#"{"alpha":4}"#,
        Kind::Egress => "sample.test,10.0.0.0/8:443",
    }
}

fn sample_for(s: &Setting) -> String {
    match (s.key, s.kind) {
        // Settings with a shape beyond their kind.
        ("terminal.cwd", _) => "/sample".to_owned(),
        ("terminal.docker_shm_size", _) => "2g".to_owned(),
        ("terminal.docker_egress_overrides", _) => r#"{"alpha":"pypi.org"}"#.to_owned(),
        ("terminal.docker_extra_args", _) => r#"["--add-host","b:c"]"#.to_owned(),
        // Booleans: the opposite of the default.
        (_, Kind::Bool) => if s.default == "true" { "false" } else { "true" }.to_owned(),
        _ => sample(s.kind).to_owned(),
    }
}

#[test]
fn cwd_accepts_hermes_placeholders_and_refuses_other_relative_paths() {
    for ok in [".", "auto", "cwd", "~", "/work", "~/src"] {
        assert!(validate("terminal.cwd", ok).is_ok(), "{ok}");
    }
    let err = validate("terminal.cwd", "src/app").unwrap_err().to_string();
    assert!(err.contains("relative path") && err.contains("`.`"), "{err}");
    assert!(validate("terminal.docker_shm_size", "lots").is_err());
    // The flags are the engine's to read (the edge refuses `--rm` with the Docker adapter's parser); the table
    // takes any list, and tells the edge when `-c` set one.
    assert!(validate("terminal.docker_extra_args", r#"["--gpus","all","--ulimit","nofile=10"]"#).is_ok());
    let over = resolve_with(None, &[], &[("terminal.docker_extra_args", r#"["--rm"]"#)]);
    assert_eq!(over.extra_args_from_cli(), Some(&["--rm".to_owned()][..]));
    let env = resolve_with(None, &[("TERMINAL_DOCKER_EXTRA_ARGS", r#"["--rm"]"#)], &[]);
    assert_eq!(env.extra_args_from_cli(), None);
    assert!(validate("terminal.docker_shm_size", "").is_ok());
}

#[test]
fn the_table_is_well_formed() {
    let keys: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(keys, sorted, "keys are sorted and unique");
    let mut vars: Vec<String> = SETTINGS.iter().map(Setting::env_var).collect();
    vars.dedup();
    assert_eq!(vars.len(), SETTINGS.len(), "env vars do not collide");
    for s in SETTINGS {
        assert!(s.key.starts_with("terminal.") || s.key.starts_with("kanban."), "{}", s.key);
        assert!(s.key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.'));
        assert!(!s.doc.is_empty());
        assert_eq!(s.env_var(), s.key.replace('.', "_").to_uppercase());
        default_value(s, Path::new(HOME));
    }
    assert_eq!(
        find("terminal.docker_persist_across_processes").unwrap().env_var(),
        "TERMINAL_DOCKER_PERSIST_ACROSS_PROCESSES"
    );
    assert_eq!(find("terminal.docker_orphan_reaper").unwrap().env_var(), "TERMINAL_DOCKER_ORPHAN_REAPER");
    assert_eq!(find("terminal.lifetime_seconds").unwrap().env_var(), "TERMINAL_LIFETIME_SECONDS");
}

#[test]
fn every_row_round_trips_through_every_surface() {
    let dir = tempfile::tempdir().unwrap();
    for s in SETTINGS {
        let raw = sample_for(s);
        let want = validate(s.key, &raw).unwrap();
        // -c → value.
        let r = resolve_with(None, &[], &[(s.key, &raw)]);
        assert_eq!((r.value(s.key), r.entry(s.key).source.kind()), (&want, "cli"), "{} via -c", s.key);
        // env → value.
        let var = s.env_var();
        let r = resolve_with(None, &[(var.as_str(), raw.as_str())], &[]);
        assert_eq!((r.value(s.key), r.entry(s.key).source.kind()), (&want, "env"), "{} via env", s.key);
        // config set → file → value.
        let path = dir.path().join(format!("{}.yaml", s.key));
        set_in_file(&path, s.key, &raw).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let r = resolve_with(Some(&text), &[], &[]);
        assert_eq!((r.value(s.key), r.entry(s.key).source.kind()), (&want, "file"), "{} via file:\n{text}", s.key);
        // gateway/worker env → value.
        let env = r.worker_env();
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let worker = resolve_with(None, &pairs, &[]);
        assert_eq!(worker.value(s.key), &want, "{} via worker env", s.key);
        for e in r.entries() {
            assert_eq!(worker.value(e.setting.key), &e.value, "worker env reproduces {}", e.setting.key);
        }
        // unset → default.
        assert!(unset_in_file(&path, s.key).unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(resolve_with(Some(&text), &[], &[]).entry(s.key).source, Source::Default);
    }
}

#[test]
fn precedence_default_file_env_cli() {
    let file = "terminal:\n  timeout: 10\n";
    assert_eq!(resolve_with(None, &[], &[]).settings.terminal.timeout.get(), 180);
    assert_eq!(resolve_with(Some(file), &[], &[]).settings.terminal.timeout.get(), 10);
    assert_eq!(resolve_with(Some(file), &[("TERMINAL_TIMEOUT", "20")], &[]).settings.terminal.timeout.get(), 20);
    let r = resolve_with(
        Some(file),
        &[("TERMINAL_TIMEOUT", "20")],
        &[("terminal.timeout", "30"), ("terminal.timeout", "40")],
    );
    assert_eq!(r.settings.terminal.timeout.get(), 40);
    assert_eq!(r.entry("terminal.timeout").source, Source::Cli);
}

#[test]
fn booleans_accept_the_documented_spellings() {
    for (raw, want) in [
        ("true", true),
        ("1", true),
        ("YES", true),
        ("On", true),
        ("false", false),
        ("0", false),
        ("no", false),
        ("OFF", false),
    ] {
        let r = resolve_with(None, &[("TERMINAL_DOCKER_ORPHAN_REAPER", raw)], &[]);
        assert_eq!(r.settings.terminal.docker_orphan_reaper, want, "{raw}");
    }
    let r = resolve_with(None, &[("TERMINAL_DOCKER_ORPHAN_REAPER", "maybe")], &[]);
    assert!(r.settings.terminal.docker_orphan_reaper, "falls back to the default");
    assert!(
        r.warnings[0].contains("TERMINAL_DOCKER_ORPHAN_REAPER") && r.warnings[0].contains("maybe"),
        "{:?}",
        r.warnings
    );
    // YAML 1.1 `on` arrives as a string in YAML 1.2 parsers; both spellings work.
    let r = resolve_with(
        Some("terminal:\n  docker_orphan_reaper: off\n  docker_persist_across_processes: 'no'\n"),
        &[],
        &[],
    );
    assert!(!r.settings.terminal.docker_orphan_reaper);
    assert!(!r.settings.terminal.docker_persist_across_processes);
}

#[test]
fn caps_below_one_mean_no_cap_with_a_warning_and_other_invalid_caps_refuse() {
    for raw in ["0", "-1"] {
        let r = resolve_with(None, &[("KANBAN_MAX_IN_PROGRESS_PER_PROFILE", raw)], &[]);
        assert_eq!(r.settings.kanban.max_in_progress_per_profile, None, "{raw}");
        assert!(r.warnings.iter().any(|w| w.contains("no cap") && w.contains(raw)), "{raw}: {:?}", r.warnings);
        assert!(r.refused.is_empty(), "{raw}: {:?}", r.refused);
    }
    for raw in ["abc", "1.5", "99999999999"] {
        let r = resolve_with(None, &[("KANBAN_MAX_IN_PROGRESS_PER_PROFILE", raw)], &[]);
        assert!(
            r.refused.iter().any(|w| w.contains("KANBAN_MAX_IN_PROGRESS_PER_PROFILE") && w.contains(raw)),
            "{raw}: {:?}",
            r.refused
        );
    }
    let r = resolve_with(Some("kanban:\n  max_in_progress_per_profile: \"2\"\n"), &[], &[]);
    assert_eq!(r.settings.kanban.max_in_progress_per_profile, Some(2), "strings are accepted, as the gateway did");
    let r = resolve_with(Some("kanban:\n  failure_limit: 0\n"), &[], &[]);
    assert_eq!(r.settings.kanban.failure_limit.get(), 2);
    assert_eq!(r.warnings.len(), 1);
}

#[test]
fn json_env_values() {
    let r = resolve_with(
        None,
        &[("TERMINAL_DOCKER_VOLUMES", r#"["/a:/b"]"#), ("TERMINAL_DOCKER_ENV", r#"{"A":1,"B":"x"}"#)],
        &[],
    );
    assert_eq!(r.settings.terminal.docker_volumes, ["/a:/b"]);
    assert_eq!(r.settings.terminal.docker_env.get("A").map(String::as_str), Some("1"));
    let r = resolve_with(None, &[("TERMINAL_DOCKER_VOLUMES", "[not json")], &[]);
    assert!(r.settings.terminal.docker_volumes.is_empty());
    assert!(r.warnings[0].contains("valid JSON"));
}

#[test]
fn a_hermes_config_loads_and_drives_berth() {
    let hermes = r#"
model:
  default: anthropic/claude
  provider: openrouter
terminal:
  backend: docker
  env_type: docker
  docker_image: my/image:1
  docker_persist_across_processes: false
  docker_orphan_reaper: true
  container_memory: 2048
  lifetime_seconds: 0
  docker_env:
    FOO: bar
    PORT: 8080
    NESTED: [1, 2]
  docker_volumes:
    - /data:/data:ro
  persistent_shell: true
  singularity_image: whatever
  modal_mode: auto
  env_passthrough: []
  shell_init_files: []
  auto_source_bashrc: true
  home_mode: auto
  daemon_term_grace_seconds: 2.0
  ssh_port: 22
  vercel_runtime: node24
kanban:
  default_assignee: "  research  "
  max_in_progress_per_profile: 2
  max_in_progress_per_profile_overrides: {alpha: 4}
  auto_decompose: true
  auto_decompose_per_tick: 3
  orchestrator_profile: ""
display:
  skin: dark
mcp_servers: {}
"#;
    let r = resolve_with(Some(hermes), &[], &[]);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let sb = r.settings.sandbox();
    assert_eq!(sb.image, "my/image:1");
    assert!(!sb.persist_across_processes);
    assert_eq!(sb.memory_mb, 2048);
    assert_eq!(sb.lifetime_seconds, 0);
    assert_eq!(sb.env.get("PORT").map(String::as_str), Some("8080"));
    assert!(!sb.env.contains_key("NESTED"));
    assert_eq!(sb.volumes, ["/data:/data:ro"]);
    assert_eq!(r.settings.default_assignee().as_deref(), Some("research"));
    let caps = r.settings.caps();
    assert_eq!((caps.per_profile, caps.per_profile_overrides.get("alpha").copied()), (Some(2), Some(4)));
    assert_eq!(sb.sandbox_dir, "/h/sandboxes");
}

#[test]
fn whitespace_default_assignee_is_unset() {
    assert_eq!(resolve_with(Some("kanban:\n  default_assignee: '   '\n"), &[], &[]).settings.default_assignee(), None);
}

#[test]
fn bad_overrides_are_errors() {
    assert!(matches!(parse_override("nonsense"), Err(ConfigError::BadOverride(_))));
    assert!(matches!(parse_override("terminal.nope=1"), Err(ConfigError::UnknownKey(_))));
    assert_eq!(parse_override("terminal.timeout=5").unwrap(), ("terminal.timeout".into(), "5".into()));
    let env = EnvMap::default();
    let bad = [("terminal.timeout".to_owned(), "soon".to_owned())];
    let err = resolve(&Inputs { home: Path::new(HOME), file: None, env: &env, overrides: &bad }).unwrap_err();
    assert_eq!(err.to_string(), "invalid value \"soon\" for terminal.timeout: expected a whole number");
}

#[test]
fn config_set_refuses_bad_values_and_leaves_the_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "model:\n  x: 1\nkanban:\n  failure_limit: 3\n").unwrap();
    let before = std::fs::read(&path).unwrap();
    assert!(set_in_file(&path, "kanban.max_in_progress_per_profile", "abc").is_err());
    assert!(set_in_file(&path, "kanban.failure_limit", "0").is_err());
    assert!(set_in_file(&path, "terminal.bogus", "1").is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    set_in_file(&path, "terminal.docker_orphan_reaper", "off").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("model:") && text.contains("failure_limit: 3") && text.contains("docker_orphan_reaper: false"),
        "{text}"
    );
}

#[test]
fn upstream_bridge_pins_hold_on_the_derived_surfaces() {
    // Upstream pins each of these keys in its CLI map, gateway map, `config set` sync map and terminal_tool.
    // Here every surface derives from the table, so the pin is: the key resolves from each surface.
    for key in [
        "terminal.docker_persist_across_processes",
        "terminal.docker_orphan_reaper",
        "terminal.docker_run_as_host_user",
        "terminal.docker_mount_cwd_to_workspace",
        "terminal.docker_env",
    ] {
        let s = find(key).unwrap();
        let var = s.env_var();
        assert!(hermetic_vars().contains(&var), "{var} is cleared by hermetic tests");
        let r = resolve_with(None, &[], &[]);
        assert!(r.worker_env().iter().any(|(k, _)| k == &var), "{var} is handed to workers");
        assert!(settings_doc(&[]).contains(&format!("`{var}`")), "{var} is documented");
    }
    let r = resolve_with(None, &[("TERMINAL_DOCKER_PERSIST_ACROSS_PROCESSES", "false")], &[]);
    assert!(!r.settings.sandbox().persist_across_processes);
    let r = resolve_with(None, &[("TERMINAL_DOCKER_ORPHAN_REAPER", "off")], &[]);
    assert!(!r.settings.sandbox().orphan_reaper);
}

#[test]
fn shell_quoting_gives_one_word_that_splits_back_to_the_value() {
    assert_eq!(shell_quote("abc"), "abc");
    for raw in ["", r#"["a"]"#, "it's", "a b; rm -rf /", "$(id) `id` $HOME", "x\ny\"z\""] {
        let quoted = shell_quote(raw);
        assert_eq!(shlex::split(&quoted), Some(vec![raw.to_owned()]), "{raw:?} quoted as {quoted}");
    }
}

#[test]
fn durations_past_ten_years_are_refused_and_fall_back_from_the_environment() {
    for (key, raw) in [
        ("terminal.lifetime_seconds", "4611686018427387904"),
        ("kanban.claim_ttl_seconds", "9223372036854775807"),
        ("kanban.dispatch_interval_seconds", "1e20"),
        ("terminal.timeout", "315360001"),
    ] {
        assert!(matches!(validate(key, raw), Err(ConfigError::InvalidValue { .. })), "{key}={raw}");
        let var = env_var_for(key);
        let r = resolve_with(None, &[(var.as_str(), raw)], &[]);
        assert_eq!(r.entry(key).source, Source::Default, "{key}");
        assert!(r.warnings.iter().any(|w| w.contains(key)), "{key}: {:?}", r.warnings);
    }
    assert!(validate("terminal.lifetime_seconds", &MAX_SECONDS.to_string()).is_ok());
}

#[test]
fn concurrent_writers_of_different_keys_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let keys = ["terminal.timeout", "terminal.lifetime_seconds", "kanban.failure_limit", "kanban.claim_ttl_seconds"];
    std::thread::scope(|s| {
        for (i, k) in keys.iter().enumerate() {
            let path = &path;
            s.spawn(move || {
                for round in 0..20 {
                    set_in_file(path, k, &(10 + i * 100 + round).to_string()).unwrap();
                }
            });
        }
    });
    let doc = load_file(&path).unwrap().unwrap();
    for (i, k) in keys.iter().enumerate() {
        let s = find(k).unwrap();
        let v = doc.get(s.section()).and_then(|m| m.get(s.name())).and_then(serde_yaml_ng::Value::as_i64);
        assert_eq!(v, Some((10 + i * 100 + 19) as i64), "{k}");
    }
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
}

proptest::proptest! {
    #[test]
    fn env_text_never_panics_and_warns_on_garbage(raw in ".{0,30}") {
        for s in SETTINGS {
            let var = s.env_var();
            let r = resolve_with(None, &[(var.as_str(), raw.as_str())], &[]);
            let _ = r.value(s.key);
        }
    }
}

#[test]
fn typed_fields_hold_the_table_defaults_and_the_resolved_values() {
    let d = resolve_with(None, &[], &[]).settings;
    assert_eq!(d.kanban.failure_limit.get(), 2);
    assert_eq!(d.kanban.claim_ttl_seconds.get(), 900);
    assert_eq!(d.kanban.spawn_lease_seconds.get(), 20);
    assert_eq!(d.kanban.worker_log_rotate_bytes, 2_097_152);
    assert_eq!(d.kanban.worker_log_backup_count.get(), 1);
    assert_eq!(d.terminal.sandbox_dir, format!("{HOME}/sandboxes"));
    assert_eq!(d.kanban.max_spawn, None);
    let r = resolve_with(
        Some("kanban:\n  failure_limit: 5\n"),
        &[("KANBAN_CLAIM_TTL_SECONDS", "30"), ("TERMINAL_DOCKER_ORPHAN_REAPER", "off")],
        &[("kanban.max_spawn", "3"), ("terminal.container_cpu", "2.5")],
    )
    .settings;
    assert_eq!(r.kanban.failure_limit.get(), 5);
    assert_eq!(r.kanban.claim_ttl_seconds.duration(), std::time::Duration::from_secs(30));
    assert!(!r.terminal.docker_orphan_reaper);
    assert_eq!(r.kanban.max_spawn, Some(3));
    assert_eq!(r.terminal.container_cpu.get(), 2.5);
}

#[test]
fn out_of_range_values_are_refused_by_the_rows_type() {
    for (key, raw, why) in [
        ("kanban.failure_limit", "0", "0 is below 1"),
        ("kanban.spawn_lease_seconds", "0", "0 is below 1"),
        ("kanban.worker_log_rotate_bytes", "-1", "-1 is negative"),
        ("terminal.container_memory", "1073741825", "is above 1073741824"),
        ("terminal.container_cpu", "2000000", "is above 1000000"),
        ("kanban.dispatch_interval_seconds", "-1", "is negative"),
    ] {
        let err = validate(key, raw).unwrap_err().to_string();
        assert!(err.contains(why), "{key}={raw}: {err}");
    }
}

#[test]
fn yaml_merge_keys_are_read_as_hermes_reads_them() {
    let file = "\
base: &base
  timeout: 30
  lifetime_seconds: 900
more: &more
  timeout: 45
  docker_image: img:merged
chained: &chained
  <<: *base
  cwd: /srv
terminal:
  <<: [*chained, *more]
  lifetime_seconds: 600
kanban:
  <<: {failure_limit: 7}
";
    let r = resolve_with(Some(file), &[], &[]);
    let get = |k: &str| r.value(k).to_text();
    assert_eq!(get("terminal.timeout"), "30", "the earlier merged mapping wins");
    assert_eq!(get("terminal.lifetime_seconds"), "600", "a key written in the mapping wins");
    assert_eq!(get("terminal.docker_image"), "img:merged");
    assert_eq!(get("terminal.cwd"), "/srv", "a chain of merges is followed");
    assert_eq!(get("kanban.failure_limit"), "7");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let bad = resolve_with(Some("terminal:\n  <<: 5\n  timeout: 31\n"), &[], &[]);
    assert_eq!(bad.value("terminal.timeout").to_text(), "31");
    assert!(bad.warnings.iter().any(|w| w.contains("merge key")), "{:?}", bad.warnings);
}

#[test]
fn a_profiles_retry_backoff_overrides_replace_each_default_they_name() {
    let file = r#"
kanban:
  retry_backoff_seconds: 10
  retry_backoff_max_seconds: 600
  retry_backoff_seconds_overrides: {alpha: 2}
  retry_backoff_max_seconds_overrides: {alpha: 30, beta: 60}
"#;
    let r = resolve_with(Some(file), &[], &[]);
    assert!(r.refused.is_empty() && r.warnings.is_empty(), "{:?} {:?}", r.refused, r.warnings);
    let b = r.settings.retry_backoffs();
    let secs = |s| std::time::Duration::from_secs(s);
    let of = |p| {
        let x = b.of(p);
        (x.base, x.max)
    };
    assert_eq!(of(Some("alpha")), (secs(2), secs(30)));
    assert_eq!(of(Some("beta")), (secs(10), secs(60)));
    assert_eq!(of(Some("gamma")), (secs(10), secs(600)));
    assert_eq!(of(None), (secs(10), secs(600)));
}
