//! What in a create spec reaches the host past any mount: the rule behind `terminal.docker_allow_host_access`'s
//! second half (`terminal.docker_allow_host_mounts` is its older name), read from the typed spec so every spelling
//! that produced it (`--cap-add=sys_admin`, `--cap-add CAP_SYS_ADMIN`, `--security-opt seccomp:unconfined`,
//! config.yaml, the environment, `-c`) meets it.
//!
//! The rule: a sandbox keeps the engine's confinement and namespaces of its own. Refused without the opt-in is
//! whatever lifts one of them:
//! - `--privileged` (every host device and capability);
//! - a capability that reaches past the sandbox's own namespaces: anything beyond the engine's default set
//!   ([`ENGINE_DEFAULT_CAPABILITIES`]) and the few that act inside them only ([`NAMESPACED_CAPABILITIES`]), `ALL`
//!   included: `SYS_ADMIN` (mounts, namespaces, most of the kernel), `SYS_MODULE`, `SYS_RAWIO`, `DAC_READ_SEARCH`
//!   (opens host files by handle), `SYS_TIME`, `SYS_BOOT`, `BPF`, `PERFMON`, `SYSLOG`, `MAC_ADMIN`, `MAC_OVERRIDE`,
//!   `AUDIT_CONTROL`, `SYS_RESOURCE` (the disk space and system-wide limits the kernel keeps for the host's root),
//!   `WAKE_ALARM`, `BLOCK_SUSPEND`, `LINUX_IMMUTABLE`, `CHECKPOINT_RESTORE`, and any the engine may learn later;
//! - behind an egress allowlist, `NET_ADMIN`, `NET_RAW` and any `net.*` sysctl too: there the network is what confines the sandbox, and
//!   with them it could take another address on the internal network the policy's sandboxes share (the proxy's);
//! - a security option that switches a confinement off (`apparmor`, `seccomp` or `systempaths` `unconfined`, a
//!   seccomp profile other than the engine's own, SELinux `label=disable` or an unconfined type,
//!   `writable-cgroups=true`, `no-new-privileges=false`, which lets a set-user-id program in the image gain what
//!   berth's own `no-new-privileges` keeps from it);
//! - a cgroup parent (`--cgroup-parent`, any): the sandbox then sits in a cgroup of the host's tree chosen by the
//!   caller, outside the engine's and under whatever limits (or none) that one has;
//! - a host device (`--device`, any: a host device node is the host's hardware or kernel interface) and a device
//!   cgroup rule (with `MKNOD`, in the default set, it opens host devices by number);
//! - a namespace shared with the host or another container (`host` or `container:…` for `--pid`, `--ipc`, `--uts`,
//!   `--userns`, `--cgroupns`, `--network`).
//!
//! GPUs requested with `--gpus` pass: the engine's GPU driver hands over the devices it manages, nothing else.

use super::CreateSpec;

/// The capabilities a container gets from the engine by default (Docker's and Podman's set); adding one of these
/// back after berth's `--cap-drop ALL` gives nothing a default container lacks.
pub const ENGINE_DEFAULT_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "NET_RAW",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The capabilities beyond the engine's default set that act only inside the sandbox's own namespaces, under the
/// engine's seccomp profile (which berth never lifts without the opt-in); hermes-agent passes them, and so does berth:
/// - `SYS_PTRACE`: traces and reads the memory of processes in its own pid namespace only (debuggers, `strace`);
/// - `NET_ADMIN`: configures its own network namespace (interfaces, routes, its own firewall);
/// - `NET_RAW` (in the engine's default set, which berth drops): raw sockets on its own interfaces;
/// - `SYS_NICE`: priorities and CPU placement of its own processes;
/// - `IPC_LOCK`: locks its own memory, counted against its memory limit.
///
/// `NET_ADMIN` and `NET_RAW` act on the sandbox's network, so behind an egress allowlist they need the opt-in.
pub const NAMESPACED_CAPABILITIES: &[&str] = &["SYS_PTRACE", "NET_ADMIN", "NET_RAW", "SYS_NICE", "IPC_LOCK"];

/// The capabilities that change the sandbox's network, refused behind an egress allowlist without the opt-in.
const NETWORK_CAPABILITIES: &[&str] = &["NET_ADMIN", "NET_RAW"];

/// Why `spec` reaches the host past any mount, if it does: one phrase naming the flag as the user would write it,
/// for the caller to put in its refusal next to the opt-in.
pub fn host_access(spec: &CreateSpec) -> Option<String> {
    if spec.privileged {
        return Some("--privileged gives it every host device and capability".to_owned());
    }
    if let Some(cap) = spec.cap_add.iter().find(|c| !is_default_capability(c) && !is_namespaced_capability(c)) {
        return Some(format!(
            "--cap-add {cap} reaches past the sandbox's own namespaces (it acts on the host's kernel)"
        ));
    }
    if behind_allowlist(spec)
        && let Some(cap) = spec.cap_add.iter().find(|c| NETWORK_CAPABILITIES.contains(&capability_name(c).as_str()))
    {
        return Some(format!(
            "--cap-add {cap} changes the sandbox's network, which is what confines it behind the egress allowlist"
        ));
    }
    if behind_allowlist(spec)
        && let Some(key) = spec.extra.sysctls.keys().find(|k| k.trim().to_ascii_lowercase().starts_with("net."))
    {
        return Some(format!(
            "--sysctl {key} changes the sandbox's network (IPv6 on the internal bridge reaches the host), which is \
             what confines it behind the egress allowlist"
        ));
    }
    if let Some(opt) = spec.security_opt.iter().find(|o| lifts_confinement(o)) {
        return Some(format!("--security-opt {opt} switches off a confinement of the engine"));
    }
    let x = &spec.extra;
    if let Some(parent) = x.cgroup_parent.as_deref().filter(|p| !p.trim().is_empty()) {
        return Some(format!(
            "--cgroup-parent {parent} places it in a cgroup of the host's tree, outside the engine's and its limits"
        ));
    }
    if let Some(d) = x.devices.first() {
        return Some(format!("--device {} hands it a device of the host", d.host));
    }
    if let Some(rule) = x.device_cgroup_rules.first() {
        return Some(format!("--device-cgroup-rule {rule:?} lets it open devices of the host"));
    }
    let namespaces = [
        ("--pid", x.pid_mode.as_deref()),
        ("--ipc", x.ipc_mode.as_deref()),
        ("--uts", x.uts_mode.as_deref()),
        ("--userns", x.userns_mode.as_deref()),
        ("--cgroupns", x.cgroupns_mode.as_deref()),
        ("--network", spec.network_mode.as_deref()),
    ];
    namespaces.into_iter().find_map(|(flag, mode)| {
        let mode = mode?.trim();
        let shared = mode.eq_ignore_ascii_case("host") || mode.to_ascii_lowercase().starts_with("container:");
        shared.then(|| format!("{flag} {mode} shares a namespace of the host or another container"))
    })
}

/// A capability's name as the engine reads it: any case, with or without `CAP_`.
fn capability_name(cap: &str) -> String {
    let upper = cap.trim().to_ascii_uppercase();
    upper.strip_prefix("CAP_").unwrap_or(&upper).to_owned()
}

/// Whether `cap` is in the engine's default set.
fn is_default_capability(cap: &str) -> bool {
    ENGINE_DEFAULT_CAPABILITIES.contains(&capability_name(cap).as_str())
}

/// Whether `cap` acts inside the sandbox's own namespaces only ([`NAMESPACED_CAPABILITIES`]).
fn is_namespaced_capability(cap: &str) -> bool {
    NAMESPACED_CAPABILITIES.contains(&capability_name(cap).as_str())
}

/// Whether the spec puts the sandbox behind an egress allowlist (its policy label lists destinations).
fn behind_allowlist(spec: &CreateSpec) -> bool {
    spec.labels
        .get(crate::egress::LABEL_EGRESS_POLICY)
        .is_some_and(|p| matches!(crate::egress::EgressPolicy::parse(p), Ok(crate::egress::EgressPolicy::Allow(_))))
}

/// Whether a `--security-opt` value switches a confinement off. The engine takes `key=value` and the older
/// `key:value`.
fn lifts_confinement(opt: &str) -> bool {
    let opt = opt.trim();
    let (key, value) = match opt.split_once('=') {
        Some(kv) => kv,
        None => opt.split_once(':').unwrap_or((opt, "")),
    };
    let (key, value) = (key.trim().to_ascii_lowercase(), value.trim().to_ascii_lowercase());
    match key.as_str() {
        "apparmor" | "systempaths" => value == "unconfined",
        // Anything but the engine's own profile: `unconfined`, or a profile berth cannot tell is as strict.
        "seccomp" => !matches!(value.as_str(), "builtin" | "default"),
        "label" => value == "disable" || value == "type:spc_t" || value == "type:unconfined_t",
        "writable-cgroups" => value != "false",
        // The engine reads it as a boolean, bare meaning true; anything but true lifts berth's own.
        "no-new-privileges" => !matches!(value.as_str(), "" | "true" | "1" | "t"),
        _ => false,
    }
}
