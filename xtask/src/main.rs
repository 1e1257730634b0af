//! Automation: `cargo xtask image` builds the local sandbox image; `cargo xtask ci` runs the CI steps;
//! `cargo xtask bench` measures the PRODUCT §9 figures.
//!
//! It depends on no product crate: it drives `docker` and `cargo` as processes.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The image berth's tests, demo and default settings use.
const IMAGE: &str = "berth-sandbox:latest";

/// Host programs copied into the image, with their shared libraries.
const PROGRAMS: &[&str] = &[
    "sh", "dash", "sleep", "cat", "echo", "true", "false", "ls", "mkdir", "rm", "env", "kill", "id", "touch", "head",
    "wc", "date", "uname", "printf", "grep", "pwd", "test", "seq", "tr", "cut", "sort", "ps", "stat", "timeout", "yes",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        Some("image") => image(args.iter().any(|a| a == "--force")),
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

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

/// Shared libraries a binary needs, from `ldd`.
fn libraries(bin: &Path) -> Vec<PathBuf> {
    let Ok(out) = Command::new("ldd").arg(bin).output() else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')).map(PathBuf::from))
        .collect()
}

fn copy_into(root: &Path, file: &Path) -> Result<(), String> {
    let real = std::fs::canonicalize(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let dest = root.join(file.strip_prefix("/").unwrap_or(file));
    std::fs::create_dir_all(dest.parent().expect("absolute path has a parent")).map_err(|e| e.to_string())?;
    if !dest.exists() {
        std::fs::copy(&real, &dest).map_err(|e| format!("copy {}: {e}", real.display()))?;
    }
    Ok(())
}

/// Builds `berth-sandbox:latest` from host binaries (no registry needed); does nothing when it exists.
fn image(force: bool) -> Result<(), String> {
    let exists =
        Command::new("docker").args(["image", "inspect", IMAGE]).output().map(|o| o.status.success()).unwrap_or(false);
    if exists && !force {
        eprintln!("xtask: image {IMAGE} already present");
        return Ok(());
    }
    let ctx = std::env::temp_dir().join(format!("berth-image-{}", std::process::id()));
    let root = ctx.join("rootfs");
    let _ = std::fs::remove_dir_all(&ctx);
    for dir in ["bin", "tmp", "root", "workspace", "etc", "var/tmp", "run", "home", "proc", "sys", "dev"] {
        std::fs::create_dir_all(root.join(dir)).map_err(|e| e.to_string())?;
    }
    for program in PROGRAMS {
        let Some(bin) = which(program) else {
            eprintln!("xtask: {program} not found on the host; skipped");
            continue;
        };
        let dest = root.join("bin").join(program);
        std::fs::copy(std::fs::canonicalize(&bin).map_err(|e| e.to_string())?, &dest)
            .map_err(|e| format!("copy {program}: {e}"))?;
        for lib in libraries(&bin) {
            copy_into(&root, &lib)?;
        }
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").map_err(|e| e.to_string())?;
    std::fs::write(
        ctx.join("Dockerfile"),
        "FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin\nLABEL org.opencontainers.image.title=berth-sandbox\nCMD [\"sleep\", \"infinity\"]\n",
    )
    .map_err(|e| e.to_string())?;
    eprintln!("xtask: building {IMAGE} from host binaries");
    let res = run(Command::new("docker").args(["build", "-q", "-t", IMAGE]).arg(&ctx));
    let _ = std::fs::remove_dir_all(&ctx);
    res
}

/// Builds the release binary and the image, then runs the figures benchmark (writes BENCHMARKS.md, benchmarks.json).
fn bench(quick: bool) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    image(false)?;
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
    image(false)?;
    // The CLI tests run the real binary, so build it first.
    run(Command::new(&cargo).args(["build", "-p", "app", "--bin", "berth"]))?;
    test_and_count(Command::new(&cargo).args(["test", "--workspace"]))
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
