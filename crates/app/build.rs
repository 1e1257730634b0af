//! Embeds the git commit berth is built from as `BERTH_COMMIT` (`berth --version` names it): the short hash of
//! `HEAD`, or `unknown` when the sources are not a git checkout (a source archive) or git is missing. Rebuilt when
//! `HEAD` moves: the build reruns when the HEAD file or the ref it names changes. Also links the binary at a fixed
//! address (below).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=BERTH_COMMIT");
    let commit = std::env::var("BERTH_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BERTH_COMMIT={commit}");
    // The binary is linked at a fixed address (not position-independent): the loader then applies none of its
    // ~18 000 relative relocations, so every start costs a quarter fewer page faults and a tenth less CPU
    // (`perf stat berth --version`: 322 → 241 faults). A drain starts a berth per task (its worker) and another per
    // completion, so process start is most of its CPU (BENCHMARKS.md). Shared libraries stay where the loader puts
    // them; only the executable's own address is fixed, so its code loses address randomization (a trade for a
    // program in safe Rust; full RELRO stays: its symbol table is still read-only once loaded). Lazy symbol binding
    // would save another tenth of a start and is not taken: it leaves that table writable.
    println!("cargo:rustc-link-arg-bins=-no-pie");
    // HEAD (in a worktree its own), the branch ref it names, and packed refs (where a ref may live instead); only
    // files that exist, since cargo reruns a build script on every build while a watched path is missing.
    let watch = |path: String| {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    };
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        watch(format!("{git_dir}/HEAD"));
        let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]).unwrap_or(git_dir);
        watch(format!("{common}/packed-refs"));
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch(format!("{common}/{head_ref}"));
        }
    }
}
