//! Restoring a snapshot: its nodes created and filled with its archives,
//! every one checked against its checksum, and the fix-ups a restored
//! cluster needs once it answers.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use futures::StreamExt;

use super::manifest::SavedFile;
use super::store::{Snapshot, damaged};
use super::upload::upload_checked;
use super::volume::fill_shared_volume;
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::profile::Settings;
use crate::ui::Step;

/// The node containers restored from a snapshot: created stopped, then
/// filled with its archives (streamed, every one checked against its
/// checksum). `up` starts them. A damaged archive fails the restore, which
/// the caller rolls back.
pub async fn restore_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    snapshot: &Snapshot,
    step: &Step,
) -> Result<(), Error> {
    let manifest = &snapshot.manifest;
    check_restorable(engine, settings, snapshot).await?;
    step.progress(format!("restoring snapshot `{}`", manifest.name));
    let mut shared = Vec::new();
    for node in &manifest.nodes {
        let file = manifest
            .files
            .iter()
            .find(|f| f.shared && f.node == node.container);
        shared.push(match file {
            Some(file) => {
                let span = step.span(format!("shared layers of node {}", node.identity));
                let progress = |message: String| step.progress(message);
                Some(span.finish(
                    fill_shared_volume(engine, settings, snapshot, file, &progress).await,
                )?)
            }
            None => None,
        });
    }
    let restored = {
        let span = step.span("restored node containers");
        let saved = manifest.saved_cluster();
        span.finish(crate::cluster::create_restored_nodes(engine, settings, &saved, &shared).await)?
    };
    let container_of: BTreeMap<&str, &str> = manifest
        .nodes
        .iter()
        .map(|n| n.container.as_str())
        .zip(restored.containers.iter().map(String::as_str))
        .collect();
    let span = step.span("snapshot files into the nodes");
    let uploads = manifest.files.iter().filter(|f| !f.shared).map(|file| {
        let container = container_of.get(file.node.as_str()).copied();
        async move {
            let container = container.ok_or_else(|| {
                damaged(&manifest.name, &format!("{} belongs to no node", file.file))
            })?;
            upload(engine, container, &snapshot.dir, file, &manifest.name).await
        }
    });
    span.finish(futures::future::try_join_all(uploads).await)?;
    crate::cluster::start_restored_nodes(engine, settings, &restored, step).await
}

/// What this machine must have to restore `snapshot` that the profile
/// does not say (for Kind: the same kind, the very node image): checked
/// before anything is created.
pub async fn check_restorable(
    engine: &dyn Engine,
    settings: &Settings,
    snapshot: &Snapshot,
) -> Result<(), Error> {
    let manifest = &snapshot.manifest;
    crate::cluster::check_restorable(engine, settings, &manifest.name, &manifest.versions).await
}

/// What a restored cluster needs once its API server answers: each node
/// that moved registered at its new address, and (in the background) its
/// kubelet reached with a certificate for it. Dropped, the wait stops.
pub async fn after_restore(
    engine: &dyn Engine,
    settings: &Settings,
    client: &kube::Client,
) -> Result<AfterRestore, Error> {
    // A kind node's kubelet registers its new address itself (kind's
    // entrypoint rewrote its `--node-ip`), and the API server does not
    // check kubelets' certificates there.
    if settings.cluster.provider != crate::profile::Provider::K3s {
        return Ok(AfterRestore { kubelets: None });
    }
    let moved = correct_node_addresses(engine, settings, client).await?;
    let kubelets = (!moved.is_empty()).then(|| {
        tokio::spawn(wait_kubelets_reachable(
            client.clone(),
            moved,
            KUBELET_CERTIFICATE_WAIT,
        ))
    });
    Ok(AfterRestore { kubelets })
}

/// The background wait [`after_restore`] started, aborted when dropped.
pub struct AfterRestore {
    kubelets: Option<tokio::task::JoinHandle<()>>,
}

impl AfterRestore {
    /// Waits until the moved nodes' kubelets are reached (or the wait's
    /// limit passes).
    pub async fn finish(mut self) {
        if let Some(kubelets) = self.kubelets.as_mut() {
            let _ = kubelets.await;
        }
    }
}

impl Drop for AfterRestore {
    fn drop(&mut self) {
        if let Some(kubelets) = &self.kubelets {
            kubelets.abort();
        }
    }
}

/// Points each restored node's InternalIP at its address on the new
/// network. A node that could not keep its address is registered with the
/// old one until K3s's cloud controller next updates it (minutes later),
/// and the API server reaches kubelets by it: `kubectl logs` and `exec`
/// would fail on the kubelet's certificate until then. Returns the nodes
/// whose address changed.
async fn correct_node_addresses(
    engine: &dyn Engine,
    settings: &Settings,
    client: &kube::Client,
) -> Result<Vec<String>, Error> {
    use k8s_openapi::api::core::v1::Node;
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let mut corrected = Vec::new();
    for node in crate::cluster::saved_cluster(engine, settings).await?.nodes {
        let Some(ip) = node.ip else { continue };
        let registered = nodes
            .get_opt(&node.identity)
            .await
            .map_err(|e| Error::internal(format!("read node {}", node.identity)).with_source(e))?
            .and_then(|n| n.status)
            .and_then(|s| s.addresses)
            .unwrap_or_default();
        if registered
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == ip)
        {
            continue;
        }
        let patch = serde_json::json!({"status": {"addresses": [
            {"type": "InternalIP", "address": ip},
            {"type": "Hostname", "address": node.identity},
        ]}});
        nodes
            .patch_status(
                &node.identity,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .map_err(|e| {
                Error::internal(format!("update the address of node {}", node.identity))
                    .with_source(e)
            })?;
        corrected.push(node.identity);
    }
    Ok(corrected)
}

/// How long a restore waits for the kubelets of nodes that moved to serve
/// a certificate for their new address.
const KUBELET_CERTIFICATE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits until the API server reaches each of `nodes`' kubelets (what
/// `kubectl logs` and `exec` need): a node that moved starts its kubelet
/// with its old address's certificate until K3s issues a new one. A
/// kubelet still not reached after `limit` is only reported: the stack
/// itself works.
async fn wait_kubelets_reachable(
    client: kube::Client,
    nodes: Vec<String>,
    limit: std::time::Duration,
) {
    let deadline = tokio::time::Instant::now() + limit;
    for node in nodes {
        while !crate::k8s::kubelet_reachable(&client, &node).await {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    "the API server does not reach node {node}'s kubelet yet (its certificate \
                     is for the node's old address): `kubectl logs` and `exec` on it fail until \
                     K3s issues a new one"
                );
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
}

/// Streams one archive into `container` at its path's parent directory,
/// checking its checksum on the way.
async fn upload(
    engine: &dyn Engine,
    container: &str,
    dir: &Path,
    file: &SavedFile,
    snapshot: &str,
) -> Result<(), Error> {
    let (parent, last) = Some(file.path.as_str())
        .filter(|path| path.starts_with('/'))
        .and_then(|path| path.rsplit_once('/'))
        .filter(|(_, last)| !last.is_empty())
        .ok_or_else(|| damaged(snapshot, &format!("the path {} is not absolute", file.path)))?;
    let parent = if parent.is_empty() { "/" } else { parent };
    // The parent may be missing in a container that never ran (`/etc/rancher`):
    // extracting a directory entry for it at its own parent makes it.
    if parent != "/" {
        let (grand, dir_name) = parent.rsplit_once('/').unwrap_or(("", parent));
        let grand = if grand.is_empty() { "/" } else { grand };
        let archive = directory_archive(dir_name)?;
        let body = futures::stream::iter([Ok(Bytes::from(archive))]).boxed();
        engine
            .upload_archive(container, grand, body)
            .await
            .map_err(|e| docker::engine_error(format!("create {parent} in {container}"), e))?;
    }
    upload_checked(engine, container, parent, dir, file, snapshot, last).await
}

/// A tar archive of one empty directory `name`.
fn directory_archive(name: &str) -> Result<Vec<u8>, Error> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(0o755);
    header.set_size(0);
    builder
        .append_data(&mut header, format!("{name}/"), std::io::empty())
        .and_then(|()| builder.into_inner())
        .map_err(|e| Error::internal(format!("archive of directory {name}")).with_source(e))
}
