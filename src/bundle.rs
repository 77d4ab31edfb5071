//! Offline bundles (the format `make kit` produces): a directory with
//! `index.json` listing artifacts — images as `docker save` tarballs,
//! Flux install manifests, ESO CRDs and chart — so a stack can come up with
//! nothing pulled.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::docker::{self, Engine};
use crate::error::Error;
use crate::profile::{Provider, Settings};

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

    /// The artifact of `kind` at `version` (`v2.9.0` and `2.9.0` are the
    /// same version): a bundle may hold several versions of a component,
    /// e.g. the previous and the current ESO for the upgrade path.
    pub fn artifact_version(&self, kind: &str, version: &str) -> Option<&Artifact> {
        self.index.artifacts.iter().find(|a| {
            a.kind == kind
                && a.version
                    .as_deref()
                    .is_some_and(|v| same_version(v, version))
        })
    }

    /// Versions of `kind` the bundle holds, as its index writes them.
    pub fn versions_of(&self, kind: &str) -> Vec<String> {
        self.index
            .artifacts
            .iter()
            .filter(|a| a.kind == kind)
            .filter_map(|a| a.version.clone())
            .collect()
    }

    /// Image references the bundle holds for `role` (`localstack`, `k3s-node`, ...).
    pub fn images_for(&self, role: &str) -> Vec<String> {
        self.images()
            .filter(|a| a.role.as_deref() == Some(role))
            .map(Artifact::reference)
            .collect()
    }

    /// What the bundle holds, component by component, for messages and
    /// `--json`: `{"eso-chart": ["0.19.2"], "localstack": ["localstack/localstack:4.3.0"], ...}`.
    pub fn held(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut held = std::collections::BTreeMap::<String, Vec<String>>::new();
        for a in &self.index.artifacts {
            let (key, value) = match (a.kind.as_str(), &a.role) {
                ("image", Some(role)) => (role.clone(), a.reference()),
                ("image", None) => ("image".to_string(), a.reference()),
                (kind, _) => (
                    kind.to_string(),
                    a.version.clone().unwrap_or_else(|| a.name.clone()),
                ),
            };
            held.entry(key).or_default().push(value);
        }
        held
    }
}

/// `v2.9.0` and `2.9.0` name the same version.
pub fn same_version(a: &str, b: &str) -> bool {
    a.trim_start_matches('v') == b.trim_start_matches('v')
}

/// One version the profile asks for that the bundle lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lack {
    /// The profile key that decides it (`eso.chartVersion`, `localstack.image`...).
    pub setting: &'static str,
    pub wanted: String,
    /// What the bundle holds of that component.
    pub held: Vec<String>,
}

/// What the profile asks for, per component the bundle carries.
#[derive(Debug, Clone)]
pub struct Wanted<'a> {
    pub eso_chart: &'a str,
    pub flux: &'a str,
    pub localstack_image: &'a str,
    /// `(bundle role, image)`: `("k3s-node", "rancher/k3s:v1.32.0-k3s1")`.
    pub node_image: (&'static str, &'a str),
}

/// The versions `wanted` names that the bundle lacks. A component the
/// bundle does not carry at all is not checked (devstack fetches it online
/// as without a bundle), nor is an image of another repository than the
/// bundle's (a locally built image, loaded from the Docker image store).
pub fn lacking(bundle: &Bundle, wanted: &Wanted) -> Vec<Lack> {
    let mut out = Vec::new();
    let mut version = |setting, kind: &str, want: &str| {
        let held = bundle.versions_of(kind);
        if !held.is_empty() && !held.iter().any(|h| same_version(h, want)) {
            out.push(Lack {
                setting,
                wanted: want.to_string(),
                held,
            });
        }
    };
    version("eso.chartVersion", "eso-chart", wanted.eso_chart);
    version("eso.chartVersion", "eso-crds", wanted.eso_chart);
    version("flux.version", "flux-install", wanted.flux);
    for (setting, role, image) in [
        ("localstack.image", "localstack", wanted.localstack_image),
        ("cluster.image", wanted.node_image.0, wanted.node_image.1),
    ] {
        let held = bundle.images_for(role);
        let want = normalize_reference(image);
        let repository = |r: &str| r.rsplit_once(':').map(|(repo, _)| repo.to_string());
        let same_repository = held
            .iter()
            .any(|h| repository(&normalize_reference(h)) == repository(&want));
        if same_repository && !held.iter().any(|h| normalize_reference(h) == want) {
            out.push(Lack {
                setting,
                wanted: image.to_string(),
                held,
            });
        }
    }
    // The chart and its CRDs are one component to the user: say it once.
    out.dedup_by(|a, b| a.setting == b.setting && a.wanted == b.wanted);
    out
}

impl<'a> Wanted<'a> {
    pub fn of(settings: &'a Settings) -> Wanted<'a> {
        // An existing cluster's nodes come with it: no bundle role holds them.
        let role = match settings.cluster.provider {
            Provider::K3s => "k3s-node",
            Provider::Kind => "kind-node",
            Provider::Existing => "existing-node",
        };
        Wanted {
            eso_chart: &settings.eso.chart_version,
            flux: &settings.flux.version,
            localstack_image: &settings.localstack.image,
            node_image: (role, &settings.cluster.image),
        }
    }
}

/// The settings' bundle (`images.bundle`), opened; `None` without one.
pub fn open(settings: &Settings) -> Result<Option<Bundle>, Error> {
    settings
        .bundle_dir()
        .as_deref()
        .map(Bundle::open)
        .transpose()
}

/// The settings' bundle, opened and checked against what they ask for;
/// `None` without a bundle. An image the engine already holds is used as
/// it is, whether or not the bundle carries it.
pub async fn open_checked(
    settings: &Settings,
    engine: &dyn Engine,
) -> Result<Option<Bundle>, Error> {
    let Some(dir) = settings.bundle_dir() else {
        return Ok(None);
    };
    let bundle = Bundle::open(&dir)?;
    let mut lacks = Vec::new();
    for lack in lacking(&bundle, &Wanted::of(settings)) {
        let is_image = matches!(lack.setting, "localstack.image" | "cluster.image");
        if !(is_image && engine.image_id(&lack.wanted).await.is_ok()) {
            lacks.push(lack);
        }
    }
    refuse_lacks(&bundle, &lacks)?;
    Ok(Some(bundle))
}

/// Refuses, before anything starts, a profile that pins versions the
/// bundle does not hold, naming what it holds.
pub fn check_versions(bundle: &Bundle, wanted: &Wanted) -> Result<(), Error> {
    refuse_lacks(bundle, &lacking(bundle, wanted))
}

fn refuse_lacks(bundle: &Bundle, lacks: &[Lack]) -> Result<(), Error> {
    let Some(first) = lacks.first() else {
        return Ok(());
    };
    let lines: Vec<String> = lacks
        .iter()
        .map(|l| {
            format!(
                "`{}: {}` (the bundle has {})",
                l.setting,
                l.wanted,
                l.held.join(", ")
            )
        })
        .collect();
    Err(Error::user(format!(
        "the offline bundle {} lacks what the profile asks for: {}",
        bundle.dir.display(),
        lines.join("; ")
    ))
    .with_hint(format!(
        "pin what the bundle has (e.g. `{}: {}`), rebuild the bundle with `make kit`, or run without a bundle (online)",
        first.setting,
        first.held.first().map(String::as_str).unwrap_or("?")
    )))
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

    /// The kit's bundle before ESO 2.9.0 and LocalStack 4.14.0 were added.
    fn kit_bundle() -> Bundle {
        let artifact =
            |kind: &str, role: Option<&str>, name: &str, tag: Option<&str>, version: &str| {
                Artifact {
                    kind: kind.into(),
                    role: role.map(String::from),
                    name: name.into(),
                    tag: tag.map(String::from),
                    version: Some(version.into()),
                    digest: None,
                    size: None,
                    file: format!("{name}.file"),
                }
            };
        Bundle {
            dir: PathBuf::from("/kit/bundle"),
            index: Index {
                api_version: "devstack.dev/v1alpha1".into(),
                kind: "Bundle".into(),
                artifacts: vec![
                    artifact("eso-chart", None, "eso-chart", None, "0.19.2"),
                    artifact("eso-crds", None, "eso-crds", None, "v0.19.2"),
                    artifact("flux-install", None, "flux-install", None, "v2.9.5"),
                    artifact(
                        "image",
                        Some("localstack"),
                        "localstack/localstack",
                        Some("4.3.0"),
                        "4.3.0",
                    ),
                    artifact(
                        "image",
                        Some("k3s-node"),
                        "rancher/k3s",
                        Some("v1.32.0-k3s1"),
                        "v1.32.0+k3s1",
                    ),
                    artifact(
                        "image",
                        Some("kind-node"),
                        "kindest/node",
                        Some("v1.36.4"),
                        "v1.36.4",
                    ),
                ],
            },
        }
    }

    fn wanted<'a>(eso: &'a str, localstack: &'a str, node: &'a str) -> Wanted<'a> {
        Wanted {
            eso_chart: eso,
            flux: "v2.9.5",
            localstack_image: localstack,
            node_image: ("k3s-node", node),
        }
    }

    #[test]
    fn a_bundle_finds_the_artifact_of_each_version() {
        let bundle = kit_bundle();
        assert!(bundle.artifact_version("eso-crds", "0.19.2").is_some());
        assert!(bundle.artifact_version("eso-chart", "v0.19.2").is_some());
        assert!(bundle.artifact_version("eso-chart", "2.9.0").is_none());
        assert_eq!(bundle.versions_of("eso-chart"), ["0.19.2"]);
        assert_eq!(bundle.held()["localstack"], ["localstack/localstack:4.3.0"]);
    }

    #[test]
    fn versions_the_bundle_holds_pass() {
        let bundle = kit_bundle();
        let ok = wanted(
            "0.19.2",
            "localstack/localstack:4.3.0",
            "rancher/k3s:v1.32.0-k3s1",
        );
        assert_eq!(lacking(&bundle, &ok), []);
        check_versions(&bundle, &ok).unwrap();
        // Another repository is a locally built image, not a version pin.
        let custom = wanted(
            "0.19.2",
            "localstack/localstack:4.3.0",
            "devstack-test/k3s:x",
        );
        assert_eq!(lacking(&bundle, &custom), []);
    }

    #[test]
    fn versions_the_bundle_lacks_fail_naming_what_it_has() {
        let bundle = kit_bundle();
        let new = wanted(
            crate::versions::ESO_CHART_VERSION,
            crate::versions::LOCALSTACK_IMAGE,
            "rancher/k3s:v1.33.1-k3s1",
        );
        let lacks = lacking(&bundle, &new);
        let settings: Vec<_> = lacks.iter().map(|l| l.setting).collect();
        assert_eq!(
            settings,
            ["eso.chartVersion", "localstack.image", "cluster.image"]
        );
        let err = check_versions(&bundle, &new).unwrap_err();
        assert_eq!(err.kind(), crate::Kind::User);
        let message = err.message();
        assert!(
            message.contains("`eso.chartVersion: 2.9.0` (the bundle has 0.19.2)"),
            "{message}"
        );
        assert!(
            message.contains("(the bundle has localstack/localstack:4.3.0)"),
            "{message}"
        );
        assert!(err.hint().unwrap().contains("`eso.chartVersion: 0.19.2`"));
    }

    #[tokio::test]
    async fn an_image_the_engine_holds_is_used_although_the_bundle_lacks_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut bundle = kit_bundle();
        bundle.dir = dir.path().to_path_buf();
        std::fs::write(
            dir.path().join(INDEX_FILE),
            serde_json::to_string(&bundle.index).unwrap(),
        )
        .unwrap();
        let mut settings = Settings::builtin(&Default::default()).unwrap();
        settings.images.bundle = Some(dir.path().to_path_buf());
        settings.eso.chart_version = "0.19.2".into();
        settings.localstack.image = "localstack/localstack:4.3.0".into();
        settings.cluster.image = "kindest/node:v1.36.9".into();
        let engine = crate::docker::fake::FakeEngine::new();
        let err = open_checked(&settings, &engine).await.unwrap_err();
        assert!(
            err.message().contains(
                "`cluster.image: kindest/node:v1.36.9` (the bundle has kindest/node:v1.36.4)"
            ),
            "{}",
            err.message()
        );
        engine.with(|s| s.images.insert("kindest/node:v1.36.9".into()));
        let opened = open_checked(&settings, &engine).await.unwrap();
        assert_eq!(opened.unwrap().dir, dir.path());
    }

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
