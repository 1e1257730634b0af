//! What each sandbox costs: `berth sandbox ls` (state, age, idle time, memory and CPU, and with `--size` the writable
//! layer and host folders) and `berth sandbox top ID` (the processes inside), from the engine's stats, inspect and
//! process list through bollard.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use domain::container::ContainerSummary;
use domain::policy::idle::is_keep_alive;
use domain::ports::Clock;
use domain::service;
use domain::time::Timestamp;

use crate::edge::context::{Ctx, SystemClock};
use crate::edge::error::Failure;
use crate::edge::output;
use crate::sandbox::engine::{connect, profile_label};
use crate::sandbox::views::{IdleState, ProcessRow, SandboxRow, SandboxSize, SandboxSummary, SandboxTop};

/// Where the gateway's cleanup loop leaves when it first saw each sandbox idle, for `sandbox ls`.
pub fn idle_state_path(home: &Path) -> PathBuf {
    home.join("cache").join("idle-since.json")
}

/// The gateway's idle observations, when it wrote them recently enough to still be true (three of its passes, or a
/// minute); an absent or stale file means nobody is watching.
fn read_idle_since(home: &Path, now: Timestamp) -> BTreeMap<String, Timestamp> {
    let Some(text) = crate::edge::state_file::read_small(&idle_state_path(home), 16 << 20) else {
        return BTreeMap::new();
    };
    let Ok(state) = serde_json::from_str::<IdleState>(&text) else { return BTreeMap::new() };
    let fresh_for = state.pass_ms.unwrap_or(20_000).saturating_mul(3).max(60_000);
    if state.written_at_ms.is_none_or(|w| now.as_millis().saturating_sub(w) > fresh_for) {
        return BTreeMap::new();
    }
    state.idle_since_ms.into_iter().map(|(id, t)| (id, Timestamp::from_millis(t))).collect()
}

/// Writes the gateway's idle observations (atomically: a reader never sees half a file).
pub fn write_idle_since(home: &Path, now: Timestamp, pass_ms: i64, memory: &BTreeMap<String, Timestamp>) {
    let state = IdleState {
        written_at_ms: Some(now.as_millis()),
        pass_ms: Some(pass_ms),
        idle_since_ms: memory.iter().map(|(id, t)| (id.clone(), t.as_millis())).collect(),
    };
    let body = serde_json::to_string(&state).unwrap_or_default();
    crate::edge::state_file::write_atomically(&idle_state_path(home), body.as_bytes());
}

/// The disk space everything under `dir` takes, as `du -s` counts it: allocated blocks (a sparse file costs what it
/// holds, not its apparent length), each inode once (a hard link adds nothing), directories included, symlinks
/// counted as themselves and never followed; `None` when it is absent.
fn dir_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).ok()?;
    let mut seen = std::collections::HashSet::new();
    let mut count = |m: &std::fs::Metadata| {
        if m.nlink() > 1 && !m.is_dir() && !seen.insert((m.dev(), m.ino())) {
            return 0;
        }
        m.blocks().saturating_mul(512)
    };
    let mut total = count(&meta);
    if !meta.is_dir() {
        return Some(total);
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(m) = e.path().symlink_metadata() else { continue };
            total = total.saturating_add(count(&m));
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Some(total)
}

/// A berth-made sandbox's host folder, from its labels (hermes-made ones keep theirs elsewhere: `None`).
fn host_dir(ctx: &Ctx, c: &ContainerSummary) -> Option<PathBuf> {
    let digest = c.identity()?;
    let dir = &ctx.settings.terminal.sandbox_dir;
    Some(Path::new(dir.trim_end_matches('/')).join("docker").join(c.profile_label()?).join(format!(
        "{}-{}",
        c.task_label()?,
        digest.get(..12)?
    )))
}

pub(crate) fn human_bytes(n: Option<u64>) -> String {
    let Some(n) = n else { return "-".to_owned() };
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut i) = (n as f64, 0);
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 { format!("{n}B") } else { format!("{v:.1}{}", units[i]) }
}

fn human_secs(s: Option<i64>) -> String {
    match s {
        None => "-".to_owned(),
        Some(s) if s < 120 => format!("{s}s"),
        Some(s) if s < 7200 => format!("{}m", s / 60),
        Some(s) if s < 172_800 => format!("{}h", s / 3600),
        Some(s) => format!("{}d", s / 86_400),
    }
}

/// Every sandbox of this profile (of all with `all_profiles`) with what it costs; its disk use with `size`.
///
/// # Errors
/// An engine failure (exit 125).
pub async fn rows(ctx: &Ctx, all_profiles: bool, size: bool) -> Result<Vec<SandboxRow>, Failure> {
    let rt = connect(ctx).await?;
    let profile = profile_label(ctx);
    let listed = service::list_managed(&*rt, (!all_profiles).then_some(profile.as_str()), Some(&ctx.home_id())).await?;
    let now = SystemClock.now();
    let idle_since = read_idle_since(&ctx.home, now);
    // Every engine call runs for all sandboxes at once: stats take about a second each, sizes longer.
    let details = service::join_all(listed.iter().map(|c| rt.inspect(&c.id))).await;
    let live = |c: &ContainerSummary| c.state == domain::container::ContainerState::Running;
    let usages = service::join_all(listed.iter().map(|c| {
        let rt = &rt;
        async move { if live(c) { rt.usage(&c.id).await.ok() } else { None } }
    }))
    .await;
    let procs = service::join_all(listed.iter().map(|c| {
        let rt = &rt;
        async move { if live(c) { rt.processes(&c.id).await.ok() } else { None } }
    }))
    .await;
    let sizes: Vec<Option<i64>> = if size {
        service::join_all(listed.iter().map(|c| rt.writable_size(&c.id)))
            .await
            .into_iter()
            .map(|r| r.ok().flatten())
            .collect()
    } else {
        vec![None; listed.len()]
    };
    // Snapshots, by the sandbox they were taken of: counted on its row, and a sandbox with no container but a
    // snapshot is listed as `suspended`.
    let snapshots =
        crate::sandbox::snapshots::in_home(&*rt, Some(&ctx.home_id()), (!all_profiles).then_some(profile.as_str()))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!("cannot list sandbox snapshots: {e}");
                Vec::new()
            });
    let mut by_sandbox: BTreeMap<&str, Vec<&domain::ports::SnapshotImage>> = BTreeMap::new();
    for s in &snapshots {
        by_sandbox.entry(s.label(domain::label::LABEL_SNAPSHOT_OF).unwrap_or_default()).or_default().push(s);
    }
    let snapshot_bytes = |name: &str| {
        by_sandbox.get(name).map(|list| {
            list.iter()
                .map(|s| {
                    s.label(domain::label::LABEL_SNAPSHOT_BYTES).and_then(|b| b.parse().ok()).unwrap_or(s.size_bytes)
                })
                .sum::<i64>()
        })
    };
    let mut rows = Vec::new();
    for (i, c) in listed.iter().enumerate() {
        let usage = usages[i].clone().unwrap_or_default();
        rows.push(SandboxRow {
            sandbox: SandboxSummary::of(c),
            finished: details[i].as_ref().ok().and_then(|d| d.finished_at()).map(|t| t.to_rfc3339()),
            age_secs: now.secs_since(c.created).floor() as i64,
            busy: procs[i].as_ref().map(|p| p.iter().any(|p| !is_keep_alive(&p.command))),
            idle_secs: idle_since.get(&c.id).map(|t| now.secs_since(*t).floor() as i64),
            memory_bytes: usage.memory_bytes,
            memory_limit_bytes: usage.memory_limit_bytes,
            cpu_percent: usage.cpu_percent.map(|p| (p * 100.0).round() / 100.0),
            pids: usage.pids,
            snapshots: by_sandbox.get(c.name.as_str()).map_or(0, Vec::len),
            snapshot_bytes: snapshot_bytes(&c.name),
            size: size.then(|| SandboxSize {
                size_rw_bytes: sizes[i],
                host_dir_bytes: host_dir(ctx, c).and_then(|d| dir_bytes(&d)),
            }),
        });
    }
    for (name, list) in &by_sandbox {
        if name.is_empty() || listed.iter().any(|c| c.name == *name) {
            continue;
        }
        // Newest first: the one a resume starts from.
        let c = crate::sandbox::snapshots::suspended_summary(list[0]);
        // No container id: the name stands for it (`sandbox rm NAME`, the dashboard's remove).
        let mut sandbox = SandboxSummary::of(&c);
        sandbox.id.clone_from(&c.name);
        rows.push(SandboxRow {
            sandbox,
            finished: None,
            age_secs: now.secs_since(c.created).floor() as i64,
            busy: None,
            idle_secs: None,
            memory_bytes: None,
            memory_limit_bytes: None,
            cpu_percent: None,
            pids: None,
            snapshots: list.len(),
            snapshot_bytes: snapshot_bytes(name),
            size: size.then(|| SandboxSize {
                size_rw_bytes: None,
                host_dir_bytes: host_dir(ctx, &c).and_then(|d| dir_bytes(&d)),
            }),
        });
    }
    Ok(rows)
}

/// `berth sandbox ls [--all-profiles] [--size]`.
///
/// # Errors
/// An engine failure (exit 125).
pub async fn ls(ctx: &Ctx, all_profiles: bool, size: bool) -> Result<u8, Failure> {
    let rows = rows(ctx, all_profiles, size).await?;
    if ctx.json {
        output::json(&rows);
        return Ok(0);
    }
    let mut headers = vec!["NAME", "TASK", "PROFILE", "STATE", "EGRESS", "AGE", "IDLE", "MEM", "CPU"];
    // The snapshots' column when any sandbox has one, or with --size.
    let with_snapshots = size || rows.iter().any(|r| r.snapshots > 0);
    if with_snapshots {
        headers.push("SNAPSHOTS");
    }
    if size {
        headers.extend_from_slice(&["WRITABLE", "HOST DIR"]);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let idle = match (r.busy, r.idle_secs) {
                (Some(true), _) => "busy".to_owned(),
                (_, Some(s)) => human_secs(Some(s)),
                _ => "-".to_owned(),
            };
            let s = &r.sandbox;
            let mut row = vec![
                s.name.clone(),
                s.task.clone().unwrap_or_default(),
                s.profile.clone().unwrap_or_default(),
                s.state.clone(),
                s.egress.clone(),
                human_secs(Some(r.age_secs)),
                idle,
                human_bytes(r.memory_bytes),
                r.cpu_percent.map_or_else(|| "-".to_owned(), |p| format!("{p:.1}%")),
            ];
            if with_snapshots {
                row.push(match r.snapshot_bytes {
                    Some(b) => format!("{} ({})", r.snapshots, human_bytes(u64::try_from(b).ok())),
                    None => "-".to_owned(),
                });
            }
            if let Some(size) = &r.size {
                row.push(human_bytes(size.size_rw_bytes.and_then(|n| u64::try_from(n).ok())));
                row.push(human_bytes(size.host_dir_bytes));
            }
            row
        })
        .collect();
    output::table(&headers, &table);
    Ok(0)
}

/// `berth sandbox top ID`: the processes inside one of this profile's sandboxes (by id, id prefix or name).
///
/// # Errors
/// A usage failure (2) when no sandbox of this profile matches; an engine failure (125).
pub async fn top(ctx: &Ctx, id: &str, all_profiles: bool) -> Result<u8, Failure> {
    let rt = connect(ctx).await?;
    let profile = profile_label(ctx);
    let listed = service::list_managed(&*rt, (!all_profiles).then_some(profile.as_str()), Some(&ctx.home_id())).await?;
    let want = id.trim();
    let found: Vec<&ContainerSummary> = listed
        .iter()
        .filter(|c| !want.is_empty() && (c.name == want || (want.len() >= 4 && c.id.starts_with(want))))
        .collect();
    let c = match found.as_slice() {
        [one] => *one,
        [] => return Err(Failure::usage(format!("no sandbox {want:?} in profile {}", ctx.profile))),
        _ => return Err(Failure::usage(format!("{want:?} matches {} sandboxes; give more of the id", found.len()))),
    };
    if !c.state.is_live() {
        return Err(Failure::usage(format!("sandbox {} is {}: no processes", c.name, c.state)));
    }
    let procs = rt.processes(&c.id).await?;
    let processes: Vec<ProcessRow> = procs
        .iter()
        .map(|p| ProcessRow { pid: p.pid.clone(), command: p.command.clone(), keep_alive: is_keep_alive(&p.command) })
        .collect();
    if ctx.json {
        output::json(&SandboxTop { id: c.id.clone(), name: c.name.clone(), processes });
    } else {
        let rows: Vec<Vec<String>> = processes
            .into_iter()
            .map(|p| vec![p.pid, if p.keep_alive { "keep-alive" } else { "" }.to_owned(), p.command])
            .collect();
        output::table(&["PID", "ROLE", "COMMAND"], &rows);
    }
    Ok(0)
}
