//! Tests of spec building: upstream hardening, user mode, mounts, env normalization, extra args and fingerprints.

use std::collections::BTreeMap;

use super::*;
use crate::ids::{ProfileName, TaskId};
use crate::label::LABEL_FIELDS;

fn settings() -> SandboxSettings {
    crate::test_util::sandbox_settings()
}

fn ident(task: &str, profile: &str) -> SandboxIdentity {
    SandboxIdentity::new(TaskId::parse(task).unwrap(), ProfileName::parse(profile).unwrap())
}

fn try_build(s: &SandboxSettings, host: &HostFacts) -> Result<BuiltSpec, SpecError> {
    let id = ident("my-task", "default");
    build_create_spec(&id, SandboxMode::Persist, id.persistent_name(), s, host)
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
fn extra_args_override_and_unmappable_flags_are_errors() {
    let mut st = settings();
    st.extra_args = ["--cpus", "2", "--memory=1g", "-e", "A=1", "--pids-limit", "64", "--shm-size", "256m", "-eB=2"]
        .map(String::from)
        .to_vec();
    let b = build(&st, &HostFacts::default());
    assert_eq!(b.spec.nano_cpus, Some(2_000_000_000));
    assert_eq!(b.spec.memory_bytes, Some(1024 * 1024 * 1024));
    assert!(b.spec.env.contains(&"A=1".to_owned()) && b.spec.env.contains(&"B=2".to_owned()));
    assert_eq!(b.spec.pids_limit, Some(64));
    assert_eq!(b.spec.shm_size, Some(256 * 1024 * 1024));
    let err = |args: &[&str]| {
        let mut st = settings();
        st.extra_args = args.iter().map(|s| (*s).to_owned()).collect();
        try_build(&st, &HostFacts::default()).expect_err("refused").to_string()
    };
    assert!(err(&["--frobnicate", "x"]).contains("--frobnicate"));
    assert!(err(&["--cap-add"]).contains("needs a value"));
    assert!(err(&["--rm"]).contains("--rm is not supported"));
    assert!(err(&["-d"]).contains("--detach"));
    assert!(err(&["--env-file", "x.env"]).contains("terminal.docker_env"));
    assert!(err(&["--ulimit", "nofile"]).contains("key=value"));
    assert!(err(&["--gpus", "bogus=1"]).contains("--gpus"));
    assert!(err(&["--mount", "type=bind,target=/x"]).contains("needs a source"));
    assert!(err(&["alpine"]).contains("not a flag"));
    assert_eq!(parse_bytes("1024"), Some(1024));
    assert_eq!(parse_bytes("64k"), Some(65536));
    assert_eq!(parse_bytes("x"), None);
}

#[test]
fn extra_args_map_devices_gpus_ulimits_mounts_and_the_rest() {
    let mut st = settings();
    st.extra_args = [
        "--gpus",
        "all",
        "--gpus",
        "\"device=0,2\"",
        "--device",
        "/dev/null:/dev/xnull:r",
        "--ulimit",
        "nofile=1024:2048",
        "--ulimit",
        "nproc=512",
        "--mount",
        "type=bind,source=/srv/data,target=/data,readonly",
        "--mount",
        "type=tmpfs,target=/scratch,tmpfs-size=64m",
        "--sysctl",
        "net.ipv4.ip_forward=1",
        "--read-only",
        "-h",
        "box",
        "--restart=on-failure:3",
        "-p",
        "127.0.0.1:8080:80",
        "--log-opt",
        "max-size=1m",
        "--oom-score-adj",
        "100",
    ]
    .map(String::from)
    .to_vec();
    let x = build(&st, &HostFacts::default()).spec.extra;
    assert_eq!(x.device_requests[0].count, -1);
    assert_eq!(x.device_requests[1].device_ids, ["0", "2"]);
    assert_eq!(x.device_requests[1].capabilities, [["gpu"]]);
    assert_eq!(
        x.devices[0],
        DeviceMapping { host: "/dev/null".into(), container: "/dev/xnull".into(), permissions: "r".into() }
    );
    assert_eq!(x.ulimits[0], Ulimit { name: "nofile".into(), soft: 1024, hard: 2048 });
    assert_eq!(x.ulimits[1], Ulimit { name: "nproc".into(), soft: 512, hard: 512 });
    assert_eq!(x.mounts[0].source.as_deref(), Some("/srv/data"));
    assert!(x.mounts[0].read_only && x.mounts[0].kind == "bind" && x.mounts[0].target == "/data");
    assert_eq!(x.mounts[1].options["tmpfs-size"], "64m");
    assert_eq!(x.sysctls["net.ipv4.ip_forward"], "1");
    assert!(x.read_only);
    assert_eq!(x.hostname.as_deref(), Some("box"));
    assert_eq!(x.restart.as_deref(), Some("on-failure:3"));
    assert_eq!(
        x.publish[0],
        PortPublish { host_ip: "127.0.0.1".into(), host_port: "8080".into(), container: "80/tcp".into() }
    );
    assert_eq!(x.log_opts["max-size"], "1m");
    assert_eq!(x.oom_score_adj, Some(100));
}

#[test]
fn extra_fields_change_the_fingerprint_only_when_used() {
    let base = build(&settings(), &HostFacts::default()).spec;
    let mut st = settings();
    st.extra_args = vec!["--ulimit".into(), "nofile=10".into()];
    assert_ne!(build(&st, &HostFacts::default()).spec.fingerprint(), base.fingerprint());
    let mut plain = base.clone();
    plain.extra = ExtraCreate::default();
    assert_eq!(plain.fingerprint(), base.fingerprint());
}

#[test]
fn network_off_with_a_network_in_extra_args_fails_closed() {
    let mut st = settings();
    st.network = false;
    st.extra_args = vec!["--network=bridge".into()];
    assert_eq!(
        try_build(&st, &HostFacts::default()).unwrap_err(),
        SpecError::NetworkConflict { mode: "bridge".into() }
    );
    st.extra_args = vec!["--net".into(), "host".into()];
    assert!(matches!(try_build(&st, &HostFacts::default()), Err(SpecError::NetworkConflict { .. })));
    st.extra_args = vec!["--network".into(), "none".into()];
    assert_eq!(build(&st, &HostFacts::default()).spec.network_mode.as_deref(), Some("none"));
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
fn fingerprint_tracks_every_spec_change_but_not_the_name() {
    let base = build(&settings(), &HostFacts::default()).spec;
    let fp = base.fingerprint();
    let mut renamed = base.clone();
    renamed.name = "other".into();
    renamed.labels.insert("x".into(), "y".into());
    assert_eq!(renamed.fingerprint(), fp);
    let changes: [fn(&mut SandboxSettings); 9] = [
        |s| s.image = "img:2".into(),
        |s| s.memory_mb = 1024,
        |s| s.cpu = 2.0,
        |s| s.volumes = vec!["/a:/b".into()],
        |s| s.env = BTreeMap::from([("A".into(), "1".into())]),
        |s| s.extra_args = vec!["--dns".into(), "1.1.1.1".into()],
        |s| s.network = false,
        |s| s.container_persistent = false,
        |s| s.cwd = "/workspace".into(),
    ];
    for change in changes {
        let mut st = settings();
        change(&mut st);
        assert_ne!(build(&st, &HostFacts::default()).spec.fingerprint(), fp);
    }
    // Forwarded secrets are per exec: they never change the container or its fingerprint.
    let mut st = settings();
    st.forward_env = vec!["SECRET".into()];
    assert_eq!(build(&st, &HostFacts::default()).spec.fingerprint(), fp);
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

/// Specs with binds in every shape (volumes with options, the cwd, named and anonymous volumes from `-v`), mounts,
/// devices and namespaces: their fingerprints and field digests are those the code before typed binds wrote, so an
/// upgrade recreates no sandbox (hermes-agent's included).
#[test]
fn fingerprints_of_specs_with_binds_and_extra_args_are_pinned() {
    let host = HostFacts { cwd: Some("/home/me/proj".into()), ..HostFacts::default() };
    // (volumes, extra args, mount the cwd, fingerprint, binds and extra digests)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], bool, &'a str, &'a str);
    let cases: [Case<'_>; 4] = [
        (
            &["/data:/data:ro", "/opt/x:/x:rw,z"],
            &[],
            false,
            "v2-240e9612b4d6fe686ff1c264d1dc76cc",
            "binds:24ebad0a extra:ab24a95f",
        ),
        (
            &["/srv:/workspace"],
            &["-v", "named:/v", "--volume=/anon", "-v", "/a:/b:ro"],
            false,
            "v2-d3de03f9e49d0f445d13e822adfe6162",
            "binds:718dd2af extra:ab24a95f",
        ),
        (
            &[],
            &["--mount", "type=bind,src=/opt,dst=/o,readonly", "--device", "/dev/null", "--pid", "host"],
            true,
            "v2-7f8a2ec376d95ba26111cc514df1f8f1",
            "binds:18071563 extra:654e4174",
        ),
        (
            &["/c:/c"],
            &["--cap-add", "NET_ADMIN", "--security-opt", "label=disable", "-v", "/e:/f:ro"],
            true,
            "v2-7e4fbc4bb8d49923b3f20271eb321763",
            "binds:9f62eae6 extra:ab24a95f",
        ),
    ];
    let mut legacies = [
        "5d52ccabc28bd697a9d84b21421cb28f",
        "36621959e336c8af8b1b1b77ceec86db",
        "022e54399c6dbe8658212f001a66887d",
        "1ae92adfed40104308bb80909fe0974e",
    ]
    .into_iter();
    for (volumes, extra, mount_cwd, fingerprint, fields) in cases {
        let st = SandboxSettings {
            volumes: volumes.iter().map(|v| (*v).to_owned()).collect(),
            extra_args: extra.iter().map(|v| (*v).to_owned()).collect(),
            mount_cwd_to_workspace: mount_cwd,
            ..settings()
        };
        let spec = build(&st, &host).spec;
        let digests = spec.field_digests();
        let pick =
            |f: &str| digests.split(',').find(|d| d.starts_with(&format!("{f}:"))).unwrap_or_default().to_owned();
        let got = format!("{} {}", pick("binds"), pick("extra"));
        let legacy = spec.legacy_fingerprint();
        assert_eq!((spec.fingerprint().as_str(), got.as_str()), (fingerprint, fields), "{volumes:?} {extra:?}");
        assert_eq!(legacy, legacies.next().unwrap(), "legacy fingerprint of {volumes:?} {extra:?}");
    }
}

#[test]
fn a_drift_names_the_fields_and_settings_that_changed_and_nothing_else() {
    let fields = |st: &SandboxSettings| build(st, &HostFacts::default()).spec.labels[LABEL_FIELDS].clone();
    let base = fields(&settings());
    assert_eq!(base.split(',').count(), 21, "{base}");
    assert!(changed_fields(Some(&base), &base).is_empty());
    type Change = fn(&mut SandboxSettings);
    let cases: [(Change, &[&str]); 5] = [
        (|s| s.memory_mb = 1024, &["memory_bytes (terminal.container_memory)"]),
        (|s| s.image = "img:2".into(), &["image (terminal.docker_image)"]),
        (|s| s.env = BTreeMap::from([("A".into(), "1".into())]), &["env (terminal.docker_env)"]),
        (
            |s| s.extra_args = vec!["--dns".into(), "1.1.1.1".into()],
            &["dns (terminal.docker_egress, terminal.docker_extra_args)"],
        ),
        (
            |s| {
                s.cpu = 3.0;
                s.network = false;
            },
            &["nano_cpus (terminal.container_cpu)", "network_mode (terminal.docker_network, terminal.docker_egress)"],
        ),
    ];
    for (change, want) in cases {
        let mut st = settings();
        change(&mut st);
        assert_eq!(changed_fields(Some(&base), &fields(&st)), want);
    }
    // A container from before the label (or hermes-made) names nothing: the caller falls back to the fingerprint.
    assert!(changed_fields(None, &base).is_empty());
    assert!(changed_fields(Some(""), &base).is_empty());
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
fn an_allowlist_puts_the_sandbox_behind_the_proxy_and_extra_args_cannot_undo_it() {
    let mut st = settings();
    st.egress = crate::egress::EgressPolicy::parse("pypi.org").unwrap();
    let route = crate::egress::EgressRoute { network: "berth-egress-h-p".into(), proxy_ip: "10.213.7.2".into() };
    let host = HostFacts { egress_route: Some(route), ..HostFacts::default() };
    let b = build(&st, &host);
    assert_eq!(b.spec.network_mode.as_deref(), Some("berth-egress-h-p"));
    assert_eq!(b.spec.dns, ["10.213.7.2"]);
    assert!(b.spec.env.iter().any(|e| e.starts_with("HTTPS_PROXY=http://") && e.ends_with("@10.213.7.2:3128")));
    assert!(b.spec.env.iter().any(|e| e.starts_with("no_proxy=")));
    assert!(b.spec.labels["hermes-egress"].starts_with("berth-"));
    for extra in [["--network", "bridge"], ["--dns", "8.8.8.8"]] {
        st.extra_args = extra.map(String::from).to_vec();
        let e = build_create_spec(&ident("t", "p"), SandboxMode::Persist, "n".into(), &st, &host).unwrap_err();
        assert_eq!(e, SpecError::EgressConflict, "{extra:?}");
    }
    st.extra_args.clear();
    let e =
        build_create_spec(&ident("t", "p"), SandboxMode::Persist, "n".into(), &st, &HostFacts::default()).unwrap_err();
    assert_eq!(e, SpecError::EgressUnavailable);
    st.egress = crate::egress::EgressPolicy::None;
    assert_eq!(build(&st, &HostFacts::default()).spec.network_mode.as_deref(), Some("none"));
}
