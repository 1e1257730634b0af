//! Tests of the `docker run` flags as the domain applies and checks them: what each flag sets, what is refused,
//! the fingerprints of specs the flags shape (pinned: an upgrade recreates no sandbox), and every spelling of what
//! reaches the host past a mount.

use std::collections::BTreeMap;

use domain::egress::{EgressPolicy, EgressRoute};
use domain::ids::{ProfileName, TaskId};
use domain::label::LABEL_FIELDS;
use domain::sandbox::{
    BuiltSpec, DeviceMapping, ExtraCreate, HostFacts, PortPublish, SandboxIdentity, SandboxMode, SandboxSettings,
    SpecError, Ulimit, build_create_spec, changed_fields, check_extra_args, host_access, parse_bytes,
};

use super::DockerRunFlags;

fn settings() -> SandboxSettings {
    domain::test_util::sandbox_settings()
}

fn ident(task: &str, profile: &str) -> SandboxIdentity {
    SandboxIdentity::new(TaskId::parse(task).unwrap(), ProfileName::parse(profile).unwrap())
}

fn try_build(s: &SandboxSettings, host: &HostFacts) -> Result<BuiltSpec, SpecError> {
    let id = ident("my-task", "default");
    build_create_spec(&id, SandboxMode::Persist, id.persistent_name(), s, host, &DockerRunFlags)
}

fn build(s: &SandboxSettings, host: &HostFacts) -> BuiltSpec {
    try_build(s, host).expect("valid settings")
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
        (
            |s| s.env = BTreeMap::from([("A".into(), "1".into())]),
            &["env (terminal.docker_env, terminal.docker_credentials)"],
        ),
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
fn an_allowlist_puts_the_sandbox_behind_the_proxy_and_extra_args_cannot_undo_it() {
    let mut st = settings();
    st.egress = EgressPolicy::parse("pypi.org").unwrap();
    let route = EgressRoute { network: "berth-egress-h-p".into(), proxy_ip: "10.213.7.2".into() };
    let host = HostFacts { egress_route: Some(route), ..HostFacts::default() };
    let b = build(&st, &host);
    assert_eq!(b.spec.network_mode.as_deref(), Some("berth-egress-h-p"));
    assert_eq!(b.spec.dns, ["10.213.7.2"]);
    assert!(b.spec.env.iter().any(|e| e.starts_with("HTTPS_PROXY=http://") && e.ends_with("@10.213.7.2:3128")));
    assert!(b.spec.env.iter().any(|e| e.starts_with("no_proxy=")));
    assert!(b.spec.labels["hermes-egress"].starts_with("berth-"));
    for extra in [["--network", "bridge"], ["--dns", "8.8.8.8"]] {
        st.extra_args = extra.map(String::from).to_vec();
        let e = build_create_spec(&ident("t", "p"), SandboxMode::Persist, "n".into(), &st, &host, &DockerRunFlags)
            .unwrap_err();
        assert_eq!(e, SpecError::EgressConflict, "{extra:?}");
    }
    st.extra_args.clear();
    let e = build_create_spec(
        &ident("t", "p"),
        SandboxMode::Persist,
        "n".into(),
        &st,
        &HostFacts::default(),
        &DockerRunFlags,
    )
    .unwrap_err();
    assert_eq!(e, SpecError::EgressUnavailable);
    st.egress = EgressPolicy::None;
    assert_eq!(build(&st, &HostFacts::default()).spec.network_mode.as_deref(), Some("none"));
}

fn reach(args: &[&str]) -> Option<String> {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    host_access(&check_extra_args(&DockerRunFlags, &args).unwrap_or_else(|e| panic!("{args:?}: {e}")))
}

#[test]
fn every_spelling_of_what_reaches_the_host_is_named() {
    for args in [
        &["--privileged"][..],
        &["--privileged=true"],
        &["--cap-add", "SYS_ADMIN"],
        &["--cap-add=sys_admin"],
        &["--cap-add", "CAP_SYS_ADMIN"],
        &["--cap-add", "ALL"],
        &["--cap-add", "SYS_MODULE"],
        &["--cap-add", "DAC_READ_SEARCH"],
        &["--cap-add", "SYS_RESOURCE"],
        &["--cap-add", "cap_syslog"],
        &["--cap-add", "PERFMON"],
        &["--cap-add", "MAC_ADMIN"],
        &["--cap-add", "SYS_BOOT"],
        &["--cap-add", "SYS_PTRACE", "--cap-add", "SYS_ADMIN"],
        &["--cap-add", "SYS_RAWIO"],
        &["--cap-add", "BPF"],
        &["--cap-add", "CHOWN", "--cap-add", "SYS_TIME"],
        &["--security-opt", "apparmor=unconfined"],
        &["--security-opt", "apparmor:unconfined"],
        &["--security-opt=seccomp=unconfined"],
        &["--security-opt", "seccomp:unconfined"],
        &["--security-opt", "seccomp={\"defaultAction\":\"SCMP_ACT_ALLOW\"}"],
        &["--security-opt", "systempaths=unconfined"],
        &["--security-opt", "label=disable"],
        &["--security-opt", "label:disable"],
        &["--security-opt", "label=type:spc_t"],
        &["--security-opt", "writable-cgroups=true"],
        &["--device", "/dev/null"],
        &["--device=/dev/mem:/dev/mem:r"],
        &["--device-cgroup-rule", "b 8:* rmw"],
        &["--pid", "host"],
        &["--pid=container:other"],
        &["--ipc", "host"],
        &["--uts", "host"],
        &["--userns=host"],
        &["--cgroupns", "host"],
        &["--network", "host"],
        &["--net=HOST"],
        &["--network", "container:other"],
    ] {
        assert!(reach(args).is_some(), "{args:?} must be refused");
    }
}

#[test]
fn network_capabilities_reach_past_an_egress_allowlist_only() {
    let spec = |args: &[&str], policy: &str| {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let mut spec = check_extra_args(&DockerRunFlags, &args).unwrap();
        spec.labels.insert(domain::egress::LABEL_EGRESS_POLICY.to_owned(), policy.to_owned());
        host_access(&spec)
    };
    for cap in ["NET_ADMIN", "cap_net_raw"] {
        let why = spec(&["--cap-add", cap], "pypi.org:443").unwrap_or_else(|| panic!("{cap} behind an allowlist"));
        assert!(why.contains("egress allowlist"), "{why}");
        assert_eq!(spec(&["--cap-add", cap], "all"), None, "{cap}");
        assert_eq!(spec(&["--cap-add", cap], "none"), None, "{cap}");
    }
    assert_eq!(spec(&["--cap-add", "SYS_PTRACE"], "pypi.org:443"), None);
}

#[test]
fn the_default_confinement_and_private_namespaces_pass() {
    for args in [
        &[][..],
        &["--privileged=false"],
        &["--cap-add", "NET_BIND_SERVICE", "--cap-add=cap_kill", "--cap-drop", "ALL"],
        // Those acting inside the sandbox's own namespaces only, as hermes configs add them.
        &["--cap-add", "SYS_PTRACE"],
        &["--cap-add", "cap_sys_ptrace", "--cap-add=net_admin", "--cap-add", "NET_RAW"],
        &["--cap-add", "SYS_NICE", "--cap-add", "IPC_LOCK"],
        &["--security-opt", "no-new-privileges"],
        &["--security-opt", "apparmor=docker-default"],
        &["--security-opt", "seccomp=builtin"],
        &["--security-opt", "label=level:s0:c100,c200"],
        &["--ipc", "shareable"],
        &["--ipc", "private"],
        &["--cgroupns", "private"],
        &["--network", "bridge"],
        &["--network", "none"],
        &["--gpus", "all"],
    ] {
        assert_eq!(reach(args), None, "{args:?}");
    }
}
