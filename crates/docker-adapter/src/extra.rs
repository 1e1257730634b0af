//! The create-call fields only `docker_extra_args` sets, from the domain's [`ExtraCreate`] to bollard's models.
//!
//! The domain has parsed and checked every value already, so this is a plain field-by-field translation.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, DeviceMapping, DeviceRequest, HostConfig, HostConfigLogConfig, Mount, MountBindOptions,
    MountTmpfsOptions, MountType, MountVolumeOptions, MountVolumeOptionsDriverConfig, PortBinding, ResourcesUlimits,
    RestartPolicy,
};
use domain::sandbox::{ExtraCreate, MountSpec, parse_bytes};

fn non_empty<T: Clone>(v: &[T]) -> Option<Vec<T>> {
    (!v.is_empty()).then(|| v.to_vec())
}

fn mount(m: &MountSpec) -> Mount {
    let opt = |k: &str| m.options.get(k).map(String::as_str);
    let flag = |k: &str| opt(k).map(|v| v != "false" && v != "0");
    let typ = match m.kind.as_str() {
        "bind" => MountType::BIND,
        "tmpfs" => MountType::TMPFS,
        _ => MountType::VOLUME,
    };
    Mount {
        target: Some(m.target.clone()),
        source: m.source.clone(),
        typ: Some(typ),
        read_only: Some(m.read_only),
        consistency: opt("consistency").map(str::to_owned),
        bind_options: (m.kind == "bind").then(|| MountBindOptions {
            propagation: opt("bind-propagation").and_then(|p| p.parse().ok()),
            non_recursive: flag("bind-nonrecursive"),
            ..Default::default()
        }),
        volume_options: (m.kind == "volume").then(|| MountVolumeOptions {
            no_copy: flag("volume-nocopy"),
            subpath: opt("volume-subpath").map(str::to_owned),
            driver_config: opt("volume-driver")
                .map(|d| MountVolumeOptionsDriverConfig { name: Some(d.to_owned()), options: None }),
            ..Default::default()
        }),
        tmpfs_options: (m.kind == "tmpfs").then(|| MountTmpfsOptions {
            size_bytes: opt("tmpfs-size").and_then(parse_bytes),
            mode: opt("tmpfs-mode").and_then(|v| i64::from_str_radix(v, 8).ok()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Sets the host-config fields `extra` carries.
pub fn apply_host(extra: &ExtraCreate, h: &mut HostConfig) {
    h.devices = non_empty(&extra.devices).map(|d| {
        d.iter()
            .map(|d| DeviceMapping {
                path_on_host: Some(d.host.clone()),
                path_in_container: Some(d.container.clone()),
                cgroup_permissions: Some(d.permissions.clone()),
            })
            .collect()
    });
    h.device_requests = non_empty(&extra.device_requests).map(|r| {
        r.iter()
            .map(|r| DeviceRequest {
                driver: Some(r.driver.clone()),
                count: Some(r.count),
                device_ids: non_empty(&r.device_ids),
                capabilities: Some(r.capabilities.clone()),
                options: None,
            })
            .collect()
    });
    h.device_cgroup_rules = non_empty(&extra.device_cgroup_rules);
    h.ulimits = non_empty(&extra.ulimits).map(|u| {
        u.iter()
            .map(|u| ResourcesUlimits { name: Some(u.name.clone()), soft: Some(u.soft), hard: Some(u.hard) })
            .collect()
    });
    h.mounts = non_empty(&extra.mounts).map(|m| m.iter().map(mount).collect());
    if !extra.sysctls.is_empty() {
        h.sysctls = Some(extra.sysctls.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    }
    if extra.read_only {
        h.readonly_rootfs = Some(true);
    }
    h.ipc_mode.clone_from(&extra.ipc_mode);
    h.pid_mode.clone_from(&extra.pid_mode);
    h.uts_mode.clone_from(&extra.uts_mode);
    h.userns_mode.clone_from(&extra.userns_mode);
    h.cgroupns_mode = extra.cgroupns_mode.as_deref().and_then(|m| m.parse().ok());
    h.cgroup_parent.clone_from(&extra.cgroup_parent);
    h.runtime.clone_from(&extra.runtime);
    h.oom_score_adj = extra.oom_score_adj;
    h.oom_kill_disable = extra.oom_kill_disable;
    h.memory_swap = extra.memory_swap;
    h.memory_reservation = extra.memory_reservation;
    h.memory_swappiness = extra.memory_swappiness;
    h.cpu_shares = extra.cpu_shares;
    h.cpu_period = extra.cpu_period;
    h.cpu_quota = extra.cpu_quota;
    h.cpuset_cpus.clone_from(&extra.cpuset_cpus);
    h.cpuset_mems.clone_from(&extra.cpuset_mems);
    h.blkio_weight = extra.blkio_weight;
    h.group_add = non_empty(&extra.group_add);
    h.dns_search = non_empty(&extra.dns_search);
    h.dns_options = non_empty(&extra.dns_options);
    h.restart_policy = extra.restart.as_deref().map(|r| {
        let (name, max) = r.split_once(':').map_or((r, None), |(n, m)| (n, m.parse().ok()));
        RestartPolicy { name: name.parse().ok(), maximum_retry_count: max }
    });
    if extra.log_driver.is_some() || !extra.log_opts.is_empty() {
        h.log_config = Some(HostConfigLogConfig {
            typ: extra.log_driver.clone(),
            config: (!extra.log_opts.is_empty())
                .then(|| extra.log_opts.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        });
    }
    if !extra.publish.is_empty() {
        let mut ports: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
        for p in &extra.publish {
            ports.entry(p.container.clone()).or_default().get_or_insert_with(Vec::new).push(PortBinding {
                host_ip: (!p.host_ip.is_empty()).then(|| p.host_ip.clone()),
                host_port: (!p.host_port.is_empty()).then(|| p.host_port.clone()),
            });
        }
        h.port_bindings = Some(ports);
    }
}

/// Sets the container-config fields `extra` carries.
pub fn apply_config(extra: &ExtraCreate, body: &mut ContainerCreateBody) {
    body.hostname.clone_from(&extra.hostname);
    body.domainname.clone_from(&extra.domainname);
    body.stop_signal.clone_from(&extra.stop_signal);
    body.stop_timeout = extra.stop_timeout;
    let mut exposed: Vec<String> = extra.expose.clone();
    exposed.extend(extra.publish.iter().map(|p| p.container.clone()));
    exposed.sort();
    exposed.dedup();
    body.exposed_ports = non_empty(&exposed);
}
