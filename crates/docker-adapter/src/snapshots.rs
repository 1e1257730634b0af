//! Snapshots of a sandbox's filesystem as local images ([`ContainerSnapshots`]): `docker commit` through the Engine
//! API's `/commit` (the container paused meanwhile, so the files are consistent), listed by label and removed by
//! reference. Nothing is ever pushed.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use bollard::models::ContainerConfig;
use bollard::query_parameters::{CommitContainerOptions, ListImagesOptions, RemoveImageOptions};
use domain::ports::{ContainerSnapshots, RuntimeError, SnapshotImage};
use domain::time::Timestamp;

use crate::DockerRuntime;

/// How long one commit may take: it copies the writable layer, which may be large.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(600);

#[async_trait]
impl ContainerSnapshots for DockerRuntime {
    async fn commit(
        &self,
        container: &str,
        repo: &str,
        tag: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, RuntimeError> {
        self.check_stalled()?;
        let options = CommitContainerOptions {
            container: Some(container.to_owned()),
            repo: Some(repo.to_owned()),
            tag: Some(tag.to_owned()),
            comment: Some("berth sandbox snapshot".to_owned()),
            pause: true,
            ..Default::default()
        };
        // The labels are given in full (the sandbox's and the snapshot's), not left to the engine's merge of the
        // container's config, so Docker and Podman label the image alike.
        let config = ContainerConfig {
            labels: Some(labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<HashMap<_, _>>()),
            ..Default::default()
        };
        let call = self.docker.commit_container(options, config);
        match tokio::time::timeout(COMMIT_TIMEOUT, call).await {
            Ok(Ok(r)) => Ok(r.id),
            Ok(Err(e)) => Err(match self.map_err("commit", container, e) {
                RuntimeError::Api { status, message } => RuntimeError::Api {
                    status,
                    message: format!("the engine cannot commit sandbox {container} to an image: {message}"),
                },
                other => other,
            }),
            Err(_) => Err(RuntimeError::Timeout(format!("commit of {container}"))),
        }
    }

    async fn snapshots(&self, labels: &BTreeMap<String, String>) -> Result<Vec<SnapshotImage>, RuntimeError> {
        let wanted: Vec<String> =
            labels.iter().map(|(k, v)| if v.is_empty() { k.clone() } else { format!("{k}={v}") }).collect();
        let options = ListImagesOptions {
            all: false,
            filters: Some(HashMap::from([("label".to_owned(), wanted)])),
            ..Default::default()
        };
        let listed = self.call("list images", "", self.docker.list_images(Some(options))).await?;
        Ok(listed
            .into_iter()
            .map(|i| SnapshotImage {
                id: i.id,
                tags: i.repo_tags.into_iter().filter(|t| t != "<none>:<none>").collect(),
                labels: i.labels.into_iter().collect(),
                created: Timestamp::from_secs(i.created),
                size_bytes: i.size,
            })
            // The engine filters by label already; Podman's older versions ignore a key-only filter, so again here.
            .filter(|i| labels.iter().all(|(k, v)| i.labels.get(k).is_some_and(|got| v.is_empty() || got == v)))
            .collect())
    }

    async fn remove_snapshot(&self, reference: &str) -> Result<(), RuntimeError> {
        let options = RemoveImageOptions { force: false, noprune: false, ..Default::default() };
        match self.call("remove image", reference, self.docker.remove_image(reference, Some(options), None)).await {
            Ok(_) => Ok(()),
            Err(RuntimeError::Api { status: 404, .. }) => Err(RuntimeError::NotFound(reference.to_owned())),
            Err(e) => Err(e),
        }
    }
}
