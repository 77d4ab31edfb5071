//! Importing the stack's images straight into the kind nodes' containerd.

use std::collections::HashSet;
use std::path::Path;
use std::process::Stdio;

use super::cli::tail_lines;
use super::nodes::KindNode;
use super::{ROLE_WORKER, STDERR_TAIL_LINES, cluster_name};
use crate::bundle::normalize_reference;
use crate::cluster::preload::{self, PreloadImage};
use crate::docker::{Engine, exec_in};
use crate::error::Error;
use crate::profile::Settings;
use crate::ui::Step;

/// Images in a node's containerd, normalized like [`normalize_reference`].
/// Unknown (an empty set) when the node cannot tell, so the image is loaded.
async fn node_images(engine: &dyn Engine, node: &str) -> HashSet<String> {
    match exec_in(
        engine,
        node,
        &["ctr", "--namespace", "k8s.io", "images", "list", "--quiet"],
    )
    .await
    {
        Ok((0, stdout)) => parse_image_list(&stdout),
        Ok((code, _)) => {
            tracing::debug!("listing images in {node} exited with {code}; loading everything");
            HashSet::new()
        }
        Err(e) => {
            tracing::debug!("listing images in {node} failed: {e}; loading everything");
            HashSet::new()
        }
    }
}

fn parse_image_list(stdout: &str) -> HashSet<String> {
    stdout
        .lines()
        .map(str::trim)
        // Bare digests are the same images again under their content address.
        .filter(|l| !l.is_empty() && !l.starts_with("sha256:"))
        .map(normalize_reference)
        .collect()
}

/// The snapshotter the node's CRI unpacks images with (kind's nodes:
/// `overlayfs`; rootless ones `fuse-overlayfs`), as kind's own `load` reads it.
async fn node_snapshotter(engine: &dyn Engine, node: &str) -> String {
    let dump = exec_in(engine, node, &["containerd", "config", "dump"])
        .await
        .ok()
        .filter(|(code, _)| *code == 0)
        .map(|(_, out)| out)
        .unwrap_or_default();
    parse_snapshotter(&dump).unwrap_or_else(|| "overlayfs".to_string())
}

/// The first non-empty `snapshotter = ...` of `containerd config dump`: the
/// CRI images plugin's, which comes before the per-runtime ones.
fn parse_snapshotter(dump: &str) -> Option<String> {
    dump.lines().find_map(|line| {
        let value = line.trim().strip_prefix("snapshotter")?.trim_start();
        let value = value.strip_prefix('=')?.trim().trim_matches(['\'', '"']);
        (!value.is_empty()).then(|| value.to_string())
    })
}

/// Imports the stack's images into the kind nodes that run them (see
/// [`workload_nodes`]); the profile's own `images.preload` go into every
/// node, since only the profile knows where its workloads run.
pub(super) async fn preload_images(
    engine: &dyn Engine,
    settings: &Settings,
    nodes: &[&KindNode],
    step: &Step,
) -> Result<usize, Error> {
    let every: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let roles: Vec<(&str, &str)> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.role.as_str()))
        .collect();
    let workloads = workload_nodes(&roles);
    let what = format!("kind cluster `{}`", cluster_name(settings));
    import(engine, settings, &every, &workloads, &what, step).await
}

/// The nodes the stack's pods are scheduled on: kind taints its control
/// planes when the cluster has workers, so the stack's pods (none of which
/// tolerates that taint) run on the workers alone, and an image imported
/// into a control plane there only takes CPU from kubeadm. Without workers
/// the control planes are untainted and run everything.
fn workload_nodes<'a>(nodes: &[(&'a str, &str)]) -> Vec<&'a str> {
    let workers: Vec<&str> = nodes
        .iter()
        .filter(|(_, role)| *role == ROLE_WORKER)
        .map(|(name, _)| *name)
        .collect();
    if workers.is_empty() {
        nodes.iter().map(|(name, _)| *name).collect()
    } else {
        workers
    }
}

/// Imports every wanted image into the node containers `nodes` (of the
/// cluster `what`) that lack it, straight into each node's containerd: what
/// `kind load` does, but into all nodes at once. Returns how many images
/// were imported.
pub(in crate::cluster) async fn import_into_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    nodes: &[&str],
    what: &str,
    step: &Step,
) -> Result<usize, Error> {
    import(engine, settings, nodes, nodes, what, step).await
}

/// [`import_into_nodes`], with the stack's own images only into
/// `workload_nodes` (some of `nodes`) and the profile's `images.preload`
/// into all of `nodes`.
async fn import(
    engine: &dyn Engine,
    settings: &Settings,
    nodes: &[&str],
    workload_nodes: &[&str],
    what: &str,
    step: &Step,
) -> Result<usize, Error> {
    let wanted = preload::wanted_images(settings)?;
    if wanted.is_empty() || nodes.is_empty() {
        return Ok(0);
    }
    let profile_preloads: HashSet<String> = settings
        .images
        .preload
        .iter()
        .map(|r| normalize_reference(r))
        .collect();
    let targets = |image: &PreloadImage| -> &[&str] {
        if profile_preloads.contains(&normalize_reference(&image.reference)) {
            nodes
        } else {
            workload_nodes
        }
    };
    // Only the nodes some image goes to are asked what they hold.
    let asked: Vec<&str> = nodes
        .iter()
        .copied()
        .filter(|n| wanted.iter().any(|i| targets(i).contains(n)))
        .collect();
    let timeout = settings.timeouts.preload;
    let work = async {
        step.progress("checking images already in the nodes");
        let present = futures::future::join_all(asked.iter().map(|n| node_images(engine, n))).await;
        let has = |node: &str, image: &str| {
            asked
                .iter()
                .zip(&present)
                .any(|(n, have)| *n == node && have.contains(image))
        };
        let mut todo: Vec<(PreloadImage, Vec<&str>)> = Vec::new();
        for image in &wanted {
            let want = normalize_reference(&image.reference);
            let missing: Vec<&str> = targets(image)
                .iter()
                .copied()
                .filter(|node| !has(node, &want))
                .collect();
            if !missing.is_empty() {
                todo.push((image.clone(), missing));
            }
        }
        if todo.is_empty() {
            return Ok(0);
        }
        let images: Vec<PreloadImage> = todo.iter().map(|(i, _)| i.clone()).collect();
        // Local-store images become tarballs (cached) like the bundle's.
        let tarballs = preload::tarballs(engine, settings, &images).await?;
        let receiving: Vec<&str> = asked
            .iter()
            .copied()
            .filter(|n| todo.iter().any(|(_, missing)| missing.contains(n)))
            .collect();
        let snapshotters: Vec<String> =
            futures::future::join_all(receiving.iter().map(|n| node_snapshotter(engine, n))).await;
        let snapshotter_of = |node: &str| {
            receiving
                .iter()
                .zip(&snapshotters)
                .find(|(n, _)| **n == node)
                .map(|(_, s)| s.as_str())
                .unwrap_or("overlayfs")
        };
        for ((reference, tarball), (_, missing)) in tarballs.iter().zip(&todo) {
            step.progress(format!("importing {reference} into {}", missing.join(", ")));
            let span = step.span(format!("import {reference}"));
            span.finish(
                futures::future::try_join_all(
                    missing
                        .iter()
                        .map(|node| import_image(reference, tarball, node, snapshotter_of(node))),
                )
                .await,
            )?;
        }
        Ok(todo.len())
    };
    tokio::time::timeout(timeout.get(), work)
        .await
        .map_err(|_| {
            Error::timeout(format!(
                "importing images into {what} took longer than {timeout}"
            ))
            .with_hint("raise `timeouts.preload` in the profile, or trim `images.preload`")
        })?
}

/// `docker exec -i NODE ctr images import -` fed with the image tarball.
async fn import_image(
    reference: &str,
    tarball: &Path,
    node: &str,
    snapshotter: &str,
) -> Result<(), Error> {
    let file = std::fs::File::open(tarball).map_err(|e| {
        Error::user(format!(
            "cannot open image tarball {} for {reference}: {e}",
            tarball.display()
        ))
        .with_hint("rebuild the bundle with `make kit`")
    })?;
    let output = tokio::process::Command::new("docker")
        .args([
            "exec",
            "-i",
            node,
            "ctr",
            "--namespace=k8s.io",
            "images",
            "import",
        ])
        .args(["--all-platforms", "--digests"])
        .arg(format!("--snapshotter={snapshotter}"))
        .arg("-")
        // The node is a container of the engine devstack resolved.
        .envs(crate::docker::cli_env())
        .stdin(Stdio::from(file))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            Error::prerequisite("cannot run the `docker` CLI to import images into kind nodes")
                .with_source(e)
        })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(Error::internal(format!(
        "importing {reference} into node {node} failed ({}): {}",
        output.status,
        tail_lines(&stderr, STDERR_TAIL_LINES)
    ))
    .with_hint("`docker exec NODE ctr -n k8s.io images ls` shows what the node has; check free disk with `devstack doctor`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshotter_from_the_containerd_config() {
        let dump = "[plugins]\n  [plugins.'io.containerd.cri.v1.images']\n    snapshotter = 'overlayfs'\n    snapshotter_x = 'no'\n  [x]\n          snapshotter = ''\n";
        assert_eq!(parse_snapshotter(dump).as_deref(), Some("overlayfs"));
        let dump = "          snapshotter = \"\"\n    snapshotter = \"fuse-overlayfs\"\n";
        assert_eq!(parse_snapshotter(dump).as_deref(), Some("fuse-overlayfs"));
        assert_eq!(parse_snapshotter(""), None);
    }

    #[test]
    fn image_lists_normalize_like_profile_references() {
        let have = parse_image_list(
            "docker.io/library/nginx:1.25\n\
             sha256:0123456789abcdef\n\
             docker.io/kindest/kindnetd:v20241212\n\
             registry.k8s.io/pause:3.10\n\n",
        );
        for wanted in [
            "nginx:1.25",
            "docker.io/library/nginx:1.25",
            "kindest/kindnetd:v20241212",
            "registry.k8s.io/pause:3.10",
        ] {
            assert!(
                have.contains(&normalize_reference(wanted)),
                "{wanted} in {have:?}"
            );
        }
        assert_eq!(have.len(), 3);
        assert!(!have.contains(&normalize_reference("nginx:1.26")));
    }

    #[test]
    fn stack_images_go_to_the_workers_or_to_every_untainted_control_plane() {
        let dev = [("s-control-plane", "control-plane"), ("s-worker", "worker")];
        assert_eq!(workload_nodes(&dev), ["s-worker"]);
        let wide = [
            ("s-control-plane", "control-plane"),
            ("s-control-plane2", "control-plane"),
            ("s-worker", "worker"),
            ("s-worker2", "worker"),
        ];
        assert_eq!(workload_nodes(&wide), ["s-worker", "s-worker2"]);
        // Without workers kind leaves the control planes untainted.
        let single = [("s-control-plane", "control-plane")];
        assert_eq!(workload_nodes(&single), ["s-control-plane"]);
        let ha = [
            ("s-control-plane", "control-plane"),
            ("s-control-plane2", "control-plane"),
        ];
        assert_eq!(workload_nodes(&ha), ["s-control-plane", "s-control-plane2"]);
        assert!(workload_nodes(&[]).is_empty());
    }
}
