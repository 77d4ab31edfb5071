//! The node containers of a kind cluster, read through the engine: which
//! are the stack's own, starting stopped ones, the stack network, registry
//! mirrors.

use std::path::Path;
use std::time::Duration;

use super::config::{hosts_toml, owner_marker_dir};
use super::{
    LABEL_CLUSTER, LABEL_ROLE, MARKER_IN_NODE, REGISTRY_CONFIG_DIR, ROLE_CONTROL_PLANE,
    ROLE_WORKER, cluster_name,
};
use crate::docker::models::ContainerSummaryStateEnum;
use crate::docker::{self, Engine, exec_in};
use crate::error::Error;
use crate::profile::Settings;
use crate::ui::Step;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KindNode {
    pub(super) name: String,
    /// The container's full id.
    pub(super) id: String,
    /// The node image the container was created from.
    pub(super) image: String,
    /// `control-plane`, `worker` or `external-load-balancer`.
    pub(super) role: String,
    pub(super) state: Option<ContainerSummaryStateEnum>,
    pub(super) networks: Vec<String>,
    /// Published ports: (port in the node, port on the host).
    pub(super) ports: Vec<(u16, u16)>,
}

impl KindNode {
    pub(super) fn is_kubernetes_node(&self) -> bool {
        self.role == ROLE_CONTROL_PLANE || self.role == ROLE_WORKER
    }

    pub(super) fn is_running(&self) -> bool {
        self.state == Some(ContainerSummaryStateEnum::RUNNING)
    }
}

/// Control planes first, then workers, then anything else (the HA load
/// balancer); `x-control-plane` before `x-control-plane2` before `...10`.
fn sort_nodes(nodes: &mut [KindNode]) {
    let rank = |role: &str| match role {
        ROLE_CONTROL_PLANE => 0,
        ROLE_WORKER => 1,
        _ => 2,
    };
    nodes.sort_by(|a, b| {
        (rank(&a.role), a.name.len(), &a.name).cmp(&(rank(&b.role), b.name.len(), &b.name))
    });
}

/// Every container of the kind cluster, whatever its state.
pub(super) async fn list_nodes(engine: &dyn Engine, cluster: &str) -> Result<Vec<KindNode>, Error> {
    let containers =
        docker::find_containers(engine, vec![format!("{LABEL_CLUSTER}={cluster}")]).await?;
    let mut nodes: Vec<KindNode> = containers
        .iter()
        .map(|c| KindNode {
            name: docker::container_name_of(c),
            id: c.id.clone().unwrap_or_default(),
            image: c.image.clone().unwrap_or_default(),
            role: c
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_ROLE))
                .cloned()
                .unwrap_or_default(),
            state: c.state,
            networks: c
                .network_settings
                .as_ref()
                .and_then(|n| n.networks.as_ref())
                .map(|n| n.keys().cloned().collect())
                .unwrap_or_default(),
            ports: c
                .ports
                .iter()
                .flatten()
                .filter_map(|p| Some((p.private_port, p.public_port?)))
                .collect(),
        })
        .collect();
    sort_nodes(&mut nodes);
    Ok(nodes)
}

/// What of the stack's kind cluster exists.
pub(super) enum Found {
    None,
    /// Created by devstack for this stack (carries the owner marker).
    Ours(Vec<KindNode>),
    /// A cluster of the same name devstack did not create for this stack.
    Foreign,
}

pub(super) async fn find_cluster(engine: &dyn Engine, settings: &Settings) -> Result<Found, Error> {
    let nodes = list_nodes(engine, &cluster_name(settings)).await?;
    if nodes.is_empty() {
        return Ok(Found::None);
    }
    let marker = owner_marker_dir(settings);
    let mut kubernetes_nodes = 0;
    for node in nodes.iter().filter(|n| n.is_kubernetes_node()) {
        kubernetes_nodes += 1;
        match node_mounts(engine, &node.name).await? {
            // Gone since the listing: nothing to judge it by.
            None => continue,
            Some(mounts) => {
                let marked = mounts.iter().any(|m| {
                    m.destination.as_deref() == Some(MARKER_IN_NODE)
                        && m.source.as_deref().map(Path::new) == Some(marker.as_path())
                });
                if !marked {
                    return Ok(Found::Foreign);
                }
            }
        }
    }
    Ok(if kubernetes_nodes == 0 {
        Found::Foreign
    } else {
        Found::Ours(nodes)
    })
}

/// A node container's mounts, or None once it is gone. Every kind node has
/// mounts (at least its /var volume); a container Docker is still creating,
/// as when Ctrl-C killed `kind create` mid `docker run`, shows none for a
/// moment, so that is waited out rather than read as someone else's node.
async fn node_mounts(
    engine: &dyn Engine,
    node: &str,
) -> Result<Option<Vec<docker::models::MountPoint>>, Error> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let Some(container) = docker::inspect(engine, node).await? else {
            return Ok(None);
        };
        let mounts = container.mounts.unwrap_or_default();
        if !mounts.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(Some(mounts));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub(super) fn foreign_cluster(settings: &Settings) -> Error {
    let name = cluster_name(settings);
    Error::prerequisite(format!(
        "a kind cluster named `{name}` exists, but devstack did not create it for stack `{}` \
         (its nodes lack the mount of {})",
        settings.name,
        owner_marker_dir(settings).display()
    ))
    .with_hint(format!(
        "devstack leaves it untouched: choose another stack name (`--name`), or remove it with \
         `kind delete cluster --name {name}` if it is yours to remove"
    ))
}

/// Starts stopped or paused node containers (the load balancer too, or the
/// API server is unreachable on multi-control-plane clusters).
pub(super) async fn start_stopped(
    engine: &dyn Engine,
    nodes: &[KindNode],
    step: &Step,
) -> Result<Vec<String>, Error> {
    let mut repaired = Vec::new();
    for node in nodes {
        let name = &node.name;
        match node.state {
            Some(ContainerSummaryStateEnum::RUNNING)
            | Some(ContainerSummaryStateEnum::RESTARTING) => {}
            Some(ContainerSummaryStateEnum::PAUSED) => {
                step.progress(format!("unpausing node {name}"));
                engine
                    .unpause_container(name)
                    .await
                    .map_err(|e| docker::engine_error(format!("unpause node {name}"), e))?;
                repaired.push(format!("unpaused node {name}"));
            }
            _ => {
                let started = engine.start_container(name).await;
                started.map_err(|e| docker::engine_error(format!("start node {name}"), e))?;
                repaired.push(format!("started stopped node {name}"));
            }
        }
    }
    Ok(repaired)
}

/// Puts the Kubernetes nodes on the stack network, where LocalStack lives,
/// so pods reach it without going through the host. Returns the nodes it
/// had to connect.
pub(super) async fn connect_to_stack_network(
    engine: &dyn Engine,
    settings: &Settings,
    nodes: &[&KindNode],
) -> Result<Vec<String>, Error> {
    let network = settings.resource_prefix();
    docker::ensure_network(engine, &settings.name, &network).await?;
    let mut connected = Vec::new();
    for node in nodes.iter().filter(|n| !n.networks.contains(&network)) {
        match engine.connect_network(&network, &node.name).await {
            Ok(()) => connected.push(node.name.clone()),
            // A concurrent `up` got there first.
            Err(e) if docker::docker_message(&e).contains("already exists") => {}
            Err(e) => {
                return Err(docker::engine_error(
                    format!("connect node {} to network {network}", node.name),
                    e,
                ));
            }
        }
    }
    Ok(connected)
}

/// Writes each mirrored registry's `hosts.toml` into every node. containerd
/// reads these per pull, so no restart is needed; rewriting is idempotent.
pub(super) async fn write_registry_hosts(
    engine: &dyn Engine,
    settings: &Settings,
    nodes: &[&KindNode],
) -> Result<(), Error> {
    const SCRIPT: &str = "mkdir -p \"$1\" && printf '%s' \"$2\" > \"$1/hosts.toml\"";
    for (registry, endpoints) in &settings.cluster.registry_mirrors {
        let dir = format!("{REGISTRY_CONFIG_DIR}/{registry}");
        let content = hosts_toml(registry, endpoints);
        for node in nodes {
            let (code, _) = exec_in(
                engine,
                &node.name,
                &["sh", "-c", SCRIPT, "sh", &dir, &content],
            )
            .await?;
            if code != 0 {
                return Err(Error::internal(format!(
                    "cannot write {dir}/hosts.toml in node {} (exit code {code})",
                    node.name
                ))
                .with_hint("check that the node image is a kind node image (`cluster.image`)"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, role: &str) -> KindNode {
        KindNode {
            name: name.into(),
            id: String::new(),
            image: String::new(),
            role: role.into(),
            state: None,
            networks: Vec::new(),
            ports: Vec::new(),
        }
    }

    #[test]
    fn nodes_sort_control_planes_first() {
        let mut nodes = vec![
            node("c-worker2", "worker"),
            node("c-external-load-balancer", "external-load-balancer"),
            node("c-control-plane10", "control-plane"),
            node("c-worker", "worker"),
            node("c-control-plane2", "control-plane"),
            node("c-control-plane", "control-plane"),
        ];
        sort_nodes(&mut nodes);
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "c-control-plane",
                "c-control-plane2",
                "c-control-plane10",
                "c-worker",
                "c-worker2",
                "c-external-load-balancer"
            ]
        );
        assert!(!nodes[5].is_kubernetes_node());
    }
}
