//! `cargo xtask image`: builds the local sandbox image from the host's own programs, with no registry.
//!
//! hermes-agent runs every command as `bash -c …` (after a `bash -l` snapshot), and agents call the everyday tools,
//! so the image carries bash, coreutils, grep/sed/awk, find, tar, git (with its libexec helpers and templates) and,
//! when the host has one, Debian's python3 with its standard library. Each file lands at its host path (the host's
//! merged-`/usr` symlinks are mirrored), hard links stay hard links (git's builtins are one file), and every ELF
//! file brings the shared libraries `ldd` names (and those of a Rust binary built here, so berth itself runs in it: the
//! egress proxy).
//!
//! The root filesystem becomes one tar written with sorted names, a fixed mtime and numeric root ownership, so the
//! same host gives the same bytes. Its sha256 is stored on the image as the `berth.image.content` label: an image
//! whose label differs (older recipe, host tools upgraded, or an image from before the label) is rebuilt, an equal
//! one is kept. `--force` rebuilds regardless.

use std::collections::{BTreeSet, HashMap};
use std::io::{IsTerminal, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The image berth's tests, demo and default settings use; `BERTH_SANDBOX_IMAGE` overrides the tag, so a new recipe
/// can be tried without replacing the image other work depends on.
pub const DEFAULT_TAG: &str = "berth-sandbox:latest";

/// Bumped when the recipe changes in a way the tar's bytes do not show (the `docker import` changes below).
const RECIPE: &str = "3";

/// The label carrying the content digest.
const CONTENT_LABEL: &str = "berth.image.content";

/// Programs the image must have: the build fails without them (berth's own tests and hermes rely on them).
const REQUIRED: &[&str] =
    &["sh", "bash", "sleep", "cat", "echo", "kill", "ps", "grep", "env", "id", "timeout", "ls", "mkdir", "rm", "true"];

/// Everyday tools an agent calls; copied when the host has them.
const EVERYDAY: &[&str] = &[
    "dash",
    "false",
    "touch",
    "head",
    "tail",
    "wc",
    "date",
    "uname",
    "printf",
    "pwd",
    "test",
    "[",
    "seq",
    "tr",
    "cut",
    "sort",
    "uniq",
    "stat",
    "yes",
    "basename",
    "dirname",
    "chmod",
    "chown",
    "chgrp",
    "cp",
    "mv",
    "ln",
    "dd",
    "df",
    "du",
    "expr",
    "install",
    "mktemp",
    "nproc",
    "readlink",
    "realpath",
    "rmdir",
    "tee",
    "comm",
    "paste",
    "join",
    "fold",
    "nl",
    "od",
    "base64",
    "tac",
    "truncate",
    "sync",
    "printenv",
    "nohup",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "split",
    "whoami",
    "sed",
    "awk",
    "egrep",
    "fgrep",
    "find",
    "xargs",
    "tar",
    "gzip",
    "gunzip",
    "zcat",
    "diff",
    "cmp",
    "patch",
    "which",
    "less",
    "hostname",
    "pgrep",
    "pkill",
    "free",
    "curl",
    "git",
    "python3",
    "tty",
    "stty",
    "make",
    "vi",
    "vim",
    "file",
];

/// Where programs are looked up: the system directories only, not `PATH` (shims such as pyenv's are shell scripts
/// around another installation, and a developer's `PATH` must not change the image).
const SYSTEM_DIRS: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"];

/// Files left out of copied trees: bytecode caches (rebuilt on demand), the test suite, Tk and the static library.
fn skipped(name: &str) -> bool {
    matches!(name, "__pycache__" | "test" | "idlelib" | "tkinter" | "turtledemo" | "ensurepip")
        || name.starts_with("config-3.")
}

/// Progress on stderr: one rewritten line on a terminal, plain lines otherwise.
struct Progress {
    tty: bool,
}

impl Progress {
    /// A step under way: on a terminal one line rewritten in place; nothing otherwise (logs keep the outcomes).
    fn step(&self, msg: &str) {
        if self.tty {
            eprint!("\r\x1b[Kxtask: {msg}");
            let _ = std::io::stderr().flush();
        }
    }
    /// A fine-grained step (one per program): shown on a terminal only, where it overwrites itself.
    fn tick(&self, msg: &str) {
        if self.tty {
            self.step(msg);
        }
    }
    fn done(&self, msg: &str) {
        if self.tty {
            eprintln!("\r\x1b[Kxtask: {msg}");
        } else {
            eprintln!("xtask: {msg}");
        }
    }
}

/// The root filesystem being assembled.
struct Rootfs {
    root: PathBuf,
    /// (device, inode) of host files already copied → their path in the root, so hard links stay links.
    inodes: HashMap<(u64, u64), PathBuf>,
    /// ELF files whose libraries still need resolving.
    elves: BTreeSet<PathBuf>,
    resolved: BTreeSet<PathBuf>,
    files: usize,
}

fn err(ctx: &str, e: impl std::fmt::Display) -> String {
    format!("{ctx}: {e}")
}

fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == *b"\x7fELF"
}

impl Rootfs {
    fn new(root: PathBuf) -> Result<Self, String> {
        std::fs::create_dir_all(&root).map_err(|e| err("create rootfs", e))?;
        // Mirror the host's top-level symlinks (merged /usr: /bin → usr/bin, …) so paths ldd and scripts name
        // resolve inside the image exactly as on the host.
        for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
            let host = Path::new("/").join(top);
            if let Ok(target) = std::fs::read_link(&host) {
                std::os::unix::fs::symlink(&target, root.join(top)).map_err(|e| err("symlink", e))?;
            }
        }
        for dir in ["usr/bin", "usr/local/bin", "bin", "root", "workspace", "etc", "run", "home", "proc", "sys", "dev"]
        {
            std::fs::create_dir_all(root.join(dir)).map_err(|e| err("mkdir", e))?;
        }
        for dir in ["tmp", "var/tmp"] {
            let path = root.join(dir);
            std::fs::create_dir_all(&path).map_err(|e| err("mkdir", e))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o1777)).map_err(|e| err("chmod", e))?;
        }
        Ok(Self { root, inodes: HashMap::new(), elves: BTreeSet::new(), resolved: BTreeSet::new(), files: 0 })
    }

    fn inside(&self, host: &Path) -> PathBuf {
        self.root.join(host.strip_prefix("/").unwrap_or(host))
    }

    /// Copies one host path into the root at the same place: a symlink anywhere on the way is recreated and its
    /// target copied too; a regular file is copied (or hard-linked to an earlier copy of the same inode).
    fn add(&mut self, host: &Path) -> Result<(), String> {
        let dest = self.inside(host);
        if dest.symlink_metadata().is_ok() {
            return Ok(());
        }
        // Resolve the parent first, so a symlinked directory on the way exists in the root as on the host.
        let parent = host.parent().unwrap_or(Path::new("/"));
        let real_parent = std::fs::canonicalize(parent).map_err(|e| err(&parent.display().to_string(), e))?;
        if real_parent != parent {
            let host = real_parent.join(host.file_name().unwrap_or_default());
            self.add(&host)?;
            return Ok(());
        }
        let meta = host.symlink_metadata().map_err(|e| err(&host.display().to_string(), e))?;
        std::fs::create_dir_all(dest.parent().expect("absolute path has a parent")).map_err(|e| err("mkdir", e))?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(host).map_err(|e| err("readlink", e))?;
            std::os::unix::fs::symlink(&target, &dest).map_err(|e| err("symlink", e))?;
            let absolute = if target.is_absolute() { target } else { parent.join(target) };
            return self.add(&absolute);
        }
        if meta.is_dir() {
            std::fs::create_dir_all(&dest).map_err(|e| err("mkdir", e))?;
            return Ok(());
        }
        if let Some(first) = self.inodes.get(&(meta.dev(), meta.ino())) {
            std::fs::hard_link(first, &dest).map_err(|e| err("link", e))?;
            return Ok(());
        }
        std::fs::copy(host, &dest).map_err(|e| err(&format!("copy {}", host.display()), e))?;
        self.inodes.insert((meta.dev(), meta.ino()), dest);
        self.files += 1;
        if is_elf(host) {
            self.elves.insert(host.to_path_buf());
        }
        Ok(())
    }

    /// Copies a whole host directory tree (minus `skipped` names).
    fn add_tree(&mut self, host: &Path) -> Result<(), String> {
        let mut entries: Vec<_> = std::fs::read_dir(host)
            .map_err(|e| err(&host.display().to_string(), e))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        entries.sort();
        self.add(host)?;
        for entry in entries {
            if entry.file_name().and_then(|n| n.to_str()).is_some_and(skipped) {
                continue;
            }
            let meta = entry.symlink_metadata().map_err(|e| err("stat", e))?;
            if meta.is_dir() { self.add_tree(&entry)? } else { self.add(&entry)? }
        }
        Ok(())
    }

    /// Copies the shared libraries of every ELF file added so far (and of those libraries in turn).
    fn add_libraries(&mut self) -> Result<(), String> {
        while let Some(elf) = self.elves.pop_first() {
            if !self.resolved.insert(elf.clone()) {
                continue;
            }
            let Ok(out) = Command::new("ldd").arg(&elf).output() else { continue };
            for lib in String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
            {
                self.add(Path::new(lib))?;
            }
        }
        Ok(())
    }
}

fn find_program(name: &str) -> Option<PathBuf> {
    SYSTEM_DIRS.iter().map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

fn output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Assembles the root filesystem under `ctx/rootfs`.
fn assemble(ctx: &Path, progress: &Progress) -> Result<(), String> {
    let mut fs = Rootfs::new(ctx.join("rootfs"))?;
    let mut missing = Vec::new();
    for (i, name) in REQUIRED.iter().chain(EVERYDAY).enumerate() {
        progress.tick(&format!("[1/4] programs {}/{}: {name}", i + 1, REQUIRED.len() + EVERYDAY.len()));
        match find_program(name) {
            Some(path) => fs.add(&path)?,
            None if REQUIRED.contains(name) => return Err(format!("{name} not found on the host")),
            None => missing.push(*name),
        }
    }
    // git finds its helpers (`git-remote-https`, …) and `git init`'s templates by compiled-in paths.
    if let Some(git) = find_program("git") {
        let exec_path = PathBuf::from(output(Command::new(&git).arg("--exec-path"))?);
        progress.step(&format!("[2/4] git helpers from {}", exec_path.display()));
        fs.add_tree(&exec_path)?;
        let share = exec_path.parent().and_then(Path::parent).map(|p| p.join("share/git-core"));
        if let Some(share) = share.filter(|p| p.is_dir()) {
            fs.add_tree(&share)?;
        }
    }
    // Debian's python3 finds its standard library next to the executable (`<prefix>/lib/python3.X`).
    if let Some(python) = find_program("python3") {
        let stdlib =
            output(Command::new(&python).args(["-S", "-c", "import os; print(os.path.dirname(os.__file__))"]))?;
        progress.step(&format!("[2/4] python standard library from {stdlib}"));
        fs.add_tree(Path::new(&stdlib))?;
    }
    if Path::new("/etc/ssl/certs/ca-certificates.crt").is_file() {
        fs.add(Path::new("/etc/ssl/certs/ca-certificates.crt"))?;
    }
    add_tool_data(&mut fs, progress)?;
    progress.step("[3/4] shared libraries");
    // The libraries a Rust program built here needs (libgcc_s among them), so berth's own binary runs in the image:
    // it is the egress proxy of `terminal.docker_egress` allowlists. xtask is built by the same toolchain.
    if let Ok(exe) = std::env::current_exe() {
        fs.elves.insert(exe);
    }
    fs.add_libraries()?;
    let etc = fs.root.join("etc");
    let write = |name: &str, text: &str| std::fs::write(etc.join(name), text).map_err(|e| err(name, e));
    write("passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")?;
    write("group", "root:x:0:\nnogroup:x:65534:\n")?;
    // `bash -l` (hermes's session snapshot) reads /etc/profile; keep PATH sane for a login shell.
    write("profile", &format!("export PATH={PATH}\n"))?;
    if !missing.is_empty() {
        progress.done(&format!("not on this host, left out: {}", missing.join(" ")));
    }
    progress.done(&format!("[3/4] root filesystem: {} files", fs.files));
    Ok(())
}

/// The data files `file`, `vim` and `pip3` need beside their programs, when the host has them: `file`'s magic
/// database, vim's `defaults.vim` (without it vim starts with an error), and Debian's pip package with a `pip3`
/// script that runs it on the image's python3.
fn add_tool_data(fs: &mut Rootfs, progress: &Progress) -> Result<(), String> {
    for data in ["/usr/lib/file/magic.mgc", "/usr/share/misc/magic.mgc", "/usr/share/file/magic.mgc"] {
        if Path::new(data).exists() {
            fs.add(Path::new(data))?;
        }
    }
    let vim_runtimes = std::fs::read_dir("/usr/share/vim").into_iter().flatten().flatten().map(|e| e.path());
    for defaults in vim_runtimes.map(|d| d.join("defaults.vim")).filter(|d| d.is_file()) {
        fs.add(&defaults)?;
    }
    let pip = Path::new("/usr/lib/python3/dist-packages/pip");
    if find_program("python3").is_some() && pip.is_dir() {
        progress.step(&format!("[2/4] pip from {}", pip.display()));
        fs.add_tree(pip)?;
        let script = fs.root.join("usr/local/bin/pip3");
        std::fs::write(&script, "#!/bin/sh\nexec python3 -m pip \"$@\"\n").map_err(|e| err("pip3", e))?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).map_err(|e| err("pip3", e))?;
    }
    Ok(())
}

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn current_label(tag: &str) -> Option<String> {
    let format = format!("{{{{index .Config.Labels \"{CONTENT_LABEL}\"}}}}");
    output(Command::new("docker").args(["image", "inspect", "--format", &format, tag])).ok()
}

/// Builds the image unless an image with the same content label exists (`force` rebuilds regardless).
pub fn build(force: bool) -> Result<(), String> {
    let tag = std::env::var("BERTH_SANDBOX_IMAGE").unwrap_or_else(|_| DEFAULT_TAG.to_owned());
    let progress = Progress { tty: std::io::stderr().is_terminal() };
    let ctx = std::env::temp_dir().join(format!("berth-image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ctx);
    let res = build_in(&ctx, &tag, force, &progress);
    let _ = std::fs::remove_dir_all(&ctx);
    res
}

fn build_in(ctx: &Path, tag: &str, force: bool, progress: &Progress) -> Result<(), String> {
    assemble(ctx, progress)?;
    let tar = ctx.join("rootfs.tar");
    progress.step("[4/4] packing");
    output(
        Command::new("tar")
            .args(["--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner", "--format=gnu"])
            .arg("-C")
            .arg(ctx.join("rootfs"))
            .arg("-cf")
            .arg(&tar)
            .arg("."),
    )?;
    let sum = output(Command::new("sha256sum").arg(&tar))?;
    let digest = format!("{}-r{RECIPE}", &sum[..16.min(sum.len())]);
    let current = current_label(tag);
    if !force && current.as_deref() == Some(digest.as_str()) {
        progress.done(&format!("image {tag} is up to date ({CONTENT_LABEL}={digest})"));
        return Ok(());
    }
    let why = match current.as_deref() {
        _ if force => "--force".to_owned(),
        None => "absent".to_owned(),
        Some("" | "<no value>") => "built by an older recipe".to_owned(),
        Some(old) => format!("content changed ({old})"),
    };
    let size = std::fs::metadata(&tar).map(|m| m.len() / (1 << 20)).unwrap_or(0);
    progress.step(&format!("[4/4] importing {size} MiB as {tag} ({why})"));
    output(
        Command::new("docker")
            .arg("import")
            .args(["--change", &format!("ENV PATH={PATH}")])
            .args(["--change", "CMD [\"sleep\", \"infinity\"]"])
            .args(["--change", "LABEL org.opencontainers.image.title=berth-sandbox"])
            .args(["--change", &format!("LABEL {CONTENT_LABEL}={digest}")])
            .arg(&tar)
            .arg(tag),
    )?;
    progress.done(&format!("built {tag} ({size} MiB, {CONTENT_LABEL}={digest}, {why})"));
    Ok(())
}
