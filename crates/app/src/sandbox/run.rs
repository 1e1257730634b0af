//! `berth run`: acquire the task's sandbox, exec the command with its streams, timeout and signals, release.

use std::io::Write;

use futures_util::FutureExt;
use std::time::Duration;

use domain::policy::cleanup::ReleaseMode;
use domain::ports::{ExecOutcome, ExecSpec, OutputSink, OutputStream};
use domain::sandbox::{SandboxIdentity, is_valid_env_name};
use domain::service::{self};

use crate::cli::RunArgs;
use crate::edge::context::Ctx;
use crate::edge::error::{Exit, Failure};

use super::engine::*;

/// Writes exec output straight to our stdout and stderr as it arrives; tells `gone` once stdout's reader has gone
/// (`berth run -- yes | head`: the write fails with EPIPE, since Rust ignores SIGPIPE).
struct StdSink {
    gone: std::sync::Arc<tokio::sync::Notify>,
    told: bool,
}

impl OutputSink for StdSink {
    fn write(&mut self, stream: OutputStream, bytes: &[u8]) {
        let written = match stream {
            OutputStream::Stdout => std::io::stdout().lock().write_all(bytes).and_then(|()| std::io::stdout().flush()),
            OutputStream::Stderr => std::io::stderr().lock().write_all(bytes),
        };
        if let Err(e) = written
            && stream == OutputStream::Stdout
            && e.kind() == std::io::ErrorKind::BrokenPipe
            && !self.told
        {
            self.told = true;
            self.gone.notify_one();
        }
    }
}

/// The exec environment: forwarded host variables plus `-e` pairs.
fn exec_env(ctx: &Ctx, extra: &[String]) -> Result<Vec<String>, Failure> {
    let mut env = forwarded_env(ctx);
    for kv in extra {
        match kv.split_once('=') {
            Some((k, _)) if is_valid_env_name(k) => env.push(kv.clone()),
            _ => return Err(Failure::usage(format!("-e expects KEY=VALUE with a valid variable name, got {kv:?}"))),
        }
    }
    Ok(env)
}

/// `berth run`: returns the command's exit code (124 on timeout).
///
/// # Errors
/// A failure before the command ran (exit 125, or 2 for bad input).
pub async fn run(ctx: &Ctx, args: &RunArgs) -> Result<u8, Failure> {
    ctx.require_profile()?;
    let identity = identity(ctx, &args.task)?;
    let env = exec_env(ctx, &args.env)?;
    crate::sandbox::run_io::check_tty(args.tty)?;
    let (rt, remembered) = connect_remembered(ctx).await?;
    let (req, mut found) = first_contact(ctx, args, &*rt, identity, remembered).await?;
    if found.is_none() {
        maybe_reap(ctx, &*rt).await;
        // A suspended sandbox is resumed from its snapshot before the command runs in it.
        found = crate::sandbox::snapshots::resume_if_suspended(ctx, &*rt, &req).await?;
    }
    // With credentials the sandbox is acquired first, so its proxy holds their values before the command starts.
    let found = match found {
        None if crate::sandbox::engine::has_credentials(ctx, &req) => Some(service::acquire(&*rt, &req).await?),
        found => found,
    };
    if let Some(acquired) = &found {
        crate::sandbox::engine::admit_credentials(ctx, &*rt, &req, acquired).await?;
    }
    let timeout = args.timeout.unwrap_or(ctx.settings.terminal.timeout.get());
    let exec = ExecSpec {
        argv: args.argv.clone(),
        env,
        workdir: Some(args.workdir.clone().unwrap_or_else(|| req.spec.workdir.clone())),
        user: None,
        timeout: (timeout > 0).then(|| Duration::from_secs(timeout)),
    };
    // The marker finds this command's processes inside the sandbox if we are interrupted.
    let marker = format!("BERTH_RUN={}", crate::edge::context::owner_label());
    let mut exec = exec;
    exec.env.push(marker.clone());
    let stdout_gone = std::sync::Arc::new(tokio::sync::Notify::new());
    let mut std_sink = StdSink { gone: stdout_gone.clone(), told: false };
    let mut sink = crate::edge::exec_errors::StartFailureSink::new(&mut std_sink).with_hint(task_hint(args));
    // A throw-away sandbox carries a lease this process renews while it runs, for reapers on other hosts.
    let _lease = (!req.persist_across_processes).then(|| crate::sandbox::lease::hold(ctx, &rt, &req.spec.name));
    // Input (and a TTY) are wired only when asked for or piped; the terminal is restored when `io` drops.
    let io = crate::sandbox::run_io::attach(args.interactive, args.tty)?;
    let exec_run = async {
        match io {
            None => service::run_from(&*rt, &req, found, &exec, &mut sink).await,
            Some(mut io) => {
                // Input cannot be replayed, so an exec with input is not retried the way `service::run` retries.
                let acquired = match found {
                    Some(a) => a,
                    None => service::acquire(&*rt, &req).await?,
                };
                let outcome = rt.exec_io(&acquired.id, &exec, &mut sink, io.take()).await;
                drop(io);
                Ok((acquired, outcome?))
            }
        }
    };
    let result = tokio::select! {
        r = exec_run => r,
        // A signal, or stdout's reader gone (what SIGPIPE is to a shell's pipeline): the command is stopped alike.
        code = stopped(&stdout_gone) => {
            // Stop the command inside, and in opt-out mode remove the container this process made.
            let owner = (!req.persist_across_processes).then(crate::edge::context::owner_label);
            stop_marked(ctx, &req.identity, &marker, owner.as_deref()).await;
            if owner.is_some() && !args.keep_files {
                remove_folder_bounded(ctx, &req.identity).await;
            }
            return Ok(code);
        }
    };
    if let Ok((acquired, _)) = &result {
        for note in &acquired.notes {
            tracing::warn!("{note}");
        }
        tracing::debug!("ran in {} ({})", acquired.name, acquired.action.as_str());
        if !req.persist_across_processes {
            release_throwaway(ctx, &*rt, &req, acquired, args.keep_files).await;
        }
    }
    match result?.1 {
        // The command ended on its own while its output could not be written: the pipeline's end, all the same.
        _ if stdout_gone.notified().now_or_never().is_some() => Ok(Exit::BROKEN_PIPE),
        ExecOutcome::Exited(code) => {
            let code = sink.finish(code, args.argv.first().map_or("", String::as_str));
            Ok(u8::try_from(code).unwrap_or(Exit::FAILURE))
        }
        ExecOutcome::TimedOut => {
            eprintln!("berth: command timed out after {timeout}s and was killed");
            Ok(Exit::TIMEOUT)
        }
    }
}

/// Resolves on SIGINT (130), SIGTERM (143), or once stdout's reader has gone (141, as a writer killed by SIGPIPE).
async fn stopped(stdout_gone: &tokio::sync::Notify) -> u8 {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        stdout_gone.notified().await;
        return Exit::BROKEN_PIPE;
    };
    tokio::select! {
        _ = int.recv() => Exit::INTERRUPTED,
        _ = term.recv() => Exit::TERMINATED,
        () = stdout_gone.notified() => Exit::BROKEN_PIPE,
    }
}

/// Removes `identity`'s folder after its throw-away sandbox went (see `Folders::remove_for`); bounded, best effort.
async fn remove_folder_bounded(ctx: &Ctx, identity: &SandboxIdentity) {
    let work = async {
        let rt = connect(ctx).await.ok()?;
        crate::sandbox::folders::Folders::from_ctx(ctx).remove_for(&*rt, identity).await
    };
    if let Ok(Some(Err(e))) = tokio::time::timeout(TEARDOWN_WAIT, work).await {
        tracing::warn!("{e}");
    }
}

/// The sandbox to run in, on the fast path when it already runs under its deterministic name (one inspect, the
/// request built meanwhile); `None` when it must still be acquired.
async fn first_contact(
    ctx: &Ctx,
    args: &RunArgs,
    rt: &dyn domain::ports::Engine,
    identity: domain::sandbox::SandboxIdentity,
    remembered: bool,
) -> Result<(domain::service::AcquireRequest, Option<domain::service::Acquired>), Failure> {
    // The fast path: the sandbox already runs under its deterministic name (one inspect). The orphan reaper runs
    // once per process before a sandbox is created, so only when that misses.
    let first_contact = async {
        if args.interactive || args.tty || !ctx.settings.terminal.docker_persist_across_processes {
            return Ok::<_, Failure>((request(ctx, rt, identity).await?, None));
        }
        // The inspect of the deterministic name goes out first; the request is built while it is answered.
        let name = identity.persistent_name();
        let (inspected, req) = tokio::join!(rt.inspect(&name), request(ctx, rt, identity));
        let req = req?;
        let found = if req.spec.name == name {
            service::attach_inspected(&req, inspected)?
        } else {
            service::attach_running(rt, &req).await?
        };
        Ok((req, found))
    };
    if remembered {
        // The first requests to an engine not pinged: bounded as the ping is, so a hung engine fails as fast.
        let bound = docker_adapter::CONNECT_TIMEOUT;
        tokio::time::timeout(bound, first_contact).await.map_err(|_| {
            Failure::from(domain::ports::RuntimeError::Unavailable {
                endpoint: rt.endpoint().to_owned(),
                message: format!("no answer within {}s; is the Docker daemon running?", bound.as_secs()),
            })
        })?
    } else {
        first_contact.await
    }
}

/// Stops and removes a throw-away sandbox after its command (and its folder, unless kept or still used); bounded.
async fn release_throwaway(
    ctx: &Ctx,
    rt: &dyn domain::ports::Engine,
    req: &domain::service::AcquireRequest,
    acquired: &domain::service::Acquired,
    keep_files: bool,
) {
    let teardown = async {
        service::release(rt, Some(&acquired.id), ReleaseMode::OptOut).await?;
        // A throw-away sandbox's folder goes with it, unless kept or still used (see `remove_for`).
        if !keep_files
            && let Some(Err(e)) = crate::sandbox::folders::Folders::from_ctx(ctx).remove_for(rt, &req.identity).await
        {
            tracing::warn!("{e}");
        }
        Ok::<_, domain::ports::RuntimeError>(())
    };
    if tokio::time::timeout(TEARDOWN_WAIT, teardown).await.is_err() {
        tracing::warn!(
            "teardown of {} did not finish within {}s; the reaper will remove it",
            acquired.name,
            TEARDOWN_WAIT.as_secs()
        );
    }
}

/// `berth run demo ls` (the task given as the command's first word, `--task` left out): the hint for the "command
/// not found" line, saying how to name the task.
fn task_hint(args: &RunArgs) -> String {
    match args.argv.as_slice() {
        [first, rest @ ..] if args.task == "default" && !rest.is_empty() && !first.contains('/') => {
            format!(
                " (to run `{}` in task {first}'s sandbox: `berth run --task {first} -- {}`)",
                rest.join(" "),
                rest.join(" ")
            )
        }
        _ => String::new(),
    }
}
