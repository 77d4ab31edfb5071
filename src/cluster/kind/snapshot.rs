//! The Kind side of snapshots: what a snapshot records of a kind cluster,
//! and node containers made from one the way kind makes them, so that
//! `kind get clusters`, `kind get kubeconfig` and `kind delete cluster` (and
//! devstack, by its owner mount) take them for the stack's cluster.
//!
//! A kind node keeps its state in its `/var` volume (containerd, the
//! kubelet, etcd) and in its root filesystem: kubeadm's certificates,
//! manifests and kubeconfigs (`/etc/kubernetes`), kind's own files
//! (`/kind`: the kubeadm config, the node's last address), the CNI config
//! and containerd's config. A restored node keeps its hostname (its
//! Kubernetes name, and the name the workers and kube-proxy reach the
//! control plane by, which the stack's network also answers as an alias);
//! its address changes, and kind's entrypoint rewrites the old address in
//! the manifests and re-issues the API server's certificate on start, as it
//! does when a node restarts with a new address. One control plane only:
//! etcd's member keeps its old peer address, which only a single member
//! survives.

use std::collections::{BTreeMap, HashMap};

use super::nodes::{Found, KindNode, find_cluster, foreign_cluster};
use super::{
    KIND_API_PORT, LABEL_CLUSTER, LABEL_ROLE, MARKER_IN_NODE, ROLE_CONTROL_PLANE, ROLE_WORKER,
    cluster_name, find_kind, write_owner_marker,
};
use crate::cluster::k3s::{RestoredNodes, SHARED_IN_NODE, SavedCluster, SavedNode};
use crate::docker::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, HostConfigCgroupnsModeEnum, Mount,
    MountType, MountVolumeOptions, NetworkingConfig, PortBinding, RestartPolicy,
    RestartPolicyNameEnum,
};
use crate::docker::{self, Engine, exec_in};
use crate::error::Error;
use crate::profile::Settings;
use crate::ui::Step;

/// What a snapshot saves of each node: `/var` whole (containerd's images
/// and containers, the kubelet's files, etcd's data; split in two, see
/// [`SHARED_DIRS`]), and the parts of the root filesystem kubeadm, kind and
/// devstack wrote.
pub const SNAPSHOT_PATHS: &[&str] = &[
    "/var",
    "/etc/kubernetes",
    "/kind",
    "/etc/cni/net.d",
    "/etc/containerd",
];

/// The directories below `/var` whose entries never change once written
/// (containerd's content blobs and unpacked layers), which restored nodes
/// share through the snapshot's volume; each with its place there.
pub const SHARED_DIRS: &[(&str, &str)] = &[
    (
        "lib/containerd/io.containerd.content.v1.content/blobs/sha256",
        "blobs/sha256",
    ),
    (
        "lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots",
        "snapshots",
    ),
];

/// The version keys a Kind snapshot records besides the profile's:
/// restoring needs the same kind (its node image's entrypoint and the
/// labels it reads) and the very node image the state was made by.
const VERSION_KIND: &str = "kind";
const VERSION_NODE_IMAGE: &str = "nodeImageId";

/// Where kind's entrypoint keeps the address the node had when it last
/// started: what kubeadm's files name, and the API server advertised.
const OLD_IPV4: &str = "/kind/old-ipv4";

/// The stack's kind nodes, every one running, as a snapshot records them.
/// One control plane and no load balancer: etcd keeps its member's peer
/// address, which a lone member survives moving and several do not.
pub async fn saved_cluster(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<SavedCluster, Error> {
    let all = match find_cluster(engine, settings).await? {
        Found::Ours(nodes) => nodes,
        Found::Foreign => return Err(foreign_cluster(settings)),
        Found::None => {
            return Err(Error::user(format!(
                "stack `{}` has no kind cluster to save",
                settings.name
            ))
            .with_hint("bring the stack up first (`devstack up`)"));
        }
    };
    let control_planes = all.iter().filter(|n| n.role == ROLE_CONTROL_PLANE).count();
    if control_planes != 1 || all.iter().any(|n| !n.is_kubernetes_node()) {
        return Err(several_control_planes(settings, control_planes));
    }
    if let Some(stopped) = all.iter().find(|n| !n.is_running()) {
        return Err(Error::user(format!("node {} is not running", stopped.name))
            .with_hint("`devstack up` starts it and verifies the stack; save after that"));
    }
    let mut saved = Vec::new();
    for node in &all {
        super::restart::keep_flannel_subnet(engine, &node.name).await?;
        saved.push(SavedNode {
            role: node.role.clone(),
            container: node.name.clone(),
            identity: hostname(engine, node).await?,
            ip: last_address(engine, &node.name).await?,
        });
    }
    Ok(SavedCluster {
        nodes: saved,
        // kubeadm's join tokens expire and a restore joins nothing.
        token: String::new(),
        // The nodes' addresses change on restore whatever the subnet:
        // kind's entrypoint rewrites them.
        subnet: None,
    })
}

fn several_control_planes(settings: &Settings, count: usize) -> Error {
    Error::user(format!(
        "stack `{}` has {count} kind control planes, and a snapshot restores one: etcd's members \
         keep the addresses they had, and a restored cluster's nodes get new ones",
        settings.name
    ))
    .with_hint("snapshot a stack with `cluster.servers: 1` (workers are fine)")
}

/// The node's hostname: its Kubernetes name, kept by a restored node.
async fn hostname(engine: &dyn Engine, node: &KindNode) -> Result<String, Error> {
    Ok(docker::inspect(engine, &node.name)
        .await?
        .and_then(|c| c.config)
        .and_then(|c| c.hostname)
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| node.name.clone()))
}

/// The address kubeadm's files name for the node (kind records it as it
/// starts the node).
async fn last_address(engine: &dyn Engine, node: &str) -> Result<Option<String>, Error> {
    let (code, out) = exec_in(engine, node, &["cat", OLD_IPV4]).await?;
    Ok((code == 0)
        .then(|| out.trim().to_string())
        .filter(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok()))
}

/// What a Kind snapshot records beyond the profile's versions: the kind
/// release and the node image's ID.
pub async fn snapshot_versions(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<BTreeMap<String, String>, Error> {
    let kind = find_kind(settings).await?;
    let image = &settings.cluster.image;
    let id = engine
        .image_id(image)
        .await
        .map_err(|e| docker::engine_error(format!("inspect node image {image}"), e))?;
    Ok(BTreeMap::from([
        (VERSION_KIND.to_string(), kind_version(kind.version)),
        (VERSION_NODE_IMAGE.to_string(), id),
    ]))
}

fn kind_version((major, minor, patch): (u64, u64, u64)) -> String {
    format!("v{major}.{minor}.{patch}")
}

/// Whether a Kind snapshot recorded with `recorded` versions can be
/// restored on this machine: the same kind, and its node image here (from
/// the offline bundle or a registry) with the same ID. Creates nothing but
/// the image.
pub async fn check_restorable(
    engine: &dyn Engine,
    settings: &Settings,
    snapshot: &str,
    recorded: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let resave = format!(
        "bring the stack up cold here (`devstack up`) and save it again (`devstack snapshot save {snapshot}`)"
    );
    let kind = kind_version(find_kind(settings).await?.version);
    let had = recorded
        .get(VERSION_KIND)
        .map(String::as_str)
        .unwrap_or("?");
    if had != kind {
        return Err(Error::user(format!(
            "snapshot `{snapshot}` was made with kind {had}, and this machine runs kind {kind}"
        ))
        .with_hint(format!(
            "use kind {had} (DEVSTACK_KIND=/path/to/kind), or {resave}"
        )));
    }
    let image = &settings.cluster.image;
    let bundle = crate::bundle::open(settings)?;
    crate::bundle::ensure_image(engine, image, bundle.as_ref())
        .await
        .map_err(|e| {
            Error::user(format!(
                "snapshot `{snapshot}` needs node image {image}, which this machine lacks: {}",
                e.message()
            ))
            .with_hint(format!(
                "load it (`docker load`, or the offline bundle it came with: `images.bundle`), or {resave}"
            ))
        })?;
    let id = engine
        .image_id(image)
        .await
        .map_err(|e| docker::engine_error(format!("inspect node image {image}"), e))?;
    let want = recorded.get(VERSION_NODE_IMAGE).map(String::as_str);
    if want != Some(id.as_str()) {
        return Err(Error::user(format!(
            "snapshot `{snapshot}` was made from another build of node image {image} ({} then, {id} here)",
            want.unwrap_or("none recorded")
        ))
        .with_hint(format!(
            "the saved nodes' files belong to the image they ran: {resave}"
        )));
    }
    Ok(())
}

/// kind's node names: `<cluster>-control-plane`, `<cluster>-worker`,
/// `<cluster>-worker2`, ... (kind's `MakeNodeNamer`).
fn node_container(settings: &Settings, role: &str, index: usize) -> String {
    let suffix = if index == 0 {
        String::new()
    } else {
        (index + 1).to_string()
    };
    format!("{}-{role}{suffix}", cluster_name(settings))
}

/// Creates the node containers of a kind cluster restored from a snapshot,
/// stopped, for the caller to fill with the snapshot's files: as kind's
/// `docker run` makes them (its labels, privileged, `/tmp` and `/run`
/// tmpfs, `/var` a volume of its own, the API server published on
/// 127.0.0.1), with devstack's owner mount, each node's old hostname (its
/// Kubernetes name) answered on the stack's network, where they run, and
/// `shared` (by node) the snapshot volume it links its layers to.
pub async fn create_restored_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    saved: &SavedCluster,
    shared: &[Option<String>],
) -> Result<RestoredNodes, Error> {
    let network = settings.resource_prefix();
    docker::ensure_network(engine, &settings.name, &network).await?;
    let marker = write_owner_marker(settings)?;
    let api_port = crate::cluster::choose_api_port(settings)?;
    let mut created = Vec::new();
    let mut workers = 0;
    for (index, node) in saved.nodes.iter().enumerate() {
        let control_plane = node.role == ROLE_CONTROL_PLANE;
        let name = if control_plane {
            node_container(settings, ROLE_CONTROL_PLANE, 0)
        } else {
            workers += 1;
            node_container(settings, ROLE_WORKER, workers - 1)
        };
        let new = RestoredNode {
            identity: &node.identity,
            role: if control_plane {
                ROLE_CONTROL_PLANE
            } else {
                ROLE_WORKER
            },
            api_port: control_plane.then_some(api_port),
            shared: shared.get(index).and_then(Option::as_deref),
        };
        let body = container_body(settings, &new, &marker.display().to_string());
        crate::cluster::create_node_container(engine, &name, body, "kind").await?;
        created.push(name);
    }
    Ok(RestoredNodes {
        containers: created,
        stale_server_ip: saved.nodes.first().and_then(|n| n.ip.clone()),
    })
}

struct RestoredNode<'a> {
    identity: &'a str,
    role: &'static str,
    api_port: Option<u16>,
    shared: Option<&'a str>,
}

/// kind's `docker run` flags for a node (`runArgsForNode`, `commonArgs` in
/// kind's `providers/docker/provision.go`), on the stack's network.
fn container_body(
    settings: &Settings,
    node: &RestoredNode<'_>,
    marker: &str,
) -> ContainerCreateBody {
    let labels = HashMap::from([
        (LABEL_CLUSTER.to_string(), cluster_name(settings)),
        (LABEL_ROLE.to_string(), node.role.to_string()),
    ]);
    let mut binds = vec![
        "/lib/modules:/lib/modules:ro".to_string(),
        format!("{marker}:{MARKER_IN_NODE}:ro"),
    ];
    if let Some(volume) = node.shared {
        binds.push(format!("{volume}:{SHARED_IN_NODE}:ro"));
    }
    let (exposed, port_bindings) = published(settings, node.api_port);
    let mut env = Vec::new();
    if node.role == ROLE_CONTROL_PLANE {
        env.push("KUBECONFIG=/etc/kubernetes/admin.conf".to_string());
    }
    let network = settings.resource_prefix();
    ContainerCreateBody {
        image: Some(settings.cluster.image.clone()),
        hostname: Some(node.identity.to_string()),
        tty: Some(true),
        env: Some(env),
        labels: Some(labels),
        exposed_ports: Some(exposed),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                network.clone(),
                EndpointSettings {
                    // The workers' kubelets and kube-proxy reach the control
                    // plane by its old name (kubeadm's control plane endpoint).
                    aliases: Some(vec![node.identity.to_string()]),
                    ..Default::default()
                },
            )])),
        }),
        host_config: Some(HostConfig {
            privileged: Some(true),
            security_opt: Some(vec![
                "seccomp=unconfined".into(),
                "apparmor=unconfined".into(),
            ]),
            tmpfs: Some(HashMap::from([
                ("/tmp".to_string(), String::new()),
                ("/run".to_string(), String::new()),
            ])),
            // The snapshot's /var is all of it: nothing copied from the image.
            mounts: Some(vec![Mount {
                target: Some("/var".into()),
                typ: Some(MountType::VOLUME),
                volume_options: Some(MountVolumeOptions {
                    no_copy: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            binds: Some(binds),
            port_bindings: Some(port_bindings),
            network_mode: Some(network),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::ON_FAILURE),
                maximum_retry_count: Some(1),
            }),
            init: Some(false),
            cgroupns_mode: Some(HostConfigCgroupnsModeEnum::PRIVATE),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The control plane's published ports, as kind publishes them: the API
/// server's on 127.0.0.1, then `cluster.ports`. None for a worker.
fn published(
    settings: &Settings,
    api_port: Option<u16>,
) -> (Vec<String>, HashMap<String, Option<Vec<PortBinding>>>) {
    let mut exposed = Vec::new();
    let mut bindings = HashMap::new();
    let Some(api_port) = api_port else {
        return (exposed, bindings);
    };
    let mut publish = |key: String, ip: &str, port: u16| {
        exposed.push(key.clone());
        bindings.insert(
            key,
            Some(vec![PortBinding {
                host_ip: Some(ip.to_string()),
                host_port: Some(port.to_string()),
            }]),
        );
    };
    publish(format!("{KIND_API_PORT}/tcp"), "127.0.0.1", api_port);
    for mapping in &settings.cluster.ports {
        publish(
            format!(
                "{}/{}",
                mapping.container_port,
                mapping.protocol.to_ascii_lowercase()
            ),
            &mapping.bind_address,
            mapping.host_port,
        );
    }
    (exposed, bindings)
}

/// Starts the restored nodes, the control plane first. kind's entrypoint
/// finds each node's new address and rewrites the old one. The API
/// server's endpoint lease for the old address outlives the restart (its
/// TTL counts from etcd's start), so for a while the `kubernetes` Service
/// sends some of the pods' connections there: the control plane also
/// answers on it (on its loopback), and the workers route it there.
pub async fn start_restored_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    restored: &RestoredNodes,
    step: &Step,
) -> Result<(), Error> {
    let Some((control_plane, workers)) = restored.containers.split_first() else {
        return Ok(());
    };
    let start = |name: &str| {
        let name = name.to_string();
        async move {
            crate::cluster::start_node_container(engine, &name).await?;
            // Before its kubelet starts, seconds later.
            super::restart::after_start(engine, &name).await?;
            Ok::<(), Error>(())
        }
    };
    start(control_plane).await?;
    let network = settings.resource_prefix();
    let now = docker::address_on(engine, control_plane, &network).await?;
    let old = restored
        .stale_server_ip
        .as_ref()
        .filter(|old| Some(*old) != now.as_ref());
    if let Some(old) = old {
        let add = ["ip", "addr", "add", &format!("{old}/32"), "dev", "lo"];
        let (code, _) = exec_in(engine, control_plane, &add).await?;
        if code != 0 {
            step.progress(format!(
                "node {control_plane} cannot answer on its old address {old}: pods may wait for the API server until its lease for it expires"
            ));
        }
    }
    let started = futures::future::join_all(workers.iter().map(|w| start(w))).await;
    started.into_iter().collect::<Result<Vec<()>, Error>>()?;
    if let (Some(old), Some(via)) = (old, now) {
        for worker in workers {
            let route = ["ip", "route", "add", &format!("{old}/32"), "via", &via];
            let _ = exec_in(engine, worker, &route).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let mut settings = crate::profile::select(Some("dev"), &Default::default()).unwrap();
        settings.state_dir = "/state".into();
        settings
    }

    #[test]
    fn restored_nodes_are_named_as_kind_names_them() {
        let s = settings();
        let cluster = cluster_name(&s);
        assert_eq!(
            node_container(&s, ROLE_CONTROL_PLANE, 0),
            format!("{cluster}-control-plane")
        );
        assert_eq!(
            node_container(&s, ROLE_WORKER, 0),
            format!("{cluster}-worker")
        );
        assert_eq!(
            node_container(&s, ROLE_WORKER, 1),
            format!("{cluster}-worker2")
        );
    }

    #[test]
    fn a_restored_node_carries_kinds_labels_and_flags_and_its_old_name() {
        let s = settings();
        let node = RestoredNode {
            identity: "devstack-a-control-plane",
            role: ROLE_CONTROL_PLANE,
            api_port: Some(41234),
            shared: Some("devstack-snapshot-base-0-abc"),
        };
        let body = container_body(&s, &node, "/state/stacks/b/kind-owner");
        let labels = body.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_CLUSTER], cluster_name(&s));
        assert_eq!(labels[LABEL_ROLE], ROLE_CONTROL_PLANE);
        assert_eq!(body.hostname.as_deref(), Some("devstack-a-control-plane"));
        let endpoints = body
            .networking_config
            .as_ref()
            .and_then(|n| n.endpoints_config.as_ref())
            .unwrap();
        assert_eq!(
            endpoints[&s.resource_prefix()].aliases,
            Some(vec!["devstack-a-control-plane".to_string()])
        );
        let host = body.host_config.as_ref().unwrap();
        assert_eq!(host.privileged, Some(true));
        assert_eq!(host.init, Some(false));
        let binds = host.binds.as_ref().unwrap();
        assert!(binds.contains(&"/state/stacks/b/kind-owner:/etc/devstack:ro".to_string()));
        assert!(binds.contains(&format!("devstack-snapshot-base-0-abc:{SHARED_IN_NODE}:ro")));
        let api = &host.port_bindings.as_ref().unwrap()["6443/tcp"];
        assert_eq!(api.as_ref().unwrap()[0].host_port.as_deref(), Some("41234"));
        let var = &host.mounts.as_ref().unwrap()[0];
        assert_eq!(var.target.as_deref(), Some("/var"));
        assert_eq!(
            var.source, None,
            "an anonymous volume, removed with the node"
        );
    }

    #[test]
    fn a_worker_publishes_nothing() {
        let (exposed, bindings) = published(&settings(), None);
        assert!(exposed.is_empty() && bindings.is_empty());
    }
}
