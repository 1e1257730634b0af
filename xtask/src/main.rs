//! Automation: `cargo xtask image` builds the local sandbox image; `cargo xtask ci` runs the CI steps;
//! `cargo xtask bench` measures the PRODUCT §9 figures.
//!
//! It depends on no product crate: it drives `docker` and `cargo` as processes.

use std::process::{Command, ExitCode};

mod image;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        Some("image") => image::build(args.iter().any(|a| a == "--force")),
        Some("ci") => ci(),
        Some("bench") => bench(args.iter().any(|a| a == "--quick")),
        _ => Err("usage: cargo xtask <image [--force] | ci | bench [--quick]>".to_owned()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed with {status}")) }
}

/// Builds the release binary and the image, then runs the figures benchmark (writes BENCHMARKS.md, benchmarks.json).
fn bench(quick: bool) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    image::build(false)?;
    run(Command::new(&cargo).args(["build", "--release", "-p", "app", "--bin", "berth"]))?;
    let mut cmd = Command::new(&cargo);
    cmd.args(["bench", "-p", "tests", "--bench", "figures", "--"]);
    if quick {
        cmd.arg("--quick");
    }
    run(&mut cmd)
}

/// The CI steps, in order: format, lints, the image, every test.
fn ci() -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    run(Command::new(&cargo).args(["fmt", "--all", "--check"]))?;
    run(Command::new(&cargo).args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    image::build(false)?;
    // The CLI tests run the real binary, so build it first.
    run(Command::new(&cargo).args(["build", "-p", "app", "--bin", "berth"]))?;
    let mut test = Command::new(&cargo);
    test.args(["test", "--workspace"]);
    // The hermes interop suite finds hermes-agent's venv through this variable; `.ci/run` sets it, and a venv at
    // the place `.ci/run` makes it counts too.
    let venv_python = std::path::Path::new("/opt/berth-hermes-venv/bin/python");
    if std::env::var_os("BERTH_HERMES_PYTHON").is_none() && venv_python.exists() {
        test.env("BERTH_HERMES_PYTHON", venv_python);
    }
    test_and_count(&mut test)
}

/// Runs `cargo test`, echoing its output, and closes with one `N passed, N failed` line summing every test binary,
/// so the last line speaks for the whole run rather than for the last (possibly empty) binary.
fn test_and_count(cmd: &mut Command) -> Result<(), String> {
    use std::io::{BufRead, BufReader, Write};
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let (mut passed, mut failed) = (0u64, 0u64);
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let _ = writeln!(std::io::stdout(), "{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            let count = |word: &str| -> u64 {
                rest.split(';')
                    .find_map(|part| part.trim().strip_suffix(word)?.trim().rsplit(' ').next()?.parse().ok())
                    .unwrap_or(0)
            };
            passed += count("passed");
            failed += count("failed");
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    println!("{passed} passed, {failed} failed");
    if status.success() { Ok(()) } else { Err(format!("cargo test failed with {status}")) }
}
