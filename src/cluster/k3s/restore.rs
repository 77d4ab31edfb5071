//! The K3s side of snapshots: what a snapshot records of a cluster, and
//! node containers made from one, keeping their Kubernetes names, token and,
//! where the network allows, addresses.

use super::node::{NewNode, agent_args, create_node, own_server_args, server_args};
use super::{LABEL_NODE_NAME, ROLE_AGENT, ROLE_SERVER, cluster_token, nodes};
use crate::cluster::node_name;
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::profile::Settings;
use crate::ui::Step;

/// The directories of a node's state ([`SNAPSHOT_PATHS`]' first, the
/// `k3s` below) whose entries never change once written, so that restored
/// nodes can share them: containerd's content blobs (content-addressed) and
/// its overlay snapshots (the unpacked image layers, committed before use;
/// a container's own upper directory is one too, and nothing writes to it
/// again once its container has gone, as it has after a restore). Each with
/// its place in the shared volume.
pub const SHARED_DIRS: &[(&str, &str)] = &[
    (
        "agent/containerd/io.containerd.content.v1.content/blobs/sha256",
        "blobs/sha256",
    ),
    (
        "agent/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots",
        "snapshots",
    ),
];

/// Where a K3s node keeps the state a snapshot saves: its named volumes
/// but the log (the datastore, containerd's images and containers, the
/// kubelet's and CNI's files) and the password the server checks the node
/// by, which K3s writes into the container's own filesystem.
pub const SNAPSHOT_PATHS: &[&str] = &[
    "/var/lib/rancher/k3s",
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/etc/rancher/node",
];

/// A node as a snapshot records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedNode {
    /// `k3s-server` or `k3s-agent`.
    pub role: String,
    /// Its container in the stack it was saved from.
    pub container: String,
    /// Its Kubernetes node name, which the restored node keeps.
    pub identity: String,
    /// Its address on the stack's network: the API server advertised the
    /// server's in the `kubernetes` Service, and keeps doing so for a while
    /// after it restarts elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
}

/// What a snapshot needs to know of a stack's K3s cluster besides its files.
#[derive(Debug, Clone)]
pub struct SavedCluster {
    /// The server first.
    pub nodes: Vec<SavedNode>,
    /// The token the datastore's bootstrap data is encrypted with: the
    /// restored server must start with it, and agents join with it.
    pub token: String,
    /// The stack network's subnet.
    pub subnet: Option<String>,
}

/// The node containers [`create_restored_nodes`] made, stopped.
#[derive(Debug, Clone)]
pub struct RestoredNodes {
    /// The container made for each saved node, in order.
    pub containers: Vec<String>,
    /// The server's address in the snapshot, when the new network could
    /// not give it back: the API server's endpoint lease for it outlives
    /// the restart (its TTL counts from the start), so for about 25 s the
    /// `kubernetes` Service would send half the pods' connections there.
    pub stale_server_ip: Option<String>,
}

/// The stack's K3s nodes, every one running, as a snapshot records them.
pub async fn saved_cluster(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<SavedCluster, Error> {
    let found = nodes(engine, settings).await?;
    let server = node_name(settings, "server", 0);
    if found.first().is_none_or(|n| n.name != server) {
        return Err(Error::user(format!(
            "stack `{}` has no K3s server node to save",
            settings.name
        ))
        .with_hint("bring the stack up first (`devstack up`)"));
    }
    if let Some(stopped) = found.iter().find(|n| !n.running) {
        return Err(Error::user(format!("node {} is not running", stopped.name))
            .with_hint("`devstack up` starts it and verifies the stack; save after that"));
    }
    let token = cluster_token(engine, settings).await?;
    let network = settings.resource_prefix();
    let mut saved = Vec::new();
    for n in found {
        saved.push(SavedNode {
            identity: n.labels.get(LABEL_NODE_NAME).unwrap_or(&n.name).clone(),
            ip: docker::address_on(engine, &n.name, &network).await?,
            role: n.role,
            container: n.name,
        });
    }
    Ok(SavedCluster {
        nodes: saved,
        token,
        subnet: docker::network_subnet(engine, &network).await?,
    })
}

/// The addressing a restored stack's network should have: the snapshot's
/// subnet, handing out to other containers (LocalStack) only the half of
/// it that holds none of the nodes' addresses, which the nodes then keep.
pub fn restored_addressing(saved: &SavedCluster) -> Option<docker::Addressing> {
    let subnet = saved.subnet.as_ref()?;
    let (base, bits) = subnet.split_once('/')?;
    let base: u32 = base.parse::<std::net::Ipv4Addr>().ok()?.into();
    let bits: u32 = bits.parse().ok()?;
    if !(8..=28).contains(&bits) {
        return None;
    }
    let half = 1u32 << (32 - bits - 1);
    let lower: Vec<u32> = saved
        .nodes
        .iter()
        .map(|n| {
            n.ip.as_ref()?
                .parse::<std::net::Ipv4Addr>()
                .ok()
                .map(u32::from)
        })
        .collect::<Option<_>>()?;
    let upper_start = base.checked_add(half)?;
    lower
        .iter()
        .all(|ip| *ip >= base && *ip < upper_start)
        .then(|| docker::Addressing {
            subnet: subnet.clone(),
            ip_range: format!("{}/{}", std::net::Ipv4Addr::from(upper_start), bits + 1),
        })
}

/// Creates the node containers of a cluster restored from a snapshot,
/// stopped, for the caller to fill with the snapshot's files before `up`
/// starts them: each keeps its Kubernetes name and the cluster its token,
/// while container names, volumes, network and API port are this stack's.
/// `shared` names, by node, the snapshot volume it shares (see
/// [`SHARED_DIRS`]). Returns the container made for each saved node, in order.
pub async fn create_restored_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    saved: &SavedCluster,
    shared: &[Option<String>],
) -> Result<RestoredNodes, Error> {
    let network = settings.resource_prefix();
    let addressing = restored_addressing(saved);
    docker::ensure_network_in(engine, &settings.name, &network, addressing.as_ref()).await?;
    // The nodes keep their addresses when the network has the snapshot's
    // subnet with them free (kept out of the range Docker hands out).
    let same_subnet =
        addressing.is_some() && docker::network_subnet(engine, &network).await? == saved.subnet;
    let image = &settings.cluster.image;
    let bundle = crate::bundle::open(settings)?;
    crate::bundle::ensure_image(engine, image, bundle.as_ref()).await?;
    let api_port = crate::cluster::choose_api_port(settings)?;
    let mut created = Vec::new();
    let mut agents = 0;
    for (index, node) in saved.nodes.iter().enumerate() {
        let server = node.role == ROLE_SERVER;
        let name = if server {
            node_name(settings, "server", 0)
        } else {
            agents += 1;
            node_name(settings, "agent", agents - 1)
        };
        let new = NewNode {
            name: &name,
            identity: &node.identity,
            role: if server { ROLE_SERVER } else { ROLE_AGENT },
            args: if server {
                server_args(settings, &node.identity)
            } else {
                agent_args(settings, &node.identity)
            },
            token: &saved.token,
            api_port: server.then_some(api_port),
            fixed_args: server.then(|| own_server_args(settings, &node.identity).len()),
            start: false,
            ip: node.ip.as_deref().filter(|_| same_subnet),
            shared: shared.get(index).and_then(Option::as_deref),
        };
        create_node(engine, settings, new, &[]).await?;
        created.push(name);
    }
    let stale_server_ip = saved
        .nodes
        .first()
        .and_then(|server| server.ip.clone())
        .filter(|_| !same_subnet);
    Ok(RestoredNodes {
        containers: created,
        stale_server_ip,
    })
}

/// Starts the restored node containers, once filled. When the server could
/// not keep its address, it answers on the old one too (on its loopback,
/// outside the new network's subnet), and the agents route it to the
/// server, so pods reach the API server through the `kubernetes` Service
/// while it still lists the old address.
pub async fn start_restored_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    restored: &RestoredNodes,
    step: &Step,
) -> Result<(), Error> {
    let Some((server, agents)) = restored.containers.split_first() else {
        return Ok(());
    };
    let start = |name: &str| {
        let name = name.to_string();
        async move {
            engine
                .start_container(&name)
                .await
                .map_err(|e| docker::engine_error(format!("start node {name}"), e))
        }
    };
    start(server).await?;
    let Some(old) = &restored.stale_server_ip else {
        for agent in agents {
            start(agent).await?;
        }
        return Ok(());
    };
    let add = ["ip", "addr", "add", &format!("{old}/32"), "dev", "lo"];
    let (code, _) = docker::exec_in(engine, server, &add).await?;
    if code != 0 {
        step.progress(format!(
            "node {server} cannot answer on its old address {old} (no `ip` in its image): pods may wait up to 25 s for the API server"
        ));
    }
    let server_ip = docker::address_on(engine, server, &settings.resource_prefix()).await?;
    for agent in agents {
        start(agent).await?;
        if let Some(via) = &server_ip {
            let route = ["ip", "route", "add", &format!("{old}/32"), "via", via];
            let _ = docker::exec_in(engine, agent, &route).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(subnet: Option<&str>, ips: &[&str]) -> SavedCluster {
        SavedCluster {
            nodes: ips
                .iter()
                .enumerate()
                .map(|(i, ip)| SavedNode {
                    role: if i == 0 { ROLE_SERVER } else { ROLE_AGENT }.into(),
                    container: format!("n{i}"),
                    identity: format!("n{i}"),
                    ip: Some(ip.to_string()),
                })
                .collect(),
            token: "t".into(),
            subnet: subnet.map(String::from),
        }
    }

    #[test]
    fn a_restored_network_hands_out_only_the_half_without_the_nodes() {
        let addressing =
            restored_addressing(&saved(Some("172.18.0.0/16"), &["172.18.0.3", "172.18.0.4"]));
        assert_eq!(
            addressing,
            Some(docker::Addressing {
                subnet: "172.18.0.0/16".into(),
                ip_range: "172.18.128.0/17".into(),
            })
        );
        // A node in the upper half, no subnet, or a subnet too small to
        // split: the network is made the usual way.
        assert_eq!(
            restored_addressing(&saved(Some("172.18.0.0/16"), &["172.18.200.1"])),
            None
        );
        assert_eq!(restored_addressing(&saved(None, &["172.18.0.3"])), None);
        assert_eq!(
            restored_addressing(&saved(Some("10.0.0.0/30"), &["10.0.0.1"])),
            None
        );
    }
}
