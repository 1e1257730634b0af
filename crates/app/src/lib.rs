//! The `berth` application: CLI parsing, wiring of the adapters, logging, and the exit-code map.

// By surface: `board` (the kanban commands, workers, dispatch), `sandbox` (sandboxes, `berth run`, host folders),
// `gateway` (the service), `config_cmd`, all on the `edge` (context, errors, output, processes).
pub mod board;
pub mod cli;
pub mod cli_kanban;
pub mod cli_values;
pub mod cli_worker;
pub mod config_cmd;
pub mod edge;
pub mod egress;
pub mod gateway;
pub mod sandbox;
pub mod web;

#[cfg(test)]
mod help_tests;

use std::process::ExitCode;

use clap::Parser;

use crate::board::worker;
use crate::cli::{Cli, Command};
use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::{log_format, private_files, redact};

/// Runs the CLI and returns its exit code.
pub fn main() -> ExitCode {
    // Before anything can create a file: berth's files (logs, the board, caches, state) are its user's alone.
    private_files::enter();
    // Before anything else: the environment (the board's password, forwarded secrets) is not readable by the
    // commands berth runs, which are of the same user, through /proc/<pid>/environ.
    edge::process::keep_memory_private();
    // A worker's command's own `kanban complete|block|heartbeat`, in its plainest form, goes to its worker at once:
    // no command line, settings or logging to set up for it (hermes's protocol runs one such process a task).
    let answered = match quick_hand_off() {
        Quick::Answered(code) => return code,
        Quick::Remove(task, assignee) => Some((task, assignee)),
        Quick::No => None,
    };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => {
            edge::version::print(&config_bridge::EnvMap::from_process());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            match cli_values::one_line(&e, &<Cli as clap::CommandFactory>::command()) {
                Some(line) => eprintln!("berth: {}", edge::terminal_text::error_line(&line)),
                None => drop(e.print()),
            }
            return ExitCode::from(code);
        }
    };
    // The gateway is a service: its dispatcher lines are INFO and belong in its log by default.
    let service = matches!(cli.command, Command::Gateway(cli::GatewayCmd::Run) | Command::Dashboard { .. });
    // The process environment is read once, here; everything else gets this map. A berth process started by berth
    // may get the board's URL on a socket instead (`edge::handover`), read now that the process is non-dumpable.
    let mut env = config_bridge::EnvMap::from_process();
    let handed = edge::handover::receive(&mut env);
    init_logging(cli.verbose + u8::from(service), &env, service && cli.json);
    match run(cli, env, handed, answered) {
        Ok(code) => ExitCode::from(code),
        Err(f) => failed(&f),
    }
}

fn failed(f: &Failure) -> ExitCode {
    eprintln!("berth: {}", edge::terminal_text::error_line(&f.message));
    ExitCode::from(f.code)
}

/// What [`quick_hand_off`] did.
enum Quick {
    /// Not a plain request of a worker's command, or no worker to answer it: the whole command line reads it.
    No,
    Answered(ExitCode),
    /// Answered, and the completed task's sandbox is the command's to remove (with its settings).
    Remove(String, String),
}

/// A worker's command's request in its plainest form (`board::handoff::plain_request`), sent to its worker.
fn quick_hand_off() -> Quick {
    let Ok(socket) = std::env::var(board::handoff::SOCKET_VAR) else { return Quick::No };
    let Some(args) = std::env::args_os().skip(1).map(|a| a.into_string().ok()).collect::<Option<Vec<String>>>() else {
        return Quick::No;
    };
    let Some((op, id, text)) = board::handoff::plain_request(&args) else { return Quick::No };
    match board::handoff::request_at(&socket, false, op, id, text) {
        None => Quick::No,
        Some(Ok(None)) => Quick::Answered(ExitCode::SUCCESS),
        Some(Ok(Some((task, assignee)))) => Quick::Remove(task, assignee),
        Some(Err(f)) => Quick::Answered(failed(&f)),
    }
}

/// Logging on stderr: plain `berth: …` lines, with time and level from `-v` (and in the gateway), JSON lines with
/// `json_lines` (`gateway run --json`).
fn init_logging(verbose: u8, env: &config_bridge::EnvMap, json_lines: bool) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = env.get("BERTH_LOG").unwrap_or(default).to_owned();
    let with_time = verbose > 0;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(redact::Stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if json_lines {
        builder.with_ansi(false).event_format(log_format::JsonLines).try_init()
    } else if with_time {
        builder.try_init()
    } else {
        builder.event_format(log_format::Plain).try_init()
    };
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::other(format!("cannot start the async runtime: {e}")))
}

/// The command's context from its flags and the environment (`handed`: what a worker was handed, its board URL among
/// them). `gateway status` reads only the home's state: with a config file that does not read, it still says what the
/// running gateway does (and that it kept its settings), the file's fault a warning. A worker's failure goes to its
/// log, its only reader.
fn context(cli: &Cli, env: config_bridge::EnvMap, read_file: bool, handed: Result<(), String>) -> Result<Ctx, Failure> {
    let resolve = |env, read| Ctx::resolve(env, cli.home.clone(), cli.profile.clone(), &cli.overrides, cli.json, read);
    match handed.map_err(Failure::other).and_then(|()| resolve(env.clone(), read_file)) {
        Ok(ctx) => Ok(ctx),
        // `gateway status` still answers over a config file it cannot read (a warning), not over another refusal.
        Err(f) if matches!(cli.command, Command::Gateway(cli::GatewayCmd::Status)) => {
            let ctx = resolve(env, false)?;
            tracing::warn!("{}", f.message);
            Ok(ctx)
        }
        Err(f) => {
            if let Command::Worker(cli::WorkerCmd::Run { log: Some(log), .. }) = &cli.command {
                let _ = worker::redirect_output(log);
            }
            Err(f)
        }
    }
}

/// Runs the parsed command; `answered`: a completed task whose worker answered its command's request already
/// ([`quick_hand_off`]), its sandbox left to remove.
fn run(
    mut cli: Cli,
    env: config_bridge::EnvMap,
    handed: Result<(), String>,
    answered: Option<(String, String)>,
) -> Result<u8, Failure> {
    // Completions need no home, settings or engine: they describe the command line itself.
    if let Command::Completions { shell } = &cli.command {
        use clap::CommandFactory;
        // Into a buffer first: the generator panics on a write error, and `… | head` closes the pipe early.
        let mut script = Vec::new();
        clap_complete::generate(*shell, &mut Cli::command(), "berth", &mut script);
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), &script);
        return Ok(0);
    }
    if let Command::Man = &cli.command {
        use clap::CommandFactory;
        let mut page = Vec::new();
        clap_mangen::Man::new(Cli::command())
            .render(&mut page)
            .map_err(|e| Failure::other(format!("cannot render the man page: {e}")))?;
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), &page);
        return Ok(0);
    }
    // The egress proxy runs in its own container with no home: it needs only its policy and its log.
    if let Command::EgressProxy { policy, log, listen } = &cli.command {
        return runtime()?.block_on(egress::proxy::serve(policy, log.clone(), *listen));
    }
    if let Command::EgressCredentials = &cli.command {
        return egress::intercept::hand_over();
    }
    // The dispatcher's gate: it opens once the tick recorded its workers (or the dispatcher is gone).
    let gate = match &cli.command {
        Command::Worker(cli::WorkerCmd::Run { after_stdin_closes: true, .. }) => worker::Gate::wait(),
        _ => worker::Gate::Closed,
    };
    // A worker never reads the config file: its dispatcher resolved every setting into its environment. Without the
    // board's URL it was handed, it would open another board (the home's SQLite file): it stops instead.
    let read_file = !matches!(cli.command, Command::Worker(_));
    let ctx = context(&cli, env, read_file, handed)?;
    // What `-c` just set of the engine's extra arguments is refused at once, read as a create would read it.
    if let Some(args) = ctx.resolved.extra_args_from_cli() {
        edge::open::extra_args_parser().parse(args).map_err(Failure::usage_of)?;
    }
    let setup = match &cli.command {
        Command::Worker(cli::WorkerCmd::Run { log, workdir, .. }) => {
            worker::enter(&ctx, log.as_deref(), workdir.as_deref()).err()
        }
        _ => None,
    };
    // Before anything can log a request carrying them (bollard logs exec bodies at debug level); the board server's
    // password too: the URL travels in workers' environments and may reach a debug log.
    redact::set_secrets(redact::secrets_of(&ctx).iter().map(String::as_str));
    // A setting that may not fall back (a cap that is not a number) stops every command but `config`, which fixes it.
    for refusal in &ctx.resolved.refused {
        if !matches!(cli.command, Command::Config(_)) {
            return Err(Failure::usage(refusal.clone()));
        }
        tracing::warn!("{refusal}");
    }
    private_files::ensure_dir(&ctx.home)
        .map_err(|e| Failure::other(format!("cannot create home {}: {e}", ctx.home.display())))?;
    private_files::tighten_home(&ctx.home, ctx.env.get("HOME"));
    // Any berth on this machine, this home's or another's, refuses to mount a folder holding the marker.
    sandbox::mounts::mark_home(&ctx.home);
    // A worker command's own `kanban complete|block|heartbeat` goes through its worker, which holds the board's
    // credential (`board/handoff.rs`); without a worker socket to reach, the command goes to the board itself.
    if let Some((op, id, text)) = board::handoff::handed_off(&cli.command)
        && ctx.env.get(board::handoff::SOCKET_VAR).is_some()
        && let Some(answered) = answered.map(|a| Ok(Some(a))).or_else(|| board::handoff::request(&ctx, op, id, text))
    {
        // A finished run's sandbox goes, as the command's own completion removed it.
        if let Some((task, assignee)) = answered? {
            runtime()?.block_on(board::release::remove_task_sandbox_shown(&ctx, &task, &assignee));
        }
        return Ok(0);
    }
    board::prefix::expand(&ctx, &mut cli.command)?;
    match &cli.command {
        Command::Profile(cmd) => config_cmd::profile(&ctx, cmd),
        Command::Config(cmd) => config_cmd::command(&ctx, cmd),
        Command::Sandbox(cmd) => runtime()?.block_on(sandbox::command(&ctx, cmd)),
        Command::Run(args) => runtime()?.block_on(sandbox::run(&ctx, args)),
        Command::Kanban(cmd) => runtime()?.block_on(board::command(&ctx, cmd)),
        Command::Worker(cli::WorkerCmd::Run { task, .. }) => runtime()?.block_on(worker::run(&ctx, task, gate, setup)),
        Command::Worker(cli::WorkerCmd::Runner) => board::runner::serve(&ctx),
        Command::Gateway(cli::GatewayCmd::Run) => runtime()?.block_on(gateway::run(&ctx)),
        Command::Gateway(cli::GatewayCmd::Status) => gateway::status(&ctx),
        Command::Gateway(cli::GatewayCmd::Token { rotate }) => web::token(&ctx, *rotate),
        Command::Dashboard { bind, port } => runtime()?.block_on(web::command(&ctx, bind.as_deref(), *port)),
        Command::Status => runtime()?.block_on(gateway::overview::command(&ctx)),
        Command::Completions { .. } | Command::Man | Command::EgressProxy { .. } | Command::EgressCredentials => Ok(0),
    }
}
