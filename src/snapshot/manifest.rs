//! What `manifest.json` records, and whether a snapshot fits the settings
//! it is to be restored with (profile, versions, provider).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cluster::k3s::{self, SavedCluster, SavedNode};
use crate::docker;
use crate::error::Error;
use crate::profile::{Provider, Settings};

/// The snapshot layout this devstack writes and reads.
pub const FORMAT: u32 = 2;
/// The manifest's file name in a snapshot's directory and an exported file.
pub(super) const MANIFEST: &str = "manifest.json";

/// What `manifest.json` records.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: u32,
    pub name: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// The stack it was saved from.
    pub stack: String,
    /// The profile it was made with, as named (`ci`, or a file's stem).
    pub profile: String,
    /// Digests of the profile's parts the saved cluster was built from, by
    /// part: a restore needs the same.
    pub profile_digests: BTreeMap<String, String>,
    /// The version matrix it was made with (devstack's own included).
    pub versions: BTreeMap<String, String>,
    pub nodes: Vec<SavedNode>,
    pub files: Vec<SavedFile>,
    /// The K3s cluster token (never printed: see [`Info`]); empty for Kind.
    #[serde(default)]
    pub(super) k3s_token: String,
    /// The stack network's subnet, which a restore asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
}

/// One archive of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedFile {
    /// The node container it was read from.
    pub node: String,
    /// The path in the node it holds (its last component is the archive's
    /// top entry).
    pub path: String,
    /// The archive's file name in the snapshot.
    pub file: String,
    pub bytes: u64,
    pub blake3: String,
    /// It holds the node's shared part (see `snapshot/shared.rs`): a
    /// restore puts it in the snapshot's volume, not in the node, whose
    /// `path` is where the node sees that volume.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

/// A snapshot as `snapshot list` shows it: the manifest without the token.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    pub name: String,
    pub created: u64,
    pub stack: String,
    pub profile: String,
    pub versions: BTreeMap<String, String>,
    pub nodes: Vec<String>,
    pub bytes: u64,
    pub path: PathBuf,
}

impl Manifest {
    pub fn info(&self, dir: &Path) -> Info {
        Info {
            name: self.name.clone(),
            created: self.created,
            stack: self.stack.clone(),
            profile: self.profile.clone(),
            versions: self.versions.clone(),
            nodes: self.nodes.iter().map(|n| n.identity.clone()).collect(),
            bytes: self.files.iter().map(|f| f.bytes).sum(),
            path: dir.to_path_buf(),
        }
    }

    pub(super) fn saved_cluster(&self) -> SavedCluster {
        SavedCluster {
            nodes: self.nodes.clone(),
            token: self.k3s_token.clone(),
            subnet: self.subnet.clone(),
        }
    }

    /// The network a restore asks for (see [`k3s::restored_addressing`]).
    pub fn addressing(&self) -> Option<docker::Addressing> {
        k3s::restored_addressing(&self.saved_cluster())
    }
}

/// The profile's name as people say it: a shipped profile's name, or a
/// profile file's stem (`profiles/ci.yaml` -> `ci`).
pub(super) fn profile_name(settings: &Settings) -> String {
    if let Some(shipped) = settings
        .profile
        .strip_prefix("<shipped profile ")
        .and_then(|rest| rest.strip_suffix('>'))
    {
        return shipped.to_string();
    }
    Path::new(&settings.profile)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| settings.profile.clone())
}

/// Digests of the profile's parts a saved cluster is made of. Left out:
/// LocalStack and the secrets (a restore seeds a new LocalStack from the
/// profile), ports, timeouts and the round trip's options.
pub fn profile_digests(settings: &Settings) -> BTreeMap<String, String> {
    let c = &settings.cluster;
    let g = &settings.gitops;
    // The stack registry's own mirror names its port, which each stack
    // chooses: a snapshot restores beside the stack it came from.
    let mut mirrors = c.registry_mirrors.clone();
    if let Some(host) = settings.registry.host() {
        mirrors.remove(&host);
    }
    let parts = [
        (
            "cluster",
            serde_json::json!({
                "provider": c.provider, "image": c.image, "servers": c.servers,
                "agents": c.agents, "k3sArgs": c.k3s_args, "registryMirrors": mirrors,
            }),
        ),
        (
            "flux",
            serde_json::to_value(&settings.flux).unwrap_or_default(),
        ),
        (
            "eso",
            serde_json::to_value(&settings.eso).unwrap_or_default(),
        ),
        (
            "gitops",
            serde_json::json!({
                "source": g.source, "layout": g.layout, "gitUrl": g.git_url,
                "gitBranch": g.git_branch, "gitPath": g.git_path,
            }),
        ),
        (
            "images",
            serde_json::json!({ "preload": settings.images.preload }),
        ),
    ];
    parts
        .into_iter()
        .map(|(part, value)| {
            let digest = blake3::hash(value.to_string().as_bytes()).to_hex();
            (part.to_string(), digest[..16].to_string())
        })
        .collect()
}

/// The version matrix a stack of these settings runs.
pub fn versions(settings: &Settings) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("devstack".into(), env!("CARGO_PKG_VERSION").into()),
        (
            "provider".into(),
            settings.cluster.provider.as_str().to_string(),
        ),
        ("clusterImage".into(), settings.cluster.image.clone()),
        ("flux".into(), settings.flux.version.clone()),
        ("esoChart".into(), settings.eso.chart_version.clone()),
        ("localstackImage".into(), settings.localstack.image.clone()),
    ])
}

/// Why a snapshot cannot be restored with these settings, if it cannot.
pub fn check(manifest: &Manifest, settings: &Settings) -> Result<(), Error> {
    let name = &manifest.name;
    if manifest.format != FORMAT {
        return Err(Error::user(format!(
            "snapshot `{name}` has format {}, and this devstack reads format {FORMAT}",
            manifest.format
        ))
        .with_hint(format!(
            "save it again with this devstack (`devstack snapshot save {name}` on a stack it brought up)"
        )));
    }
    require_supported(settings)?;
    let had_provider = manifest.versions.get("provider").map(String::as_str);
    let provider = settings.cluster.provider.as_str();
    if let Some(had) = had_provider.filter(|had| *had != provider) {
        return Err(Error::user(format!(
            "snapshot `{name}` holds a {had} cluster, and this stack's provider is {provider}"
        ))
        .with_hint(format!(
            "restore it with `--provider {had}` (or `cluster.provider: {had}` in the profile)"
        )));
    }
    let want = versions(settings);
    // LocalStack is created anew on restore: its image may differ.
    let differ: Vec<String> = want
        .iter()
        .filter(|(key, _)| key.as_str() != "localstackImage")
        .filter_map(|(key, value)| {
            let had = manifest
                .versions
                .get(key)
                .map(String::as_str)
                .unwrap_or("?");
            (had != value).then(|| format!("{key} {had} (snapshot) vs {value} (now)"))
        })
        .collect();
    if !differ.is_empty() {
        return Err(Error::user(format!(
            "snapshot `{name}` was made with other versions: {}",
            differ.join(", ")
        ))
        .with_hint(format!(
            "bring the stack up cold with these versions and save it again (`devstack up`, then `devstack snapshot save {name}`)"
        )));
    }
    let profile = profile_name(settings);
    if manifest.profile != profile {
        return Err(Error::user(format!(
            "snapshot `{name}` was made from profile `{}`, not `{profile}`",
            manifest.profile
        ))
        .with_hint(format!(
            "restore it with its profile (`-p {}`), or save a snapshot of this profile's stack",
            manifest.profile
        )));
    }
    let now = profile_digests(settings);
    let changed: Vec<&str> = now
        .iter()
        .filter(|(part, digest)| manifest.profile_digests.get(*part) != Some(digest))
        .map(|(part, _)| part.as_str())
        .collect();
    if !changed.is_empty() {
        return Err(Error::user(format!(
            "profile `{profile}` changed since snapshot `{name}` was made, in: {}",
            changed.join(", ")
        ))
        .with_hint(format!(
            "bring the stack up cold with the profile as it is and save it again (`devstack snapshot save {name}`)"
        )));
    }
    Ok(())
}

/// `snapshot save` of a stack that does not exist (exit 4, as every command
/// reading a missing stack): the command that creates one it can save.
pub fn nothing_to_save(settings: &Settings) -> Error {
    Error::unhealthy(format!(
        "stack `{}` does not exist: there is no cluster to save",
        settings.name
    ))
    .with_hint("create it with `devstack up`, then save it")
}

/// Whether a stack of these settings can be saved and restored: a K3s or
/// Kind cluster devstack made, with one Kind control plane (etcd's members
/// keep their addresses, which a restore changes), and LocalStack beside
/// it (a restored cluster would lack an in-cluster LocalStack's secrets
/// and GitOps bucket).
pub fn require_supported(settings: &Settings) -> Result<(), Error> {
    if settings.localstack.mode == crate::profile::LocalStackMode::InCluster {
        return Err(Error::user(
            "snapshots hold a cluster with LocalStack beside it, and this stack runs LocalStack in its cluster (`localstack.mode: in-cluster`), whose secrets and GitOps bucket a restored cluster would not have",
        )
        .with_hint("use `localstack.mode: container` (the default) for stacks you snapshot"));
    }
    match settings.cluster.provider {
        Provider::K3s => Ok(()),
        Provider::Kind if settings.cluster.servers == 1 => Ok(()),
        Provider::Kind => Err(Error::user(format!(
            "snapshots hold Kind clusters of one control plane, and this profile has {} (`cluster.servers`): etcd's members keep the addresses they had, and restored nodes get new ones",
            settings.cluster.servers
        ))
        .with_hint("use `cluster.servers: 1` (workers are fine) for stacks you snapshot")),
        Provider::Existing => Err(Error::user(
            "snapshots hold clusters devstack runs in Docker, and this stack's cluster is an existing one devstack did not create",
        )
        .with_hint("use `--provider k3s` or `--provider kind` for stacks you snapshot")),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::snapshot) fn settings() -> Settings {
        crate::profile::select(Some("ci"), &Default::default()).unwrap()
    }

    pub(in crate::snapshot) fn manifest_for(settings: &Settings) -> Manifest {
        Manifest {
            format: FORMAT,
            name: "base".into(),
            created: 0,
            stack: settings.name.clone(),
            profile: profile_name(settings),
            profile_digests: profile_digests(settings),
            versions: versions(settings),
            nodes: Vec::new(),
            files: Vec::new(),
            k3s_token: "t0ken".into(),
            subnet: None,
        }
    }

    #[test]
    fn a_snapshot_of_the_same_profile_and_versions_is_accepted() {
        let settings = settings();
        check(&manifest_for(&settings), &settings).unwrap();
    }

    #[test]
    fn another_format_is_refused_with_the_fix() {
        let settings = settings();
        let mut manifest = manifest_for(&settings);
        manifest.format = FORMAT + 1;
        let err = check(&manifest, &settings).unwrap_err();
        assert!(err.message().contains("format 2"), "{}", err.message());
        assert!(err.hint().unwrap().contains("snapshot save base"));
    }

    #[test]
    fn other_versions_are_named() {
        let settings = settings();
        let mut manifest = manifest_for(&settings);
        manifest.versions.insert("flux".into(), "v2.8.0".into());
        manifest
            .versions
            .insert("localstackImage".into(), "localstack/localstack:4.0".into());
        let err = check(&manifest, &settings).unwrap_err();
        assert!(
            err.message().contains("flux v2.8.0 (snapshot) vs"),
            "{}",
            err.message()
        );
        // LocalStack is created anew on restore: its version does not matter.
        assert!(!err.message().contains("localstack"), "{}", err.message());
    }

    #[test]
    fn another_profile_is_refused() {
        let settings = settings();
        let mut manifest = manifest_for(&settings);
        manifest.profile = "dev".into();
        let err = check(&manifest, &settings).unwrap_err();
        assert!(
            err.message().contains("made from profile `dev`, not `ci`"),
            "{}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("-p dev"));
    }

    #[test]
    fn a_changed_profile_part_is_named() {
        let settings = settings();
        let manifest = manifest_for(&settings);
        let mut changed = settings.clone();
        changed
            .cluster
            .k3s_args
            .push("--disable-network-policy".into());
        let err = check(&manifest, &changed).unwrap_err();
        assert!(err.message().ends_with("in: cluster"), "{}", err.message());
        // Parts a restore makes anew are not part of the identity.
        let mut reseeded = settings.clone();
        reseeded.secrets.clear();
        reseeded.timeouts.cluster = reseeded.timeouts.verify;
        check(&manifest, &reseeded).unwrap();
    }

    #[test]
    fn a_kind_snapshot_fits_kind_and_is_refused_on_k3s_with_the_fix() {
        let kind = settings().with_provider(Provider::Kind).unwrap();
        let manifest = manifest_for(&kind);
        check(&manifest, &kind).unwrap();
        let k3s = settings();
        let err = check(&manifest, &k3s).unwrap_err();
        assert!(
            err.message().contains("holds a kind cluster"),
            "{}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("--provider kind"));
    }

    #[test]
    fn several_kind_control_planes_and_existing_clusters_are_refused() {
        let mut kind = settings().with_provider(Provider::Kind).unwrap();
        kind.cluster.servers = 3;
        let err = require_supported(&kind).unwrap_err();
        assert!(
            err.message().contains("one control plane"),
            "{}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("cluster.servers: 1"));
        let existing = settings().with_provider(Provider::Existing).unwrap();
        let err = require_supported(&existing).unwrap_err();
        assert!(err.hint().is_some());
    }

    #[test]
    fn a_manifest_without_a_token_reads() {
        let settings = settings();
        let mut value = serde_json::to_value(manifest_for(&settings)).unwrap();
        value.as_object_mut().unwrap().remove("k3sToken");
        let manifest: Manifest = serde_json::from_value(value).unwrap();
        assert_eq!(manifest.k3s_token, "");
    }

    #[test]
    fn the_token_is_in_the_manifest_but_not_in_what_list_shows() {
        let settings = settings();
        let manifest = manifest_for(&settings);
        let file = serde_json::to_string(&manifest).unwrap();
        assert!(file.contains("t0ken"));
        let shown = serde_json::to_string(&manifest.info(Path::new("/s"))).unwrap();
        assert!(!shown.contains("t0ken"), "{shown}");
    }

    #[test]
    fn the_registry_port_of_the_saved_stack_does_not_stop_a_restore_beside_it() {
        let mut saved = settings();
        saved.registry.enabled = true;
        saved.registry.bound_port = Some(5111);
        saved
            .cluster
            .registry_mirrors
            .insert("localhost:5111".into(), vec!["http://r:5000".into()]);
        let mut other = settings();
        other.registry.enabled = true;
        assert_eq!(profile_digests(&saved), profile_digests(&other));
    }
}
