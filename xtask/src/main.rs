//! Automation: `cargo xtask demo` runs the main job end to end in a temporary home; `cargo xtask image` builds the local sandbox image; `cargo xtask ci` runs the CI steps;
//! `cargo xtask bench` measures the PRODUCT §9 figures; `cargo xtask man` writes the man page; `cargo xtask guide`
//! builds the guide (`docs/`, mdBook) into `target/book`.
//!
//! It depends on no product crate: it drives `docker` and `cargo` as processes.

use std::process::{Command, ExitCode};

mod demo;
mod image;

/// The test image, as `cargo xtask image` tags it by default.
const IMAGE: &str = image::DEFAULT_TAG;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        Some("image") => image::build(args.iter().any(|a| a == "--force")),
        Some("ci") => ci(args.iter().any(|a| a == "--allow-skips")),
        Some("demo") => demo::run(args.iter().any(|a| a == "--keep")),
        Some("bench") => bench(args.iter().any(|a| a == "--quick")),
        Some("man") => man(),
        Some("guide") => guide(),
        _ => Err(
            "usage: cargo xtask <demo [--keep] | image [--force] | ci [--allow-skips] | bench [--quick] | man | guide>"
                .to_owned(),
        ),
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

/// Builds berth and writes its man page to `target/man/man1/berth.1` (`MANPATH=target/man man berth` reads it).
fn man() -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    run(Command::new(&cargo).args(["build", "-p", "berth", "--bin", "berth"]))?;
    let berth = demo::target_dir().join("debug").join("berth");
    let out = Command::new(&berth).arg("man").output().map_err(|e| format!("cannot run {}: {e}", berth.display()))?;
    if !out.status.success() || out.stdout.is_empty() {
        return Err(format!("berth man failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let dir = demo::target_dir().join("man").join("man1");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let page = dir.join("berth.1");
    std::fs::write(&page, &out.stdout).map_err(|e| format!("cannot write {}: {e}", page.display()))?;
    eprintln!("xtask: wrote {}", page.display());
    Ok(())
}

/// The mdBook release the guide is built with; `cargo xtask guide` installs it under `target/tools` when missing
/// (a debug build: it compiles faster, and renders a guide this size at once).
const MDBOOK_VERSION: &str = "0.5.4";

/// Builds the guide (`book.toml`, pages in `docs/`) into `target/book` with mdBook, installed first (pinned, from
/// crates.io, under `target/tools`) when missing; fails when a page of `docs/SUMMARY.md` was not written or an
/// include was left unexpanded. The guide's links are checked by `tests/src/guide.rs`.
fn guide() -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let target = demo::target_dir();
    let tools = target.join("tools");
    let mdbook = tools.join("bin").join("mdbook");
    let installed = Command::new(&mdbook)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(MDBOOK_VERSION));
    if !installed {
        eprintln!("xtask: installing mdBook {MDBOOK_VERSION} into {}", tools.display());
        run(Command::new(&cargo)
            .args(["install", "mdbook", "--locked", "--debug", "--version", MDBOOK_VERSION, "--no-default-features"])
            .args(["--features", "search", "--root"])
            .arg(&tools))?;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(std::path::Path::new("."));
    let book = target.join("book");
    run(Command::new(&mdbook).arg("build").arg(root).arg("--dest-dir").arg(&book))?;
    let summary = std::fs::read_to_string(root.join("docs/SUMMARY.md")).map_err(|e| format!("docs/SUMMARY.md: {e}"))?;
    for page in summary.lines().filter_map(|l| l.split_once("](").and_then(|(_, rest)| rest.split_once(')'))) {
        let html = book.join(page.0.replace(".md", ".html"));
        let text = std::fs::read_to_string(&html).map_err(|e| format!("the guide has no {}: {e}", html.display()))?;
        if text.contains("{{#include") {
            return Err(format!("{} holds an include mdBook did not expand", html.display()));
        }
    }
    eprintln!("xtask: the guide is in {}", book.join("index.html").display());
    Ok(())
}

/// Builds the release binary and the image, then runs the figures benchmark (writes BENCHMARKS.md, benchmarks.json).
fn bench(quick: bool) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    image::build(false)?;
    run(Command::new(&cargo).args(["build", "--release", "-p", "berth", "--bin", "berth"]))?;
    let mut cmd = Command::new(&cargo);
    cmd.args(["bench", "-p", "tests", "--bench", "figures", "--"]);
    if quick {
        cmd.arg("--quick");
    }
    run(&mut cmd)
}

/// The CI steps, in order: format, lints, then the guide beside the image and every test.
fn ci(allow_skips: bool) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    run(Command::new(&cargo).args(["fmt", "--all", "--check"]))?;
    run(Command::new(&cargo).args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    // The guide's build (mdBook's first install compiles it) shares nothing with the tests: it runs beside them.
    let guide = GuideBuild::start()?;
    let tests = ci_tests(allow_skips);
    guide.finish()?;
    tests
}

/// `cargo xtask guide` as a child process, its output kept in `target/ci/guide.log` and shown only if it fails.
struct GuideBuild {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl GuideBuild {
    fn start() -> Result<Self, String> {
        let dir = demo::target_dir().join("ci");
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let log = dir.join("guide.log");
        let file = std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .arg("guide")
            .stdout(file.try_clone().map_err(|e| e.to_string())?)
            .stderr(file)
            .spawn()
            .map_err(|e| format!("cannot start the guide's build: {e}"))?;
        Ok(Self { child, log })
    }

    fn finish(mut self) -> Result<(), String> {
        let status = self.child.wait().map_err(|e| e.to_string())?;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        if status.success() {
            eprintln!("xtask: {}", log.lines().last().unwrap_or("the guide built"));
            Ok(())
        } else {
            eprintln!("{log}");
            Err(format!("the guide did not build ({status}); its log: {}", self.log.display()))
        }
    }
}

/// The image, then every test: the Podman half of the sandbox suite and the exactly-once suite beside the rest.
fn ci_tests(allow_skips: bool) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    image::build(false)?;
    let extra = extra_engines();
    for (name, endpoint) in &extra {
        sync_image(name, endpoint)?;
    }
    // The CLI tests run the real binary, so build it first.
    run(Command::new(&cargo).args(["build", "-p", "berth", "--bin", "berth"]))?;
    // The hermes interop suite finds hermes-agent's venv through this variable; `.ci/run` sets it, and a venv at
    // the place `.ci/run` makes it counts too.
    let venv_python = demo::target_dir().join("ci/hermes-venv/bin/python");
    let hermes = |cmd: &mut Command| {
        if std::env::var_os("BERTH_HERMES_PYTHON").is_none() && venv_python.exists() {
            cmd.env("BERTH_HERMES_PYTHON", &venv_python);
        }
    };
    if extra.iter().all(|(name, _)| name != "podman") {
        let mut test = Command::new(&cargo);
        test.args(["test", "--workspace"]);
        hermes(&mut test);
        return test_and_count(&mut [&mut test], allow_skips);
    }
    // The Podman half of the sandbox suite shares no state with the rest (its own engine, its own profiles), so it
    // runs beside it rather than after it.
    run(Command::new(&cargo).args(["test", "--workspace", "--no-run"]))?;
    let mut rest = Command::new(&cargo);
    rest.args(["test", "--workspace", "--", "--skip", PODMAN_SUITE, "--skip", EXACTLY_ONCE_SUITE]);
    hermes(&mut rest);
    let mut podman = Command::new(&cargo);
    podman.args(["test", "-p", "tests", "--", PODMAN_SUITE]);
    // The multi-host suite drives three gateways and thousands of processes per test: one test at a time, beside
    // the rest (it shares no state with them: its own homes, databases and private server).
    let mut exactly_once = Command::new(&cargo);
    exactly_once.args(["test", "-p", "tests", "--", EXACTLY_ONCE_SUITE, "--test-threads=1"]);
    test_and_count(&mut [&mut rest, &mut podman, &mut exactly_once], allow_skips)
}

/// The exactly-once suite over every store (`tests/src/exactly_once.rs`).
const EXACTLY_ONCE_SUITE: &str = "exactly_once::";

/// The tests that run the sandbox suite on Podman (`tests/src/docker.rs`).
const PODMAN_SUITE: &str = "docker::on_podman::";

/// The engines besides Docker that `BERTH_TEST_ENGINES` (`name=endpoint,…`, set by `.ci/run`) names.
fn extra_engines() -> Vec<(String, String)> {
    std::env::var("BERTH_TEST_ENGINES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| {
            let (name, endpoint) = pair.trim().split_once('=')?;
            (name.trim() != "docker").then(|| (name.trim().to_owned(), endpoint.trim().to_owned()))
        })
        .collect()
}

/// Loads Docker's test image into another engine (`docker save | docker -H … load`) unless it already has the same
/// image id, so that engine always tests the image `image` just built.
fn sync_image(name: &str, endpoint: &str) -> Result<(), String> {
    let id = |host: Option<&str>| -> String {
        let mut cmd = Command::new("docker");
        if let Some(h) = host {
            cmd.args(["-H", h]);
        }
        cmd.args(["image", "inspect", "-f", "{{.Id}}", IMAGE])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    let want = id(None);
    if !want.is_empty() && id(Some(endpoint)) == want {
        eprintln!("xtask: {name} already has {IMAGE}");
        return Ok(());
    }
    eprintln!("xtask: loading {IMAGE} into {name} at {endpoint}");
    let mut save = Command::new("docker")
        .args(["save", IMAGE])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run docker save: {e}"))?;
    let stdin = save.stdout.take().expect("piped stdout");
    let loaded = Command::new("docker")
        .args(["-H", endpoint, "load", "-q"])
        .stdin(stdin)
        .status()
        .map_err(|e| format!("cannot run docker load: {e}"))?;
    let saved = save.wait().map_err(|e| e.to_string())?;
    if saved.success() && loaded.success() {
        Ok(())
    } else {
        Err(format!("loading {IMAGE} into {name} failed (save {saved}, load {loaded})"))
    }
}

/// Runs `cargo test` invocations side by side, echoing their output, and closes with one
/// `N passed, N failed, N skipped` line summing every test binary of every invocation, so the last line speaks for
/// the whole run rather than for the last (possibly empty) binary. A test that skips (`tests::support::skip`)
/// appends a line to the skip log this sets; libtest counts it as passed, so it is moved from passed to skipped.
/// A skipped test fails the run (each distinct reason on one line, naming how to get the prerequisite) unless
/// `allow_skips`.
fn test_and_count(cmds: &mut [&mut Command], allow_skips: bool) -> Result<(), String> {
    use std::io::{BufRead, BufReader, Write};
    let skip_log = demo::target_dir().join("berth-test-skips.log");
    std::fs::create_dir_all(demo::target_dir()).map_err(|e| e.to_string())?;
    std::fs::write(&skip_log, "").map_err(|e| format!("cannot reset {}: {e}", skip_log.display()))?;
    let mut children = Vec::new();
    for cmd in cmds.iter_mut() {
        cmd.env("BERTH_TEST_SKIP_LOG", &skip_log);
        let mut child =
            cmd.stdout(std::process::Stdio::piped()).spawn().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let reader = std::thread::spawn(move || -> (u64, u64) {
            let (mut passed, mut failed) = (0u64, 0u64);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = writeln!(std::io::stdout().lock(), "{line}");
                let (p, f) = result_counts(&line);
                passed += p;
                failed += f;
            }
            (passed, failed)
        });
        children.push((format!("{cmd:?}"), child, reader));
    }
    let (mut passed, mut failed, mut errors) = (0u64, 0u64, Vec::new());
    for (name, mut child, reader) in children {
        let (p, f) = reader.join().unwrap_or((0, 0));
        passed += p;
        failed += f;
        let status = child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            errors.push(format!("{name} failed with {status}"));
        }
    }
    let log = std::fs::read_to_string(&skip_log).unwrap_or_default();
    let skips = skipped_tests(&log);
    for reason in skips.values().collect::<std::collections::BTreeSet<_>>() {
        let n = skips.values().filter(|r| *r == reason).count();
        println!("skipped {n}: {reason}");
    }
    let skipped = skips.len() as u64;
    println!("{} passed, {failed} failed, {skipped} skipped", passed.saturating_sub(skipped));
    if skipped > 0 && !allow_skips {
        errors.push(format!(
            "{skipped} tests skipped for a missing prerequisite (each named above with how to get it; \
             `bash .ci/run` sets them all up; `cargo xtask ci --allow-skips` accepts the skips)"
        ));
    }
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// The passed and failed counts of one libtest `test result:` line (zeros for any other line).
fn result_counts(line: &str) -> (u64, u64) {
    let Some(rest) = line.strip_prefix("test result: ") else { return (0, 0) };
    let count = |word: &str| -> u64 {
        rest.split(';')
            .find_map(|part| part.trim().strip_suffix(word)?.trim().rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    (count("passed"), count("failed"))
}

/// The skip log's tests, each once (a test may skip through several helpers), with its first reason.
fn skipped_tests(log: &str) -> std::collections::BTreeMap<&str, &str> {
    let mut tests = std::collections::BTreeMap::new();
    for (test, reason) in log.lines().filter_map(|l| l.split_once('\t')) {
        tests.entry(test).or_insert(reason);
    }
    tests
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_line_counts_passed_and_failed() {
        let line = "test result: FAILED. 170 passed; 3 failed; 2 ignored; 0 measured; 0 filtered out; finished in 1s";
        assert_eq!(result_counts(line), (170, 3));
        assert_eq!(result_counts("test a::b ... ok"), (0, 0));
    }

    #[test]
    fn each_skipped_test_counts_once_with_its_first_reason() {
        let log = "pg::a\tno server\npg::a\tno server again\ndocker::on_podman::b\tno podman\n";
        let skips = skipped_tests(log);
        assert_eq!(skips.len(), 2);
        assert_eq!(skips["pg::a"], "no server");
    }
}
