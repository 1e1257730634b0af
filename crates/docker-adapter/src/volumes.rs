//! What a named volume holds of the host: a `local` volume made with `type=none,o=bind,device=PATH` is the host
//! folder PATH under another name, so the mount check reads it like a bind of PATH.

use std::time::Duration;

/// Bound of the volume look-up (`EngineFacts::volume_host_path`).
pub(crate) const INSPECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The host folder a volume's driver options bind, if they bind one: the `local` driver's `device` when its `o`
/// options include `bind` (or `rbind`); for a `local` volume that mounts one of the kernel's own filesystems
/// (`type=proc`, `sysfs`, `cgroup2`, …), where the host has it, since that is what the sandbox gets (the host's
/// processes, `/proc/sys`, its devices).
pub(crate) fn bound_host_path(driver: &str, options: &std::collections::HashMap<String, String>) -> Option<String> {
    if driver != "local" {
        return None;
    }
    if let Some(root) = options.get("type").and_then(|t| kernel_fs_root(t)) {
        return Some(root.to_owned());
    }
    let binds = options.get("o").is_some_and(|o| o.split(',').any(|opt| matches!(opt.trim(), "bind" | "rbind")));
    binds.then(|| options.get("device").cloned()).flatten()
}

/// Where the host has the kernel filesystem `fs` mounted, when `fs` is one of the kernel's own.
fn kernel_fs_root(fs: &str) -> Option<&'static str> {
    Some(match fs.trim().to_ascii_lowercase().as_str() {
        "proc" => "/proc",
        "sysfs" | "securityfs" | "debugfs" | "tracefs" | "bpf" | "configfs" | "efivarfs" | "pstore" | "fusectl"
        | "selinuxfs" => "/sys",
        "cgroup" | "cgroup2" => "/sys/fs/cgroup",
        "devtmpfs" | "devpts" | "mqueue" => "/dev",
        "binfmt_misc" => "/proc/sys/fs/binfmt_misc",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn only_a_local_bind_volume_binds_a_host_folder() {
        let opts = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let bind = opts(&[("type", "none"), ("o", "bind"), ("device", "/srv/x")]);
        assert_eq!(bound_host_path("local", &bind).as_deref(), Some("/srv/x"));
        let proc = opts(&[("type", "proc"), ("device", "proc")]);
        assert_eq!(bound_host_path("local", &proc).as_deref(), Some("/proc"), "the host's own /proc");
        assert_eq!(bound_host_path("local", &opts(&[("type", "SYSFS")])).as_deref(), Some("/sys"));
        assert_eq!(bound_host_path("local", &opts(&[("type", "tmpfs")])), None, "a tmpfs is the sandbox's own");
        let rbind = opts(&[("o", "ro, rbind"), ("device", "/srv/y")]);
        assert_eq!(bound_host_path("local", &rbind).as_deref(), Some("/srv/y"));
        assert_eq!(bound_host_path("local", &opts(&[("type", "nfs"), ("device", ":/export")])), None);
        assert_eq!(bound_host_path("local", &HashMap::new()), None);
        assert_eq!(bound_host_path("other", &bind), None);
    }
}
