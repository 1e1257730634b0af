//! What berth needs from a container engine beyond [`ContainerRuntime`]'s lifecycle, as small capability traits: an
//! exec attached to input and a terminal, a container's own output, its resource use, files in and out of it, the
//! kill of a marked command tree, facts about the engine, and the egress networks. [`Engine`] is all of them: what
//! `app` holds (`Arc<dyn Engine>`), opened in one place, so no caller names an adapter type and a second engine
//! implements these traits rather than imitating Docker's.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use futures_util::stream::BoxStream;

use super::{ContainerRuntime, ExecOutcome, ExecSpec, OutputSink, RuntimeError};
use crate::egress::EgressRoute;
use crate::sandbox::{ExtraArgs, SpecError};

/// What an exec is attached to besides its output.
#[derive(Default)]
pub struct ExecIo {
    /// Allocate a TTY inside the container (output then arrives as one stream, as on a terminal).
    pub tty: bool,
    /// Chunks of standard input; the stream ending is end of input, which closes the command's stdin.
    /// `None`: the command gets no stdin at all.
    pub stdin: Option<BoxStream<'static, Vec<u8>>>,
    /// Terminal sizes as (rows, columns), applied to the TTY as they arrive (the first one right after start).
    pub resize: Option<BoxStream<'static, (u16, u16)>>,
}

impl std::fmt::Debug for ExecIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecIo")
            .field("tty", &self.tty)
            .field("stdin", &self.stdin.is_some())
            .field("resize", &self.resize.is_some())
            .finish()
    }
}

/// One sample of a running container's resource use.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    /// Memory in use minus the inactive page cache, as `docker stats` shows it.
    pub memory_bytes: Option<u64>,
    /// The memory limit the engine reports (the host's memory when unlimited).
    pub memory_limit_bytes: Option<u64>,
    /// CPU use over the engine's sampling interval, in percent of one core (100 per busy core).
    pub cpu_percent: Option<f64>,
    /// Processes (and threads) in the container's cgroup.
    pub pids: Option<u64>,
}

/// Everything needed to set up one egress policy's network and proxy.
#[derive(Clone, Debug)]
pub struct EgressSetup {
    /// The internal network's name; the proxy container is `<name>-proxy`.
    pub name: String,
    /// Labels on both (berth's home, the policy digest).
    pub labels: HashMap<String, String>,
    /// The image the proxy runs in (it must be able to run berth's binary).
    pub image: String,
    /// berth's own binary on the engine's host, bind-mounted read-only.
    pub exe: String,
    /// The host folder the proxy writes its denial log into.
    pub log_dir: String,
    /// `uid:gid` the proxy runs as.
    pub user: Option<String>,
    /// The network the proxy reaches out through (`bridge` by default).
    pub outside: String,
    /// The proxy's arguments after the binary; the runtime appends `--listen <address>`, the proxy's address on the
    /// internal network, the only one it serves on.
    pub args: Vec<String>,
    /// A number picking the first candidate subnet (from the policy digest), so homes rarely collide.
    pub seed: u8,
}

/// An exec with the caller's standard input and an optional TTY (`berth run -i`/`-t`); the port's
/// [`ContainerRuntime::exec`] is this with no input.
#[async_trait]
pub trait ExecAttached: Send + Sync {
    /// Runs a command in a running container with `io` attached, streaming its output to `sink`.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when the container is gone; [`RuntimeError::Api`] when it is not running.
    async fn exec_io(
        &self,
        id: &str,
        spec: &ExecSpec,
        sink: &mut dyn OutputSink,
        io: ExecIo,
    ) -> Result<ExecOutcome, RuntimeError>;
}

/// A container's own output (`berth sandbox logs`).
#[async_trait]
pub trait ContainerLogs: Send + Sync {
    /// Streams `id`'s output to `sink`: the last `tail` lines (all with `None`), then, with `follow`, what it writes
    /// until the container stops.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when the container is gone, another [`RuntimeError`] otherwise.
    async fn logs(
        &self,
        id: &str,
        tail: Option<usize>,
        follow: bool,
        sink: &mut dyn OutputSink,
    ) -> Result<(), RuntimeError>;
}

/// What a container costs (`sandbox ls --usage`, `--size`).
#[async_trait]
pub trait ContainerUsage: Send + Sync {
    /// Samples a running container's memory and CPU use.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`]; [`RuntimeError::Timeout`].
    async fn usage(&self, id: &str) -> Result<Usage, RuntimeError>;

    /// The size of a container's writable layer, when the engine reports it.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`]; [`RuntimeError::Timeout`].
    async fn writable_size(&self, id: &str) -> Result<Option<i64>, RuntimeError>;
}

/// Files into a container, and a host folder removed as root through a helper container.
#[async_trait]
pub trait ContainerFiles: Send + Sync {
    /// Writes `data` as the file `dir/name` inside `container` (running or not), replacing it.
    ///
    /// # Errors
    /// A [`RuntimeError`] (`NotFound` when the container is gone).
    async fn write_file(&self, container: &str, dir: &str, name: &str, data: &[u8]) -> Result<(), RuntimeError>;

    /// Removes the host folder `parent/name` as root, from a one-shot helper container of `image` carrying
    /// `labels`, removed whatever happens.
    ///
    /// # Errors
    /// A [`RuntimeError`], or [`RuntimeError::Api`] when the removal failed inside.
    async fn remove_folder_as_root(
        &self,
        image: &str,
        parent: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), RuntimeError>;
}

/// The kill of a command tree by the marker in its environment, from inside the container's own pid namespace.
#[async_trait]
pub trait MarkedKill: Send + Sync {
    /// Kills every process in `container` whose environment holds the entry `marker` (`KEY=VALUE`).
    ///
    /// # Errors
    /// A [`RuntimeError`] when the kill cannot run.
    async fn kill_marked(&self, container: &str, marker: &str) -> Result<(), RuntimeError>;
}

/// What berth asks about the engine itself.
#[async_trait]
pub trait EngineFacts: Send + Sync {
    /// The endpoint the engine answers on.
    fn endpoint(&self) -> &str;

    /// The engine API version in use, e.g. `1.41`.
    fn api_version(&self) -> &str;

    /// Whether the engine can enforce a disk quota per container.
    ///
    /// # Errors
    /// A [`RuntimeError`].
    async fn supports_disk_quota(&self) -> Result<bool, RuntimeError>;

    /// Whether the engine can apply memory, CPU and pids limits.
    ///
    /// # Errors
    /// A [`RuntimeError`].
    async fn supports_cgroup_limits(&self) -> Result<bool, RuntimeError>;

    /// Whether the engine is Podman.
    ///
    /// # Errors
    /// A [`RuntimeError`].
    async fn is_podman(&self) -> Result<bool, RuntimeError>;

    /// The host folder the named volume `name` binds (a `local` volume made with `o=bind,device=PATH`), so the
    /// mount check reads it like a bind of that folder; `None` when it binds none or does not exist. The default
    /// knows of no volume.
    ///
    /// # Errors
    /// A [`RuntimeError`].
    async fn volume_host_path(&self, name: &str) -> Result<Option<String>, RuntimeError> {
        let _ = name;
        Ok(None)
    }
}

/// The networks and proxy of `terminal.docker_egress`.
#[async_trait]
pub trait EgressNetworks: Send + Sync {
    /// Makes sure the internal network and its running proxy exist; returns where sandboxes attach.
    ///
    /// # Errors
    /// A [`RuntimeError`], or `Api` with one line when the proxy does not stay up.
    async fn ensure_egress(&self, setup: &EgressSetup) -> Result<EgressRoute, RuntimeError>;

    /// Whether the proxy `name` is running; with its last words when it is not.
    ///
    /// # Errors
    /// A [`RuntimeError`].
    async fn proxy_down(&self, name: &str) -> Result<Option<String>, RuntimeError>;

    /// The address `container` has on `network` (where the egress proxy sees its connections come from); `None`
    /// when it is not attached there.
    ///
    /// # Errors
    /// A [`RuntimeError`].
    async fn address_on(&self, container: &str, network: &str) -> Result<Option<String>, RuntimeError>;
}

/// A local image of a sandbox's filesystem (`berth sandbox snapshot|suspend`), as the engine lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotImage {
    /// The image id (`sha256:…`).
    pub id: String,
    /// Its references (`berth-snapshot/<sandbox>:<name>`).
    pub tags: Vec<String>,
    /// The sandbox's labels and the snapshot's own (`berth.snapshot`, …).
    pub labels: BTreeMap<String, String>,
    pub created: crate::time::Timestamp,
    /// The whole image, base included.
    pub size_bytes: i64,
}

impl SnapshotImage {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// Snapshots of a container's filesystem as local images: made, listed and removed, never pushed.
#[async_trait]
pub trait ContainerSnapshots: Send + Sync {
    /// Commits `container`'s filesystem (its writable layer over its image) to the local image `repo:tag`
    /// carrying `labels`; returns the image id.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when the container is gone; [`RuntimeError::Api`] with one line when the engine
    /// cannot commit.
    async fn commit(
        &self,
        container: &str,
        repo: &str,
        tag: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, RuntimeError>;

    /// The local images carrying every label of `labels` (a value of `""` matches the key with any value).
    ///
    /// # Errors
    /// A [`RuntimeError`].
    async fn snapshots(&self, labels: &BTreeMap<String, String>) -> Result<Vec<SnapshotImage>, RuntimeError>;

    /// Removes the image `reference` (a tag or an id); its parent layers go when nothing else uses them.
    ///
    /// # Errors
    /// [`RuntimeError::NotFound`] when it is gone; [`RuntimeError::Api`] (409) while a container uses it.
    async fn remove_snapshot(&self, reference: &str) -> Result<(), RuntimeError>;
}

/// How a runtime reads `terminal.docker_extra_args`: into the typed [`ExtraArgs`] the domain applies to the create
/// spec, so the one mount and host-access check sees everything the arguments mount or grant, and the adapter
/// renders the spec, never the arguments. Needs no connection: `config set` checks a value with it.
pub trait ExtraArgsParser: Send + Sync {
    /// The model of `args`, applied in order, the last one winning.
    ///
    /// # Errors
    /// [`SpecError::UnsupportedExtraArg`] for an argument the runtime cannot carry, [`SpecError::BadExtraArg`] for
    /// a value that does not parse.
    fn parse(&self, args: &[String]) -> Result<ExtraArgs, SpecError>;
}

/// A whole engine: the lifecycle port and every capability. Any type with all of them is one.
pub trait Engine:
    ContainerRuntime
    + ExecAttached
    + ContainerLogs
    + ContainerUsage
    + ContainerFiles
    + MarkedKill
    + EngineFacts
    + EgressNetworks
    + ContainerSnapshots
{
}

impl<T> Engine for T where
    T: ContainerRuntime
        + ExecAttached
        + ContainerLogs
        + ContainerUsage
        + ContainerFiles
        + MarkedKill
        + EngineFacts
        + EgressNetworks
        + ContainerSnapshots
{
}
