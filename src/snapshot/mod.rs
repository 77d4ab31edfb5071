//! Snapshots: a verified K3s stack's cluster saved as files, and new stacks
//! created from them in seconds instead of a cold `up`.
//!
//! A snapshot is a directory under `<state dir>/snapshots/<name>/`: one tar
//! archive per saved path of each node ([`k3s::SNAPSHOT_PATHS`]: the
//! datastore, containerd's images and containers, kubelet and CNI files, the
//! node password) and `manifest.json`, which records the profile and the
//! version matrix it was made with, the nodes' Kubernetes names and every
//! archive's size and BLAKE3 checksum. `export` packs the directory into
//! one tar file for a CI cache; `import` unpacks it, checking every archive.
//!
//! The nodes are paused while their files are read, so the archives are one
//! consistent cut, as after a power cut: the datastore (SQLite) and
//! containerd's database are built to start from that. LocalStack is not
//! saved (community LocalStack keeps no state): a restore seeds a new one
//! from the profile, and `up` refills the GitOps bucket and lets Flux and
//! ESO reconcile against it.
//!
//! A snapshot holds the cluster's credentials (its CA keys, the join token)
//! and the Kubernetes Secrets ESO synced: its files are readable by their
//! owner only.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bollard::models::{ContainerCreateBody, HostConfig, VolumeCreateRequest};
use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

mod shared;

use crate::cluster::k3s::{self, SHARED_IN_NODE, SavedCluster, SavedNode};
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::profile::{Provider, Settings};
use crate::ui::Step;

/// The snapshot layout this devstack writes and reads.
pub const FORMAT: u32 = 2;
const MANIFEST: &str = "manifest.json";
/// Read and hashed in pieces this large while streaming to the engine.
const CHUNK: usize = 4 << 20;
/// A file a shared volume gets once it holds its whole archive.
const FILLED_MARK: &str = ".devstack-filled";
/// Labels of a shared volume: the snapshot's name, and the store it
/// belongs to (stores of other state directories leave it alone).
const LABEL_SNAPSHOT: &str = "dev.devstack.snapshot";
const LABEL_SNAPSHOT_STORE: &str = "dev.devstack.snapshot-store";

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
    /// The K3s cluster token (never printed: see [`Info`]).
    k3s_token: String,
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
    /// It holds the node's shared part ([`shared`]): a restore puts it in
    /// the snapshot's volume, not in the node, whose `path` is where the
    /// node sees that volume.
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

    fn saved_cluster(&self) -> SavedCluster {
        SavedCluster {
            nodes: self.nodes.clone(),
            token: self.k3s_token.clone(),
            subnet: self.subnet.clone(),
        }
    }
}

/// A snapshot in the store, its manifest read and checked against the
/// settings it is to be restored with.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub manifest: Manifest,
    pub dir: PathBuf,
}

/// What `save` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SaveReport {
    pub snapshot: Info,
    /// Whether it replaced a snapshot of the same name.
    pub replaced: bool,
    /// How long the nodes were paused.
    pub paused_ms: u64,
    pub elapsed_ms: u64,
}

pub fn store_dir(settings: &Settings) -> PathBuf {
    settings.state_dir.join("snapshots")
}

/// A snapshot name is a directory name and appears in commands: lowercase
/// letters, digits, `.`, `_` and `-`, starting with a letter or digit.
pub fn check_name(name: &str) -> Result<(), Error> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(
            Error::user(format!("`{name}` is not a valid snapshot name")).with_hint(
                "use up to 63 lowercase letters, digits, `.`, `_` or `-`, starting with a letter or digit",
            ),
        )
    }
}

/// The profile's name as people say it: a shipped profile's name, or a
/// profile file's stem (`profiles/ci.yaml` -> `ci`).
fn profile_name(settings: &Settings) -> String {
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
    let parts = [
        (
            "cluster",
            serde_json::json!({
                "provider": c.provider, "image": c.image, "servers": c.servers,
                "agents": c.agents, "k3sArgs": c.k3s_args, "registryMirrors": c.registry_mirrors,
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
    require_k3s(settings)?;
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

/// Snapshots hold K3s clusters only: Kind's nodes keep kubeadm's
/// certificates and etcd's member address bound to the node's IP, which a
/// restore into a new network changes.
pub fn require_k3s(settings: &Settings) -> Result<(), Error> {
    if settings.cluster.provider == Provider::K3s {
        return Ok(());
    }
    Err(Error::user(format!(
        "snapshots hold K3s clusters, and this stack's provider is {}",
        settings.cluster.provider.as_str()
    ))
    .with_hint("use `--provider k3s` (or `cluster.provider: k3s` in the profile)"))
}

fn io_error(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::internal(what).with_source(e)
}

/// Writes a file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error(format!("create {}", path.display())))?;
    file.write_all(bytes)
        .map_err(io_error(format!("write {}", path.display())))
}

fn create_private_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            Error::prerequisite(format!("cannot create {}", dir.display()))
                .with_source(e)
                .with_hint("make devstack's state directory (DEVSTACK_HOME) writable")
        })
}

/// A directory beside the store's snapshots, removed when dropped unless
/// it was moved into place: a save or import that fails leaves nothing.
struct Partial(Option<PathBuf>);

impl Partial {
    fn new(settings: &Settings, name: &str) -> Result<Self, Error> {
        let store = store_dir(settings);
        create_private_dir(&store)?;
        let dir = store.join(format!(".partial-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        create_private_dir(&dir)?;
        Ok(Partial(Some(dir)))
    }

    fn path(&self) -> &Path {
        self.0.as_deref().expect("not yet moved")
    }

    /// Moves the directory to `dest`, replacing what is there.
    fn finish(mut self, dest: &Path) -> Result<bool, Error> {
        let dir = self.0.take().expect("not yet moved");
        let replaced = dest.exists();
        if replaced {
            std::fs::remove_dir_all(dest)
                .map_err(io_error(format!("remove {}", dest.display())))?;
        }
        std::fs::rename(&dir, dest).map_err(io_error(format!("move {}", dir.display())))?;
        Ok(replaced)
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The archive file a node's path is saved in: `<container>-<last part>.tar`.
fn archive_name(node: &str, path: &str) -> String {
    let last = path.rsplit('/').next().unwrap_or(path);
    format!("{node}-{last}.tar")
}

/// Saves the stack's cluster as snapshot `name` (replacing one of that
/// name). The caller has verified the stack and holds its lock.
pub async fn save(
    engine: &dyn Engine,
    settings: &Settings,
    name: &str,
    progress: &(dyn Fn(String) + Sync),
) -> Result<SaveReport, Error> {
    let started = Instant::now();
    check_name(name)?;
    require_k3s(settings)?;
    let cluster = k3s::saved_cluster(engine, settings).await?;
    let partial = Partial::new(settings, name)?;
    let containers: Vec<&str> = cluster.nodes.iter().map(|n| n.container.as_str()).collect();
    progress(format!("pausing {} node(s)", containers.len()));
    let paused_at = Instant::now();
    let mut paused = Vec::new();
    let mut result = Ok(Vec::new());
    for container in &containers {
        match engine.pause_container(container).await {
            Ok(()) => paused.push(*container),
            Err(e) => {
                result = Err(docker::engine_error(format!("pause node {container}"), e));
                break;
            }
        }
    }
    if result.is_ok() {
        progress("reading the nodes' files".into());
        let dir = partial.path();
        let reads = cluster.nodes.iter().flat_map(|node| {
            k3s::SNAPSHOT_PATHS
                .iter()
                .map(move |path| read_node_path(engine, &node.container, path, dir))
        });
        result = futures::future::try_join_all(reads)
            .await
            .map(|files| files.into_iter().flatten().collect());
    }
    // Always, whatever failed: a paused stack is a broken one.
    let mut unpause_failed = None;
    for container in paused {
        if let Err(e) = engine.unpause_container(container).await {
            unpause_failed = Some(docker::engine_error(format!("unpause node {container}"), e));
        }
    }
    let paused_ms = paused_at.elapsed().as_millis() as u64;
    let files = result?;
    if let Some(err) = unpause_failed {
        return Err(err.with_hint("`docker unpause` it, or `devstack up` to repair the stack"));
    }
    let manifest = Manifest {
        format: FORMAT,
        name: name.to_string(),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default(),
        stack: settings.name.clone(),
        profile: profile_name(settings),
        profile_digests: profile_digests(settings),
        versions: versions(settings),
        nodes: cluster.nodes,
        files,
        k3s_token: cluster.token,
        subnet: cluster.subnet,
    };
    write_manifest(partial.path(), &manifest)?;
    let dest = store_dir(settings).join(name);
    let replaced = partial.finish(&dest)?;
    // Filled now, so that the first restore is as quick as the next.
    let snapshot = Snapshot {
        manifest: manifest.clone(),
        dir: dest.clone(),
    };
    for file in manifest.files.iter().filter(|f| f.shared) {
        fill_shared_volume(engine, settings, &snapshot, file, progress).await?;
    }
    prune_shared_volumes(engine, settings).await?;
    Ok(SaveReport {
        snapshot: manifest.info(&dest),
        replaced,
        paused_ms,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// The archives of one of a node's [`k3s::SNAPSHOT_PATHS`]: the K3s state
/// directory in two ([`shared`]), the others whole.
async fn read_node_path(
    engine: &dyn Engine,
    container: &str,
    path: &str,
    dir: &Path,
) -> Result<Vec<SavedFile>, Error> {
    let file = archive_name(container, path);
    let saved =
        |file: String, path: &str, (bytes, blake3): (u64, String), shared: bool| SavedFile {
            node: container.to_string(),
            path: path.to_string(),
            file,
            bytes,
            blake3,
            shared,
        };
    if path != k3s::SNAPSHOT_PATHS[0] {
        let out = HashedFile::create(&dir.join(&file))?;
        let out = feed(engine, container, path, out, |out, mut archive| {
            std::io::copy(&mut archive, out).map(drop)
        })
        .await?;
        return Ok(vec![saved(file, path, out.finish()?, false)]);
    }
    let shared_file = format!("{container}-shared.tar");
    let split = shared::Split::new(
        HashedFile::create(&dir.join(&file))?,
        HashedFile::create(&dir.join(&shared_file))?,
    );
    let root = last_component(path).to_string();
    let split = feed(engine, container, path, split, move |split, archive| {
        split.node_archive(archive, &root)
    })
    .await?;
    // A node restored from a snapshot links to layers in that snapshot's
    // volume: this snapshot takes copies of them.
    let split = if split.needs_volume() {
        let root = last_component(SHARED_IN_NODE).to_string();
        feed(
            engine,
            container,
            SHARED_IN_NODE,
            split,
            move |split, archive| split.volume_archive(archive, &root),
        )
        .await?
    } else {
        split
    };
    let (own, shared) = split.finish().map_err(|e| {
        Error::internal(format!("split the archive of {container}:{path}")).with_source(e)
    })?;
    Ok(vec![
        saved(file, path, own.finish()?, false),
        saved(shared_file, SHARED_IN_NODE, shared.finish()?, true),
    ])
}

fn last_component(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Streams the archive of `path` in a container through `work`, which runs
/// on a thread of its own, reading it as it arrives; `state` back.
async fn feed<T: Send + 'static>(
    engine: &dyn Engine,
    container: &str,
    path: &str,
    state: T,
    work: impl FnOnce(&mut T, ChunkReader) -> std::io::Result<()> + Send + 'static,
) -> Result<T, Error> {
    let (chunks, received) = tokio::sync::mpsc::channel::<Bytes>(8);
    let worker = tokio::task::spawn_blocking(move || {
        let mut state = state;
        let done = work(
            &mut state,
            ChunkReader {
                received,
                current: Bytes::new(),
            },
        );
        (state, done)
    });
    let pump = async move {
        let mut stream = engine.download_archive(container, path);
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| docker::engine_error(format!("read {container}:{path}"), e))?;
            if chunks.send(chunk).await.is_err() {
                break;
            }
        }
        Ok::<_, Error>(())
    };
    let (pumped, worked) = tokio::join!(pump, worker);
    let (state, done) = worked.map_err(|e| Error::internal("archive task").with_source(e))?;
    pumped?;
    done.map_err(|e| {
        Error::internal(format!("read the archive of {container}:{path}")).with_source(e)
    })?;
    Ok(state)
}

/// The chunks a channel delivers, as a blocking reader.
struct ChunkReader {
    received: tokio::sync::mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.received.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// A new private file, hashed as it is written.
struct HashedFile {
    out: std::io::BufWriter<std::fs::File>,
    hasher: blake3::Hasher,
    bytes: u64,
    path: PathBuf,
}

impl HashedFile {
    fn create(path: &Path) -> Result<Self, Error> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io_error(format!("create {}", path.display())))?;
        Ok(HashedFile {
            out: std::io::BufWriter::with_capacity(CHUNK, file),
            hasher: blake3::Hasher::new(),
            bytes: 0,
            path: path.to_path_buf(),
        })
    }

    /// Its size and BLAKE3, once all is on disk.
    fn finish(mut self) -> Result<(u64, String), Error> {
        self.out
            .flush()
            .map_err(io_error(format!("write {}", self.path.display())))?;
        Ok((self.bytes, self.hasher.finalize().to_hex().to_string()))
    }
}

impl Write for HashedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), Error> {
    let text = serde_json::to_vec_pretty(manifest).expect("manifest serializes");
    write_private(&dir.join(MANIFEST), &text)
}

fn not_found(name: &str) -> Error {
    Error::user(format!("there is no snapshot `{name}`")).with_hint(
        "`devstack snapshot list` shows the snapshots; `devstack snapshot import FILE` adds one",
    )
}

fn read_manifest(dir: &Path, name: &str) -> Result<Manifest, Error> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read(&path).map_err(io_error(format!("read {}", path.display())))?;
    serde_json::from_slice(&text).map_err(|e| damaged(name, &format!("its manifest: {e}")))
}

fn damaged(name: &str, what: &str) -> Error {
    Error::user(format!("snapshot `{name}` is damaged: {what}")).with_hint(format!(
        "remove it (`devstack snapshot rm {name}`) and save or import a good copy"
    ))
}

/// Snapshot `name` from the store, checked against `settings`.
pub fn open(settings: &Settings, name: &str) -> Result<Snapshot, Error> {
    check_name(name)?;
    let dir = store_dir(settings).join(name);
    if !dir.join(MANIFEST).exists() {
        return Err(not_found(name));
    }
    let manifest = read_manifest(&dir, name)?;
    check(&manifest, settings)?;
    for file in &manifest.files {
        let size = std::fs::metadata(dir.join(&file.file)).map(|m| m.len());
        if size.as_ref().ok() != Some(&file.bytes) {
            return Err(damaged(
                name,
                &format!("{} is missing or has another size", file.file),
            ));
        }
    }
    Ok(Snapshot { manifest, dir })
}

/// Every snapshot in the store, by name.
pub fn list(settings: &Settings) -> Result<Vec<Info>, Error> {
    let store = store_dir(settings);
    let entries = match std::fs::read_dir(&store) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(format!("read {}", store.display()))(e)),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if let Ok(manifest) = read_manifest(&entry.path(), &name) {
            out.push(manifest.info(&entry.path()));
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// What removing a snapshot did with its shared volumes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removal {
    /// Volumes a stack restored from it still mounts: that stack's `down`
    /// removes them.
    pub volumes_in_use: Vec<String>,
    /// Docker was not reachable, so its volumes stay until the next
    /// `down` or `snapshot rm` that reaches it.
    pub docker_unreachable: bool,
}

/// Removes snapshot `name` and the shared volumes no other snapshot of the
/// store has (those a running stack mounts stay; see [`Removal`]).
pub async fn remove(settings: &Settings, name: &str) -> Result<Removal, Error> {
    check_name(name)?;
    let dir = store_dir(settings).join(name);
    if !dir.exists() {
        return Err(not_found(name));
    }
    std::fs::remove_dir_all(&dir).map_err(io_error(format!("remove {}", dir.display())))?;
    let Ok(docker) = docker::connect().await else {
        return Ok(Removal {
            docker_unreachable: true,
            ..Removal::default()
        });
    };
    let engine = docker::shared(&docker);
    Ok(Removal {
        volumes_in_use: prune_shared_volumes(engine.as_ref(), settings).await?,
        docker_unreachable: false,
    })
}

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
        span.finish(k3s::create_restored_nodes(engine, settings, &saved, &shared).await)?
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
    k3s::start_restored_nodes(engine, settings, &restored, step).await
}

/// Points each restored node's InternalIP at its address on the new
/// network. A node that could not keep its address is registered with the
/// old one until K3s's cloud controller next updates it (minutes later),
/// and the API server reaches kubelets by it: `kubectl logs` and `exec`
/// would fail on the kubelet's certificate until then. Returns the nodes
/// whose address changed.
pub async fn correct_node_addresses(
    engine: &dyn Engine,
    settings: &Settings,
    client: &kube::Client,
) -> Result<Vec<String>, Error> {
    use k8s_openapi::api::core::v1::Node;
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let mut corrected = Vec::new();
    for node in k3s::saved_cluster(engine, settings).await?.nodes {
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
pub const KUBELET_CERTIFICATE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits until the API server reaches each of `nodes`' kubelets (what
/// `kubectl logs` and `exec` need). A node that moved starts its kubelet
/// with the certificate it had, for its old address, and K3s issues one
/// for the new address moments later; a restore that returned before that
/// left `kubectl logs` failing on the certificate. A kubelet still not
/// reached after `limit` is only reported: the stack itself works.
pub async fn wait_kubelets_reachable(
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

impl Manifest {
    /// The network a restore asks for (see [`k3s::restored_addressing`]).
    pub fn addressing(&self) -> Option<docker::Addressing> {
        k3s::restored_addressing(&self.saved_cluster())
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
    let (parent, last) = file
        .path
        .rsplit_once('/')
        .filter(|(parent, _)| parent.starts_with('/'))
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

/// Extracts the archive `file` into directory `into` of a container,
/// checking it against its checksum on the way.
async fn upload_checked(
    engine: &dyn Engine,
    container: &str,
    into: &str,
    dir: &Path,
    file: &SavedFile,
    snapshot: &str,
    what: &str,
) -> Result<(), Error> {
    let path = dir.join(&file.file);
    let source =
        std::fs::File::open(&path).map_err(io_error(format!("read {}", path.display())))?;
    let digest = Arc::new(Mutex::new(None));
    let body = hashed_stream(source, digest.clone());
    let mismatch = || {
        damaged(
            snapshot,
            &format!("{} does not match its checksum", file.file),
        )
    };
    if let Err(e) = engine.upload_archive(container, into, body).await {
        // A damaged header stops the engine before the checksum is known:
        // then the damage is what to report.
        let whole = tokio::task::spawn_blocking(move || {
            let mut reader = Hashing {
                inner: std::fs::File::open(&path)?,
                hasher: blake3::Hasher::new(),
                bytes: 0,
            };
            std::io::copy(&mut reader, &mut std::io::sink())?;
            Ok::<_, std::io::Error>((reader.bytes, reader.hasher.finalize().to_hex().to_string()))
        })
        .await;
        return match whole {
            Ok(Ok((bytes, hash))) if bytes != file.bytes || hash != file.blake3 => Err(mismatch()),
            _ => Err(docker::engine_error(
                format!("restore {what} into {container}:{into}"),
                e,
            )),
        };
    }
    let got: Option<(u64, String)> = digest.lock().unwrap().take();
    match got {
        Some((bytes, hash)) if bytes == file.bytes && hash == file.blake3 => Ok(()),
        _ => Err(mismatch()),
    }
}

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
async fn fill_shared_volume(
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
    let bundle = crate::cluster::preload::open_bundle(settings)?;
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

/// Every readable snapshot manifest in the store.
fn manifests(settings: &Settings) -> Vec<Manifest> {
    let Ok(entries) = std::fs::read_dir(store_dir(settings)) else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            read_manifest(&entry.path(), &name).ok()
        })
        .collect()
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

/// The file as a stream of chunks, read and hashed on a thread of its own a
/// few chunks ahead of the engine taking them; at the end, its size and
/// BLAKE3 go into `digest`.
fn hashed_stream(
    mut file: std::fs::File,
    digest: Arc<Mutex<Option<(u64, String)>>>,
) -> futures::stream::BoxStream<'static, std::io::Result<Bytes>> {
    let (chunks, received) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let mut hasher = blake3::Hasher::new();
        let mut bytes = 0u64;
        loop {
            let mut buf = vec![0u8; CHUNK];
            match read_full(&mut file, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    buf.truncate(n);
                    hasher.update(&buf);
                    bytes += n as u64;
                    if chunks.blocking_send(Ok(Bytes::from(buf))).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = chunks.blocking_send(Err(e));
                    return;
                }
            }
        }
        *digest.lock().unwrap() = Some((bytes, hasher.finalize().to_hex().to_string()));
    });
    futures::stream::unfold(received, |mut received| async move {
        received.recv().await.map(|chunk| (chunk, received))
    })
    .boxed()
}

/// Reads until `buf` is full or the file ends.
fn read_full(file: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: blake3::Hasher,
    bytes: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Packs snapshot `name` into one tar file: the manifest first, then every
/// archive, each checked against its checksum as it is copied (a damaged
/// snapshot is not exported). Written beside `dest` and renamed into place.
pub async fn export(settings: &Settings, name: &str, dest: &Path) -> Result<Info, Error> {
    check_name(name)?;
    let dir = store_dir(settings).join(name);
    if !dir.join(MANIFEST).exists() {
        return Err(not_found(name));
    }
    let manifest = read_manifest(&dir, name)?;
    let dest = dest.to_path_buf();
    let name = name.to_string();
    let info = manifest.info(&dir);
    tokio::task::spawn_blocking(move || export_blocking(&dir, &manifest, &name, &dest))
        .await
        .map_err(|e| Error::internal("export task").with_source(e))??;
    Ok(info)
}

fn export_blocking(dir: &Path, manifest: &Manifest, name: &str, dest: &Path) -> Result<(), Error> {
    let partial = dest.with_file_name(format!(
        ".{}.partial",
        dest.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "snapshot".into())
    ));
    let result = (|| {
        let out = std::fs::File::create(&partial).map_err(|e| {
            Error::user(format!("cannot write {}", partial.display()))
                .with_source(e)
                .with_hint("choose a FILE in a writable directory")
        })?;
        let mut builder = tar::Builder::new(std::io::BufWriter::with_capacity(CHUNK, out));
        let append = |builder: &mut tar::Builder<_>, path: &Path, entry: &str| {
            let file =
                std::fs::File::open(path).map_err(io_error(format!("read {}", path.display())))?;
            let size = file
                .metadata()
                .map_err(io_error(format!("read {}", path.display())))?
                .len();
            let mut header = tar::Header::new_gnu();
            header.set_size(size);
            header.set_mode(0o600);
            let mut reader = Hashing {
                inner: file,
                hasher: blake3::Hasher::new(),
                bytes: 0,
            };
            builder
                .append_data(&mut header, entry, &mut reader)
                .map_err(io_error(format!("write {}", partial.display())))?;
            Ok::<_, Error>((reader.bytes, reader.hasher.finalize().to_hex().to_string()))
        };
        append(&mut builder, &dir.join(MANIFEST), MANIFEST)?;
        for file in &manifest.files {
            let (bytes, hash) = append(&mut builder, &dir.join(&file.file), &file.file)?;
            if bytes != file.bytes || hash != file.blake3 {
                return Err(damaged(
                    name,
                    &format!("{} does not match its checksum", file.file),
                ));
            }
        }
        let mut out = builder
            .into_inner()
            .map_err(io_error(format!("write {}", partial.display())))?;
        out.flush()
            .map_err(io_error(format!("write {}", partial.display())))?;
        std::fs::rename(&partial, dest).map_err(io_error(format!("write {}", dest.display())))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// Adds the snapshot packed in `file` to the store, as `name` (default: the
/// name it was saved as). Every archive is checked against the manifest's
/// checksum before the snapshot appears; a damaged file adds nothing.
pub async fn import(settings: &Settings, file: &Path, name: Option<&str>) -> Result<Info, Error> {
    if let Some(name) = name {
        check_name(name)?;
    }
    let settings = settings.clone();
    let file = file.to_path_buf();
    let name = name.map(String::from);
    tokio::task::spawn_blocking(move || import_blocking(&settings, &file, name.as_deref()))
        .await
        .map_err(|e| Error::internal("import task").with_source(e))?
}

fn import_blocking(settings: &Settings, file: &Path, name: Option<&str>) -> Result<Info, Error> {
    let shown = file.display().to_string();
    let not_snapshot = |why: String| {
        Error::user(format!("{shown} is not a devstack snapshot file: {why}")).with_hint(
            "pass a file written by `devstack snapshot export`; a cut-off download or cache entry is refused",
        )
    };
    let source = std::fs::File::open(file).map_err(|e| {
        Error::user(format!("cannot read {shown}"))
            .with_source(e)
            .with_hint("check the path")
    })?;
    let mut archive = tar::Archive::new(std::io::BufReader::with_capacity(CHUNK, source));
    let mut entries = archive
        .entries()
        .map_err(|e| not_snapshot(format!("not a tar archive ({e})")))?;
    let mut first = entries
        .next()
        .ok_or_else(|| not_snapshot("it is empty".into()))?
        .map_err(|e| not_snapshot(format!("not a tar archive ({e})")))?;
    let first_name = first
        .path()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    if first_name != MANIFEST {
        return Err(not_snapshot(format!(
            "its first entry is `{first_name}`, not {MANIFEST}"
        )));
    }
    let mut text = Vec::new();
    first
        .read_to_end(&mut text)
        .map_err(|e| not_snapshot(format!("its manifest cannot be read ({e})")))?;
    let mut manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|e| not_snapshot(format!("its manifest cannot be read ({e})")))?;
    if manifest.format != FORMAT {
        return Err(Error::user(format!(
            "{shown} holds a snapshot of format {}, and this devstack reads format {FORMAT}",
            manifest.format
        ))
        .with_hint("import it with the devstack that exported it, or save the snapshot again with this one"));
    }
    let name = name.map(String::from).unwrap_or(manifest.name.clone());
    check_name(&name)?;
    let dest = store_dir(settings).join(&name);
    if dest.exists() {
        return Err(
            Error::user(format!("a snapshot named `{name}` exists already")).with_hint(format!(
                "remove it first (`devstack snapshot rm {name}`), or import under another name (`devstack snapshot import {shown} NAME`)"
            )),
        );
    }
    let partial = Partial::new(settings, &name)?;
    let mut seen = std::collections::BTreeSet::new();
    for entry in entries {
        let mut entry =
            entry.map_err(|e| not_snapshot(format!("it is cut off or damaged ({e})")))?;
        let entry_name = entry
            .path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(saved) = manifest.files.iter().find(|f| f.file == entry_name) else {
            return Err(not_snapshot(format!(
                "it holds `{entry_name}`, which its manifest does not list"
            )));
        };
        let path = partial.path().join(&saved.file);
        let mut out = std::io::BufWriter::with_capacity(
            CHUNK,
            std::fs::File::create(&path).map_err(io_error(format!("create {}", path.display())))?,
        );
        let mut reader = Hashing {
            inner: &mut entry,
            hasher: blake3::Hasher::new(),
            bytes: 0,
        };
        std::io::copy(&mut reader, &mut out)
            .map_err(|e| not_snapshot(format!("it is cut off or damaged ({e})")))?;
        out.flush()
            .map_err(io_error(format!("write {}", path.display())))?;
        if reader.bytes < saved.bytes {
            return Err(Error::user(format!(
                "{shown} is damaged: it is cut off ({} has {} of its {} bytes)",
                saved.file, reader.bytes, saved.bytes
            ))
            .with_hint("export the snapshot again, or restore a whole copy of the file; nothing was imported"));
        }
        if reader.bytes != saved.bytes || reader.hasher.finalize().to_hex().as_str() != saved.blake3
        {
            return Err(Error::user(format!(
                "{shown} is damaged: {} does not match its checksum",
                saved.file
            ))
            .with_hint("export the snapshot again, or restore a good copy of the file; nothing was imported"));
        }
        seen.insert(saved.file.clone());
    }
    if let Some(missing) = manifest.files.iter().find(|f| !seen.contains(&f.file)) {
        return Err(not_snapshot(format!(
            "it is cut off: {} is missing",
            missing.file
        )));
    }
    manifest.name = name.clone();
    write_manifest(partial.path(), &manifest)?;
    partial.finish(&dest)?;
    Ok(manifest.info(&dest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        crate::profile::select(Some("ci"), &Default::default()).unwrap()
    }

    fn manifest_for(settings: &Settings) -> Manifest {
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
    fn kind_stacks_are_refused() {
        let settings = settings().with_provider(Provider::Kind).unwrap();
        let err = check(&manifest_for(&settings), &settings).unwrap_err();
        assert!(err.message().contains("K3s"), "{}", err.message());
        assert!(err.hint().unwrap().contains("--provider k3s"));
    }

    #[test]
    fn names_are_directory_safe() {
        for good in ["ci", "ci-2026.11", "a_b"] {
            check_name(good).unwrap();
        }
        for bad in ["", "../x", "Ci", "-x", "a/b", ".hidden"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
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
}
