//! What a sandbox may mount from the host: never berth's home or other sandboxes' folders, and never another berth
//! home, the engine's socket, the kernel's own filesystems (`/proc`, `/sys`, `/dev`, the cgroup tree), or a folder
//! holding any of them unless the operator opts in (`terminal.docker_allow_host_access`, or its older name
//! `terminal.docker_allow_host_mounts`).
//!
//! A sandbox that could write `<home>/config.yaml` or `kanban.db` could give the next task the Docker socket (root on
//! the host), so every host path that reaches a create call is checked here, canonicalized (symlinks, `..`, trailing
//! slashes): a mount of a parent of a protected path exposes it too. Another home on the machine (any folder
//! [`scan::kind_of`] recognises, and another home's sandboxes folder) is as much a way to the host as this one, and a hard link of the engine's socket can
//! sit anywhere: a folder to be mounted is walked for both ([`scan`]).

mod scan;

use std::path::{Component, Path, PathBuf};

pub use scan::{mark_home, mark_sandboxes};

use domain::sandbox::{
    Bind, CreateSpec, MountSource, SandboxIdentity, blank_spec, check_extra_args, host_access, mount_sources,
};

use crate::edge::context::Ctx;
use crate::edge::error::Failure;
use crate::edge::open::extra_args_parser;

/// The setting that lets what reaches the host through (the engine socket, a kernel filesystem, a capability beyond
/// the sandbox's namespaces, …); `terminal.docker_allow_host_mounts` is its older name.
pub const ALLOW_KEY: &str = "terminal.docker_allow_host_access";

/// The host's kernel interfaces by path: processes, the kernel's objects and cgroups, devices (whatever filesystem
/// the host has there: a tmpfs `/dev` or a cgroup v1 tmpfs holds the same).
const KERNEL_PATHS: &[(&str, &str)] = &[("/proc", "proc"), ("/sys", "sysfs"), ("/dev", "device")];

/// The host's own system folders, what in each reaches the host: refused with what is inside them and what holds
/// them, unless the operator opts in.
const SYSTEM_PATHS: &[(&str, &str)] = &[
    ("/etc", "the host's configuration (its users and passwords, sudoers, services, cron)"),
    ("/boot", "the host's kernels and boot loader"),
    ("/lib/modules", "the host's kernel modules"),
    ("/var/log", "the host's logs"),
];

/// The paths a sandbox must not reach, canonicalized once.
#[derive(Clone, Debug)]
pub struct Protected {
    /// Berth's home and the sandboxes folder: refused always (their parents too).
    roots: Vec<PathBuf>,
    /// The engine sockets: refused unless `allow_sockets`, and their file ids (a hard link anywhere is one).
    sockets: Vec<PathBuf>,
    socket_ids: Vec<scan::FileId>,
    /// The engines' own folders: refused unless `allow_sockets`, with what is inside them.
    engine_dirs: Vec<PathBuf>,
    /// The host's system folders ([`SYSTEM_PATHS`], canonical): refused unless `allow_sockets`, with what is inside
    /// them and what holds them.
    system: Vec<(PathBuf, &'static str)>,
    allow_sockets: bool,
    /// The sandbox's own folder (under `terminal.sandbox_dir`), which berth itself mounts.
    own: Option<PathBuf>,
}

/// Resolves `p` like the engine will: symlinks of the part that exists, then `..` and `.` of the rest, lexically.
pub fn canonical(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(&existing) {
            let mut out = c;
            for part in rest.iter().rev() {
                match Path::new(part).components().next() {
                    Some(Component::ParentDir) => {
                        out.pop();
                    }
                    Some(Component::CurDir) | None => {}
                    _ => out.push(part),
                }
            }
            return out;
        }
        match (existing.file_name().map(ToOwned::to_owned), existing.parent().map(Path::to_path_buf)) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent;
            }
            // `..` as the last component, or nothing left: normalize lexically.
            _ => return lexical(p),
        }
    }
}

fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The engine sockets this host may have: the usual Docker and Podman paths, `DOCKER_HOST`'s unix path, and the
/// runtimes below an engine (containerd, CRI-O, BuildKit), each of which starts containers as root too.
fn socket_paths(ctx: &Ctx) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = [
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/podman/podman.sock",
        "/run/containerd/containerd.sock",
        "/run/docker/containerd/containerd.sock",
        "/run/crio/crio.sock",
        "/run/buildkit/buildkitd.sock",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Some(rest) = ctx.env.get("DOCKER_HOST").and_then(|h| h.strip_prefix("unix://")) {
        paths.push(PathBuf::from(rest));
    }
    if let Some(xdg) = ctx.env.get("XDG_RUNTIME_DIR").filter(|x| x.starts_with('/')) {
        paths.push(Path::new(xdg).join("docker.sock"));
        paths.push(Path::new(xdg).join("podman").join("podman.sock"));
    }
    paths.iter().map(|p| canonical(p)).collect()
}

/// The engines' own folders: their containers' files and configuration (another sandbox's, a stopped container's
/// settings to rewrite) and their runtime sockets (containerd's shims). Rootless engines keep theirs in the user's
/// home.
fn engine_dirs(ctx: &Ctx) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "/var/lib/docker",
        "/var/lib/containerd",
        "/var/lib/containers",
        "/run/docker",
        "/run/containerd",
        "/run/crio",
        "/run/buildkit",
        "/run/containers",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Some(home) = ctx.env.get("HOME").filter(|h| h.starts_with('/')) {
        dirs.push(Path::new(home).join(".local/share/docker"));
        dirs.push(Path::new(home).join(".local/share/containers"));
    }
    dirs.iter().map(|p| canonical(p)).collect()
}

/// [`SYSTEM_PATHS`] as the engine will resolve them (`/lib/modules` is `/usr/lib/modules` on a merged `/usr`).
fn system_paths() -> Vec<(PathBuf, &'static str)> {
    SYSTEM_PATHS.iter().map(|(p, what)| (canonical(Path::new(p)), *what)).collect()
}

impl Protected {
    /// The protected paths of this invocation; `own` is the sandbox's own folder when a sandbox is being made.
    pub fn new(ctx: &Ctx, own: Option<&SandboxIdentity>) -> Self {
        let mut roots = vec![canonical(&ctx.home)];
        let dir = ctx.settings.terminal.sandbox_dir.clone();
        if dir.starts_with('/') {
            roots.push(canonical(Path::new(&dir)));
        }
        let sockets = socket_paths(ctx);
        Self {
            roots,
            socket_ids: scan::file_ids(&sockets),
            sockets,
            engine_dirs: engine_dirs(ctx),
            system: system_paths(),
            allow_sockets: ctx.settings.allows_host_access(),
            own: own.filter(|_| dir.starts_with('/')).map(|i| canonical(Path::new(&i.host_dir(&dir)))),
        }
    }

    /// Why mounting host path `source` is refused, if it is.
    pub fn violation(&self, source: &str) -> Option<String> {
        self.violation_as(source, source)
    }

    /// Why mounting host path `source`, named `shown` in the refusal, is refused, if it is.
    fn violation_as(&self, shown: &str, source: &str) -> Option<String> {
        // Not an absolute path: a named volume, which holds nothing of the host's.
        if !source.starts_with('/') {
            return None;
        }
        let src = canonical(Path::new(source));
        if self.own.as_ref().is_some_and(|own| src.starts_with(own)) {
            return None;
        }
        for root in &self.roots {
            if root.starts_with(&src) || src.starts_with(root) {
                return Some(format!(
                    "refusing to mount {shown} into a sandbox: it exposes berth's own files ({}); nothing under \
                     berth's home or the sandboxes folder is ever mounted",
                    root.display()
                ));
            }
        }
        if self.allow_sockets {
            return None;
        }
        let refuse = |why: String| {
            Some(format!("refusing to mount {shown} into a sandbox: {why}; set {ALLOW_KEY}=true to allow it"))
        };
        if let Some(sock) = self.sockets.iter().find(|s| s.starts_with(&src) || same_file(s, &src)) {
            let sock = sock.display();
            return refuse(format!("it exposes the container engine's socket ({sock}), which is root on the host"));
        }
        if let Some((path, fs)) = KERNEL_PATHS.iter().find(|(k, _)| src.starts_with(k)) {
            return refuse(format!(
                "it is on the host's {fs} filesystem ({path}), the kernel's own: a way to the host's processes, \
                 cgroups and devices"
            ));
        }
        if let Some(dir) = self.engine_dirs.iter().find(|d| d.starts_with(&src) || src.starts_with(d)) {
            let dir = dir.display();
            return refuse(format!(
                "it exposes the container engine's own files ({dir}: containers, their settings, runtime sockets), \
                 which is root on the host"
            ));
        }
        if let Some((dir, what)) = self.system.iter().find(|(d, _)| d.starts_with(&src) || src.starts_with(d)) {
            return refuse(format!("it exposes {what} ({})", dir.display()));
        }
        if let Some((other, kind)) = scan::berth_dir_around(&src) {
            let (what, exposes) = kind.words();
            return refuse(format!("it is inside {what} ({}), {exposes}", other.display()));
        }
        refuse(match scan::scan(&src, &self.socket_ids)? {
            scan::Found::Socket(at) => format!(
                "{} inside it is the container engine's socket (a hard link of it), which is root on the host",
                at.display()
            ),
            scan::Found::Berth(at, kind) => {
                let (what, exposes) = kind.words();
                format!("it holds {what} ({}), {exposes}", at.display())
            }
            scan::Found::Kernel(at, fs) => format!(
                "{} is on the host's {fs} filesystem, the kernel's own, a way to the host's processes and files",
                at.display()
            ),
            scan::Found::Unchecked(why) => format!(
                "{why}, so it could not be checked for the container engine's socket or a berth home (mount a smaller \
                 folder)"
            ),
        })
    }
}

/// Whether `a` and `b` are one file (same device and inode): a hard link of the engine's socket elsewhere is the
/// engine's socket all the same.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Why mounting `m` is refused, if it is. A source that is not an absolute path is a volume's name to the engine,
/// unless it looks like a path (`./x`, `../x`, `~/x`, `a/b`) or is a `--mount type=bind`: a relative host path would
/// be resolved against whatever directory the engine or a docker client happens to use, so it is refused rather than
/// guessed at.
fn mount_violation(protected: &Protected, m: MountSource<'_>) -> Option<String> {
    let s = m.source;
    if s.starts_with('/') {
        return protected.violation(s);
    }
    let looks_like_path = m.bind || s.is_empty() || s.starts_with('.') || s.starts_with('~') || s.contains('/');
    looks_like_path.then(|| {
        format!("refusing to mount {s:?} into a sandbox: a host path must be absolute (a volume name has no slash)")
    })
}

/// The one mount check: why `spec` may not be created, if it may not. It reads every source the spec hands the
/// engine ([`mount_sources`]: binds from the settings and every `-v`/`--volume`/`--mount` the extra arguments
/// made, in whatever spelling), so nothing reaches the engine that this did not see.
fn spec_violation(protected: &Protected, spec: &CreateSpec) -> Option<String> {
    mount_sources(spec)
        .into_iter()
        .find_map(|m| mount_violation(protected, m))
        .or_else(|| host_access_violation(protected.allow_sockets, spec))
}

/// What reaches the host past any mount (`domain::sandbox::host_access`: `--privileged`, capabilities beyond the
/// engine's default set, a confinement switched off, a host device, a namespace shared with the host), refused
/// without the same opt-in as the engine's socket.
fn host_access_violation(allowed: bool, spec: &CreateSpec) -> Option<String> {
    if allowed {
        return None;
    }
    host_access(spec).map(|why| format!("refusing to create the sandbox: {why}; set {ALLOW_KEY}=true to allow it"))
}

/// Checks the sandboxes folder setting: an absolute path that is not `/` and does not hold berth's home.
pub fn check_sandbox_dir(home: &Path, dir: &str) -> Result<(), String> {
    if dir.trim().is_empty() || !dir.starts_with('/') {
        return Err(format!(
            "terminal.sandbox_dir must be an absolute path, got {dir:?} (an empty one would put sandbox folders at \
             /docker on the host)"
        ));
    }
    let (c, home) = (canonical(Path::new(dir)), canonical(home));
    if c == Path::new("/") || home.starts_with(&c) {
        return Err(format!("terminal.sandbox_dir {dir:?} holds berth's home; every sandbox would be given it"));
    }
    // Below this home (its `sandboxes/`) is this home's, and so is a sandboxes folder whose marker names it; inside
    // another home or another home's sandboxes folder, its sandboxes would share that home's files.
    if let Some((other, kind)) = scan::berth_dir_around(&c).filter(|(at, kind)| match kind {
        scan::Kind::Home => !at.starts_with(&home),
        scan::Kind::Sandboxes => scan::sandboxes_owner(at).is_some_and(|owner| owner != home),
    }) {
        let what = match kind {
            scan::Kind::Home => "another berth home",
            scan::Kind::Sandboxes => "another home's sandboxes folder",
        };
        return Err(format!(
            "terminal.sandbox_dir {dir:?} is inside {what} ({}); its sandboxes would share that home's files",
            other.display()
        ));
    }
    Ok(())
}

/// `config set`: refuses a value that would mount something protected (the file is not touched). The value is
/// turned into a spec by the same code a create uses, and that spec goes through the same check.
///
/// # Errors
/// A usage failure naming the offending path.
pub fn check_setting(ctx: &Ctx, key: &str, value: &config_bridge::Value) -> Result<(), Failure> {
    let spec = match (key, value) {
        ("terminal.docker_volumes", config_bridge::Value::List(l)) => {
            // As the spec builder takes them: an entry without a `:` is skipped there (with a warning).
            CreateSpec { binds: l.iter().filter(|v| v.contains(':')).map(|v| Bind::parse(v)).collect(), ..blank_spec() }
        }
        ("terminal.docker_extra_args", config_bridge::Value::List(l)) => {
            check_extra_args(extra_args_parser(), l).map_err(Failure::usage_of)?
        }
        ("terminal.sandbox_dir", config_bridge::Value::Str(s)) => {
            return check_sandbox_dir(&ctx.home, s).map_err(Failure::usage);
        }
        _ => return Ok(()),
    };
    spec_violation(&Protected::new(ctx, None), &spec).map_or(Ok(()), |why| Err(Failure::usage(why)))
}

/// Sandbox create, the named volumes: one that binds a host folder (a `local` volume made with `o=bind,device=…`)
/// is checked like a bind of that folder, since that folder is what the sandbox gets.
///
/// # Errors
/// A usage failure naming the volume and its folder; a failure when the engine cannot say what a volume holds.
pub async fn check_volumes(
    ctx: &Ctx,
    rt: &dyn domain::ports::Engine,
    identity: &SandboxIdentity,
    spec: &CreateSpec,
) -> Result<(), Failure> {
    let mut names: Vec<&str> =
        mount_sources(spec).into_iter().filter(|m| !m.bind && !m.source.starts_with('/')).map(|m| m.source).collect();
    names.sort_unstable();
    names.dedup();
    let protected = Protected::new(ctx, Some(identity));
    for name in names.into_iter().filter(|n| !n.is_empty()) {
        let path = rt
            .volume_host_path(name)
            .await
            .map_err(|e| Failure::other(format!("cannot check what volume {name} mounts into the sandbox: {e}")))?;
        if let Some(why) = path.and_then(|p| protected.violation_as(&format!("volume {name} (host folder {p})"), &p)) {
            return Err(Failure::usage(why));
        }
    }
    Ok(())
}

/// Sandbox create: refuses a spec that mounts anything protected, however the mount was asked for.
///
/// # Errors
/// A usage failure naming the offending path.
pub fn check_spec(ctx: &Ctx, identity: &SandboxIdentity, spec: &CreateSpec) -> Result<(), Failure> {
    check_sandbox_dir(&ctx.home, &ctx.settings.terminal.sandbox_dir).map_err(Failure::usage)?;
    spec_violation(&Protected::new(ctx, Some(identity)), spec).map_or(Ok(()), |why| Err(Failure::usage(why)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protected(dir: &Path) -> Protected {
        let home = dir.join("home");
        std::fs::create_dir_all(home.join("sandboxes/docker/p/t-0123/workspace")).unwrap();
        std::fs::create_dir_all(dir.join("run")).unwrap();
        // A real socket: the walk of a folder looks at sockets only.
        drop(std::os::unix::net::UnixListener::bind(dir.join("run/docker.sock")).unwrap());
        Protected {
            roots: vec![canonical(&home), canonical(&home.join("sandboxes"))],
            sockets: vec![canonical(&dir.join("run/docker.sock"))],
            socket_ids: scan::file_ids(&[dir.join("run/docker.sock")]),
            engine_dirs: vec![canonical(&dir.join("engine-state"))],
            system: system_paths(),
            allow_sockets: false,
            own: Some(canonical(&home.join("sandboxes/docker/p/t-0123"))),
        }
    }

    #[test]
    fn home_its_parents_and_its_files_are_refused_in_every_spelling() {
        let tmp = tempfile_dir();
        let p = protected(&tmp);
        let home = tmp.join("home").display().to_string();
        std::os::unix::fs::symlink(tmp.join("home"), tmp.join("link")).unwrap();
        for s in [
            home.clone(),
            format!("{home}/"),
            format!("{home}/config.yaml"),
            format!("{home}/kanban.db"),
            format!("{home}/./kanban/../"),
            format!("{home}/sandboxes/docker/p/t-0123/../other"),
            format!("{home}/sandboxes/docker/p/t-0123/workspace/../../t-9999"),
            format!("{}/link/config.yaml", tmp.display()),
            format!("{}/link", tmp.display()),
            tmp.display().to_string(),
            "/".to_owned(),
            format!("{home}/missing/dir/.."),
        ] {
            assert!(p.violation(&s).is_some(), "{s} must be refused");
        }
    }

    #[test]
    fn own_folder_named_volumes_and_unrelated_paths_pass() {
        let tmp = tempfile_dir();
        let p = protected(&tmp);
        let home = tmp.join("home").display().to_string();
        // A sibling whose name merely starts with the home's is not inside it.
        let sibling = format!("{home}2");
        std::fs::create_dir_all(&sibling).unwrap();
        for s in [
            format!("{home}/sandboxes/docker/p/t-0123/workspace"),
            "named-volume".to_owned(),
            "/opt/data".into(),
            sibling,
        ] {
            assert_eq!(p.violation(&s), None, "{s}");
        }
    }

    #[test]
    fn sockets_and_their_folders_need_the_opt_in() {
        let tmp = tempfile_dir();
        let mut p = protected(&tmp);
        // A hard link of the socket elsewhere is the same file.
        std::fs::create_dir_all(tmp.join("elsewhere/deeper")).unwrap();
        std::fs::create_dir_all(tmp.join("plain")).unwrap();
        std::fs::hard_link(tmp.join("run/docker.sock"), tmp.join("elsewhere/deeper/s")).unwrap();
        let elsewhere = tmp.join("elsewhere");
        for s in [tmp.join("run/docker.sock"), tmp.join("run"), tmp.join("run/../run/"), elsewhere.join("deeper/s")] {
            assert!(p.violation(&s.display().to_string()).is_some(), "{}", s.display());
        }
        // A folder holding a hard link of it, however deep, is refused too, naming the link.
        let why = p.violation(&elsewhere.display().to_string()).unwrap();
        assert!(why.contains("deeper/s") && why.contains(ALLOW_KEY), "{why}");
        assert_eq!(p.violation(&tmp.join("plain").display().to_string()), None);
        // The engine's own folders, inside and out.
        std::fs::create_dir_all(tmp.join("engine-state/containers")).unwrap();
        for s in [tmp.join("engine-state"), tmp.join("engine-state/containers/x")] {
            assert!(p.violation(&s.display().to_string()).is_some_and(|w| w.contains("own files")), "{}", s.display());
        }
        p.allow_sockets = true;
        assert_eq!(p.violation(&tmp.join("run/docker.sock").display().to_string()), None);
    }

    #[test]
    fn every_spelling_of_a_mount_in_the_extra_args_is_checked() {
        let tmp = tempfile_dir();
        let p = protected(&tmp);
        let home = tmp.join("home").display().to_string();
        for args in [
            vec!["-v".to_owned(), format!("{home}:/x")],
            vec![format!("-v{home}:/x")],
            vec![format!("-v={home}:/x")],
            vec![format!("--volume={home}/config.yaml:/c:ro")],
            vec!["--mount".to_owned(), format!("type=bind,source={home},target=/m")],
            vec![format!("--mount=type=bind,src={home},dst=/m")],
            vec![format!("--mount=dst=/m,src=/opt,src={home},type=bind")],
            vec!["--mount".into(), "type=bind,source=/,target=/host,readonly".into()],
            vec!["--mount".into(), "type=bind,src=.,dst=/m".into()],
            vec!["--mount".into(), "type=bind,src=docs,dst=/m".into()],
            vec!["-v".into(), "../..:/m".into()],
            vec!["-v".into(), "~/x:/m".into()],
            vec!["--volume".into(), "a/b:/m".into()],
        ] {
            let spec = check_extra_args(extra_args_parser(), &args).unwrap();
            assert!(spec_violation(&p, &spec).is_some(), "{args:?} must be refused");
        }
        for args in
            [vec!["-v".to_owned(), "named:/data".to_owned()], vec!["--mount".into(), "type=volume,src=v,dst=/v".into()]]
        {
            assert_eq!(spec_violation(&p, &check_extra_args(extra_args_parser(), &args).unwrap()), None, "{args:?}");
        }
    }

    #[test]
    fn an_empty_or_root_sandbox_dir_is_refused() {
        let tmp = tempfile_dir();
        let home = tmp.join("home");
        for d in ["", "  ", "relative/dir", "/", "/.."] {
            assert!(check_sandbox_dir(&home, d).is_err(), "{d:?}");
        }
        assert!(check_sandbox_dir(&home, &tmp.display().to_string()).is_err());
        assert!(check_sandbox_dir(&home, &home.join("sandboxes").display().to_string()).is_ok());
    }

    /// A temporary directory (canonical: /tmp may be a symlink) kept until the test ends.
    struct Tmp(tempfile::TempDir);

    impl std::ops::Deref for Tmp {
        type Target = Path;
        fn deref(&self) -> &Path {
            self.0.path()
        }
    }

    fn tempfile_dir() -> Tmp {
        Tmp(tempfile::tempdir_in(canonical(&std::env::temp_dir())).unwrap())
    }
}
