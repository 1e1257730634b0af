//! Embeds the git commit berth is built from as `BERTH_COMMIT` (`berth --version` names it): the short hash of
//! `HEAD`, or `unknown` when the sources are not a git checkout (a source archive) or git is missing. Rebuilt when
//! `HEAD` moves: the build reruns when the HEAD file or the ref it names changes.

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
