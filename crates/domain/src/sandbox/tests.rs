//! Tests of spec building: upstream hardening, user mode, mounts, env normalization and fingerprints (the extra
//! arguments' own tests are the Docker adapter's, `run_flags/tests.rs`, whose parser they need).

use std::collections::BTreeMap;

use super::*;
use crate::ids::{ProfileName, TaskId};

fn settings() -> SandboxSettings {
    crate::test_util::sandbox_settings()
}

fn ident(task: &str, profile: &str) -> SandboxIdentity {
    SandboxIdentity::new(TaskId::parse(task).unwrap(), ProfileName::parse(profile).unwrap())
}

fn try_build(s: &SandboxSettings, host: &HostFacts) -> Result<BuiltSpec, SpecError> {
    let id = ident("my-task", "default");
    build_create_spec(&id, SandboxMode::Persist, id.persistent_name(), s, host, &NoExtraArgs)
}

fn build(s: &SandboxSettings, host: &HostFacts) -> BuiltSpec {
    try_build(s, host).expect("valid settings")
}

/// A spec's binds as the engine gets them.
fn binds(spec: &CreateSpec) -> Vec<String> {
    spec.binds.iter().map(ToString::to_string).collect()
}

#[test]
fn labels_are_the_upstream_three_plus_berths_own() {
    let b = build(&settings(), &HostFacts::default());
    let l = &b.spec.labels;
    assert_eq!(l["hermes-agent"], "1");
    assert_eq!(l["hermes-task-id"], "my-task");
    assert_eq!(l["hermes-profile"], "default");
    assert!(l.contains_key("berth.identity") && l.contains_key("berth.fingerprint"));
    assert_eq!(ident("abc", "default").upstream_labels().len(), 3);
    let weird = ident("task/with:weird*chars", "research-bot").upstream_labels();
    assert_eq!(weird["hermes-task-id"], "task_with_weird_chars");
    assert_eq!(weird["hermes-profile"], "research-bot");
}

#[test]
fn hardening_matches_upstream() {
    let s = build(&settings(), &HostFacts::default()).spec;
    assert_eq!(s.cap_drop, ["ALL"]);
    for cap in ["DAC_OVERRIDE", "CHOWN", "FOWNER", "SETUID", "SETGID"] {
        assert!(s.cap_add.iter().any(|c| c == cap), "{cap}");
    }
    assert_eq!(s.security_opt, ["no-new-privileges"]);
    assert_eq!(s.pids_limit, Some(256));
    assert!(s.init);
    assert_eq!(s.cmd, ["sleep", "infinity"]);
    assert_eq!(s.tmpfs["/tmp"], "rw,nosuid,size=512m");
    assert_eq!(s.tmpfs["/var/tmp"], "rw,noexec,nosuid,size=256m");
    assert_eq!(s.tmpfs["/run"], "rw,noexec,nosuid,size=64m");
    assert_eq!(s.nano_cpus, Some(1_000_000_000));
    assert_eq!(s.memory_bytes, Some(5120 * 1024 * 1024));
    assert_eq!(s.user, None);
    assert_eq!(s.network_mode, None);
}

#[test]
fn host_user_mode_drops_setuid_caps() {
    let mut st = settings();
    st.run_as_host_user = true;
    let b = build(&st, &HostFacts { user: Some("1234:5678".into()), ..HostFacts::default() });
    assert_eq!(b.spec.user.as_deref(), Some("1234:5678"));
    assert!(!b.spec.cap_add.iter().any(|c| c == "SETUID" || c == "SETGID"));
    for cap in ["DAC_OVERRIDE", "CHOWN", "FOWNER"] {
        assert!(b.spec.cap_add.iter().any(|c| c == cap));
    }
    // Without POSIX ids: no --user, the caps stay, and a warning says why.
    let b = build(&st, &HostFacts::default());
    assert_eq!(b.spec.user, None);
    assert!(b.spec.cap_add.iter().any(|c| c == "SETUID"));
    assert!(b.warnings.iter().any(|w| w.contains("does not expose POSIX uid/gid")));
}

#[test]
fn persistent_and_tmpfs_workspaces() {
    let b = build(&settings(), &HostFacts::default());
    assert!(binds(&b.spec).iter().any(|m| m.ends_with("/home:/root")));
    assert!(binds(&b.spec).iter().any(|m| m.ends_with("/workspace:/workspace")));
    assert_eq!(b.host_dirs.len(), 2);
    assert!(b.host_dirs.iter().all(|d| d.starts_with("/sb/docker/default/my-task-")));
    let mut st = settings();
    st.container_persistent = false;
    let b = build(&st, &HostFacts::default());
    assert!(b.spec.binds.is_empty());
    assert_eq!(b.spec.tmpfs["/workspace"], "rw,exec,size=10g");
    assert_eq!(b.spec.tmpfs["/home"], "rw,exec,size=1g");
    assert_eq!(b.spec.tmpfs["/root"], "rw,exec,size=1g");
}

#[test]
fn cwd_mount_rules() {
    let mut st = settings();
    st.mount_cwd_to_workspace = true;
    let host = HostFacts { cwd: Some("/home/me/proj".into()), ..HostFacts::default() };
    let b = build(&st, &host);
    assert_eq!(b.spec.binds[0], Bind::new("/home/me/proj", "/workspace"));
    assert!(
        !binds(&b.spec).iter().any(|m| m.contains("/sb/") && m.ends_with(":/workspace")),
        "host cwd wins over the sandbox workspace"
    );
    // Auto-mount off: the host dir is not mounted.
    st.mount_cwd_to_workspace = false;
    assert!(!binds(&build(&st, &host).spec).iter().any(|m| m.starts_with("/home/me/proj")));
    // An explicit /workspace volume wins over auto-mount: ":/workspace" occurs once.
    st.mount_cwd_to_workspace = true;
    st.volumes = vec!["/other:/workspace".into(), "novolume".into()];
    let b = build(&st, &host);
    assert_eq!(binds(&b.spec).iter().filter(|m| m.contains(":/workspace")).count(), 1);
    assert!(b.spec.binds.contains(&Bind::parse("/other:/workspace")));
    assert!(b.warnings.iter().any(|w| w.contains("novolume")));
}

#[test]
fn env_is_normalized() {
    let mut st = settings();
    st.env = BTreeMap::from([
        ("VALID_KEY".into(), "1".into()),
        ("GOOD".into(), "x".into()),
        ("1BAD".into(), "y".into()),
        ("has-dash".into(), "z".into()),
    ]);
    let b = build(&st, &HostFacts::default());
    assert_eq!(b.spec.env, ["GOOD=x", "VALID_KEY=1"]);
    assert_eq!(b.warnings.iter().filter(|w| w.contains("docker_env")).count(), 2);
    assert!(is_valid_env_name("_X1") && !is_valid_env_name("") && !is_valid_env_name("A-B"));
}

#[test]
fn network_disk_and_resources() {
    let mut st = settings();
    st.network = false;
    st.cpu = 0.0;
    st.memory_mb = 0;
    let b = build(&st, &HostFacts::default());
    assert_eq!(b.spec.network_mode.as_deref(), Some("none"));
    assert_eq!(b.spec.nano_cpus, None);
    assert_eq!(b.spec.memory_bytes, None);
    assert!(b.warnings.iter().any(|w| w.contains("overlay2 on XFS")));
    let b = build(&st, &HostFacts { storage_opt_supported: true, ..HostFacts::default() });
    assert_eq!(b.spec.storage_size.as_deref(), Some("51200m"));
}

#[test]
fn cwd_placeholders_mean_the_container_default_and_relative_paths_are_refused() {
    for (raw, want) in [
        (".", "/root"),
        ("auto", "/root"),
        ("cwd", "/root"),
        ("~", "/root"),
        ("", "/root"),
        ("/w", "/w"),
        ("~/p", "/root/p"),
    ] {
        let mut st = settings();
        st.cwd = raw.into();
        assert_eq!(build(&st, &HostFacts::default()).spec.workdir, want, "{raw:?}");
    }
    let mut st = settings();
    st.cwd = "src/app".into();
    assert_eq!(try_build(&st, &HostFacts::default()).unwrap_err(), SpecError::RelativeCwd("src/app".into()));
}

#[test]
fn shm_size_defaults_to_1g_and_egress_label_is_off() {
    let b = build(&settings(), &HostFacts::default());
    assert_eq!(b.spec.shm_size, Some(1 << 30));
    assert_eq!(b.spec.labels["hermes-egress"], "off");
    let mut st = settings();
    st.shm_size = "0".into();
    assert_eq!(build(&st, &HostFacts::default()).spec.shm_size, None);
    st.shm_size = "lots".into();
    assert_eq!(try_build(&st, &HostFacts::default()).unwrap_err(), SpecError::BadShmSize("lots".into()));
}

#[test]
fn no_cgroup_controllers_drops_resource_limits_with_a_warning() {
    let host = HostFacts { cgroup_limits_unavailable: true, ..HostFacts::default() };
    let b = build(&settings(), &host);
    assert_eq!((b.spec.nano_cpus, b.spec.memory_bytes, b.spec.pids_limit), (None, None, None));
    assert!(b.warnings.iter().any(|w| w.contains("cgroup")));
}

#[test]
fn colliding_labels_get_distinct_names_and_digests() {
    let a = ident("a/b", "default");
    let b = ident("a:b", "default");
    assert_eq!(a.task_label(), b.task_label());
    assert_ne!(a.digest(), b.digest());
    assert_ne!(a.persistent_name(), b.persistent_name());
    let empty = ident("", "default");
    assert_eq!(empty.task_label().as_str(), "unknown");
    assert_ne!(empty.persistent_name(), ident("unknown", "default").persistent_name());
}

proptest::proptest! {
    #[test]
    fn names_are_valid_docker_names(task in ".{0,300}", profile in "[a-z][a-z0-9_.-]{0,30}") {
        let id = ident(&task, &profile);
        let name = id.persistent_name();
        proptest::prop_assert!(name.len() <= 80);
        proptest::prop_assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)));
        proptest::prop_assert!(name.starts_with("berth-"));
    }

    #[test]
    fn distinct_raw_ids_never_share_a_name(a in ".{0,20}", b in ".{0,20}") {
        proptest::prop_assume!(a != b);
        proptest::prop_assert_ne!(ident(&a, "p").persistent_name(), ident(&b, "p").persistent_name());
    }
}

#[test]
fn a_shared_container_key_replaces_the_profile_label_as_hermes_0_21_writes_it() {
    // Expected values computed with hermes's own formula (`_container_identity`) in Python.
    assert_eq!(shared_profile_label("team/alpha:1").as_str(), "team_alpha_1-fc4156ca636a");
    assert_eq!(shared_profile_label(&"x".repeat(80)).as_str(), format!("{}-d929cdeea7e6", "x".repeat(50)));
    let a = ident("t1", "alpha").shared("team/alpha:1");
    let b = ident("t1", "beta").shared("team/alpha:1");
    assert_eq!(a.upstream_labels()["hermes-profile"], "team_alpha_1-fc4156ca636a");
    // Two profiles with one key share the identity (digest, name, labels); without a key they do not.
    assert_eq!((a.digest(), a.persistent_name()), (b.digest(), b.persistent_name()));
    assert_ne!(ident("t1", "alpha").digest(), ident("t1", "beta").digest());
    assert_ne!(a.digest(), ident("t1", "alpha").digest());
    assert_eq!(ident("t1", "alpha").shared(""), ident("t1", "alpha"));
}

#[test]
fn fingerprint_encodings_are_pinned() {
    // Changing either value recreates every sandbox in the field: the v2 encoding may only change with a new
    // version tag, and the legacy one never.
    let base = build(&settings(), &HostFacts::default()).spec;
    assert_eq!(base.fingerprint(), "v2-948c210cfa7889427476d58e1f86f528");
    assert_eq!(base.legacy_fingerprint(), "6007ccd11d88d4142485f4e8a69dd8d6");
}

#[test]
fn sizes_are_read_as_docker_reads_them_and_nothing_else() {
    use crate::sandbox::parse_bytes;
    assert_eq!(parse_bytes("512m"), Some(512 << 20));
    assert_eq!(parse_bytes("1.5g"), Some(3 << 29));
    assert_eq!(parse_bytes("1GiB"), Some(1 << 30));
    assert_eq!(parse_bytes("2048"), Some(2048));
    for bad in ["1e3", "inf", "NaN", "-1m", "8EiB", "99999999999999999999p", "", "m", "1.m", "+5"] {
        assert_eq!(parse_bytes(bad), None, "{bad}");
    }
}

#[test]
fn extra_args_append_lists_replace_what_they_set_and_may_clear_the_cpu_count() {
    let base = build(&settings(), &HostFacts::default()).spec;
    let mut untouched = base.clone();
    ExtraArgs::default().apply_to(&mut untouched);
    assert_eq!(untouched, base);
    let mut spec = base.clone();
    ExtraArgs {
        env: vec!["A=1".into()],
        cap_add: vec!["NET_ADMIN".into()],
        labels: BTreeMap::from([("k".into(), "v".into())]),
        memory_bytes: Some(1 << 30),
        nano_cpus: Some(None),
        init: Some(false),
        ..ExtraArgs::default()
    }
    .apply_to(&mut spec);
    assert_eq!((spec.env.len(), spec.env.last().map(String::as_str)), (base.env.len() + 1, Some("A=1")));
    assert_eq!(spec.cap_add[..base.cap_add.len()], base.cap_add[..]);
    assert_eq!(spec.cap_add.last().map(String::as_str), Some("NET_ADMIN"));
    assert_eq!(spec.labels["k"], "v");
    assert_eq!((spec.memory_bytes, spec.nano_cpus, spec.init), (Some(1 << 30), None, false));
    assert_eq!((spec.pids_limit, &spec.user, &spec.network_mode), (base.pids_limit, &base.user, &base.network_mode));
    // A runtime without extra arguments refuses any, and builds the same spec from none.
    let mut st = settings();
    st.extra_args = vec!["--privileged".into()];
    assert!(matches!(try_build(&st, &HostFacts::default()), Err(SpecError::UnsupportedExtraArg { .. })));
}

#[test]
fn credentials_put_placeholders_and_the_bundle_variables_in_the_spec_only_behind_an_allowlist() {
    use crate::egress::credentials::{CA_BUNDLE_PATH, Credentials, PLACEHOLDER_PREFIX};
    use crate::egress::{EgressPolicy, EgressRoute};
    let mut s = settings();
    s.egress = EgressPolicy::parse("api.example.test").unwrap();
    let lists = BTreeMap::from([("TOKEN".to_owned(), vec!["api.example.test:443".to_owned()])]);
    s.credentials = Credentials::parse(&lists).unwrap();
    s.env = BTreeMap::from([("TOKEN".to_owned(), "stored-value".to_owned())]);
    let route = EgressRoute { network: "berth-egress-x".into(), proxy_ip: "10.213.0.2".into() };
    let facts = CredentialFacts { key: "k".into() };
    let host = HostFacts { egress_route: Some(route.clone()), credential_facts: Some(facts), ..HostFacts::default() };
    let env = build(&s, &host).spec.env;
    let tokens: Vec<&String> = env.iter().filter(|e| e.starts_with("TOKEN=")).collect();
    assert_eq!(tokens.len(), 1, "one TOKEN, the docker_env value replaced: {env:?}");
    assert!(tokens[0].starts_with(&format!("TOKEN={PLACEHOLDER_PREFIX}")), "{env:?}");
    assert!(env.contains(&format!("SSL_CERT_FILE={CA_BUNDLE_PATH}")), "{env:?}");
    let same = build(&s, &host).spec.labels[crate::label::LABEL_FINGERPRINT].clone();
    assert_eq!(same, build(&s, &host).spec.labels[crate::label::LABEL_FINGERPRINT], "stable across builds");
    let lists = BTreeMap::from([("TOKEN".to_owned(), vec!["api.example.test:8443".to_owned()])]);
    let mut moved = s.clone();
    moved.credentials = Credentials::parse(&lists).unwrap();
    assert_ne!(same, build(&moved, &host).spec.labels[crate::label::LABEL_FINGERPRINT], "destinations drift");
    let bare = HostFacts { egress_route: Some(route), ..HostFacts::default() };
    assert!(matches!(try_build(&s, &bare), Err(SpecError::Credentials(_))), "no CA set up, no spec");
    s.egress = EgressPolicy::All;
    assert!(matches!(try_build(&s, &HostFacts::default()), Err(SpecError::Credentials(m)) if m.contains("it is all")));
}
