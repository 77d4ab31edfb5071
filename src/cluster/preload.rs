//! Images loaded into cluster nodes before workloads start, so bringing a
//! cluster up pulls nothing when an offline bundle is configured.

use std::path::PathBuf;

use crate::docker::Engine;
use crate::error::Error;
use crate::profile::{Provider, Settings};

/// Bundle roles that are not workloads inside the cluster (LocalStack is,
/// with `localstack.mode: in-cluster`; the registry is a container beside it).
const NOT_IN_CLUSTER: &[&str] = &[LOCALSTACK_ROLE, "k3s-node", "kind-node", "registry"];
const LOCALSTACK_ROLE: &str = "localstack";
/// Bundle roles only a K3s node runs (K3s's CoreDNS and pause); a Kind node
/// image carries the ones its kubeadm asks for.
const K3S_ONLY: &[&str] = &["coredns", "pause"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreloadImage {
    pub reference: String,
    /// From the offline bundle; `None` = from the local Docker image store.
    pub tarball: Option<PathBuf>,
    /// Run by the cluster's own pods (K3s's CoreDNS and pause), which start
    /// the moment the node is Ready.
    pub system: bool,
}

/// Every image the bundle holds for the cluster, plus the profile's
/// `images.preload` (from the bundle when it has them).
pub fn wanted_images(settings: &Settings) -> Result<Vec<PreloadImage>, Error> {
    let bundle = crate::bundle::open(settings)?;
    let mut out: Vec<PreloadImage> = Vec::new();
    if let Some(bundle) = &bundle {
        for artifact in bundle.images() {
            // Only the profile's LocalStack, when it runs in the cluster.
            let in_cluster = |r: &str| {
                r == LOCALSTACK_ROLE
                    && settings.localstack.mode == crate::profile::LocalStackMode::InCluster
                    && crate::bundle::normalize_reference(&artifact.reference())
                        == crate::bundle::normalize_reference(&settings.localstack.image)
            };
            let skip = |r: &str| {
                (NOT_IN_CLUSTER.contains(&r) && !in_cluster(r))
                    || (r == "eso" && !settings.eso.installs())
                    || (settings.cluster.provider != Provider::K3s && K3S_ONLY.contains(&r))
            };
            if artifact.role.as_deref().is_some_and(skip) {
                continue;
            }
            // A bundle may hold several ESO versions (for upgrades): only
            // the chart's own image runs.
            if artifact.role.as_deref() == Some("eso")
                && !artifact
                    .tag
                    .as_deref()
                    .is_some_and(|t| crate::bundle::same_version(t, &settings.eso.chart_version))
            {
                continue;
            }
            out.push(PreloadImage {
                reference: artifact.reference(),
                tarball: Some(bundle.path_of(artifact)),
                system: artifact
                    .role
                    .as_deref()
                    .is_some_and(|r| K3S_ONLY.contains(&r)),
            });
        }
    }
    for reference in &settings.images.preload {
        if out.iter().any(|i| {
            crate::bundle::normalize_reference(&i.reference)
                == crate::bundle::normalize_reference(reference)
        }) {
            continue;
        }
        let tarball = bundle
            .as_ref()
            .and_then(|b| b.image(reference))
            .map(|a| bundle.as_ref().unwrap().path_of(a));
        out.push(PreloadImage {
            reference: reference.clone(),
            tarball,
            system: false,
        });
    }
    Ok(out)
}

/// A tarball for each image: the bundle's, or one exported from the local
/// Docker image store into the state cache (reused while the image is the same).
pub async fn tarballs(
    engine: &dyn Engine,
    settings: &Settings,
    images: &[PreloadImage],
) -> Result<Vec<(String, PathBuf)>, Error> {
    let mut out = Vec::new();
    for image in images {
        if let Some(path) = &image.tarball {
            if !path.is_file() {
                return Err(Error::user(format!(
                    "offline bundle file {} for {} is missing",
                    path.display(),
                    image.reference
                ))
                .with_hint("rebuild the bundle with `make kit`"));
            }
            out.push((image.reference.clone(), path.clone()));
            continue;
        }
        let id = engine.image_id(&image.reference).await.map_err(|_| {
            Error::user(format!("image `{}` (images.preload) is neither in the offline bundle nor in the local Docker image store", image.reference))
                .with_hint(format!("`docker pull {}` or build it first, or remove it from images.preload", image.reference))
        })?;
        let id = id.replace("sha256:", "");
        let dir = crate::state::cache_dir(settings).join("image-cache");
        let path = dir.join(format!("{}.tar", &id[..id.len().min(24)]));
        if !path.is_file() {
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(|e| Error::internal(format!("create {}: {e}", dir.display())))?;
            let tmp = path.with_extension("tmp");
            crate::docker::save_image(engine, &image.reference, tmp.clone()).await?;
            tokio::fs::rename(&tmp, &path)
                .await
                .map_err(|e| Error::internal(format!("rename {}: {e}", tmp.display())))?;
        }
        out.push((image.reference.clone(), path));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_eso_image_of_the_chart_version_is_preloaded() {
        let dir = tempfile::tempdir().unwrap();
        let image = |tag: &str| {
            serde_json::json!({"kind": "image", "role": "eso", "name": "ghcr.io/external-secrets/external-secrets",
                "tag": tag, "version": tag, "file": format!("images/eso-{tag}.tar")})
        };
        let index = serde_json::json!({"apiVersion": "devstack.dev/v1alpha1", "kind": "Bundle",
            "artifacts": [image("v0.19.2"), image("v2.9.0")]});
        std::fs::write(dir.path().join("index.json"), index.to_string()).unwrap();
        let mut settings = Settings::builtin(&Default::default()).unwrap();
        settings.images.bundle = Some(dir.path().to_path_buf());
        let wanted: Vec<String> = wanted_images(&settings)
            .unwrap()
            .into_iter()
            .map(|i| i.reference)
            .collect();
        assert_eq!(wanted, [crate::versions::ESO_IMAGE]);
    }
}
