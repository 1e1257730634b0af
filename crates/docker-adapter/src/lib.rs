//! `DockerRuntime`: the [`ContainerRuntime`] port over the Docker Engine API, through bollard on the socket.
//!
//! The API version is negotiated (Debian's Engine 20.10 speaks 1.41; bollard defaults to a newer one), every call is
//! bounded, and bollard's errors are mapped to the domain's [`RuntimeError`] here at the seam.

mod bound;
mod egress;
mod exec_io;
mod extra;
mod facts;
mod files;
mod host_kill;
mod kill;
mod logs;
mod run_flags;
mod snapshots;
mod usage;
mod volumes;

pub use egress::PROXY_EXE;
pub use files::LABEL_HELPER;
pub use run_flags::{DockerRunFlags, MAPPED_FLAGS};

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveContainerOptions, StartContainerOptions, StopContainerOptions,
};
use domain::container::{ContainerDetails, ContainerProcess, ContainerState, ContainerSummary};
use domain::ports::{ContainerRuntime, ExecAttached, ExecOutcome, ExecSpec, ListQuery, OutputSink, RuntimeError};
use domain::sandbox::CreateSpec;
use domain::time::Timestamp;

/// The socket berth talks to when `DOCKER_HOST` is unset.
pub const DEFAULT_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// How long connecting and negotiating may take before the engine counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(4);

/// Bound of ordinary API calls (list, inspect, create, remove); stop adds its grace period.
pub(crate) const CALL_TIMEOUT_SECS: u64 = 30;

/// The oldest Engine API berth uses (Docker 1.13); anything older is reported as too old.
const MIN_API: (u32, u32) = (1, 25);

/// A [`ContainerRuntime`] on a Docker Engine (or Podman's Docker-compatible socket).
#[derive(Clone, Debug)]
pub struct DockerRuntime {
    docker: Docker,
    endpoint: String,
    api_version: String,
    /// Whether the engine answered since connecting, or stalled (see `bound`); shared by clones.
    health: std::sync::Arc<bound::Health>,
}

pub(crate) fn unavailable(endpoint: &str, message: impl Into<String>) -> RuntimeError {
    RuntimeError::Unavailable { endpoint: endpoint.to_owned(), message: message.into() }
}

impl DockerRuntime {
    /// Connects to `endpoint` (`unix:///path`, a socket path, `tcp://host:port` or `http://…`) and negotiates the
    /// API version, all within [`CONNECT_TIMEOUT`].
    ///
    /// # Errors
    /// [`RuntimeError::Unavailable`] naming the endpoint when the engine does not answer or is too old.
    pub async fn connect(endpoint: &str) -> Result<Self, RuntimeError> {
        let endpoint = if endpoint.trim().is_empty() { DEFAULT_ENDPOINT } else { endpoint.trim() };
        let known = ["tcp://", "http://", "unix://", "/"];
        if !known.iter().any(|p| endpoint.starts_with(p)) {
            return Err(unavailable(endpoint, "unsupported endpoint scheme (use unix:// or tcp://)"));
        }
        // The engine's API version comes from `/_ping`'s `Api-Version` header rather than from `/version`:
        // Podman computes its whole `info` for `/version` (over a second, one caller at a time), so twenty
        // concurrent callers negotiating through it ran past the connect bound.
        let pinged = match tokio::time::timeout(CONNECT_TIMEOUT, ping_api_version(endpoint)).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                return Err(unavailable(
                    endpoint,
                    format!("{e}; is the Docker daemon running and is its socket readable?"),
                ));
            }
            Err(_) => {
                return Err(unavailable(
                    endpoint,
                    format!("no answer within {}s; is the Docker daemon running?", CONNECT_TIMEOUT.as_secs()),
                ));
            }
        };
        let default = bollard::API_DEFAULT_VERSION;
        let client_version = match pinged {
            Some((major, minor)) if (major, minor) < (default.major_version, default.minor_version) => {
                bollard::ClientVersion { major_version: major, minor_version: minor }
            }
            _ => bollard::ClientVersion { major_version: default.major_version, minor_version: default.minor_version },
        };
        let docker = client(endpoint, &client_version)?;
        let docker = if pinged.is_some() {
            docker
        } else {
            // An engine whose ping names no version: negotiate the slow way.
            match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
                Ok(Ok(d)) => d,
                Ok(Err(e)) => return Err(unavailable(endpoint, format!("{e}; is the Docker daemon running?"))),
                Err(_) => {
                    return Err(unavailable(
                        endpoint,
                        format!("no answer within {}s; is the Docker daemon running?", CONNECT_TIMEOUT.as_secs()),
                    ));
                }
            }
        };
        let v = docker.client_version();
        let (major, minor) = (v.major_version as u32, v.minor_version as u32);
        if (major, minor) < MIN_API {
            return Err(unavailable(
                endpoint,
                format!("engine API {major}.{minor} is older than {}.{}; upgrade Docker", MIN_API.0, MIN_API.1),
            ));
        }
        Ok(Self {
            docker,
            endpoint: endpoint.to_owned(),
            api_version: format!("{major}.{minor}"),
            health: Default::default(),
        })
    }

    /// A runtime on `endpoint` at an API version already negotiated with this same engine (`version` as
    /// [`Self::api_version`] gave it, e.g. `1.41`), without a round trip. The caller vouches that the engine is the
    /// one that answered (berth keys the version it remembers by the socket file, which an engine's restart
    /// replaces); a wrong guess shows as the first call's error.
    ///
    /// # Errors
    /// [`RuntimeError::Unavailable`] for an endpoint or version that cannot be used.
    pub fn connect_at(endpoint: &str, version: &str) -> Result<Self, RuntimeError> {
        let parsed =
            version.split_once('.').and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
        let Some((major, minor)) = parsed.filter(|(a, b)| (*a as u32, *b as u32) >= MIN_API) else {
            return Err(unavailable(endpoint, format!("{version:?} is not an engine API version berth uses")));
        };
        let docker = client(endpoint, &bollard::ClientVersion { major_version: major, minor_version: minor })?;
        Ok(Self {
            docker,
            endpoint: endpoint.to_owned(),
            api_version: format!("{major}.{minor}"),
            health: Default::default(),
        })
    }

    /// Whether an image exists locally.
    ///
    /// # Errors
    /// A mapped [`RuntimeError`] other than "not found".
    pub async fn image_exists(&self, image: &str) -> Result<bool, RuntimeError> {
        match self.call("inspect image", image, self.docker.inspect_image(image)).await {
            Ok(_) => Ok(true),
            Err(RuntimeError::NotFound(_)) => Ok(false),
            Err(RuntimeError::Api { status: 404, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `docker info`, which Podman computes slowly (over a second, one caller at a time): bounded by the ordinary
    /// bound, not the first call's, so a busy engine is not taken for a stalled one; callers that can do without
    /// the answer bound it themselves.
    async fn info(&self) -> Result<bollard::models::SystemInfo, RuntimeError> {
        self.check_stalled()?;
        let info = self.docker.info().await;
        if let Err(e) = &info
            && let Some(stalled) = self.note("info", "", Some(e))
        {
            return Err(stalled);
        }
        self.note("info", "", None);
        info.map_err(|e| self.map_err("info", "", e))
    }

    fn map_err(&self, op: &str, id: &str, e: bollard::errors::Error) -> RuntimeError {
        use bollard::errors::Error as E;
        match e {
            E::DockerResponseServerError { status_code: 404, message } => {
                if message.contains("No such container") || message.contains("no such container") || id.is_empty() {
                    RuntimeError::NotFound(id.to_owned())
                } else {
                    RuntimeError::Api { status: 404, message }
                }
            }
            // Docker answers 409; Podman 4.x answers 500 with the same words (409 only from 2026 on).
            E::DockerResponseServerError { message, .. } if op == "create" && message.contains("already in use") => {
                RuntimeError::NameConflict(id.to_owned())
            }
            // Podman refuses to remove a running container with 500 where Docker says 409; callers rely on 409.
            E::DockerResponseServerError { message, .. }
                if op == "remove" && message.contains("cannot be removed without force") =>
            {
                RuntimeError::Api { status: 409, message }
            }
            E::DockerResponseServerError { status_code, message } => {
                RuntimeError::Api { status: status_code, message: explain(&message).unwrap_or(message) }
            }
            E::RequestTimeoutError => RuntimeError::Timeout(bound::what(op, id)),
            E::SocketNotFoundError(_) | E::HyperResponseError { .. } | E::IOError { .. } => {
                unavailable(&self.endpoint, e.to_string())
            }
            // No connection at all (nothing listens on the socket any more).
            E::HyperLegacyError { err } if err.is_connect() => {
                unavailable(&self.endpoint, format!("cannot connect ({err}); is the Docker daemon running?"))
            }
            // The connection failed under the call (the engine closed it, or died): no answer either.
            E::HyperLegacyError { err } => {
                unavailable(&self.endpoint, format!("{} failed: {err}", bound::what(op, id)))
            }
            other => RuntimeError::Api { status: 0, message: format!("{op}: {other}") },
        }
    }
}

/// A client of `endpoint` (TCP or a unix socket) speaking API `version`; no request is made.
fn client(endpoint: &str, version: &bollard::ClientVersion) -> Result<Docker, RuntimeError> {
    if endpoint.starts_with("tcp://") || endpoint.starts_with("http://") {
        Docker::connect_with_http(endpoint, CALL_TIMEOUT_SECS, version)
    } else {
        Docker::connect_with_unix(endpoint, CALL_TIMEOUT_SECS, version)
    }
    .map_err(|e| unavailable(endpoint, format!("{e}; is the Docker daemon running?")))
}

/// How long ago a container was created, by the wall clock.
fn wall_age(c: &ContainerSummary) -> Duration {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let created = Duration::from_millis(u64::try_from(c.created.as_millis()).unwrap_or(0));
    now.saturating_sub(created)
}

/// Asks `/_ping` for the engine's API version; `Ok(None)` when it answers without one.
async fn ping_api_version(endpoint: &str) -> std::io::Result<Option<(usize, usize)>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // HTTP/1.0: the engine closes the connection after its answer, so reading to the end is reading the answer.
    let request = b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n";
    let mut answer = Vec::new();
    if let Some(addr) = endpoint.strip_prefix("tcp://").or_else(|| endpoint.strip_prefix("http://")) {
        let mut stream = tokio::net::TcpStream::connect(addr.trim_end_matches('/')).await?;
        stream.write_all(request).await?;
        stream.take(64 * 1024).read_to_end(&mut answer).await?;
    } else {
        let mut stream = tokio::net::UnixStream::connect(endpoint.trim_start_matches("unix://")).await?;
        stream.write_all(request).await?;
        stream.take(64 * 1024).read_to_end(&mut answer).await?;
    }
    let text = String::from_utf8_lossy(&answer);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    if !head.starts_with("HTTP/") {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "the endpoint does not speak HTTP"));
    }
    Ok(head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        if !key.trim().eq_ignore_ascii_case("api-version") {
            return None;
        }
        let (major, minor) = value.trim().split_once('.')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    }))
}

/// One actionable line for engine errors whose raw text does not say what to do; `None` for the rest.
///
/// Both cases are Podman's: berth's `--init` needs its init binary, and rootful Podman raises the container's
/// `nofile`/`nproc` limits to its own defaults, which fails on hosts that do not let root raise resource limits.
fn explain(message: &str) -> Option<String> {
    let raw = message.lines().next().unwrap_or("").trim();
    if message.contains("container-init binary not found") {
        return Some(format!(
            "the engine has no init binary for --init: install catatonit (Podman), or set init_path in \
             containers.conf ({raw})"
        ));
    }
    if message.contains("error setting rlimit") || message.contains("setrlimit") {
        return Some(format!(
            "the engine could not set the container's resource limits: set default_ulimits in containers.conf \
             (Podman) to values within the host's hard limits, or pass --ulimit through \
             terminal.docker_extra_args ({raw})"
        ));
    }
    None
}

/// Maps `top`'s rows to processes by their column titles; without a command column every row counts with its whole
/// text, so an unknown layout makes a sandbox look busy, never idle.
fn top_rows(titles: Vec<String>, rows: Vec<Vec<String>>) -> Vec<ContainerProcess> {
    // Podman's compatible `top` gives the titles as one string and each process as one unsplit line: split both on
    // whitespace, the last column taking the rest of the line (the command and its arguments).
    let (titles, rows) = if titles.len() == 1 && titles[0].split_whitespace().count() > 1 {
        let titles: Vec<String> = titles[0].split_whitespace().map(str::to_owned).collect();
        let n = titles.len();
        let rows = rows
            .into_iter()
            .map(|row| {
                let line = row.join(" ");
                let mut cols: Vec<String> = Vec::with_capacity(n);
                let mut rest = line.trim_start();
                while cols.len() + 1 < n {
                    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    cols.push(rest[..end].to_owned());
                    rest = rest[end..].trim_start();
                }
                cols.push(rest.to_owned());
                cols
            })
            .collect();
        (titles, rows)
    } else {
        (titles, rows)
    };
    let col = |names: &[&str]| titles.iter().position(|t| names.iter().any(|n| t.eq_ignore_ascii_case(n)));
    let pid = col(&["PID"]);
    let cmd = col(&["CMD", "COMMAND", "ARGS"]);
    rows.into_iter()
        .map(|row| ContainerProcess {
            pid: pid.and_then(|i| row.get(i).cloned()).unwrap_or_default(),
            command: match cmd {
                // The command column is last and may have been split on spaces by some engines: join the rest.
                Some(i) => row.get(i..).map(|r| r.join(" ")).unwrap_or_default(),
                None => row.join(" "),
            },
        })
        .collect()
}

fn state_of(raw: Option<String>) -> ContainerState {
    ContainerState::parse(raw.as_deref().unwrap_or(""))
}

fn to_hash(m: &BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[async_trait]
impl ContainerRuntime for DockerRuntime {
    async fn list(&self, query: &ListQuery) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let mut filters: HashMap<String, Vec<String>> = HashMap::new();
        if !query.labels.is_empty() {
            filters.insert("label".into(), query.labels.iter().map(|(k, v)| format!("{k}={v}")).collect());
        }
        // States are filtered here, not by the engine: Podman 4.3 rejects the `dead` and `restarting` filters.
        let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let listed = self.call("list", "", self.docker.list_containers(Some(options))).await?;
        Ok(listed
            .into_iter()
            .map(|c| ContainerSummary {
                id: c.id.unwrap_or_default(),
                name: c.names.and_then(|n| n.into_iter().next()).unwrap_or_default().trim_start_matches('/').to_owned(),
                labels: c.labels.unwrap_or_default().into_iter().collect(),
                state: state_of(c.state.map(|s| s.to_string())),
                created: Timestamp::from_secs(c.created.unwrap_or(0)),
                network_mode: c.host_config.and_then(|h| h.network_mode),
            })
            .filter(|c| query.states.is_empty() || query.states.contains(&c.state))
            .collect())
    }

    async fn inspect(&self, id: &str) -> Result<ContainerDetails, RuntimeError> {
        let c = self.call("inspect", id, self.docker.inspect_container(id, None)).await?;
        let state = c.state.unwrap_or_default();
        let config = c.config.unwrap_or_default();
        let network_mode = c.host_config.and_then(|h| h.network_mode);
        Ok(ContainerDetails {
            summary: ContainerSummary {
                id: c.id.unwrap_or_default(),
                name: c.name.unwrap_or_default().trim_start_matches('/').to_owned(),
                labels: config.labels.unwrap_or_default().into_iter().collect(),
                state: state_of(state.status.map(|s| s.to_string())),
                created: c.created.as_deref().and_then(Timestamp::parse_docker).unwrap_or(Timestamp::from_secs(0)),
                network_mode,
            },
            finished_at_raw: state.finished_at.unwrap_or_default(),
            started_at_raw: state.started_at.unwrap_or_default(),
            exit_code: state.exit_code,
            oom_killed: state.oom_killed.unwrap_or(false),
            env: config.env.unwrap_or_default(),
        })
    }

    async fn create(&self, spec: &CreateSpec) -> Result<String, RuntimeError> {
        let mut host_config = HostConfig {
            binds: Some(spec.binds.iter().map(ToString::to_string).collect()),
            tmpfs: Some(to_hash(&spec.tmpfs)),
            cap_drop: Some(spec.cap_drop.clone()),
            cap_add: Some(spec.cap_add.clone()),
            security_opt: Some(spec.security_opt.clone()),
            pids_limit: spec.pids_limit,
            init: Some(spec.init),
            nano_cpus: spec.nano_cpus,
            memory: spec.memory_bytes,
            storage_opt: spec.storage_size.as_ref().map(|s| HashMap::from([("size".to_owned(), s.clone())])),
            network_mode: spec.network_mode.clone(),
            extra_hosts: (!spec.extra_hosts.is_empty()).then(|| spec.extra_hosts.clone()),
            dns: (!spec.dns.is_empty()).then(|| spec.dns.clone()),
            privileged: Some(spec.privileged),
            shm_size: spec.shm_size,
            ..Default::default()
        };
        extra::apply_host(&spec.extra, &mut host_config);
        let mut body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: Some(spec.cmd.clone()),
            labels: Some(to_hash(&spec.labels)),
            env: Some(spec.env.clone()),
            working_dir: Some(spec.workdir.clone()),
            user: spec.user.clone(),
            host_config: Some(host_config),
            ..Default::default()
        };
        extra::apply_config(&spec.extra, &mut body);
        let options = CreateContainerOptions { name: Some(spec.name.clone()), ..Default::default() };
        match self.call("create", &spec.name, self.docker.create_container(Some(options), body)).await {
            Ok(created) => {
                // The engine accepts some settings it cannot apply on this kernel and says so only here (e.g.
                // "Weight discarded" for --blkio-weight); pass that on rather than dropping it silently.
                for w in created.warnings.iter().filter(|w| !w.is_empty()) {
                    tracing::warn!("engine: {w}");
                }
                Ok(created.id)
            }
            Err(e) => Err(match e {
                RuntimeError::Api { status: 404, message } => RuntimeError::Api {
                    status: 404,
                    message: format!(
                        "{message} (berth never pulls: run `docker pull {}`, or build or load the image first)",
                        spec.image
                    ),
                },
                other => other,
            }),
        }
    }

    async fn await_settled(&self, name_or_id: &str, stall: Duration) -> Result<Option<ContainerSummary>, RuntimeError> {
        let mut last: Option<(String, ContainerState)> = None;
        let mut since = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            let seen = match self.inspect(name_or_id).await {
                Ok(d) => Some(d.summary),
                Err(RuntimeError::NotFound(_)) => None,
                Err(e) => return Err(e),
            };
            let settled = seen.as_ref().is_some_and(|c| c.state != ContainerState::Created);
            // A `created` container older than the stall bound has no creator left to wait for.
            let stale = seen.as_ref().is_some_and(|c| c.state == ContainerState::Created && wall_age(c) > stall);
            if settled || stale {
                return Ok(seen);
            }
            // Progress (the container appears, or a new one takes the name) restarts the stall bound.
            let mark = seen.as_ref().map(|c| (c.id.clone(), c.state.clone()));
            if mark != last {
                last = mark;
                since = tokio::time::Instant::now();
            }
            if since.elapsed() >= stall {
                return Ok(seen);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        // A paused container cannot be started; unpause it instead.
        if let Ok(d) = self.inspect(id).await
            && d.summary.state == ContainerState::Paused
        {
            return self.call("unpause", id, self.docker.unpause_container(id)).await;
        }
        self.call("start", id, self.docker.start_container(id, None::<StartContainerOptions>)).await
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let t = i32::try_from(grace.as_secs()).unwrap_or(10);
        let options = StopContainerOptions { t: Some(t), ..Default::default() };
        self.check_stalled()?;
        let call = self.docker.stop_container(id, Some(options));
        let bound = grace + self.call_bound();
        match tokio::time::timeout(bound, call).await {
            Ok(res) => res.map_err(|e| self.note("stop", id, Some(&e)).unwrap_or_else(|| self.map_err("stop", id, e))),
            Err(_) => Err(self.stalled("stop", id, bound)),
        }
    }

    async fn remove(&self, id: &str, force: bool) -> Result<(), RuntimeError> {
        let options = RemoveContainerOptions { force, v: true, ..Default::default() };
        self.call("remove", id, self.docker.remove_container(id, Some(options))).await
    }

    async fn read_file(&self, id: &str, path: &str) -> Result<Option<Vec<u8>>, RuntimeError> {
        self.download_file(id, path).await
    }

    async fn processes(&self, id: &str) -> Result<Vec<ContainerProcess>, RuntimeError> {
        // The engine's default `ps` columns: Docker prints `PID … CMD`, Podman `PID … COMMAND`; both full args.
        let call = self.docker.top_processes(id, None::<bollard::query_parameters::TopOptions>);
        let top = self.call("top", id, call).await?;
        Ok(top_rows(top.titles.unwrap_or_default(), top.processes.unwrap_or_default()))
    }

    async fn exec<'s>(
        &self,
        id: &str,
        spec: &ExecSpec,
        sink: &'s mut (dyn OutputSink + 's),
    ) -> Result<ExecOutcome, RuntimeError> {
        self.exec_io(id, spec, sink, domain::ports::ExecIo::default()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_rows_read_dockers_columns_and_podmans_unsplit_lines() {
        // Verbatim shapes: Docker splits each row into the titles' columns, Podman 4.3 gives one string each.
        let docker = top_rows(
            vec!["UID".into(), "PID".into(), "CMD".into()],
            vec![vec!["root".into(), "7".into(), "sleep infinity".into()]],
        );
        assert_eq!((docker[0].pid.as_str(), docker[0].command.as_str()), ("7", "sleep infinity"));
        let podman = top_rows(
            vec!["UID          PID    PPID  C STIME TTY          TIME CMD".into()],
            vec![
                vec!["root           1       0  0 15:10 ?        00:00:00 /run/podman-init -- sleep infinity".into()],
                vec!["root           7       1  0 15:10 ?        00:00:00 sleep infinity".into()],
            ],
        );
        let got: Vec<(&str, &str)> = podman.iter().map(|p| (p.pid.as_str(), p.command.as_str())).collect();
        assert_eq!(got, [("1", "/run/podman-init -- sleep infinity"), ("7", "sleep infinity")]);
        assert!(podman.iter().all(|p| domain::policy::idle::is_keep_alive(&p.command)));
    }

    #[test]
    fn podmans_raw_errors_become_one_actionable_line() {
        // Verbatim from Podman 4.3.1.
        let init = "container-init binary not found on the host: stat /usr/libexec/podman/catatonit: no such file or \
                    directory";
        let limits = "runc: runc create failed: unable to start container process: error during container init: \
                      error setting rlimits for ready process: error setting rlimit type 6: operation not permitted: \
                      OCI permission denied";
        let said = explain(init).unwrap();
        assert!(said.contains("install catatonit") && !said.contains('\n'), "{said}");
        let said = explain(limits).unwrap();
        assert!(said.contains("default_ulimits") && said.contains("type 6"), "{said}");
        assert_eq!(explain("No such image: x"), None);
    }

    #[tokio::test]
    async fn the_api_version_comes_from_the_ping_headers() {
        let dir = std::env::temp_dir().join(format!("berth-ping-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("engine.sock");
        let _ = std::fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        let server = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf).await.unwrap();
            // Podman 4.3.1's answer, headers as it sends them.
            let answer = "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nLibpod-Api-Version: 4.3.1\r\n\
                          Server: Libpod/4.3.1 (linux)\r\nContent-Length: 2\r\n\r\nOK";
            conn.write_all(answer.as_bytes()).await.unwrap();
        });
        let got = ping_api_version(&format!("unix://{}", sock.display())).await.unwrap();
        server.await.unwrap();
        assert_eq!(got, Some((1, 41)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
