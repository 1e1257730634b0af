//! Killing a timed-out exec and everything it started, by host pid when permitted, else from inside the container.

use std::time::Duration;

use domain::ports::{CapturedOutput, ContainerRuntime, ExecSpec};

use crate::DockerRuntime;

/// Reads `(ppid, nspid)` of a host process from `/proc`: its parent and its pid inside the container.
fn proc_info(pid: u32) -> Option<(u32, Option<u32>)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let ppid = field("PPid:")?.parse().ok()?;
    let nspid = field("NSpid:").and_then(|v| v.split_whitespace().last()?.parse().ok());
    Some((ppid, nspid))
}

/// The host pids of `root` and all its descendants.
fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return vec![root] };
    let parents: Vec<(u32, u32)> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, proc_info(pid)?.0)))
        .collect();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(pid, _)| *pid));
        i += 1;
    }
    tree
}

/// Kills the exec's process tree: signals host pids directly where allowed (berth as root on the daemon's host),
/// otherwise runs `kill -KILL` inside the container with the namespaced pids.
pub(crate) async fn kill_exec_tree(rt: &DockerRuntime, container: &str, host_pid: i64) {
    let Ok(root) = u32::try_from(host_pid) else { return };
    if root == 0 {
        return;
    }
    let tree = descendants(root);
    let ns_pids: Vec<u32> = tree.iter().filter_map(|p| proc_info(*p).and_then(|(_, ns)| ns)).collect();
    let mut all_signalled = true;
    for pid in &tree {
        let Ok(raw) = libc::pid_t::try_from(*pid) else { continue };
        // SAFETY: kill(2) with a pid and a signal number has no memory-safety preconditions.
        let rc = unsafe { libc::kill(raw, libc::SIGKILL) };
        if rc != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH) {
            all_signalled = false;
        }
    }
    if !all_signalled && !ns_pids.is_empty() {
        let mut argv = vec!["kill".to_owned(), "-KILL".to_owned()];
        argv.extend(ns_pids.iter().map(u32::to_string));
        let spec =
            ExecSpec { argv, user: Some("0".into()), timeout: Some(Duration::from_secs(5)), ..ExecSpec::default() };
        let _ = Box::pin(rt.exec(container, &spec, &mut CapturedOutput::default())).await;
    }
}
