//! The Docker volumes that hold snapshots' shared parts ([`super::shared`]):
//! filled once per snapshot, mounted by every stack restored from it, and
//! pruned when no snapshot of the store has them.

use std::collections::HashMap;

use bytes::Bytes;
use futures::StreamExt;

use super::manifest::{Manifest, SavedFile};
use super::store::{Snapshot, manifests, store_dir};
use super::upload::upload_checked;
use crate::cluster::k3s::SHARED_IN_NODE;
use crate::docker::models::{ContainerCreateBody, HostConfig, VolumeCreateRequest};
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::profile::Settings;

/// A file a shared volume gets once it holds its whole archive.
const FILLED_MARK: &str = ".devstack-filled";
/// Labels of a shared volume: the snapshot's name, and the store it
/// belongs to (stores of other state directories leave it alone).
const LABEL_SNAPSHOT: &str = "dev.devstack.snapshot";
const LABEL_SNAPSHOT_STORE: &str = "dev.devstack.snapshot-store";

/// The Docker volume holding the shared part `file` of a snapshot's node:
/// named by the archive's checksum (a replaced snapshot gets a new one) and
/// by the store (another state directory's snapshot of the same name and
/// content has its own, which its own `rm` removes).
fn shared_volume(settings: &Settings, manifest: &Manifest, file: &SavedFile) -> String {
    let index = manifest
        .nodes
        .iter()
        .position(|n| n.container == file.node)
        .unwrap_or_default();
    let mut key = blake3::Hasher::new();
    key.update(store_dir(settings).as_os_str().as_encoded_bytes());
    key.update(file.blake3.as_bytes());
    let digest = key.finalize().to_hex();
    format!(
        "devstack-snapshot-{}-{index}-{}",
        manifest.name,
        &digest[..12]
    )
}

/// Fills the volume for the shared part `file` of a snapshot's node, once:
/// later restores find it filled. The archive is checked against its
/// checksum; a fill that fails removes the volume. Its name back.
pub(super) async fn fill_shared_volume(
    engine: &dyn Engine,
    settings: &Settings,
    snapshot: &Snapshot,
    file: &SavedFile,
    progress: &(dyn Fn(String) + Sync),
) -> Result<String, Error> {
    let manifest = &snapshot.manifest;
    let volume = shared_volume(settings, manifest, file);
    // Two restores at once fill it once.
    let lock = crate::state::StackLock::path(settings).with_file_name(format!("{volume}.lock"));
    let _lock = crate::state::StackLock::acquire_at(
        settings,
        lock,
        &format!("snapshot `{}`", manifest.name),
        "fill a snapshot volume",
        &|message| progress(message),
    )
    .await?;
    let labels = HashMap::from([
        (
            docker::LABEL_MANAGED_BY.to_string(),
            docker::MANAGED_BY_VALUE.to_string(),
        ),
        (LABEL_SNAPSHOT.to_string(), manifest.name.clone()),
        (
            LABEL_SNAPSHOT_STORE.to_string(),
            store_dir(settings).display().to_string(),
        ),
    ]);
    engine
        .create_volume(VolumeCreateRequest {
            name: Some(volume.clone()),
            labels: Some(labels.clone()),
            ..Default::default()
        })
        .await
        .map_err(|e| docker::engine_error(format!("create volume {volume}"), e))?;
    // Docker writes into a volume only through a container: one that never
    // starts, of the node image the stack has anyway.
    let image = &settings.cluster.image;
    let bundle = crate::bundle::open(settings)?;
    crate::bundle::ensure_image(engine, image, bundle.as_ref()).await?;
    let helper = format!("{volume}-fill");
    let _ = engine.remove_container(&helper).await;
    engine
        .create_container(
            &helper,
            ContainerCreateBody {
                image: Some(image.clone()),
                labels: Some(labels),
                host_config: Some(HostConfig {
                    binds: Some(vec![format!("{volume}:{SHARED_IN_NODE}")]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| docker::engine_error(format!("create container {helper}"), e))?;
    let filled = async {
        let mark = format!("{SHARED_IN_NODE}/{FILLED_MARK}");
        if matches!(
            engine.download_archive(&helper, &mark).next().await,
            Some(Ok(_))
        ) {
            return Ok(());
        }
        progress(format!(
            "filling volume {volume}, which every stack restored from snapshot `{}` shares (once)",
            manifest.name
        ));
        let what = format!("the shared part of node {}", file.node);
        upload_checked(
            engine,
            &helper,
            SHARED_IN_NODE,
            &snapshot.dir,
            file,
            &manifest.name,
            &what,
        )
        .await?;
        let body = futures::stream::iter([Ok(Bytes::from(empty_file_archive(FILLED_MARK)?))]);
        engine
            .upload_archive(&helper, SHARED_IN_NODE, body.boxed())
            .await
            .map_err(|e| docker::engine_error(format!("mark volume {volume} filled"), e))
    }
    .await;
    let _ = engine.remove_container(&helper).await;
    if filled.is_err() {
        let _ = engine.remove_volume(&volume).await;
    }
    filled.map(|()| volume)
}

/// Removes this store's shared volumes that no snapshot in it has (its
/// snapshot removed, or replaced), except those a stack still uses, which
/// are returned: `down` of that stack removes them.
pub async fn prune_shared_volumes(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<Vec<String>, Error> {
    let store = format!("{LABEL_SNAPSHOT_STORE}={}", store_dir(settings).display());
    let volumes = engine
        .list_volumes(vec![store])
        .await
        .map_err(|e| docker::engine_error("list volumes", e))?;
    if volumes.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: std::collections::BTreeSet<String> = manifests(settings)
        .iter()
        .flat_map(|m| {
            m.files
                .iter()
                .filter(|f| f.shared)
                .map(|f| shared_volume(settings, m, f))
        })
        .collect();
    let mut in_use = Vec::new();
    for volume in volumes.into_iter().filter(|v| !wanted.contains(v)) {
        match engine.remove_volume(&volume).await {
            Ok(()) => {}
            Err(e) if docker::is_conflict(&e) => in_use.push(volume),
            Err(e) if docker::is_not_found(&e) => {}
            Err(e) => return Err(docker::engine_error(format!("remove volume {volume}"), e)),
        }
    }
    Ok(in_use)
}

/// A tar archive of one empty file `name`.
fn empty_file_archive(name: &str) -> Result<Vec<u8>, Error> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o644);
    header.set_size(0);
    builder
        .append_data(&mut header, name, std::io::empty())
        .and_then(|()| builder.into_inner())
        .map_err(|e| Error::internal(format!("archive of file {name}")).with_source(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::manifest::tests::{manifest_for, settings};

    #[test]
    fn a_shared_volume_is_named_by_its_snapshot_content_and_store() {
        let settings = settings();
        let manifest = manifest_for(&settings);
        let file = |blake3: &str| SavedFile {
            node: "n".into(),
            path: SHARED_IN_NODE.into(),
            file: "n-shared.tar".into(),
            bytes: 1,
            blake3: blake3.into(),
            shared: true,
        };
        let volume = shared_volume(&settings, &manifest, &file("aa"));
        assert!(volume.starts_with("devstack-snapshot-base-0-"), "{volume}");
        assert_eq!(volume, shared_volume(&settings, &manifest, &file("aa")));
        assert_ne!(volume, shared_volume(&settings, &manifest, &file("bb")));
        let mut elsewhere = settings.clone();
        elsewhere.state_dir = elsewhere.state_dir.join("other");
        assert_ne!(volume, shared_volume(&elsewhere, &manifest, &file("aa")));
    }
}
