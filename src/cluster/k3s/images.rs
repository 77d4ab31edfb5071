//! The stack's images in K3s nodes: staged for a new node (K3s imports
//! its own pods' at boot, devstack the rest while the node boots), imported
//! into running nodes that lack them, then unstaged.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{IMAGES_IN_NODE, PRELOAD_IN_NODE, nodes};
use crate::cluster::preload;
use crate::docker::{self, Engine};
use crate::error::{Error, Kind};
use crate::profile::Settings;
use crate::ui::Step;

/// An image tarball for the nodes.
pub(super) struct NodeTarball {
    pub(super) path: std::path::PathBuf,
    /// Imported by K3s before its kubelet starts, for the cluster's own pods.
    pub(super) at_boot: bool,
}

pub(super) async fn node_tarballs(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<Vec<NodeTarball>, Error> {
    let wanted = preload::wanted_images(settings)?;
    let tarballs = preload::tarballs(engine, settings, &wanted).await?;
    Ok(wanted
        .into_iter()
        .zip(tarballs)
        .map(|(image, (_, path))| NodeTarball {
            path,
            at_boot: image.system,
        })
        .collect())
}

/// The images a node has, from `crictl images`; `None` when it cannot tell
/// yet (containerd still starting).
async fn crictl_images(
    engine: &dyn Engine,
    node: &str,
) -> Result<Option<std::collections::HashSet<String>>, Error> {
    let (code, stdout) = docker::exec_in(engine, node, &["crictl", "images", "-o", "json"]).await?;
    Ok((code == 0).then(|| image_tags(&stdout)))
}

/// The images each node has (empty when it cannot tell yet).
async fn node_images(
    engine: &dyn Engine,
    node: &str,
) -> Result<std::collections::HashSet<String>, Error> {
    Ok(crictl_images(engine, node).await?.unwrap_or_default())
}

/// The images a node has, once its containerd answers: a node that is
/// starting cannot tell yet, and "none" would have every image imported
/// again although its containerd holds them all (as after a restart).
async fn answered_images(
    engine: &dyn Engine,
    node: &str,
    limit: Duration,
) -> Result<std::collections::HashSet<String>, Error> {
    let started = Instant::now();
    loop {
        if let Some(images) = crictl_images(engine, node).await? {
            return Ok(images);
        }
        if started.elapsed() >= limit {
            return Err(Error::new(
                Kind::Timeout,
                format!(
                    "the container runtime of node {node} did not answer within {}s",
                    limit.as_secs()
                ),
            )
            .with_hint("raise `timeouts.preload`; `docker logs` of the node shows why"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The folder of the stack's state holding a node's staged tarballs.
pub(super) fn staged_images_dir(settings: &Settings, node: &str) -> std::path::PathBuf {
    crate::state::stack_dir(settings)
        .join("node-images")
        .join(node)
}

/// Who imports a staged tarball into the node's containerd.
#[derive(Clone, Copy)]
pub(super) enum Stage {
    /// K3s, from its images directory, before it starts the kubelet.
    Boot,
    /// devstack, while the node boots.
    Devstack,
}

impl Stage {
    pub(super) fn dir(self, staged: &Path) -> std::path::PathBuf {
        staged.join(match self {
            Stage::Boot => "k3s",
            Stage::Devstack => "devstack",
        })
    }
}

/// Where each tarball mounted as a file into a node (one that could not be
/// linked into its staged directories) is mounted.
async fn mounted_tarballs(
    engine: &dyn Engine,
    node: &str,
) -> Result<HashMap<std::path::PathBuf, String>, Error> {
    let mounts = docker::inspect(engine, node)
        .await?
        .and_then(|c| c.mounts)
        .unwrap_or_default();
    Ok(mounts
        .into_iter()
        .filter_map(|m| Some((std::path::PathBuf::from(m.source?), m.destination?)))
        .filter(|(_, destination)| {
            [IMAGES_IN_NODE, PRELOAD_IN_NODE]
                .iter()
                .any(|dir| destination.starts_with(&format!("{dir}/")))
        })
        .collect())
}

/// The name of `dir`'s hard link to `file`, if it holds one.
fn linked_name(dir: &Path, file: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let target = std::fs::metadata(file).ok()?;
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .find(|entry| {
            entry
                .metadata()
                .is_ok_and(|m| m.dev() == target.dev() && m.ino() == target.ino())
        })
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
}

/// Where node `node` finds `tarball`, and who imports it from there.
fn staged_in_node(
    settings: &Settings,
    node: &str,
    mounted: &HashMap<std::path::PathBuf, String>,
    tarball: &Path,
) -> Option<(Stage, String)> {
    let stage_of = |path: &str| {
        if path.starts_with(&format!("{IMAGES_IN_NODE}/")) {
            Stage::Boot
        } else {
            Stage::Devstack
        }
    };
    if let Some(destination) = mounted.get(tarball) {
        return Some((stage_of(destination), destination.clone()));
    }
    let staged = staged_images_dir(settings, node);
    [
        (Stage::Boot, IMAGES_IN_NODE),
        (Stage::Devstack, PRELOAD_IN_NODE),
    ]
    .into_iter()
    .find_map(|(stage, in_node)| {
        linked_name(&stage.dir(&staged), tarball).map(|name| (stage, format!("{in_node}/{name}")))
    })
    // Nodes of earlier devstack versions: one directory, K3s's.
    .or_else(|| {
        linked_name(&staged, tarball).map(|name| (Stage::Boot, format!("{IMAGES_IN_NODE}/{name}")))
    })
}

/// Empties the nodes' staged images directories once their images are in
/// containerd, so that a restart imports nothing (see `stage_tarballs`).
fn unstage_images(settings: &Settings, nodes: &[String]) {
    for node in nodes {
        let staged = staged_images_dir(settings, node);
        let dirs = [
            staged.clone(),
            Stage::Boot.dir(&staged),
            Stage::Devstack.dir(&staged),
        ];
        for entry in dirs.iter().flat_map(std::fs::read_dir).flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if let Err(e) = std::fs::remove_file(entry.path()) {
                tracing::debug!("unstage {}: {e}", entry.path().display());
            }
        }
    }
}

/// Makes every wanted image present in every node, within
/// `timeouts.preload`: K3s imports the cluster's own images staged for it
/// as the node starts; devstack imports the others staged into the node
/// with `ctr import`, and copies in and imports images added to the
/// profile since the node was created. Then the staged tarballs are
/// removed: the node's containerd keeps the images across restarts.
/// Returns how many images it imported itself.
pub(crate) async fn load_images(
    engine: &dyn Engine,
    settings: &Settings,
    step: &Step,
) -> Result<usize, Error> {
    let wanted = preload::wanted_images(settings)?;
    if wanted.is_empty() {
        return Ok(0);
    }
    let limit = settings.timeouts.preload.get();
    let started = Instant::now();
    let names: Vec<String> = nodes(engine, settings)
        .await?
        .into_iter()
        .map(|n| n.name)
        .collect();
    let mut tarballs = None;
    let mut imports = Vec::new();
    for node in &names {
        let present =
            answered_images(engine, node, limit.saturating_sub(started.elapsed())).await?;
        let missing: Vec<&preload::PreloadImage> = wanted
            .iter()
            .filter(|w| !present.contains(&crate::bundle::normalize_reference(&w.reference)))
            .collect();
        if missing.is_empty() {
            continue;
        }
        if tarballs.is_none() {
            tarballs = Some(preload::tarballs(engine, settings, &wanted).await?);
        }
        let all = tarballs.as_deref().unwrap_or_default();
        let mounted = mounted_tarballs(engine, node).await?;
        for image in missing {
            let Some((_, tarball)) = all.iter().find(|(r, _)| *r == image.reference) else {
                continue;
            };
            let absolute = std::fs::canonicalize(tarball).unwrap_or_else(|_| tarball.clone());
            let path = match staged_in_node(settings, node, &mounted, &absolute) {
                Some((Stage::Boot, _)) => continue,
                Some((Stage::Devstack, path)) => path,
                None => {
                    let path = format!("{IMAGES_IN_NODE}/added-{}", file_name(&absolute));
                    engine.upload(node, &path, &absolute).await?;
                    path
                }
            };
            let size = std::fs::metadata(&absolute).map_or(0, |m| m.len());
            imports.push((size, image.reference.as_str(), node.as_str(), path));
        }
    }
    // One at a time, the largest first: imports are CPU-bound, running them at once gains nothing.
    imports.sort_by_key(|import| std::cmp::Reverse(import.0));
    let imported = imports.len();
    for (_, reference, node, path) in &imports {
        step.progress(format!("importing {reference} into {node}"));
        let span = step.span(format!("import {reference} into {node}"));
        let left = limit.saturating_sub(started.elapsed());
        span.finish(import_staged(engine, node, reference, path, left).await)?;
    }
    let wanted: Vec<String> = wanted.into_iter().map(|i| i.reference).collect();
    // K3s imports its own (CoreDNS, pause) as the node starts; this is when
    // the last image is there.
    let span = step.span(format!("{} image(s) in every node", wanted.len()));
    span.finish(
        wait_images_imported(
            engine,
            &names,
            &wanted,
            limit.saturating_sub(started.elapsed()),
            step,
        )
        .await,
    )?;
    unstage_images(settings, &names);
    Ok(imported)
}

/// `ctr import` of the tarball at `$0`; ctr says why it failed on stderr,
/// which exec does not capture.
const IMPORT: &str = r#"ctr --namespace k8s.io images import "$0" 2>&1"#;

/// `ctr import` of a tarball the node has at `path`, which unpacks the
/// image too: the container that first runs it has nothing left to do.
async fn import_staged(
    engine: &dyn Engine,
    node: &str,
    reference: &str,
    path: &str,
    limit: Duration,
) -> Result<(), Error> {
    let import = ["sh", "-c", IMPORT, path];
    let (code, output) = docker::exec_within(engine, node, &import, limit).await?;
    if code != 0 {
        let said = output.trim().lines().last().unwrap_or_default().to_string();
        return Err(Error::internal(format!(
            "importing {reference} into node {node} failed (exit code {code}): {said}"
        ))
        .with_hint("`docker logs` of the node and `devstack doctor` (free disk) show why"));
    }
    Ok(())
}

/// K3s imports its images directory in the background while the node turns
/// Ready; workloads must not start before the preloaded images are there, or
/// they would try to pull them.
async fn wait_images_imported(
    engine: &dyn Engine,
    nodes: &[String],
    wanted: &[String],
    timeout: Duration,
    step: &Step,
) -> Result<(), Error> {
    if wanted.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    loop {
        let mut missing = Vec::new();
        for node in nodes {
            let present = node_images(engine, node).await?;
            missing.extend(
                wanted
                    .iter()
                    .filter(|w| !present.contains(&crate::bundle::normalize_reference(w)))
                    .map(|w| format!("{w} on {node}")),
            );
        }
        if missing.is_empty() {
            return Ok(());
        }
        step.progress(format!("importing images ({} left)", missing.len()));
        if started.elapsed() >= timeout {
            return Err(Error::new(
                Kind::Timeout,
                format!(
                    "preloaded images were not imported within {}s: {}",
                    timeout.as_secs(),
                    missing.join(", ")
                ),
            )
            .with_hint("raise `timeouts.preload`; `docker logs` of the node shows the import"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Normalized `repoTags` from `crictl images -o json`.
fn image_tags(json: &str) -> std::collections::HashSet<String> {
    let value: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    value["images"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["repoTags"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t.as_str().map(crate::bundle::normalize_reference))
        .collect()
}

pub(super) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "image.tar".into())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::super::engine_tests::{Fixture, fixture, step};
    use super::super::node::create_nodes;
    use super::*;

    /// The nodes' containerd, faked: `crictl images` lists `present` and
    /// what was imported since, `ctr import PATH` adds `image_of(PATH)`.
    /// The imported paths, in order.
    fn fake_containerd(
        f: &Fixture,
        present: &[&str],
        image_of: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Arc<Mutex<Vec<String>>> {
        let seen: Arc<Mutex<Vec<String>>> =
            Arc::new(Mutex::new(present.iter().map(|i| i.to_string()).collect()));
        let imports: Arc<Mutex<Vec<String>>> = Arc::default();
        let order = imports.clone();
        f.engine.on_exec(move |_, cmd| match cmd {
            ["crictl", "images", ..] => {
                let tags: Vec<_> = seen.lock().unwrap().clone();
                (
                    0,
                    serde_json::json!({"images": [{"repoTags": tags}]}).to_string(),
                )
            }
            ["sh", "-c", script, path] if *script == IMPORT => {
                order.lock().unwrap().push(path.to_string());
                seen.lock().unwrap().push(image_of(path));
                (0, String::new())
            }
            other => panic!("unexpected command {other:?}"),
        });
        imports
    }

    #[tokio::test]
    async fn k3s_imports_its_own_images_at_boot_and_devstack_the_rest_while_it_boots() {
        let f = fixture("");
        let bundle = tempfile::tempdir().unwrap();
        std::fs::create_dir(bundle.path().join("images")).unwrap();
        let image = |role: &str, name: &str, file: &str, bytes: usize| {
            std::fs::write(bundle.path().join("images").join(file), vec![0u8; bytes]).unwrap();
            serde_json::json!({"kind": "image", "role": role, "name": name, "tag": "v1",
                "version": "v1", "file": format!("images/{file}")})
        };
        let index = serde_json::json!({"apiVersion": "devstack.dev/v1alpha1", "kind": "Bundle",
        "artifacts": [
            image("pause", "example.test/pause", "pause.tar", 10),
            image("flux-source-controller", "example.test/source", "source.tar", 20),
            image("flux-kustomize-controller", "example.test/kustomize", "kustomize.tar", 30),
        ]});
        std::fs::write(bundle.path().join("index.json"), index.to_string()).unwrap();
        let mut settings = f.settings.clone();
        settings.images.bundle = Some(bundle.path().to_path_buf());

        create_nodes(f.engine.as_ref(), &settings, 6550, &step())
            .await
            .unwrap();
        let server = f.engine.container("devstack-t-server-0").unwrap();
        let staged = staged_images_dir(&settings, "devstack-t-server-0");
        for (dir, in_node) in [("k3s", IMAGES_IN_NODE), ("devstack", PRELOAD_IN_NODE)] {
            let bind = format!("{}:{in_node}", staged.join(dir).display());
            assert!(server.binds.contains(&bind), "{bind} in {:?}", server.binds);
        }
        let names = |dir: &str| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(staged.join(dir))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names("k3s"), ["00-pause.tar"]);
        assert_eq!(names("devstack"), ["01-source.tar", "02-kustomize.tar"]);

        // K3s has imported pause by itself; devstack imports the others.
        let imports = fake_containerd(&f, &["example.test/pause:v1"], |path| {
            let image = if path.contains("source") {
                "source"
            } else {
                "kustomize"
            };
            format!("example.test/{image}:v1")
        });
        let imported = load_images(f.engine.as_ref(), &settings, &step())
            .await
            .unwrap();
        assert_eq!(imported, 2);
        assert_eq!(
            *imports.lock().unwrap(),
            [
                format!("{PRELOAD_IN_NODE}/02-kustomize.tar"),
                format!("{PRELOAD_IN_NODE}/01-source.tar"),
            ],
            "the largest first, from where the node has it"
        );
        assert!(
            names("k3s").is_empty() && names("devstack").is_empty(),
            "unstaged"
        );
        assert!(
            !f.engine.calls().iter().any(|c| c.starts_with("upload")),
            "nothing copied"
        );
    }

    #[tokio::test]
    async fn images_added_to_the_profile_are_imported_into_running_nodes() {
        let f = fixture("");
        f.add_server(true);
        let image = "example.test/added:1";
        f.engine.with(|s| s.images.insert(image.to_string()));
        let mut settings = f.settings.clone();
        settings.images.preload = vec![image.to_string()];
        fake_containerd(&f, &[], move |_| image.to_string());

        let imported = load_images(f.engine.as_ref(), &settings, &step())
            .await
            .unwrap();
        assert_eq!(imported, 1);
        let server = f.engine.container("devstack-t-server-0").unwrap();
        assert_eq!(server.files.len(), 1, "copied for the next start too");
        assert!(
            server.files.keys().all(|p| p.starts_with(IMAGES_IN_NODE)),
            "{:?}",
            server.files
        );
        // Present now: nothing is imported again.
        let imported = load_images(f.engine.as_ref(), &settings, &step())
            .await
            .unwrap();
        assert_eq!(imported, 0);
        assert_eq!(
            f.engine
                .calls()
                .iter()
                .filter(|c| c.starts_with("upload"))
                .count(),
            1
        );
    }
}
