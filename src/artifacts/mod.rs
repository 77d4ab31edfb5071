//! Every artifact a stack runs — node image, LocalStack, Flux's manifests
//! and controller images, ESO's image, chart and CRDs, the kind CLI —
//! resolved into a verified local cache in the offline bundle's format.
//! From there online and offline runs take one code path: nodes import
//! images from the cache and pull nothing themselves, and the GitOps
//! source serves the chart and CRDs from the stack's bucket.
//!
//! Each artifact is checked against its pin ([`pins`]) before it enters
//! the cache; a mismatch is refused naming both digests, and nothing of it
//! stays behind. A second stack finds everything cached and downloads
//! nothing.

pub mod cache;
pub mod fetch;
pub mod mirrors;
pub mod pins;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::docker::Engine;
use crate::error::Error;
use crate::profile::{Provider, Settings};
use crate::versions;

pub use pins::Pins;

/// One artifact the profile needs, and where upstream publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The bundle index's kind: `image`, `flux-install`, `eso-chart`, `eso-crds`, `binary`.
    pub kind: &'static str,
    /// For images, what runs it (`kind-node`, `flux-source-controller`, …).
    pub role: Option<String>,
    pub version: String,
    pub origin: Origin,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// An image, by its upstream reference (`kindest/node:v1.36.4`).
    Image(String),
    /// A file, by its upstream URL, kept under `file` in the cache.
    Download {
        url: String,
        file: String,
        name: String,
    },
}

impl Wanted {
    /// What a person calls it: the image reference or the file's URL.
    pub fn label(&self) -> &str {
        match &self.origin {
            Origin::Image(reference) => reference,
            Origin::Download { url, .. } => url,
        }
    }
}

/// How an artifact came to be in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The cache held it already.
    Cached,
    /// The Docker engine held it (with its pinned digest), so it was only saved.
    FromDocker,
    /// Pulled from its registry (or that registry's mirror).
    Pulled,
    /// Downloaded (from upstream or the download mirror).
    Downloaded,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fetched {
    pub kind: String,
    pub name: String,
    /// The digest it was checked against (`None`: an image the profile
    /// names that devstack has no pin for, used as named).
    pub digest: Option<String>,
    pub size: u64,
    /// Bytes that crossed the network for it (0 when cached or in Docker).
    pub downloaded: u64,
    pub outcome: Outcome,
    /// Where it came from when it was fetched (a mirror, when one served it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PullReport {
    /// The bundle directory the artifacts are in.
    pub dir: PathBuf,
    pub artifacts: Vec<Fetched>,
    /// Bytes that crossed the network in this run.
    pub downloaded_bytes: u64,
    /// The `DEVSTACK_PINS` file in effect, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pins_file: Option<PathBuf>,
    pub elapsed_ms: u64,
}

impl PullReport {
    /// One line: what the run fetched and what it found in place.
    pub fn summary(&self) -> String {
        let count = |outcome| {
            self.artifacts
                .iter()
                .filter(|a| a.outcome == outcome)
                .count()
        };
        let fetched = count(Outcome::Pulled) + count(Outcome::Downloaded);
        let mut parts = vec![format!("{} artifact(s)", self.artifacts.len())];
        if fetched > 0 {
            parts.push(format!(
                "{fetched} fetched ({})",
                human_bytes(self.downloaded_bytes)
            ));
        }
        if count(Outcome::FromDocker) > 0 {
            parts.push(format!("{} from Docker", count(Outcome::FromDocker)));
        }
        if count(Outcome::Cached) > 0 {
            parts.push(format!("{} cached", count(Outcome::Cached)));
        }
        parts.join(", ")
    }
}

pub fn human_bytes(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    match bytes {
        b if b < 1024 * 1024 => format!("{:.0} KiB", b as f64 / 1024.0),
        b if (b as f64) < 1024.0 * MIB => format!("{:.1} MiB", b as f64 / MIB),
        b => format!("{:.2} GiB", b as f64 / (1024.0 * MIB)),
    }
}

/// The upstream URL of each download, by version.
pub fn flux_install_url(version: &str) -> String {
    format!("https://github.com/fluxcd/flux2/releases/download/{version}/install.yaml")
}

pub fn eso_chart_url(version: &str) -> String {
    let v = version.trim_start_matches('v');
    format!(
        "https://github.com/external-secrets/external-secrets/releases/download/helm-chart-{v}/external-secrets-{v}.tgz"
    )
}

/// ESO's CRDs at the commit of the pinned release, else at the version's
/// tag (which has no built-in pin: a pins file must name it).
pub fn eso_crds_url(version: &str) -> String {
    let v = version.trim_start_matches('v');
    if v == versions::ESO_CHART_VERSION {
        return versions::ESO_CRDS.url.to_string();
    }
    format!(
        "https://raw.githubusercontent.com/external-secrets/external-secrets/v{v}/deploy/crds/bundle.yaml"
    )
}

pub fn eso_image(chart_version: &str) -> String {
    format!(
        "ghcr.io/external-secrets/external-secrets:v{}",
        chart_version.trim_start_matches('v')
    )
}

/// The kind CLI for this machine's platform, or why there is none.
pub fn kind_cli_pin() -> Result<&'static versions::FilePin, String> {
    let platform = (std::env::consts::OS, std::env::consts::ARCH);
    versions::KIND_CLI
        .iter()
        .find(|(p, _)| *p == platform)
        .map(|(_, pin)| pin)
        .ok_or_else(|| {
            format!(
                "kind {} publishes no binary for {}/{}",
                versions::KIND_CLI_VERSION,
                platform.0,
                platform.1
            )
        })
}

/// The files the profile needs, before the images (Flux's images are the
/// ones its install manifest names).
pub fn wanted_files(settings: &Settings) -> Vec<Wanted> {
    let flux = &settings.flux.version;
    let eso = settings
        .eso
        .chart_version
        .trim_start_matches('v')
        .to_string();
    vec![
        Wanted {
            kind: "flux-install",
            role: None,
            version: flux.clone(),
            origin: Origin::Download {
                url: flux_install_url(flux),
                file: format!("artifacts/flux/{flux}/install.yaml"),
                name: "flux-install".into(),
            },
        },
        Wanted {
            kind: "eso-crds",
            role: None,
            version: format!("v{eso}"),
            origin: Origin::Download {
                url: eso_crds_url(&eso),
                file: format!("artifacts/eso/v{eso}/external-secrets-crds.yaml"),
                name: "eso-crds".into(),
            },
        },
        Wanted {
            kind: "eso-chart",
            role: None,
            version: eso.clone(),
            origin: Origin::Download {
                url: eso_chart_url(&eso),
                file: format!("artifacts/eso/v{eso}/external-secrets-{eso}.tgz"),
                name: "eso-chart".into(),
            },
        },
    ]
}

/// The images the profile needs besides Flux's controllers.
pub fn wanted_images(settings: &Settings) -> Vec<Wanted> {
    let image = |role: &str, reference: &str| Wanted {
        kind: "image",
        role: Some(role.to_string()),
        version: mirrors::ImageName::parse(reference).tag,
        origin: Origin::Image(reference.to_string()),
    };
    let node_role = match settings.cluster.provider {
        Provider::K3s => Some("k3s-node"),
        Provider::Kind => Some("kind-node"),
        Provider::Existing => None,
    };
    let mut out: Vec<Wanted> = node_role
        .map(|role| image(role, &settings.cluster.image))
        .into_iter()
        .collect();
    out.push(image("localstack", &settings.localstack.image));
    out.push(image("eso", &eso_image(&settings.eso.chart_version)));
    if settings.registry.enabled {
        out.push(image("registry", &settings.registry.image));
    }
    // K3s runs its own CoreDNS and pause images; a Kind node image carries
    // the ones its kubeadm deploys.
    if settings.cluster.provider == Provider::K3s
        && crate::bundle::normalize_reference(&settings.cluster.image)
            == crate::bundle::normalize_reference(versions::K3S_IMAGE)
    {
        for pin in versions::K3S_SYSTEM_IMAGES {
            let role = if pin.reference.contains("pause") {
                "pause"
            } else {
                "coredns"
            };
            out.push(image(role, pin.reference));
        }
    }
    out
}

/// Flux's controller images that `install` (its install manifest) names,
/// for the components the profile asks for.
pub fn flux_images(install: &str, components: &[String]) -> Result<Vec<Wanted>, Error> {
    let docs = crate::k8s::apply::parse_documents(install, "Flux install.yaml")?;
    let mut out = Vec::new();
    for doc in docs {
        if doc["kind"] != "Deployment" {
            continue;
        }
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        if !components.iter().any(|c| c == name) {
            continue;
        }
        for container in doc["spec"]["template"]["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(reference) = container["image"].as_str() {
                out.push(Wanted {
                    kind: "image",
                    role: Some(format!("flux-{name}")),
                    version: mirrors::ImageName::parse(reference).tag,
                    origin: Origin::Image(reference.to_string()),
                });
            }
        }
    }
    Ok(out)
}

/// Refuses a `cluster.version` whose node image devstack has no pin for
/// (kind publishes node images for a few Kubernetes versions per release;
/// any other tag does not exist upstream). `cluster.image` stays free.
pub fn check_version(settings: &Settings, pins: &Pins) -> Result<(), Error> {
    let Some(version) = &settings.cluster.version else {
        return Ok(());
    };
    let name = mirrors::ImageName::parse(&settings.cluster.image);
    let repository = name.local_repository();
    let mut known = pins.tags_of(&repository);
    if known.contains(&name.tag) {
        return Ok(());
    }
    known.sort_by_key(|t| std::cmp::Reverse(versions::parse_kube_version(t)));
    let provider = settings.cluster.provider.as_str();
    Err(Error::user(format!(
        "`cluster.version: {version}` has no published {provider} node image that devstack knows ({repository}:{} is not pinned); the versions it knows are {}",
        name.tag,
        known.join(", ")
    ))
    .with_hint(format!(
        "set `cluster.version` to one of {}, or name an image yourself with `cluster.image`",
        known.join(", ")
    )))
}

/// Options of one pull.
pub struct PullOptions<'a> {
    /// Where the artifacts go: the settings' cache, or a bundle to carry
    /// to another machine (`pull --bundle`).
    pub dir: PathBuf,
    /// Also the kind CLI (a portable bundle for the Kind provider).
    pub with_kind: bool,
    /// The images too, into the Docker engine; without them (a cluster
    /// whose nodes pull for themselves) no engine is asked.
    pub images: bool,
    pub progress: &'a (dyn Fn(String) + Sync),
}

/// Resolves every artifact `settings` needs into `options.dir`, checking
/// each against its pin. Holds the cache's lock, so parallel runs fetch
/// each artifact once.
pub async fn pull(
    docker: &dyn Engine,
    settings: &Settings,
    options: PullOptions<'_>,
) -> Result<PullReport, Error> {
    let started = Instant::now();
    let pins = Pins::load(settings.images.pins_file.as_deref())?;
    check_version(settings, &pins)?;
    let _lock = lock_cache(settings, &options.dir, options.progress).await?;
    let mut cache = cache::Cache::open(&options.dir)?;
    let fetcher = fetcher(settings, &pins, options.progress);
    let mut files = wanted_files(settings);
    if options.with_kind
        && settings.cluster.provider == Provider::Kind
        && let Ok(pin) = kind_cli_pin()
    {
        files.push(kind_wanted(pin));
    }
    let mut fetched = Vec::new();
    let mut flux_install = None;
    for wanted in &files {
        let got = fetcher.file(&mut cache, wanted).await?;
        if wanted.kind == "flux-install" {
            flux_install = Some(cache.dir().join(file_of(wanted)));
        }
        fetched.push(got);
    }
    let mut images = if options.images {
        wanted_images(settings)
    } else {
        Vec::new()
    };
    if let Some(path) = flux_install.filter(|_| options.images) {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::internal(format!("read {}: {e}", path.display())))?;
        images.extend(flux_images(&text, &settings.flux.components)?);
    }
    for wanted in &images {
        fetched.push(fetcher.image(docker, &mut cache, wanted).await?);
    }
    Ok(PullReport {
        dir: options.dir,
        downloaded_bytes: fetched.iter().map(|f| f.downloaded).sum(),
        artifacts: fetched,
        pins_file: pins.replaced_by,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// The kind CLI into the settings' cache (checksum verified, through the
/// download mirror when one is set); returns its path.
pub async fn fetch_kind(settings: &Settings) -> Result<PathBuf, Error> {
    let pin = kind_cli_pin().map_err(Error::prerequisite)?;
    let path = fetch_file(settings, &kind_wanted(pin)).await?;
    make_executable(&path)?;
    Ok(path)
}

/// Flux's install manifest of the profile's version into the settings'
/// cache, as [`fetch_kind`] fetches kind: for a command that needs it
/// without an `up` or `pull` having fetched it (the cache was emptied).
pub async fn fetch_flux_install(settings: &Settings) -> Result<PathBuf, Error> {
    let wanted = wanted_files(settings)
        .into_iter()
        .find(|w| w.kind == "flux-install")
        .expect("the profile's files include Flux's install manifest");
    fetch_file(settings, &wanted).await
}

/// One file into the settings' cache, checked against its pin.
async fn fetch_file(settings: &Settings, wanted: &Wanted) -> Result<PathBuf, Error> {
    let pins = Pins::load(settings.images.pins_file.as_deref())?;
    let dir = settings.artifact_cache();
    let _lock = lock_cache(settings, &dir, &|_| {}).await?;
    let mut cache = cache::Cache::open(&dir)?;
    let fetcher = fetcher(settings, &pins, &|_| {});
    fetcher.file(&mut cache, wanted).await?;
    Ok(dir.join(file_of(wanted)))
}

/// The bytes of a file of `bundle` (an offline bundle, or devstack's cache
/// read as one), checked against the sha256 its index records: read once
/// and hashed in memory, what the reader would read anyway, so the check
/// costs a few milliseconds. An entry without a digest is read as it is.
pub fn read_checked(
    settings: &Settings,
    bundle: &crate::bundle::Bundle,
    artifact: &crate::bundle::Artifact,
) -> Result<Vec<u8>, Error> {
    use sha2::Digest;
    let path = bundle.path_of(artifact);
    let bytes = std::fs::read(&path).map_err(|e| {
        Error::user(format!("cannot read {}: {e}", path.display()))
            .with_hint("rebuild the bundle with `make kit`, or fill the cache with `devstack pull`")
    })?;
    let found = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
    match artifact.digest.as_deref() {
        Some(expected) if expected != found => Err(damaged(settings, bundle, artifact, &found)),
        _ => Ok(bytes),
    }
}

/// Hashes a file of `bundle` (or the cache) against the sha256 its index
/// records, for a file used by its path (an executable about to run).
pub fn check_file(
    settings: &Settings,
    bundle: &crate::bundle::Bundle,
    artifact: &crate::bundle::Artifact,
) -> Result<(), Error> {
    let Some(expected) = artifact.digest.as_deref() else {
        return Ok(());
    };
    let found = fetch::sha256_file(&bundle.path_of(artifact))
        .unwrap_or_else(|e| format!("unreadable ({e})"));
    if found == expected {
        return Ok(());
    }
    Err(damaged(settings, bundle, artifact, &found))
}

/// The refusal of a file that is not what its index says: the cache's
/// hint re-fetches, a bundle's has it copied or rebuilt.
fn damaged(
    settings: &Settings,
    bundle: &crate::bundle::Bundle,
    artifact: &crate::bundle::Artifact,
    found: &str,
) -> Error {
    let path = bundle.path_of(artifact);
    let expected = artifact.digest.as_deref().unwrap_or_default();
    if bundle.dir == settings.artifact_cache() {
        fetch::damaged_entry(&artifact.name, &path, expected, found, None)
    } else {
        damaged_in_bundle(&artifact.name, &path, &bundle.dir, expected, found)
    }
}

/// The refusal of an offline bundle's file that is not what the bundle's
/// index says (`found`: its digest now).
fn damaged_in_bundle(name: &str, path: &Path, bundle: &Path, expected: &str, found: &str) -> Error {
    Error::prerequisite(format!(
        "the offline bundle's {name} at {} is damaged or was replaced: it is {found}, not \
         {expected} as the bundle's index says, and devstack does not use it",
        path.display()
    ))
    .with_hint(format!(
        "copy the bundle {} again, or rebuild it (`devstack pull --bundle DIR` where the network \
         answers, or `make kit`)",
        bundle.display()
    ))
}

/// Whether the kind CLI could be fetched now (its URL, through the download
/// mirror, answers within a few seconds): `Err` says where it was asked and why not.
pub async fn kind_reachable(settings: &Settings) -> Result<String, String> {
    let pin = kind_cli_pin()?;
    let url = mirrors::download_url(settings.images.download_mirror.as_deref(), pin.url);
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    match client
        .head(&url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
    {
        Ok(_) => Ok(url),
        Err(e) => Err(format!("{url} does not answer: {e}")),
    }
}

fn kind_wanted(pin: &versions::FilePin) -> Wanted {
    Wanted {
        kind: "binary",
        role: None,
        version: versions::KIND_CLI_VERSION.to_string(),
        origin: Origin::Download {
            url: pin.url.to_string(),
            file: format!("bin/kind-{}", versions::KIND_CLI_VERSION),
            name: "kind".into(),
        },
    }
}

fn file_of(wanted: &Wanted) -> &str {
    match &wanted.origin {
        Origin::Download { file, .. } => file,
        Origin::Image(_) => "",
    }
}

fn make_executable(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::internal(format!("chmod {}: {e}", path.display())))
}

/// Holds the cache `dir` for this process: parallel runs fetch each
/// artifact once, and never write one index over another.
async fn lock_cache(
    settings: &Settings,
    dir: &Path,
    waiting: &(dyn Fn(String) + Sync),
) -> Result<crate::state::StackLock, Error> {
    crate::state::StackLock::acquire_at(
        settings,
        lock_path(settings, dir),
        &format!("the artifact cache {}", dir.display()),
        "pull",
        waiting,
    )
    .await
}

fn fetcher<'a>(
    settings: &'a Settings,
    pins: &'a Pins,
    progress: &'a (dyn Fn(String) + Sync),
) -> fetch::Fetcher<'a> {
    fetch::Fetcher {
        pins,
        mirrors: &settings.images.mirrors,
        download_mirror: settings.images.download_mirror.as_deref(),
        progress,
    }
}

/// One lock per cache directory, kept beside the stack locks.
fn lock_path(settings: &Settings, dir: &Path) -> PathBuf {
    let key = blake3::hash(dir.to_string_lossy().as_bytes()).to_hex();
    settings
        .state_dir
        .join("locks")
        .join(format!("artifacts-{}.lock", &key[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;

    #[test]
    fn the_default_profile_needs_pinned_artifacts_only() {
        let settings = Settings::builtin(&Default::default()).unwrap();
        let pins = Pins::builtin();
        for wanted in wanted_files(&settings) {
            assert!(
                pins.file(wanted.label()).is_some(),
                "{} has no pin",
                wanted.label()
            );
        }
        let images = wanted_images(&settings);
        let roles: Vec<_> = images.iter().filter_map(|w| w.role.clone()).collect();
        assert_eq!(roles, ["kind-node", "localstack", "eso"]);
        for wanted in images {
            assert!(pins.image(wanted.label()).is_some(), "{}", wanted.label());
        }
        let k3s = settings.with_provider(Provider::K3s).unwrap();
        let roles: Vec<_> = wanted_images(&k3s)
            .into_iter()
            .filter_map(|w| w.role)
            .collect();
        assert_eq!(roles, ["k3s-node", "localstack", "eso", "pause", "coredns"]);
    }

    #[test]
    fn flux_images_are_the_ones_its_manifest_names_for_chosen_components() {
        let install = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: source-controller}\n\
spec: {template: {spec: {containers: [{name: manager, image: ghcr.io/fluxcd/source-controller:v1.9.5}]}}}\n---\n\
apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: notification-controller}\n\
spec: {template: {spec: {containers: [{name: manager, image: ghcr.io/fluxcd/notification-controller:v1.9.4}]}}}\n";
        let images = flux_images(install, &["source-controller".to_string()]).unwrap();
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].label(), "ghcr.io/fluxcd/source-controller:v1.9.5");
        assert_eq!(images[0].role.as_deref(), Some("flux-source-controller"));
        assert_eq!(images[0].version, "v1.9.5");
    }

    #[test]
    fn cluster_version_resolves_only_to_pinned_node_images() {
        let pins = Pins::builtin();
        let mut settings = Settings::builtin(&Default::default()).unwrap();
        settings.cluster.version = Some("1.35.8".into());
        settings.cluster.image = "kindest/node:v1.35.8".into();
        check_version(&settings, &pins).unwrap();
        settings.cluster.version = Some("1.36.5".into());
        settings.cluster.image = "kindest/node:v1.36.5".into();
        let err = check_version(&settings, &pins).unwrap_err();
        assert_eq!(err.kind(), crate::Kind::User);
        assert_eq!(
            err.message(),
            "`cluster.version: 1.36.5` has no published kind node image that devstack knows \
             (kindest/node:v1.36.5 is not pinned); the versions it knows are v1.37.0, v1.36.4, v1.35.8, v1.34.11"
        );
        settings.cluster.version = None;
        check_version(&settings, &pins).expect("an explicit image stays free");
    }

    /// Serves `body` to every request on a local port, as a download
    /// mirror does; the port.
    async fn serve(body: &'static [u8]) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body).await;
            }
        });
        port
    }

    /// The kind CLI in a cache under a temporary DEVSTACK_HOME, damaged on
    /// disk after its download: offline it is refused naming its path and
    /// the command that fetches it again; online it is fetched again.
    #[tokio::test]
    async fn a_damaged_cached_kind_is_refused_offline_and_fetched_again_online() {
        const KIND: &[u8] = b"#!/bin/sh\necho kind v0.33.0\n";
        let home = tempfile::tempdir().unwrap();
        let pin = kind_cli_pin().unwrap();
        let pins = home.path().join("pins.json");
        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(KIND)));
        let pins_file = serde_json::json!({
            "apiVersion": "devstack.dev/v1alpha1", "kind": "Pins",
            "files": {pin.url: digest},
        });
        std::fs::write(&pins, pins_file.to_string()).unwrap();
        let mut settings = Settings::builtin(&Default::default()).unwrap();
        settings.state_dir = home.path().join("state");
        settings.images.pins_file = Some(pins);
        let online = format!("http://127.0.0.1:{}", serve(KIND).await);
        let offline = "http://127.0.0.1:9".to_string();

        settings.images.download_mirror = Some(online.clone());
        let path = fetch_kind(&settings).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), KIND);
        // Cached now: fetched from nowhere.
        settings.images.download_mirror = Some(offline.clone());
        assert_eq!(fetch_kind(&settings).await.unwrap(), path);

        std::fs::write(&path, b"#!/bin/sh\necho replaced\n").unwrap();
        let err = fetch_kind(&settings).await.unwrap_err();
        assert_eq!(err.kind(), crate::Kind::Prerequisite);
        let message = err.message();
        assert!(
            message.contains(&format!("the cached kind at {}", path.display()))
                && message.contains("damaged")
                && message.contains(&digest)
                && message.contains("fetching it again failed"),
            "{message}"
        );
        let hint = err.hint().unwrap();
        assert!(hint.contains("`devstack pull`"), "{hint}");
        assert_ne!(std::fs::read(&path).unwrap(), KIND, "nothing was fetched");

        settings.images.download_mirror = Some(online);
        assert_eq!(fetch_kind(&settings).await.unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap(), KIND, "fetched again");
    }

    /// An image tarball in the cache no longer the size it was saved with
    /// is not used: with no engine to save or pull it again from, the
    /// error names the file and the fix.
    #[tokio::test]
    async fn a_truncated_cached_image_is_refused_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = cache::Cache::open(dir.path()).unwrap();
        let file = "images/devstack-test-1.tar";
        let partial = cache.partial(file).unwrap();
        std::fs::write(&partial, vec![7u8; 4096]).unwrap();
        let path = cache.commit(&partial, file).unwrap();
        cache
            .record(crate::bundle::Artifact {
                kind: "image".into(),
                role: None,
                name: "example.invalid/devstack-test".into(),
                tag: Some("1".into()),
                version: Some("1".into()),
                digest: None,
                size: Some(4096),
                file: file.into(),
            })
            .unwrap();
        let pins = Pins::default();
        let mirrors = Default::default();
        let fetcher = fetch::Fetcher {
            pins: &pins,
            mirrors: &mirrors,
            download_mirror: None,
            progress: &|_| {},
        };
        let wanted = Wanted {
            kind: "image",
            role: None,
            version: "1".into(),
            origin: Origin::Image("example.invalid/devstack-test:1".into()),
        };
        let absent = crate::docker::absent();
        let got = fetcher
            .image(absent.as_ref(), &mut cache, &wanted)
            .await
            .unwrap();
        assert_eq!(got.outcome, Outcome::Cached);

        std::fs::write(&path, vec![7u8; 1000]).unwrap();
        let err = fetcher
            .image(absent.as_ref(), &mut cache, &wanted)
            .await
            .unwrap_err();
        let message = err.message();
        assert!(
            message.contains(&format!("at {} is damaged", path.display()))
                && message.contains("1000 bytes, not 4096 bytes"),
            "{message}"
        );
        assert!(err.hint().unwrap().contains("`devstack pull`"));
    }

    /// A bundle's files are checked against its index before use: a
    /// damaged one is refused naming it, with the fix for where it lives
    /// (a bundle is copied again, devstack's cache pulled again).
    #[test]
    fn damaged_files_of_a_bundle_or_the_cache_are_refused_with_their_fix() {
        let home = tempfile::tempdir().unwrap();
        let mut settings = Settings::builtin(&Default::default()).unwrap();
        settings.state_dir = home.path().join("state");
        let user_bundle = home.path().join("bundle");
        for dir in [user_bundle, settings.artifact_cache()] {
            let mut cache = cache::Cache::open(&dir).unwrap();
            let partial = cache.partial("bin/kind").unwrap();
            std::fs::write(&partial, b"kind").unwrap();
            let path = cache.commit(&partial, "bin/kind").unwrap();
            cache
                .record(crate::bundle::Artifact {
                    kind: "binary".into(),
                    role: None,
                    name: "kind".into(),
                    tag: None,
                    version: Some("v0.33.0".into()),
                    digest: Some(fetch::sha256_file(&path).unwrap()),
                    size: Some(4),
                    file: "bin/kind".into(),
                })
                .unwrap();
            let bundle = crate::bundle::Bundle::open(&dir).unwrap();
            let artifact = bundle.artifact("binary").unwrap();
            check_file(&settings, &bundle, artifact).unwrap();
            assert_eq!(read_checked(&settings, &bundle, artifact).unwrap(), b"kind");

            std::fs::write(&path, b"kinD").unwrap();
            let errors = [
                check_file(&settings, &bundle, artifact).unwrap_err(),
                read_checked(&settings, &bundle, artifact).unwrap_err(),
            ];
            for err in errors {
                assert!(
                    err.message()
                        .contains(&format!("kind at {} is damaged", path.display())),
                    "{}",
                    err.message()
                );
                let hint = err.hint().unwrap();
                if dir == settings.artifact_cache() {
                    assert!(hint.contains("`devstack pull`"), "{hint}");
                } else {
                    assert!(
                        hint.contains(&format!("copy the bundle {}", dir.display())),
                        "{hint}"
                    );
                }
            }
        }
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(2048), "2 KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024 + 512 * 1024), "5.5 MiB");
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024), "3.00 GiB");
    }
}
