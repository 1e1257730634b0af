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

/// An image id as Docker writes it, `sha256:<hex>`: Podman's compat API answers a commit with the bare hex, so ids
/// from the commit and from the listing compare equal only once both carry the prefix.
fn image_id(id: String) -> String {
    if id.contains(':') { id } else { format!("sha256:{id}") }
}

/// The labels as Dockerfile `LABEL` instructions, one a line, keys and values quoted.
fn label_changes(labels: &BTreeMap<String, String>) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', " "));
    labels.iter().map(|(k, v)| format!("LABEL {}={}", quote(k), quote(v))).collect::<Vec<_>>().join("\n")
}

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
            // Podman's compat API (4.3) ignores the labels of the config below; a `LABEL` change sets them there too.
            changes: Some(label_changes(labels)),
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
            Ok(Ok(r)) => Ok(image_id(r.id)),
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
        // One label filter to the engine (a `key=value` one when there is one): Podman 4.3 lists nothing for two;
        // every label is checked again below.
        let wanted: Vec<String> = labels
            .iter()
            .find(|(_, v)| !v.is_empty())
            .or_else(|| labels.iter().next())
            .map(|(k, v)| if v.is_empty() { k.clone() } else { format!("{k}={v}") })
            .into_iter()
            .collect();
        let options = ListImagesOptions {
            all: false,
            filters: Some(HashMap::from([("label".to_owned(), wanted)])),
            ..Default::default()
        };
        let listed = self.call("list images", "", self.docker.list_images(Some(options))).await?;
        Ok(listed
            .into_iter()
            .map(|i| SnapshotImage {
                id: image_id(i.id),
                // Podman qualifies a short name with its default registry (`docker.io/berth-snapshot/…`).
                tags: i
                    .repo_tags
                    .into_iter()
                    .filter(|t| t != "<none>:<none>")
                    .map(|t| t.strip_prefix("docker.io/").map(str::to_owned).unwrap_or(t))
                    .collect(),
                labels: i.labels.into_iter().collect(),
                created: Timestamp::from_secs(i.created),
                size_bytes: i.size,
            })
            // The engine filtered by one label; every label again here (Podman's older versions ignore a key-only one).
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    #[test]
    fn labels_become_quoted_label_instructions() {
        let labels = BTreeMap::from([
            ("berth.snapshot".to_owned(), "first".to_owned()),
            ("odd".to_owned(), r#"a "b" \c"#.to_owned()),
        ]);
        assert_eq!(
            super::label_changes(&labels),
            "LABEL \"berth.snapshot\"=\"first\"\nLABEL \"odd\"=\"a \\\"b\\\" \\\\c\""
        );
        assert_eq!(super::image_id("abc".into()), "sha256:abc");
        assert_eq!(super::image_id("sha256:abc".into()), "sha256:abc");
    }
}
