//! `snapshot save`: the stack's nodes paused, each saved path read into a
//! hashed archive (the node's state, K3s's or Kind's `/var`, split into its
//! own and its shared part), and the snapshot moved into the store.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use super::CHUNK;
use super::manifest::{
    FORMAT, Info, Manifest, SavedFile, profile_digests, profile_name, require_supported, versions,
};
use super::shared;
use super::store::{Partial, Snapshot, check_name, io_error, store_dir, write_manifest};
use super::volume::{fill_shared_volume, prune_shared_volumes};
use crate::cluster::SnapshotLayout;
use crate::cluster::k3s::SHARED_IN_NODE;
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::profile::Settings;

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
    require_supported(settings)?;
    let cluster = crate::cluster::saved_cluster(engine, settings).await?;
    let layout = crate::cluster::snapshot_layout(settings.cluster.provider);
    let mut versions = versions(settings);
    versions.extend(crate::cluster::snapshot_versions(engine, settings).await?);
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
            layout
                .paths
                .iter()
                .map(move |path| read_node_path(engine, &node.container, path, layout, dir))
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
        versions,
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

/// The archives of one of a node's saved paths (`layout.paths`): the
/// first, the node's state, in two ([`shared`]), the others whole.
async fn read_node_path(
    engine: &dyn Engine,
    container: &str,
    path: &str,
    layout: SnapshotLayout,
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
    if path != layout.paths[0] {
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
        layout.shared_dirs,
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
