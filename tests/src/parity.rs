//! hermes-parity behaviour on the real engine: every mapped `docker_extra_args` flag checked through `docker
//! inspect`, refused flags, the network lockdown on reuse (whoever made the container), and `terminal.cwd`
//! placeholders.

use std::collections::BTreeSet;

use docker_adapter::{DockerRunFlags, DockerRuntime, MAPPED_FLAGS};
use domain::ids::{ProfileName, TaskId};
use domain::ports::ContainerRuntime;
use domain::sandbox::{HostFacts, SandboxIdentity, SandboxMode, SandboxSettings, build_create_spec};

use crate::support::{Home, IMAGE, docker, ids, inspect, require_docker};

/// Each mapped flag with its arguments and what `docker inspect` must show for it.
const FLAG_CHECKS: &[(&str, &[&str], &str, &str)] = &[
    ("--add-host", &["--add-host", "db.local:10.1.2.3"], "{{.HostConfig.ExtraHosts}}", "db.local:10.1.2.3"),
    ("--blkio-weight", &["--blkio-weight", "300"], "{{.HostConfig.BlkioWeight}}", "300"),
    ("--cap-add", &["--cap-add", "NET_ADMIN"], "{{.HostConfig.CapAdd}}", "NET_ADMIN"),
    ("--cap-drop", &["--cap-drop", "MKNOD"], "{{.HostConfig.CapDrop}}", "MKNOD"),
    ("--cgroup-parent", &["--cgroup-parent", "berth-test.slice"], "{{.HostConfig.CgroupParent}}", "berth-test.slice"),
    ("--cgroupns", &["--cgroupns", "private"], "{{.HostConfig.CgroupnsMode}}", "private"),
    ("--cpu-period", &["--cpu-period", "100000"], "{{.HostConfig.CpuPeriod}}", "100000"),
    ("--cpu-quota", &["--cpu-quota", "50000"], "{{.HostConfig.CpuQuota}}", "50000"),
    ("--cpu-shares", &["-c", "512"], "{{.HostConfig.CpuShares}}", "512"),
    ("--cpus", &["--cpus", "0.5"], "{{.HostConfig.NanoCpus}}", "500000000"),
    ("--cpuset-cpus", &["--cpuset-cpus", "0"], "{{.HostConfig.CpusetCpus}}", "0"),
    ("--cpuset-mems", &["--cpuset-mems", "0"], "{{.HostConfig.CpusetMems}}", "0"),
    (
        "--device",
        &["--device", "/dev/null:/dev/xnull:rw"],
        "{{json .HostConfig.Devices}}",
        "\"PathInContainer\":\"/dev/xnull\"",
    ),
    (
        "--device-cgroup-rule",
        &["--device-cgroup-rule", "c 42:* rmw"],
        "{{.HostConfig.DeviceCgroupRules}}",
        "c 42:* rmw",
    ),
    ("--dns", &["--dns", "10.0.0.53"], "{{.HostConfig.Dns}}", "10.0.0.53"),
    ("--dns-option", &["--dns-option", "ndots:2"], "{{.HostConfig.DnsOptions}}", "ndots:2"),
    ("--dns-search", &["--dns-search", "corp.example"], "{{.HostConfig.DnsSearch}}", "corp.example"),
    ("--domainname", &["--domainname", "example.org"], "{{.Config.Domainname}}", "example.org"),
    ("--env", &["-e", "PARITY=1"], "{{.Config.Env}}", "PARITY=1"),
    ("--expose", &["--expose", "9000"], "{{json .Config.ExposedPorts}}", "9000/tcp"),
    ("--gpus", &["--gpus", "all"], "{{json .HostConfig.DeviceRequests}}", "\"Count\":-1"),
    ("--group-add", &["--group-add", "123"], "{{.HostConfig.GroupAdd}}", "123"),
    ("--hostname", &["-h", "parity-box"], "{{.Config.Hostname}}", "parity-box"),
    ("--init", &["--init"], "{{.HostConfig.Init}}", "true"),
    ("--ipc", &["--ipc", "shareable"], "{{.HostConfig.IpcMode}}", "shareable"),
    ("--label", &["-l", "parity.flag=yes"], "{{index .Config.Labels \"parity.flag\"}}", "yes"),
    ("--log-driver", &["--log-driver", "json-file"], "{{.HostConfig.LogConfig.Type}}", "json-file"),
    ("--log-opt", &["--log-opt", "max-size=1m"], "{{.HostConfig.LogConfig.Config}}", "max-size:1m"),
    ("--memory", &["-m", "300m"], "{{.HostConfig.Memory}}", "314572800"),
    ("--memory-reservation", &["--memory-reservation", "100m"], "{{.HostConfig.MemoryReservation}}", "104857600"),
    ("--memory-swap", &["--memory-swap", "8g"], "{{.HostConfig.MemorySwap}}", "8589934592"),
    ("--memory-swappiness", &["--memory-swappiness", "10"], "{{.HostConfig.MemorySwappiness}}", "10"),
    (
        "--mount",
        &["--mount", "type=tmpfs,target=/scratch,tmpfs-size=64m"],
        "{{json .HostConfig.Mounts}}",
        "\"Target\":\"/scratch\"",
    ),
    ("--network", &["--network", "bridge"], "{{.HostConfig.NetworkMode}}", "bridge"),
    ("--oom-kill-disable", &["--oom-kill-disable"], "{{.HostConfig.OomKillDisable}}", "true"),
    ("--oom-score-adj", &["--oom-score-adj", "100"], "{{.HostConfig.OomScoreAdj}}", "100"),
    ("--pid", &["--pid", "host"], "{{.HostConfig.PidMode}}", "host"),
    ("--pids-limit", &["--pids-limit", "99"], "{{.HostConfig.PidsLimit}}", "99"),
    ("--privileged", &["--privileged=false"], "{{.HostConfig.Privileged}}", "false"),
    ("--publish", &["-p", "127.0.0.1::8080"], "{{json .HostConfig.PortBindings}}", "\"8080/tcp\""),
    ("--read-only", &["--read-only"], "{{.HostConfig.ReadonlyRootfs}}", "true"),
    (
        "--restart",
        &["--restart", "on-failure:3"],
        "{{.HostConfig.RestartPolicy.Name}}:{{.HostConfig.RestartPolicy.MaximumRetryCount}}",
        "on-failure:3",
    ),
    ("--runtime", &["--runtime", "runc"], "{{.HostConfig.Runtime}}", "runc"),
    ("--security-opt", &["--security-opt", "label=disable"], "{{.HostConfig.SecurityOpt}}", "label=disable"),
    ("--shm-size", &["--shm-size", "128m"], "{{.HostConfig.ShmSize}}", "134217728"),
    ("--stop-signal", &["--stop-signal", "SIGINT"], "{{.Config.StopSignal}}", "SIGINT"),
    ("--stop-timeout", &["--stop-timeout", "7"], "{{.Config.StopTimeout}}", "7"),
    ("--storage-opt", &[], "", ""),
    (
        "--sysctl",
        &["--sysctl", "net.ipv4.ip_unprivileged_port_start=0"],
        "{{.HostConfig.Sysctls}}",
        "net.ipv4.ip_unprivileged_port_start:0",
    ),
    ("--tmpfs", &["--tmpfs", "/cache:rw,size=16m"], "{{.HostConfig.Tmpfs}}", "/cache:rw,size=16m"),
    (
        "--ulimit",
        &["--ulimit", "nofile=1024:2048"],
        "{{json .HostConfig.Ulimits}}",
        "{\"Name\":\"nofile\",\"Hard\":2048,\"Soft\":1024}",
    ),
    ("--user", &["-u", "1234:1234"], "{{.Config.User}}", "1234:1234"),
    ("--userns", &["--userns", "host"], "{{.HostConfig.UsernsMode}}", "host"),
    ("--uts", &["--uts", "host"], "{{.HostConfig.UTSMode}}", "host"),
    ("--volume", &["-v", "parity-vol:/vol"], "{{.HostConfig.Binds}}", "parity-vol:/vol"),
    ("--workdir", &["-w", "/srv"], "{{.Config.WorkingDir}}", "/srv"),
];

fn settings(extra: &[&str]) -> SandboxSettings {
    SandboxSettings {
        egress: domain::egress::EgressPolicy::All,
        extra_args: extra.iter().map(|s| (*s).to_owned()).collect(),
        image: IMAGE.to_owned(),
        container_persistent: false,
        disk_mb: 0,
        ..domain::test_util::sandbox_settings()
    }
}

/// Creates (never starts: a GPU request needs a GPU only at start) a container from `extra` through the adapter.
fn create_with(
    home: &Home,
    rt: &DockerRuntime,
    rt_block: &tokio::runtime::Runtime,
    task: &str,
    extra: &[&str],
) -> String {
    let identity = SandboxIdentity::new(TaskId::parse(task).unwrap(), ProfileName::parse(&home.profile).unwrap());
    let built = build_create_spec(
        &identity,
        SandboxMode::Persist,
        identity.persistent_name(),
        &settings(extra),
        &HostFacts::default(),
        &DockerRunFlags,
    )
    .unwrap_or_else(|e| panic!("{extra:?}: {e}"));
    rt_block.block_on(rt.create(&built.spec)).unwrap_or_else(|e| panic!("create with {extra:?}: {e}"))
}

#[test]
fn every_mapped_extra_arg_reaches_the_engine() {
    require_docker();
    let home = Home::new();
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let rt = tokio.block_on(DockerRuntime::connect("")).unwrap();
    // The table covers exactly the documented list.
    let documented: BTreeSet<&str> = MAPPED_FLAGS.iter().map(|f| f.split(' ').next().unwrap()).collect();
    let tested: BTreeSet<&str> = FLAG_CHECKS.iter().map(|c| c.0).collect();
    assert_eq!(documented, tested, "docs/settings.md's flag list and this test's table differ");
    // One container per flag (some exclude each other, e.g. --hostname and --uts host).
    for (flag, args, format, want) in FLAG_CHECKS.iter().filter(|c| !c.2.is_empty()) {
        let id = create_with(&home, &rt, &tokio, &format!("flag{}", flag.trim_start_matches('-')), args);
        let got = inspect(&id, format);
        if *flag == "--blkio-weight" && got == "0" {
            // This kernel has no block-I/O weight: the engine discards it and warns; berth must pass the warning on.
            let out = home
                .cmd()
                .env("TERMINAL_DOCKER_EXTRA_ARGS", r#"["--blkio-weight","300"]"#)
                .args(["sandbox", "ensure", "--task", "blkio"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("engine:") && err.contains("Weight discarded"), "{err}");
            continue;
        }
        assert!(got.contains(want), "{flag}: inspect {format} gave {got:?}, want {want:?}");
    }
    // --storage-opt needs overlay2 on XFS with pquota, which this engine may lack: the engine's own refusal proves
    // the option reached it (the create call carried StorageOpt).
    let identity = SandboxIdentity::new(TaskId::parse("storage").unwrap(), ProfileName::parse(&home.profile).unwrap());
    let built = build_create_spec(
        &identity,
        SandboxMode::Persist,
        identity.persistent_name(),
        &settings(&["--storage-opt", "size=1g"]),
        &HostFacts::default(),
        &DockerRunFlags,
    )
    .unwrap();
    assert_eq!(built.spec.storage_size.as_deref(), Some("1g"));
    match tokio.block_on(rt.create(&built.spec)) {
        Ok(id) => assert!(inspect(&id, "{{.HostConfig.StorageOpt}}").contains("size:1g")),
        Err(e) => assert!(e.to_string().to_lowercase().contains("storage"), "unexpected refusal: {e}"),
    }
    // The named volume --volume made outlives its container: remove both (this test's only).
    for id in home.containers() {
        docker(&["rm", "-f", &id]);
    }
    let out = docker(&["volume", "rm", "parity-vol"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn unmappable_extra_args_are_one_line_exit_2_and_create_nothing() {
    require_docker();
    let home = Home::new();
    for (args, needle) in [
        (r#"["--rm"]"#, "--rm is not supported"),
        (r#"["--env-file","x.env"]"#, "--env-file is not supported"),
        (r#"["--frobnicate","1"]"#, "--frobnicate is not supported"),
        (r#"["--ulimit","nofile=many"]"#, "--ulimit"),
    ] {
        let out = home
            .cmd()
            .env("TERMINAL_DOCKER_EXTRA_ARGS", args)
            .args(["run", "--task", "x", "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args}: {err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("berth: ")).count(), 1, "{args}: {err}");
        assert!(err.contains(needle), "{args}: {err}");
    }
    // Fail closed: docker_network false and a --network in the extra args.
    let out = home
        .cmd()
        .env("TERMINAL_DOCKER_NETWORK", "false")
        .env("TERMINAL_DOCKER_EXTRA_ARGS", r#"["--network=bridge"]"#)
        .args(["run", "--task", "x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("docker_network is false"));
    assert!(home.containers().is_empty());
}

/// A container made the way hermes 0.19 makes one: its three labels, the default (bridge) network, no berth labels.
fn plant_hermes_networked(home: &Home, task: &str) -> String {
    let name = format!(
        "hermes-{:x}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
    );
    let out = docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--label",
        "hermes-agent=1",
        "--label",
        &format!("hermes-task-id={task}"),
        "--label",
        &format!("hermes-profile={}", home.profile),
        IMAGE,
        "sleep",
        "infinity",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    ids(&out).remove(0)
}

#[test]
fn docker_network_false_never_reuses_a_networked_sandbox_whoever_made_it() {
    require_docker();
    let home = Home::new();
    // hermes-made, on the bridge: replaced by an air-gapped one, with a one-line reason.
    let planted = plant_hermes_networked(&home, "lock");
    assert_ne!(inspect(&planted, "{{.HostConfig.NetworkMode}}"), "none");
    let out = home
        .cmd()
        .env("TERMINAL_DOCKER_NETWORK", "false")
        .args(["run", "--task", "lock", "--", "cat", "/proc/net/route"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("terminal.docker_network is false"), "{err}");
    let now = home.containers();
    assert_eq!(now.len(), 1, "the networked container is gone: {now:?}");
    assert_ne!(now[0], planted);
    assert_eq!(inspect(&now[0], "{{.HostConfig.NetworkMode}}"), "none");
    // Only the header line: no route, no interface but lo.
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    // berth-made, networked, with recreation on drift disabled: still replaced.
    home.ok(&["run", "--task", "own", "--", "true"]);
    let out = home
        .cmd()
        .env("TERMINAL_DOCKER_NETWORK", "false")
        .env("TERMINAL_DOCKER_RECREATE_ON_CONFIG_CHANGE", "false")
        .args(["sandbox", "ensure", "--task", "own", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(inspect(v["id"].as_str().unwrap(), "{{.HostConfig.NetworkMode}}"), "none");
    // An air-gapped one is attached as it is.
    let again = home
        .cmd()
        .env("TERMINAL_DOCKER_NETWORK", "false")
        .args(["sandbox", "ensure", "--task", "own", "--json"])
        .output()
        .unwrap();
    let w: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!((w["id"].clone(), w["action"].as_str()), (v["id"].clone(), Some("attached")));
}

#[test]
fn cwd_placeholders_run_in_root_and_a_relative_cwd_is_one_line() {
    require_docker();
    let home = Home::new();
    for placeholder in [".", "auto", "cwd"] {
        let out =
            home.cmd().env("TERMINAL_CWD", placeholder).args(["run", "--task", "cwd", "--", "pwd"]).output().unwrap();
        assert!(out.status.success(), "{placeholder}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "/root\n", "{placeholder}");
    }
    let out = home.run(&["config", "set", "terminal.cwd", "src/app"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("berth: ") && err.contains("relative path") && err.lines().count() == 1, "{err}");
    assert!(
        !home.path().join("config.yaml").exists()
            || !std::fs::read_to_string(home.path().join("config.yaml")).unwrap().contains("src/app")
    );
    // At run: a relative cwd from the file or environment is named in one warning line and the default is used.
    let out = home.cmd().env("TERMINAL_CWD", "src/app").args(["run", "--task", "cwd", "--", "pwd"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/root\n", "{err}");
    assert_eq!(err.lines().filter(|l| l.contains("terminal.cwd") && l.contains("relative path")).count(), 1, "{err}");
}

/// Removes every container carrying `hermes-profile=<label>` when dropped (shared-key sandboxes do not carry the
/// test profile's label, so `Home` would not find them).
struct RemoveByProfileLabel(String);

impl Drop for RemoveByProfileLabel {
    fn drop(&mut self) {
        for id in ids(&docker(&["ps", "-aq", "--filter", &format!("label=hermes-profile={}", self.0)])) {
            docker(&["rm", "-f", &id]);
        }
    }
}

#[test]
fn profiles_with_one_shared_container_key_share_a_sandbox() {
    require_docker();
    let home = Home::new();
    let key = format!("team/{}", home.profile);
    let label = domain::sandbox::shared_profile_label(&key).as_str().to_owned();
    let _cleanup = RemoveByProfileLabel(label.clone());
    let other = format!("{}b", home.profile);
    std::fs::create_dir_all(home.path().join("profiles").join(&other)).unwrap();
    let run = |profile: &str, args: &[&str]| {
        let out = home
            .cmd()
            .env("BERTH_PROFILE", profile)
            .env("TERMINAL_DOCKER_SHARED_CONTAINER_KEY", &key)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&home.profile, &["run", "--task", "t", "--", "sh", "-c", "echo shared > /root/s"]);
    assert_eq!(run(&other, &["run", "--task", "t", "--", "cat", "/root/s"]), "shared\n");
    let shared = ids(&docker(&["ps", "-aq", "--filter", &format!("label=hermes-profile={label}")]));
    assert_eq!(shared.len(), 1, "one sandbox for both profiles");
    // Its reaper scope and listing follow the shared label too.
    let listed: serde_json::Value = serde_json::from_str(&run(&other, &["sandbox", "ls", "--json"])).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
}

#[test]
fn the_default_image_runs_what_hermes_runs() {
    require_docker();
    let home = Home::new();
    // hermes runs every command as `bash -c` after a `bash -l` snapshot; agents use git and the everyday tools.
    let script = "set -e; cd /tmp && git init -q r && cd r && echo x > f && git add f \
        && git -c user.name=t -c user.email=t@e commit -qm first && git log --format=%s; \
        echo a,b | awk -F, '{print $2}' | sed s/b/c/; find /usr/bin -name bash | head -1; \
        tar --version | head -1 | cut -d' ' -f1-2; for p in sh sleep cat kill ps grep env id timeout; do \
        command -v $p >/dev/null || echo missing $p; done";
    let out = home.ok(&["run", "--task", "img", "--", "bash", "-l", "-c", script]);
    assert_eq!(out, "first\nc\n/usr/bin/bash\ntar (GNU\n", "{out}");
    if std::path::Path::new("/usr/bin/python3").exists() {
        let out = home.ok(&[
            "run",
            "--task",
            "img",
            "--",
            "python3",
            "-c",
            "import json, sqlite3, ssl; print(json.dumps([1]))",
        ]);
        assert_eq!(out, "[1]\n");
    }
}
