//! Files through the engine: a small file written into or read out of a container (the ephemeral sandbox lease), and
//! a host folder removed as root by a one-shot helper container (a sandbox's folder holding files its root user made,
//! which the calling user cannot delete).
//!
//! Both go through the Engine API's archive and container calls, so they work for a remote engine (`DOCKER_HOST`)
//! and need no program in the image for reading and writing.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, DownloadFromContainerOptions, RemoveContainerOptions, StartContainerOptions,
    UploadToContainerOptions, WaitContainerOptions,
};
use domain::ports::{ContainerFiles, RuntimeError};
use futures_util::StreamExt;

use crate::DockerRuntime;

/// How long the folder-removal helper may run.
const HELPER_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound of one archive call.
const ARCHIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// The label that marks berth's helper containers (never sandboxes: they lack `hermes-agent`).
pub const LABEL_HELPER: &str = "berth.helper";

/// A one-file ustar archive: `name` (a plain name, under 100 bytes) holding `data`, mode 0644, mtime `mtime`.
pub(crate) fn tar_one(name: &str, data: &[u8], mtime: u64) -> Vec<u8> {
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, len: usize, s: &[u8]| {
        let n = s.len().min(len);
        h[at..at + n].copy_from_slice(&s[..n]);
    };
    put(&mut h, 0, 100, name.as_bytes());
    put(&mut h, 100, 8, b"0000644\0");
    put(&mut h, 108, 8, b"0000000\0");
    put(&mut h, 116, 8, b"0000000\0");
    put(&mut h, 124, 12, format!("{:011o}\0", data.len()).as_bytes());
    put(&mut h, 136, 12, format!("{mtime:011o}\0").as_bytes());
    h[156] = b'0';
    put(&mut h, 257, 8, b"ustar\x0000");
    // The checksum is computed with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    put(&mut h, 148, 8, format!("{sum:06o}\0 ").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512 + 1024, 0);
    out
}

/// The contents of the first regular file in a tar archive, `None` when there is none.
pub(crate) fn untar_first(tar: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0;
    while at + 512 <= tar.len() {
        let h = &tar[at..at + 512];
        if h.iter().all(|b| *b == 0) {
            return None;
        }
        let size_field = std::str::from_utf8(&h[124..136]).ok()?.trim_matches(|c: char| c == '\0' || c == ' ');
        let size = usize::from_str_radix(size_field, 8).ok()?;
        let body = at + 512;
        if matches!(h[156], b'0' | 0) {
            return tar.get(body..body + size).map(<[u8]>::to_vec);
        }
        at = body + size.div_ceil(512) * 512;
    }
    None
}

#[async_trait]
impl ContainerFiles for DockerRuntime {
    /// Writes `data` as the file `dir/name` inside `container` (running or not), replacing it.
    ///
    /// # Errors
    /// A mapped [`RuntimeError`] (`NotFound` when the container is gone).
    async fn write_file(&self, container: &str, dir: &str, name: &str, data: &[u8]) -> Result<(), RuntimeError> {
        let mtime = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let body = bollard::body_full(tar_one(name, data, mtime).into());
        let options = UploadToContainerOptions { path: dir.to_owned(), ..Default::default() };
        let call = self.docker.upload_to_container(container, Some(options), body);
        match tokio::time::timeout(ARCHIVE_TIMEOUT, call).await {
            Ok(r) => r.map_err(|e| self.map_err("write file", container, e)),
            Err(_) => Err(RuntimeError::Timeout(format!("writing a file into {container}"))),
        }
    }

    /// Removes the host folder `parent/name` as root, from a one-shot helper container of `image` that mounts `parent`
    /// and runs `rm -rf` on `name` (which never follows symlinks). The helper carries `labels` plus
    /// [`LABEL_HELPER`] and is removed whatever happens.
    ///
    /// # Errors
    /// A mapped [`RuntimeError`], or [`RuntimeError::Api`] when `rm` failed inside.
    async fn remove_folder_as_root(
        &self,
        image: &str,
        parent: &str,
        name: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), RuntimeError> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(RuntimeError::Api { status: 400, message: format!("not a folder name: {name:?}") });
        }
        let mut labels: HashMap<String, String> = labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        labels.insert(LABEL_HELPER.to_owned(), "remove-folder".to_owned());
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(vec!["rm".into(), "-rf".into(), "--".into(), format!("/berth-parent/{name}")]),
            user: Some("0:0".into()),
            labels: Some(labels),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                binds: Some(vec![format!("{parent}:/berth-parent")]),
                cap_drop: Some(vec!["ALL".into()]),
                cap_add: Some(vec!["DAC_OVERRIDE".into(), "FOWNER".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(None::<CreateContainerOptions>, body)
            .await
            .map_err(|e| self.map_err("create", "folder helper", e))?;
        let id = created.id;
        let run = async {
            self.docker
                .start_container(&id, None::<StartContainerOptions>)
                .await
                .map_err(|e| self.map_err("start", &id, e))?;
            let mut wait = self.docker.wait_container(&id, None::<WaitContainerOptions>);
            match wait.next().await {
                Some(Ok(r)) if r.status_code == 0 => Ok(()),
                Some(Ok(r)) => Err(RuntimeError::Api {
                    status: 500,
                    message: format!("removing {name} as root exited {}", r.status_code),
                }),
                // bollard reports a non-zero exit as an error of its own.
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                    Err(RuntimeError::Api { status: 500, message: format!("removing {name} as root exited {code}") })
                }
                Some(Err(e)) => Err(self.map_err("wait", &id, e)),
                None => Ok(()),
            }
        };
        let outcome = match tokio::time::timeout(HELPER_TIMEOUT, run).await {
            Ok(r) => r,
            Err(_) => Err(RuntimeError::Timeout(format!("removing folder {name} as root"))),
        };
        let rm = RemoveContainerOptions { force: true, ..Default::default() };
        let _ = self.docker.remove_container(&id, Some(rm)).await;
        outcome
    }
}

impl DockerRuntime {
    /// The contents of the file `path` inside `container`; `None` when the file does not exist.
    ///
    /// # Errors
    /// A mapped [`RuntimeError`] (`NotFound` when the container is gone).
    pub(crate) async fn download_file(&self, container: &str, path: &str) -> Result<Option<Vec<u8>>, RuntimeError> {
        let options = DownloadFromContainerOptions { path: path.to_owned() };
        let read = async {
            let mut stream = self.docker.download_from_container(container, Some(options));
            let mut tar = Vec::new();
            while let Some(chunk) = stream.next().await {
                tar.extend_from_slice(&chunk?);
                // A lease is a few bytes; anything much bigger is not ours.
                if tar.len() > 1 << 20 {
                    break;
                }
            }
            Ok::<_, bollard::errors::Error>(tar)
        };
        match tokio::time::timeout(ARCHIVE_TIMEOUT, read).await {
            Ok(Ok(tar)) => Ok(untar_first(&tar)),
            Ok(Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, message }))
                if !message.to_ascii_lowercase().contains("no such container") =>
            {
                Ok(None)
            }
            Ok(Err(e)) => Err(self.map_err("read file", container, e)),
            Err(_) => Err(RuntimeError::Timeout(format!("reading a file from {container}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_round_trips_through_tar() {
        let tar = tar_one(".berth-lease", b"{\"renewed_ms\":1}", 1_700_000_000);
        assert_eq!(tar.len() % 512, 0);
        assert_eq!(untar_first(&tar).as_deref(), Some(&b"{\"renewed_ms\":1}"[..]));
        assert_eq!(untar_first(&[0u8; 1024]), None);
        assert_eq!(untar_first(b"short"), None);
    }
}
