//! `berth sandbox logs`: a sandbox's own output, as `docker logs` shows it. A sandbox's main process is the
//! keep-alive, which writes nothing, so this is what a process sent to the container's stdout or stderr (for example
//! `> /proc/1/fd/1`, or an image's own start-up output); a command run with `berth run` prints to its caller, and a
//! task's worker writes to its log (`kanban logs`).

use std::io::Write;

use crate::sandbox::views::{LogLine, SandboxLogs};
use domain::container::ContainerSummary;
use domain::ports::{OutputSink, OutputStream};
use domain::service;

use crate::edge::context::Ctx;
use crate::edge::error::{Exit, Failure};
use crate::edge::output;
use crate::sandbox::engine::{connect, identity, identity_containers, profile_label};

/// Writes each chunk to this process's stdout or stderr as it arrives (for `-f`).
struct Passthrough;

impl OutputSink for Passthrough {
    fn write(&mut self, stream: OutputStream, bytes: &[u8]) {
        // A closed pipe (`| head`) ends the output; nothing else to do about it.
        let _ = match stream {
            OutputStream::Stdout => std::io::stdout().lock().write_all(bytes).and_then(|()| std::io::stdout().flush()),
            OutputStream::Stderr => std::io::stderr().lock().write_all(bytes),
        };
    }
}

/// Keeps each chunk with its stream, in arrival order (for `--json`).
#[derive(Default)]
struct Chunks(Vec<(OutputStream, Vec<u8>)>);

impl OutputSink for Chunks {
    fn write(&mut self, stream: OutputStream, bytes: &[u8]) {
        self.0.push((stream, bytes.to_vec()));
    }
}

/// The sandbox `id` (a container id of at least 4 characters, or a name) or `task` names.
pub(crate) async fn find(
    ctx: &Ctx,
    rt: &dyn domain::ports::Engine,
    id: Option<&str>,
    task: Option<&str>,
    all_profiles: bool,
) -> Result<ContainerSummary, Failure> {
    let found: Vec<ContainerSummary> = if let Some(task) = task {
        identity_containers(rt, &identity(ctx, task)?).await?
    } else {
        let want = id.unwrap_or_default().trim();
        let profile = profile_label(ctx);
        service::list_managed(rt, (!all_profiles).then_some(profile.as_str()), Some(&ctx.home_id()))
            .await?
            .into_iter()
            .filter(|c| !want.is_empty() && (c.name == want || (want.len() >= 4 && c.id.starts_with(want))))
            .collect()
    };
    let what = task.map_or_else(|| format!("{:?}", id.unwrap_or_default()), |t| format!("of task {t:?}"));
    match <[ContainerSummary; 1]>::try_from(found) {
        Ok([one]) => Ok(one),
        Err(v) if v.is_empty() => Err(Failure::usage(format!("no sandbox {what} in profile {}", ctx.profile))),
        Err(v) => Err(Failure::usage(format!("{what} matches {} sandboxes; give more of the id", v.len()))),
    }
}

/// `berth sandbox logs`.
///
/// # Errors
/// Usage failures (no such sandbox, `--json` with `-f`) and engine failures.
pub async fn logs(
    ctx: &Ctx,
    id: Option<&str>,
    task: Option<&str>,
    all_profiles: bool,
    tail: Option<usize>,
    follow: bool,
) -> Result<u8, Failure> {
    if follow && ctx.json {
        return Err(Failure::usage("--follow prints the output as it comes; drop --json"));
    }
    let rt = connect(ctx).await?;
    let c = find(ctx, &*rt, id, task, all_profiles).await?;
    if !ctx.json {
        rt.logs(&c.id, tail, follow, &mut Passthrough).await?;
        return Ok(Exit::OK);
    }
    let mut chunks = Chunks::default();
    rt.logs(&c.id, tail, false, &mut chunks).await?;
    let lines: Vec<LogLine> = chunks
        .0
        .iter()
        .flat_map(|(stream, bytes)| {
            let name = match stream {
                OutputStream::Stdout => "stdout",
                OutputStream::Stderr => "stderr",
            };
            String::from_utf8_lossy(bytes)
                .lines()
                .map(|l| LogLine { stream: name, line: l.to_owned() })
                .collect::<Vec<_>>()
        })
        .collect();
    output::json(&SandboxLogs { id: c.id.clone(), name: c.name.clone(), lines });
    Ok(Exit::OK)
}
