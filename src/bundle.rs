//! Offline bundles (the format `make kit` produces): a directory with
//! `index.json` listing artifacts — images as `docker save` tarballs,
//! Flux install manifests, ESO CRDs and chart — so a stack can come up with
//! nothing pulled.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::docker::{self, Engine};
use crate::error::Error;

pub const INDEX_FILE: &str = "index.json";

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub api_version: String,
    pub kind: String,
    pub artifacts: Vec<Artifact>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Artifact {
    /// `image`, `flux-install`, `eso-crds`, `eso-chart`, ...
    pub kind: String,
    #[serde(default)]
    pub role: Option<String>,
    pub name: String,
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub digest: Option<String>,
    #[serde(default)]
    pub size: Option<u64>,
    /// Path relative to the bundle directory.
    pub file: String,
}

impl Artifact {
    /// `name:tag` for images.
    pub fn reference(&self) -> String {
        match &self.tag {
            Some(tag) => format!("{}:{tag}", self.name),
            None => self.name.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Bundle {
    pub dir: PathBuf,
    pub index: Index,
}

impl Bundle {
    pub fn open(dir: &Path) -> Result<Bundle, Error> {
        let path = dir.join(INDEX_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Error::user(format!("cannot read offline bundle index {}: {e}", path.display()))
                .with_hint("point `images.bundle` / --bundle / DEVSTACK_BUNDLE at a directory made by `make kit`")
        })?;
        let index: Index = serde_json::from_str(&text).map_err(|e| {
            Error::user(format!(
                "offline bundle index {} is invalid: {e}",
                path.display()
            ))
            .with_hint("rebuild the bundle with `make kit`")
        })?;
        if index.kind != "Bundle" {
            return Err(Error::user(format!(
                "{} is not a bundle index (kind `{}`)",
                path.display(),
                index.kind
            )));
        }
        Ok(Bundle {
            dir: dir.to_path_buf(),
            index,
        })
    }

    pub fn images(&self) -> impl Iterator<Item = &Artifact> {
        self.index.artifacts.iter().filter(|a| a.kind == "image")
    }

    pub fn image(&self, reference: &str) -> Option<&Artifact> {
        let wanted = normalize_reference(reference);
        self.images()
            .find(|a| normalize_reference(&a.reference()) == wanted)
    }

    pub fn artifact(&self, kind: &str) -> Option<&Artifact> {
        self.index.artifacts.iter().find(|a| a.kind == kind)
    }

    pub fn path_of(&self, artifact: &Artifact) -> PathBuf {
        self.dir.join(&artifact.file)
    }
}

/// `docker.io/library/x:tag` and `x:tag` name the same image.
pub fn normalize_reference(reference: &str) -> String {
    let r = reference.strip_prefix("docker.io/").unwrap_or(reference);
    let r = r.strip_prefix("library/").unwrap_or(r);
    if r.rsplit_once(':').is_some_and(|(_, t)| !t.contains('/')) {
        r.to_string()
    } else {
        format!("{r}:latest")
    }
}

/// Makes `image` available in the engine: present already, loaded from the
/// bundle, or pulled — in that order.
pub async fn ensure_image(
    engine: &dyn Engine,
    image: &str,
    bundle: Option<&Bundle>,
) -> Result<(), Error> {
    if engine.image_id(image).await.is_ok() {
        return Ok(());
    }
    if let Some(bundle) = bundle
        && let Some(artifact) = bundle.image(image)
    {
        engine.load_image(&bundle.path_of(artifact)).await?;
        if engine.image_id(image).await.is_ok() {
            return Ok(());
        }
    }
    docker::pull_image(engine, image).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_normalize() {
        assert_eq!(normalize_reference("docker.io/library/redis:7"), "redis:7");
        assert_eq!(
            normalize_reference("localstack/localstack"),
            "localstack/localstack:latest"
        );
        assert_eq!(
            normalize_reference("localhost:5000/x"),
            "localhost:5000/x:latest"
        );
    }
}
