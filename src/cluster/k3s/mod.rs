//! K3s nodes as Docker containers, the way k3d runs them: privileged, named
//! volumes for the node's state, the API server published on 127.0.0.1,
//! every node on the stack's network. Needs nothing but Docker.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bollard::models::{ContainerCreateBody, HostConfig, PortBinding, VolumeCreateRequest};

use crate::cluster::{Change, ClusterInfo, Plan, UpOptions, kubeconfig, node_name, preload};
use crate::docker::{self, Engine};
use crate::error::{Error, Kind};
use crate::profile::{Provider, Settings};
use crate::ui::Step;

pub const ROLE_SERVER: &str = "k3s-server";
pub const ROLE_AGENT: &str = "k3s-agent";
const LABEL_API_PORT: &str = "dev.devstack.api-port";
/// The node's Kubernetes name, when it is not the container's (a node
/// restored from another stack's snapshot keeps the name it had there).
const LABEL_NODE_NAME: &str = "dev.devstack.node-name";
/// How many of the server's arguments are devstack's own (before
/// `k3sArgs`), recorded on the server node: the count changes when devstack
/// changes its defaults, and `plan` must still find the profile's part of
/// an older node's command.
const LABEL_FIXED_ARGS: &str = "dev.devstack.fixed-args";
/// devstack's own arguments on nodes created before LABEL_FIXED_ARGS.
const FIXED_ARGS_UNLABELLED: usize = 6;
const API_PORT: u16 = 6443;
const KUBECONFIG_IN_NODE: &str = "/etc/rancher/k3s/k3s.yaml";
const IMAGES_IN_NODE: &str = "/var/lib/rancher/k3s/agent/images";
/// Where a node finds the tarballs devstack imports into its containerd
/// itself, while the node boots (see `create_node`).
const PRELOAD_IN_NODE: &str = "/devstack/images";
/// Where a node restored from a snapshot finds, read-only, the image layers
/// and content blobs the snapshot shares among every stack restored from it.
pub const SHARED_IN_NODE: &str = "/devstack/snapshot";
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
/// Where flannel's subnet file lives across a node's restarts, in its K3s
/// volume; `/run/flannel` points here (see [`node_entrypoint`]).
const FLANNEL_RUN_IN_NODE: &str = "/var/lib/rancher/k3s/agent/flannel-run";
/// The node's state, as named volumes so `down` can find them by label.
const STATE_PATHS: &[(&str, &str)] = &[
    ("k3s", "/var/lib/rancher/k3s"),
    ("kubelet", "/var/lib/kubelet"),
    ("cni", "/var/lib/cni"),
    ("log", "/var/log"),
];

/// Runs K3s with `/run/flannel` kept in the node's K3s volume. `/run` is a
/// tmpfs, so a node that starts again (restarted, or restored from a
/// snapshot) has lost flannel's `subnet.env`, and the kubelet, quicker than
/// flannel, fails every pod's sandbox for want of it; each pod then waits
/// for the kubelet's retry, 10 s or more for some. Kept, the file is there
/// from the first sandbox on: a node's pod subnet is its own for life.
/// The shell's `$0` is `k3s`; the node's arguments follow.
fn node_entrypoint() -> Vec<String> {
    let script = format!(
        "mkdir -p {FLANNEL_RUN_IN_NODE} && rm -rf /run/flannel \
         && ln -s {FLANNEL_RUN_IN_NODE} /run/flannel && exec /bin/k3s \"$@\""
    );
    vec!["/bin/sh".into(), "-c".into(), script, "k3s".into()]
}

fn node_labels(settings: &Settings, role: &str) -> HashMap<String, String> {
    docker::labels(&settings.name, role)
}

/// One K3s node container.
#[derive(Debug, Clone)]
struct Node {
    name: String,
    role: String,
    running: bool,
    labels: HashMap<String, String>,
}

/// Every K3s node container of the stack, the server first.
async fn nodes(engine: &dyn Engine, settings: &Settings) -> Result<Vec<Node>, Error> {
    let mut filters = docker::stack_filter(Some(&settings.name));
    filters.push(docker::LABEL_ROLE.to_string());
    let containers = docker::find_containers(engine, filters).await?;
    let mut out: Vec<Node> = containers
        .into_iter()
        .filter_map(|c| {
            let labels = c.labels.clone().unwrap_or_default();
            let role = labels.get(docker::LABEL_ROLE)?.clone();
            (role == ROLE_SERVER || role == ROLE_AGENT).then(|| Node {
                name: docker::container_name_of(&c),
                running: c.state.as_ref().is_some_and(|s| s.to_string() == "running"),
                role,
                labels,
            })
        })
        .collect();
    // Servers first, then by name, so index 0 is the server.
    out.sort_by(|a, b| (a.role != ROLE_SERVER, &a.name).cmp(&(b.role != ROLE_SERVER, &b.name)));
    Ok(out)
}

/// Whether the stack has any K3s node container.
async fn any_node(engine: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    Ok(!nodes(engine, settings).await?.is_empty())
}

super::provider::engine_provider!(
    /// K3s nodes as containers of the engine it is given.
    K3s,
    Provider::K3s,
    exists: any_node,
    plan: plan,
    up: up,
    kubeconfig: kubeconfig,
    load_images: load_images,
    delete: remove_nodes
);

/// Agent index of a node container name `devstack-<stack>-agent-<i>`.
fn agent_index(settings: &Settings, name: &str) -> Option<usize> {
    name.strip_prefix(&format!("{}-agent-", settings.resource_prefix()))?
        .parse()
        .ok()
}

/// The running cluster against the settings: the agent count changes in
/// place; the node image, the server's arguments and a fixed API port need
/// a new cluster.
async fn plan(engine: &dyn Engine, settings: &Settings) -> Result<Plan, Error> {
    let existing = nodes(engine, settings).await?;
    if existing.is_empty() {
        return Ok(Plan::default());
    }
    let agents = existing.iter().filter(|n| n.role == ROLE_AGENT).count();
    let server = docker::inspect(engine, &node_name(settings, "server", 0))
        .await?
        .map(|container| {
            let config = container.config.unwrap_or_default();
            let bindings = container
                .host_config
                .and_then(|h| h.port_bindings)
                .unwrap_or_default();
            let labels = config.labels.unwrap_or_default();
            ServerFacts {
                ports: published_ports(&bindings),
                image: config.image.unwrap_or_default(),
                args: config.cmd.unwrap_or_default(),
                api_port: labels.get(LABEL_API_PORT).and_then(|p| p.parse().ok()),
                fixed_args: labels
                    .get(LABEL_FIXED_ARGS)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(FIXED_ARGS_UNLABELLED),
            }
        });
    Ok(plan_of(settings, agents, server.as_ref()))
}

/// What `plan` reads off the server node container.
struct ServerFacts {
    image: String,
    args: Vec<String>,
    api_port: Option<u16>,
    /// How many of `args` are devstack's own.
    fixed_args: usize,
    /// `cluster.ports` as published: (port in the node, port on the host).
    ports: Vec<(u16, u16)>,
}

/// The host ports a node publishes besides the API server's.
fn published_ports(bindings: &bollard::models::PortMap) -> Vec<(u16, u16)> {
    bindings
        .iter()
        .filter_map(|(key, to)| {
            let inside: u16 = key.split('/').next()?.parse().ok()?;
            let host = to.as_ref()?.first()?.host_port.as_ref()?.parse().ok()?;
            (inside != API_PORT).then_some((inside, host))
        })
        .collect()
}

/// The plan rule on what exists, kept apart from Docker so it is tested
/// without it.
fn plan_of(settings: &Settings, agents: usize, server: Option<&ServerFacts>) -> Plan {
    let mut changes = Vec::new();
    let wanted = usize::from(settings.cluster.agents);
    if agents != wanted {
        changes.push(Change {
            what: format!("agents {agents} -> {wanted}"),
            in_place: true,
        });
    }
    let Some(server) = server else {
        changes.push(Change {
            what: "the server node is missing (the cluster is created again)".into(),
            in_place: true,
        });
        return Plan {
            exists: true,
            changes,
        };
    };
    if server.image != settings.cluster.image {
        changes.push(Change {
            what: format!("image {} -> {}", server.image, settings.cluster.image),
            in_place: false,
        });
    }
    let extra = server.args.get(server.fixed_args..).unwrap_or_default();
    if extra != settings.cluster.k3s_args.as_slice() {
        changes.push(Change {
            what: format!(
                "k3sArgs [{}] -> [{}]",
                extra.join(" "),
                settings.cluster.k3s_args.join(" ")
            ),
            in_place: false,
        });
    }
    if let (Some(have), Some(want)) = (server.api_port, settings.cluster.api_server_port.fixed())
        && have != want
    {
        changes.push(Change {
            what: format!("apiServerPort {have} -> {want}"),
            in_place: false,
        });
    }
    changes.extend(super::provider::ports_change(
        server.ports.clone(),
        settings,
    ));
    Plan {
        exists: true,
        changes,
    }
}

/// Adds or removes agent nodes so the running cluster has as many as the
/// settings ask; returns what it did and the agents it removed (whose Node
/// objects must go too).
async fn scale_agents(
    engine: &dyn Engine,
    settings: &Settings,
    existing: &[Node],
    step: &Step,
) -> Result<(Vec<String>, Vec<String>), Error> {
    let wanted = usize::from(settings.cluster.agents);
    let mut done = Vec::new();
    let mut removed = Vec::new();
    let agents = existing.iter().filter(|n| n.role == ROLE_AGENT);
    for node in agents.clone() {
        if agent_index(settings, &node.name).is_none_or(|i| i >= wanted) {
            step.progress(format!("removing agent node {}", node.name));
            docker::remove_container(engine, &node.name).await?;
            remove_node_volumes(engine, &node.name).await?;
            done.push(format!("removed agent node {}", node.name));
            // Its Kubernetes name, which a restored node keeps from its snapshot.
            let identity = node.labels.get(LABEL_NODE_NAME).unwrap_or(&node.name);
            removed.push(identity.clone());
        }
    }
    let have: Vec<usize> = agents
        .filter_map(|n| agent_index(settings, &n.name))
        .collect();
    let missing: Vec<usize> = (0..wanted).filter(|i| !have.contains(i)).collect();
    if !missing.is_empty() {
        // Agents join with the cluster's own token, which the server holds.
        let token = cluster_token(engine, settings).await?;
        let tarballs = node_tarballs(engine, settings).await?;
        for index in missing {
            let agent = node_name(settings, "agent", index);
            step.progress(format!("adding agent node {agent}"));
            let node = NewNode::agent(settings, &agent, &token);
            create_node(engine, settings, node, &tarballs).await?;
            done.push(format!("added agent node {agent}"));
        }
    }
    Ok((done, removed))
}

/// The cluster's token, which the server node was started with: agents
/// join with it, and a restored server must start with it again.
async fn cluster_token(engine: &dyn Engine, settings: &Settings) -> Result<String, Error> {
    let server = node_name(settings, "server", 0);
    docker::inspect(engine, &server)
        .await?
        .and_then(|c| c.config)
        .and_then(|c| c.env)
        .unwrap_or_default()
        .into_iter()
        .find_map(|e| e.strip_prefix("K3S_TOKEN=").map(String::from))
        .ok_or_else(|| {
            Error::internal(format!("node {server} has no K3S_TOKEN"))
                .with_hint("`devstack up --recreate` creates the cluster again")
        })
}

/// kube-proxy programs a Service's new endpoint at once instead of at most
/// once a second (its default `iptables-min-sync-period`, made for clusters
/// with thousands of Services). While a node starts, pods turn Ready one
/// after another, and the source-controller's Service was reachable up to a
/// second after its pod was Ready: every Flux download waited for it, after
/// a restart or restore, and so did the API server's calls to ESO's webhook.
/// A sync of a cluster this size takes milliseconds.
const KUBE_PROXY_SYNC_AT_ONCE: &str = "--kube-proxy-arg=iptables-min-sync-period=0s";

/// devstack's own arguments of the server (recorded as LABEL_FIXED_ARGS,
/// which `plan` skips). `identity` is its Kubernetes node name: the
/// container's name, or for a node restored from a snapshot the name it had
/// there, which its pods and leases are bound to.
fn own_server_args(settings: &Settings, identity: &str) -> Vec<String> {
    let server = node_name(settings, "server", 0);
    let mut args = vec![
        "server".to_string(),
        "--disable=traefik,servicelb,metrics-server,local-storage".into(),
        "--tls-san=127.0.0.1".into(),
        format!("--tls-san={server}"),
        KUBE_PROXY_SYNC_AT_ONCE.into(),
    ];
    if identity != server {
        args.push(format!("--tls-san={identity}"));
    }
    args.push(format!("--node-name={identity}"));
    args.push(format!("--https-listen-port={API_PORT}"));
    args
}

/// The server's command: devstack's own arguments, then the profile's
/// `k3sArgs`.
fn server_args(settings: &Settings, identity: &str) -> Vec<String> {
    let mut args = own_server_args(settings, identity);
    args.extend(settings.cluster.k3s_args.iter().cloned());
    args
}

fn agent_args(settings: &Settings, identity: &str) -> Vec<String> {
    vec![
        "agent".to_string(),
        KUBE_PROXY_SYNC_AT_ONCE.into(),
        format!("--node-name={identity}"),
        format!(
            "--server=https://{}:{API_PORT}",
            node_name(settings, "server", 0)
        ),
    ]
}

/// Removes the named volumes that hold one node's state.
async fn remove_node_volumes(engine: &dyn Engine, node: &str) -> Result<(), Error> {
    for (suffix, _) in STATE_PATHS {
        docker::remove_volume(engine, &format!("{node}-{suffix}")).await?;
    }
    Ok(())
}

/// What converging the node containers did.
#[derive(Debug)]
struct Converged {
    api_port: u16,
    created: bool,
    repaired: Vec<String>,
    /// Agents removed, whose Node objects must go too.
    removed_agents: Vec<String>,
}

/// Brings the node containers to the settings' shape: creates the cluster
/// when it has no server (rolling back what it created on failure, unless
/// `retain`), else starts stopped nodes and adds or removes agents in place.
async fn converge_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    options: UpOptions,
    step: &Step,
) -> Result<Converged, Error> {
    docker::ensure_network(engine, &settings.name, &settings.resource_prefix()).await?;
    let existing = nodes(engine, settings).await?;
    let server = node_name(settings, "server", 0);
    let Some(found) = existing.iter().find(|n| n.name == server) else {
        if !existing.is_empty() {
            // Agents without their server cannot join anything: start over.
            remove_nodes(engine, settings).await?;
        }
        let api_port = super::choose_api_port(settings)?;
        return match create_nodes(engine, settings, api_port, step).await {
            Ok(()) => Ok(Converged {
                api_port,
                created: true,
                repaired: Vec::new(),
                removed_agents: Vec::new(),
            }),
            Err(err) => Err(rollback(engine, settings, options, err).await),
        };
    };
    let api_port = api_port_of(&found.labels, &server)?;
    let mut repaired = Vec::new();
    for node in existing.iter().filter(|n| !n.running) {
        step.progress(format!("starting stopped node {}", node.name));
        engine
            .start_container(&node.name)
            .await
            .map_err(|e| docker::engine_error(format!("start node {}", node.name), e))?;
        repaired.push(format!("started stopped node {}", node.name));
    }
    let (scaled, removed_agents) = scale_agents(engine, settings, &existing, step).await?;
    repaired.extend(scaled);
    Ok(Converged {
        api_port,
        created: false,
        repaired,
        removed_agents,
    })
}

fn api_port_of(labels: &HashMap<String, String>, server: &str) -> Result<u16, Error> {
    labels
        .get(LABEL_API_PORT)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| {
            Error::internal(format!("node {server} lacks its {LABEL_API_PORT} label"))
                .with_hint("remove the stack with `devstack cluster down` and bring it up again")
        })
}

pub async fn up(
    engine: &dyn Engine,
    settings: &Settings,
    options: UpOptions,
    step: &Step,
) -> Result<ClusterInfo, Error> {
    let started = Instant::now();
    let span = step.span("node containers");
    let converged = span.finish(converge_nodes(engine, settings, options, step).await)?;
    // A new node's images are imported while it boots, off the path to
    // its Ready (see `create_node`).
    let images = async {
        if converged.created {
            let span = step.span("images imported while the nodes boot");
            span.finish(load_images(engine, settings, step).await)?;
        }
        Ok::<_, Error>(())
    };
    let ready = async {
        step.progress("waiting for the kubeconfig");
        let span = step.span("API server and kubeconfig");
        let budget = settings
            .timeouts
            .cluster
            .get()
            .saturating_sub(started.elapsed());
        let config = span.finish(kubeconfig_within(engine, settings, budget).await)?;
        let client = crate::k8s::client_from_kubeconfig(&config).await?;
        for agent in &converged.removed_agents {
            crate::k8s::delete_node(&client, agent).await?;
        }
        let expected = 1 + settings.cluster.agents as usize;
        crate::k8s::wait_nodes_ready(
            &client,
            expected,
            crate::k8s::Budget::since(started, settings.timeouts.cluster.get(), "timeouts.cluster"),
            step,
        )
        .await?;
        Ok::<_, Error>(ClusterInfo {
            provider: Provider::K3s,
            nodes: nodes(engine, settings)
                .await?
                .into_iter()
                .map(|n| n.name)
                .collect(),
            api_server: api_server_url(converged.api_port),
            kubeconfig: config,
            created: converged.created,
            repaired: converged.repaired.clone(),
            images_loaded: converged.created,
        })
    };
    let finish = async { tokio::try_join!(ready, images).map(|(info, ())| info) };
    match finish.await {
        Ok(info) => Ok(info),
        Err(err) if converged.created => Err(rollback(engine, settings, options, err).await),
        Err(err) => Err(err),
    }
}

fn api_server_url(port: u16) -> String {
    format!("https://127.0.0.1:{port}")
}

/// The running cluster's kubeconfig, renamed to the stack's context.
async fn kubeconfig(engine: &dyn Engine, settings: &Settings) -> Result<String, Error> {
    kubeconfig_within(engine, settings, settings.timeouts.cluster.get()).await
}

/// [`kubeconfig`], waiting up to `limit` for a starting server to write it.
async fn kubeconfig_within(
    engine: &dyn Engine,
    settings: &Settings,
    limit: Duration,
) -> Result<String, Error> {
    let server = node_name(settings, "server", 0);
    let labels = docker::inspect(engine, &server)
        .await?
        .and_then(|c| c.config)
        .and_then(|c| c.labels)
        .ok_or_else(|| {
            Error::user(format!("stack `{}` has no K3s server node", settings.name))
                .with_hint("`devstack up` creates it")
        })?;
    let api_server = api_server_url(api_port_of(&labels, &server)?);
    let raw = read_kubeconfig(engine, &server, limit).await?;
    kubeconfig::rename_context(&raw, &settings.kube_context(), Some(&api_server))
}

/// Removes what a failed `up` created, unless `--retain`, and says which.
async fn rollback(
    engine: &dyn Engine,
    settings: &Settings,
    options: UpOptions,
    err: Error,
) -> Error {
    if options.retain && options.rollback_by_caller {
        return err.context("cluster creation failed");
    }
    if options.retain {
        return err.context("cluster creation failed; the half-created cluster is retained for debugging (--retain)");
    }
    match remove_nodes(engine, settings).await {
        Ok(_) => err.context("cluster creation failed and was rolled back"),
        Err(rollback_err) => {
            let message = format!(
                "cluster creation failed, and rollback also failed ({})",
                rollback_err.message()
            );
            // The CLI adds the flags that select this stack to the command.
            err.context(message)
                .with_hint("remove the leftovers with `devstack cluster down` once Docker answers")
        }
    }
}

async fn create_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    api_port: u16,
    step: &Step,
) -> Result<(), Error> {
    let image = &settings.cluster.image;
    let bundle = preload::open_bundle(settings)?;
    step.progress(format!("node image {image}"));
    crate::bundle::ensure_image(engine, image, bundle.as_ref()).await?;
    let tarballs = node_tarballs(engine, settings).await?;
    let token = hex::encode(rand::random::<[u8; 24]>());
    let server = node_name(settings, "server", 0);
    let node = NewNode {
        name: &server,
        identity: &server,
        role: ROLE_SERVER,
        args: server_args(settings, &server),
        token: &token,
        api_port: Some(api_port),
        fixed_args: Some(own_server_args(settings, &server).len()),
        start: true,
        ip: None,
        shared: None,
    };
    create_node(engine, settings, node, &tarballs).await?;
    for index in 0..settings.cluster.agents as usize {
        let agent = node_name(settings, "agent", index);
        let node = NewNode::agent(settings, &agent, &token);
        create_node(engine, settings, node, &tarballs).await?;
    }
    Ok(())
}

/// An image tarball for the nodes.
struct NodeTarball {
    path: std::path::PathBuf,
    /// Imported by K3s before its kubelet starts, for the cluster's own pods.
    at_boot: bool,
}

async fn node_tarballs(
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

/// A node container to create.
struct NewNode<'a> {
    name: &'a str,
    /// Its Kubernetes node name and hostname.
    identity: &'a str,
    role: &'a str,
    args: Vec<String>,
    token: &'a str,
    /// The server's published API port.
    api_port: Option<u16>,
    /// How many of the server's `args` are devstack's own.
    fixed_args: Option<usize>,
    /// Start it once created (a restored node is filled first).
    start: bool,
    /// The address it must have on the stack's network.
    ip: Option<&'a str>,
    /// The snapshot volume a restored node shares (at [`SHARED_IN_NODE`]).
    shared: Option<&'a str>,
}

impl<'a> NewNode<'a> {
    fn agent(settings: &Settings, name: &'a str, token: &'a str) -> Self {
        NewNode {
            name,
            identity: name,
            role: ROLE_AGENT,
            args: agent_args(settings, name),
            token,
            api_port: None,
            fixed_args: None,
            start: true,
            ip: None,
            shared: None,
        }
    }
}

async fn create_node(
    engine: &dyn Engine,
    settings: &Settings,
    node: NewNode<'_>,
    tarballs: &[NodeTarball],
) -> Result<(), Error> {
    let NewNode {
        name,
        identity,
        role,
        args,
        token,
        api_port,
        fixed_args,
        start,
        ip,
        shared,
    } = node;
    let mut labels = node_labels(settings, role);
    labels.insert(LABEL_NODE_NAME.into(), identity.to_string());
    if let Some(port) = api_port {
        labels.insert(LABEL_API_PORT.into(), port.to_string());
    }
    if let Some(count) = fixed_args {
        labels.insert(LABEL_FIXED_ARGS.into(), count.to_string());
    }
    let mut binds = Vec::new();
    for (suffix, path) in STATE_PATHS {
        let volume = format!("{name}-{suffix}");
        engine
            .create_volume(VolumeCreateRequest {
                name: Some(volume.clone()),
                labels: Some(node_labels(settings, "volume")),
                ..Default::default()
            })
            .await
            .map_err(|e| docker::engine_error(format!("create volume {volume}"), e))?;
        binds.push(format!("{volume}:{path}"));
    }
    // K3s imports every file in its images directory before it starts the
    // kubelet, each time the node starts, and leaves them packed: the
    // container that first runs an image unpacks it then (10 s for the
    // kit's 314 MB kustomize-controller on a busy node). So K3s gets only
    // what its own pods run from the first moment (CoreDNS, pause: 1 s);
    // devstack imports the rest itself while the node boots (`ctr import`
    // unpacks as it goes). Both directories are folders of the stack's
    // state holding hard links to the tarballs, emptied by `load_images`
    // once the images are in: containerd, in the node's volume, keeps them
    // across restarts. A tarball that cannot be linked (another filesystem)
    // is mounted as a file instead.
    let staged = staged_images_dir(settings, name);
    let _ = std::fs::remove_dir_all(&staged);
    for (stage, in_node) in [
        (Stage::Boot, IMAGES_IN_NODE),
        (Stage::Devstack, PRELOAD_IN_NODE),
    ] {
        let dir = stage.dir(&staged);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::internal(format!("create {}", dir.display())).with_source(e))?;
        binds.push(format!("{}:{in_node}", dir.display()));
    }
    for (index, tarball) in tarballs.iter().enumerate() {
        let absolute =
            std::fs::canonicalize(&tarball.path).unwrap_or_else(|_| tarball.path.clone());
        let file = format!("{index:02}-{}", file_name(&absolute));
        let (stage, in_node) = if tarball.at_boot {
            (Stage::Boot, IMAGES_IN_NODE)
        } else {
            (Stage::Devstack, PRELOAD_IN_NODE)
        };
        if std::fs::hard_link(&absolute, stage.dir(&staged).join(&file)).is_err() {
            binds.push(format!("{}:{in_node}/{file}:ro", absolute.display()));
        }
    }
    if let Some(volume) = shared {
        binds.push(format!("{volume}:{SHARED_IN_NODE}:ro"));
    }
    if !settings.cluster.registry_mirrors.is_empty() {
        let path = crate::state::stack_dir(settings).join("registries.yaml");
        kubeconfig::write_private(&path, &registries_yaml(settings))?;
        binds.push(format!(
            "{}:/etc/rancher/k3s/registries.yaml:ro",
            path.display()
        ));
    }
    let mut port_bindings = HashMap::new();
    let mut exposed = Vec::new();
    if let Some(port) = api_port {
        let key = format!("{API_PORT}/tcp");
        exposed.push(key.clone());
        port_bindings.insert(
            key,
            Some(vec![PortBinding {
                host_ip: Some("127.0.0.1".into()),
                host_port: Some(port.to_string()),
            }]),
        );
        for mapping in &settings.cluster.ports {
            let key = format!("{}/{}", mapping.container_port, mapping.protocol);
            exposed.push(key.clone());
            port_bindings.insert(
                key,
                Some(vec![PortBinding {
                    host_ip: Some(mapping.bind_address.clone()),
                    host_port: Some(mapping.host_port.to_string()),
                }]),
            );
        }
    }
    let mut env = vec![format!("K3S_TOKEN={token}")];
    if role == ROLE_AGENT {
        env.push(format!(
            "K3S_URL=https://{}:{API_PORT}",
            node_name(settings, "server", 0)
        ));
    }
    let body = ContainerCreateBody {
        image: Some(settings.cluster.image.clone()),
        entrypoint: Some(node_entrypoint()),
        cmd: Some(args),
        env: Some(env),
        hostname: Some(identity.to_string()),
        networking_config: ip.map(|ip| bollard::models::NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                settings.resource_prefix(),
                bollard::models::EndpointSettings {
                    ipam_config: Some(bollard::models::EndpointIpamConfig {
                        ipv4_address: Some(ip.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )])),
        }),
        labels: Some(labels),
        exposed_ports: Some(exposed),
        host_config: Some(HostConfig {
            privileged: Some(true),
            binds: Some(binds),
            port_bindings: Some(port_bindings),
            network_mode: Some(settings.resource_prefix()),
            tmpfs: Some(HashMap::from([
                ("/run".to_string(), String::new()),
                ("/var/run".to_string(), String::new()),
            ])),
            ..Default::default()
        }),
        ..Default::default()
    };
    engine.create_container(name, body).await.map_err(|e| {
        if docker::is_conflict(&e) {
            Error::prerequisite(format!(
                "a container named `{name}` exists but is not this stack's K3s node"
            ))
            .with_hint(format!(
                "remove it (`docker rm -f {name}`) or use another stack name with --name"
            ))
        } else {
            docker::engine_error(format!("create node {name}"), e)
        }
    })?;
    if !start {
        return Ok(());
    }
    engine.start_container(name).await.map_err(|e| {
        let message = docker::docker_message(&e);
        if message.contains("port is already allocated")
            || message.contains("address already in use")
        {
            Error::prerequisite(format!("node {name} cannot publish its ports: {message}"))
                .with_hint("choose other ports (`cluster.apiServerPort`, `cluster.ports`)")
        } else {
            docker::engine_error(format!("start node {name}"), e)
        }
    })
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
fn staged_images_dir(settings: &Settings, node: &str) -> std::path::PathBuf {
    crate::state::stack_dir(settings)
        .join("node-images")
        .join(node)
}

/// Who imports a staged tarball into the node's containerd.
#[derive(Clone, Copy)]
enum Stage {
    /// K3s, from its images directory, before it starts the kubelet.
    Boot,
    /// devstack, while the node boots.
    Devstack,
}

impl Stage {
    fn dir(self, staged: &Path) -> std::path::PathBuf {
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
/// containerd, so that a restart imports nothing (see `create_node`).
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
async fn load_images(
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
    // One after the other, the largest first: each is checksums and
    // unpacking, CPU the booting node needs too (on 2 cores, two at once
    // took as long as one after the other).
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

/// `ctr import` of a tarball the node has at `path`, which unpacks the
/// image too: the container that first runs it has nothing left to do.
async fn import_staged(
    engine: &dyn Engine,
    node: &str,
    reference: &str,
    path: &str,
    limit: Duration,
) -> Result<(), Error> {
    let import = ["ctr", "--namespace", "k8s.io", "images", "import", path];
    let (code, _) = docker::exec_within(engine, node, &import, limit).await?;
    if code != 0 {
        return Err(Error::internal(format!(
            "importing {reference} into node {node} failed (exit code {code})"
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

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "image.tar".into())
}

fn registries_yaml(settings: &Settings) -> String {
    let mut out = String::from("mirrors:\n");
    for (registry, endpoints) in &settings.cluster.registry_mirrors {
        out.push_str(&format!(
            "  {}:\n    endpoint:\n",
            serde_json::to_string(registry).expect("string")
        ));
        for endpoint in endpoints {
            out.push_str(&format!(
                "      - {}\n",
                serde_json::to_string(endpoint).expect("string")
            ));
        }
    }
    out
}

/// Polls the server container until K3s has written its kubeconfig.
async fn read_kubeconfig(
    engine: &dyn Engine,
    server: &str,
    timeout: Duration,
) -> Result<String, Error> {
    let started = Instant::now();
    loop {
        let state = docker::inspect(engine, server).await?.and_then(|c| c.state);
        if !state.as_ref().and_then(|s| s.running).unwrap_or(false) {
            let logs = docker::tail_logs(engine, server, 20).await;
            return Err(Error::new(
                Kind::Internal,
                format!("K3s node {server} stopped while starting; last log lines:\n{logs}"),
            )
            .with_hint("`docker logs` of the node shows more; check `devstack doctor`"));
        }
        if let Ok(bytes) = engine.download(server, KUBECONFIG_IN_NODE).await
            && let Some(text) = first_file_in_tar(&bytes)
            && text.contains("server:")
        {
            return Ok(text);
        }
        if started.elapsed() >= timeout {
            return Err(Error::new(
                Kind::Timeout,
                format!(
                    "K3s node {server} did not write its kubeconfig within {}s",
                    timeout.as_secs()
                ),
            )
            .with_hint("raise `timeouts.cluster`; `docker logs` of the node shows why"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn first_file_in_tar(bytes: &[u8]) -> Option<String> {
    let mut archive = tar::Archive::new(bytes);
    let mut entry = archive.entries().ok()?.next()?.ok()?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut entry, &mut text).ok()?;
    Some(text)
}

/// Removes the stack's K3s node containers and their volumes.
async fn remove_nodes(engine: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    let mut removed = false;
    for node in nodes(engine, settings).await? {
        removed |= docker::remove_container(engine, &node.name).await?;
    }
    let volumes = engine
        .list_volumes(docker::stack_filter(Some(&settings.name)))
        .await
        .map_err(|e| docker::engine_error("list volumes", e))?;
    for volume in volumes {
        removed |= docker::remove_volume(engine, &volume).await?;
    }
    // Links to bundle tarballs a node never got to import: they would keep
    // a removed bundle's files on disk.
    let _ = std::fs::remove_dir_all(crate::state::stack_dir(settings).join("node-images"));
    Ok(removed)
}

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
    let bundle = preload::open_bundle(settings)?;
    crate::bundle::ensure_image(engine, image, bundle.as_ref()).await?;
    let api_port = super::choose_api_port(settings)?;
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

    #[test]
    fn a_restored_server_keeps_its_kubernetes_name_and_answers_to_both_names() {
        let settings = settings("");
        let args = own_server_args(&settings, "devstack-old-server-0");
        assert!(args.contains(&"--node-name=devstack-old-server-0".to_string()));
        assert!(args.contains(&"--tls-san=devstack-old-server-0".to_string()));
        assert!(args.contains(&format!("--tls-san={}", node_name(&settings, "server", 0))));
        let own = own_server_args(&settings, &node_name(&settings, "server", 0));
        assert!(
            own.contains(&KUBE_PROXY_SYNC_AT_ONCE.to_string()),
            "{own:?}"
        );
    }

    fn settings(cluster: &str) -> Settings {
        let text = format!(
            "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\ncluster:\n  provider: k3s\n{cluster}"
        );
        let loaded = crate::profile::load::parse("t.yaml", &text, ".".into()).unwrap();
        Settings::resolve(loaded, &Default::default()).unwrap()
    }

    fn server(settings: &Settings, api_port: u16) -> ServerFacts {
        ServerFacts {
            image: settings.cluster.image.clone(),
            args: server_args(settings, &node_name(settings, "server", 0)),
            api_port: Some(api_port),
            fixed_args: own_server_args(settings, &node_name(settings, "server", 0)).len(),
            ports: Vec::new(),
        }
    }

    #[test]
    fn agents_change_in_place_image_args_and_a_fixed_port_need_a_recreate() {
        let same = settings("");
        assert_eq!(plan_of(&same, 0, Some(&server(&same, 6550))).changes, []);

        let more = settings("  agents: 2\n");
        let plan = plan_of(&more, 0, Some(&server(&same, 6550)));
        assert_eq!(plan.changes.len(), 1);
        assert!(plan.changes[0].in_place && plan.changes[0].what == "agents 0 -> 2");
        assert!(!plan.needs_recreate());

        let image = settings("  image: rancher/k3s:v1.33.1-k3s1\n");
        let plan = plan_of(&image, 0, Some(&server(&same, 6550)));
        assert!(plan.needs_recreate());
        assert_eq!(
            plan.changes[0].what,
            format!("image {} -> rancher/k3s:v1.33.1-k3s1", same.cluster.image)
        );

        let args = settings("  k3sArgs: [--disable-network-policy]\n");
        let plan = plan_of(&args, 0, Some(&server(&same, 6550)));
        assert_eq!(
            plan.changes[0].what,
            "k3sArgs [] -> [--disable-network-policy]"
        );
        assert!(plan.needs_recreate());
        // Unchanged arguments read back from the node are no change.
        assert_eq!(plan_of(&args, 0, Some(&server(&args, 6550))).changes, []);

        let fixed = settings("  apiServerPort: 6551\n");
        assert!(plan_of(&fixed, 0, Some(&server(&same, 6550))).needs_recreate());
        assert!(
            !plan_of(&same, 0, Some(&server(&same, 6551))).needs_recreate(),
            "auto keeps any port"
        );

        let orphans = plan_of(&same, 1, None);
        assert!(orphans.exists && !orphans.needs_recreate());
    }

    #[test]
    fn the_profiles_arguments_are_found_after_however_many_devstack_set() {
        let args = settings("  k3sArgs: [--x]\n");
        // A node made when devstack set six arguments of its own (and no
        // label said so) keeps its profile arguments apart from them.
        let mut old = server(&args, 6550);
        old.args = [
            "server",
            "--disable=a",
            "--tls-san=1",
            "--tls-san=2",
            "--node-name=n",
            "--https-listen-port=6443",
            "--x",
        ]
        .map(String::from)
        .to_vec();
        old.fixed_args = FIXED_ARGS_UNLABELLED;
        assert_eq!(plan_of(&args, 0, Some(&old)).changes, []);
        // devstack's own arguments changing is no change of the profile's.
        let mut more = server(&args, 6550);
        more.args.insert(1, "--new-default".into());
        more.fixed_args += 1;
        assert_eq!(plan_of(&args, 0, Some(&more)).changes, []);
    }

    #[test]
    fn agent_indexes_come_from_node_names() {
        let s = settings("");
        assert_eq!(agent_index(&s, "devstack-t-agent-3"), Some(3));
        assert_eq!(agent_index(&s, "devstack-t-server-0"), None);
        assert_eq!(agent_index(&s, "devstack-other-agent-0"), None);
    }
}

/// Converge, drift and rollback against the in-memory engine.
#[cfg(test)]
mod engine_tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::docker::fake::{FakeContainer, FakeEngine};

    struct Fixture {
        engine: Arc<FakeEngine>,
        /// Holds the state directory (image cache) for the test's length.
        _state: tempfile::TempDir,
        settings: Settings,
    }

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
            ["ctr", "--namespace", "k8s.io", "images", "import", path] => {
                order.lock().unwrap().push(path.to_string());
                seen.lock().unwrap().push(image_of(path));
                (0, String::new())
            }
            other => panic!("unexpected command {other:?}"),
        });
        imports
    }

    fn fixture(cluster: &str) -> Fixture {
        let state = tempfile::tempdir().unwrap();
        let text = format!(
            "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\ncluster:\n  provider: k3s\n{cluster}"
        );
        let loaded = crate::profile::load::parse("t.yaml", &text, ".".into()).unwrap();
        let mut settings = Settings::resolve(loaded, &Default::default()).unwrap();
        settings.state_dir = state.path().to_path_buf();
        settings.images.bundle = None;
        let engine = Arc::new(FakeEngine::new());
        engine.with(|s| s.images.insert(settings.cluster.image.clone()));
        Fixture {
            engine,
            _state: state,
            settings,
        }
    }

    impl Fixture {
        fn with(&self, cluster: &str) -> Settings {
            let mut next = fixture(cluster).settings;
            next.state_dir = self.settings.state_dir.clone();
            next
        }

        /// A server node as `up` leaves it, running or stopped.
        fn add_server(&self, running: bool) {
            let mut labels = node_labels(&self.settings, ROLE_SERVER);
            labels.insert(LABEL_API_PORT.into(), "6550".into());
            let identity = node_name(&self.settings, "server", 0);
            labels.insert(
                LABEL_FIXED_ARGS.into(),
                own_server_args(&self.settings, &identity).len().to_string(),
            );
            let server = FakeContainer {
                image: self.settings.cluster.image.clone(),
                cmd: server_args(&self.settings, &identity),
                env: vec!["K3S_TOKEN=secret-token".into()],
                labels,
                running,
                ports: vec![(API_PORT, 6550)],
                ..Default::default()
            };
            self.engine.with(|s| {
                s.containers.insert("devstack-t-server-0".into(), server);
                for (suffix, _) in STATE_PATHS {
                    s.volumes.insert(
                        format!("devstack-t-server-0-{suffix}"),
                        node_labels(&self.settings, "volume"),
                    );
                }
            });
        }
    }

    fn step() -> Step {
        crate::ui::Ui::silent().step("test")
    }

    #[tokio::test]
    async fn converge_starts_stopped_nodes_and_scales_agents_in_place() {
        let f = fixture("");
        f.add_server(false);
        let one = f.with("  agents: 1\n");
        let engine = f.engine.as_ref();

        let done = converge_nodes(engine, &one, UpOptions::default(), &step())
            .await
            .unwrap();
        assert!(!done.created);
        assert_eq!(done.api_port, 6550);
        assert_eq!(
            done.repaired,
            [
                "started stopped node devstack-t-server-0",
                "added agent node devstack-t-agent-0"
            ]
        );
        assert!(done.removed_agents.is_empty());
        let agent = f.engine.container("devstack-t-agent-0").unwrap();
        assert!(agent.running);
        assert!(
            agent.env.contains(&"K3S_TOKEN=secret-token".to_string()),
            "agents join with the server's token: {:?}",
            agent.env
        );
        assert_eq!(agent.cmd, agent_args(&one, "devstack-t-agent-0"));
        assert_eq!(f.engine.volume_names().len(), 2 * STATE_PATHS.len());
        assert!(f.engine.container("devstack-t-server-0").unwrap().running);

        // Nothing to do: no engine call changes anything.
        let before = f.engine.calls().len();
        let again = converge_nodes(engine, &one, UpOptions::default(), &step())
            .await
            .unwrap();
        assert!(again.repaired.is_empty(), "{:?}", again.repaired);
        assert_eq!(f.engine.calls().len(), before, "{:?}", f.engine.calls());

        let none = f.with("");
        let done = converge_nodes(engine, &none, UpOptions::default(), &step())
            .await
            .unwrap();
        assert_eq!(done.repaired, ["removed agent node devstack-t-agent-0"]);
        assert_eq!(done.removed_agents, ["devstack-t-agent-0"]);
        assert_eq!(f.engine.container_names(), ["devstack-t-server-0"]);
        assert_eq!(
            f.engine.volume_names().len(),
            STATE_PATHS.len(),
            "the agent's volumes went with it: {:?}",
            f.engine.volume_names()
        );
    }

    #[tokio::test]
    async fn a_failed_create_removes_exactly_what_it_created() {
        let f = fixture("  agents: 1\n");
        // A container of another stack, which the rollback must not touch.
        f.engine.with(|s| {
            s.containers.insert(
                "devstack-other-server-0".into(),
                FakeContainer {
                    labels: crate::docker::labels("other", ROLE_SERVER),
                    ..Default::default()
                },
            );
            s.fail_on = Some("create container devstack-t-agent-0".into());
        });
        let err = converge_nodes(
            f.engine.as_ref(),
            &f.settings,
            UpOptions::default(),
            &step(),
        )
        .await
        .unwrap_err();
        assert!(
            err.message().starts_with(
                "cluster creation failed and was rolled back: create node devstack-t-agent-0"
            ),
            "{}",
            err.message()
        );
        assert_eq!(f.engine.container_names(), ["devstack-other-server-0"]);
        assert!(
            f.engine.volume_names().is_empty(),
            "{:?}",
            f.engine.volume_names()
        );
        let calls = f.engine.calls();
        let created = calls
            .iter()
            .position(|c| c == "create container devstack-t-server-0");
        let removed = calls
            .iter()
            .position(|c| c == "remove container devstack-t-server-0");
        assert!(created < removed, "{calls:?}");

        // --retain keeps the wreck.
        let f = fixture("  agents: 1\n");
        f.engine
            .with(|s| s.fail_on = Some("create container devstack-t-agent-0".into()));
        let retain = UpOptions {
            retain: true,
            ..Default::default()
        };
        let err = converge_nodes(f.engine.as_ref(), &f.settings, retain, &step())
            .await
            .unwrap_err();
        assert!(err.message().contains("retained"), "{}", err.message());
        assert_eq!(f.engine.container_names(), ["devstack-t-server-0"]);
    }

    #[tokio::test]
    async fn plan_reads_the_running_cluster() {
        let f = fixture("");
        let engine = f.engine.as_ref();
        assert_eq!(plan(engine, &f.settings).await.unwrap(), Plan::default());
        f.add_server(true);
        assert_eq!(plan(engine, &f.settings).await.unwrap().changes, []);

        let changed = f.with(
            "  agents: 2\n  image: rancher/k3s:v9.9.9-k3s1\n  apiServerPort: 6551\n  ports:\n  - {hostPort: 8080, containerPort: 30080}\n",
        );
        let plan = plan(engine, &changed).await.unwrap();
        let changes: Vec<(&str, bool)> = plan
            .changes
            .iter()
            .map(|c| (c.what.as_str(), c.in_place))
            .collect();
        let image = format!(
            "image {} -> rancher/k3s:v9.9.9-k3s1",
            f.settings.cluster.image
        );
        assert_eq!(
            changes,
            [
                ("agents 0 -> 2", true),
                (image.as_str(), false),
                ("apiServerPort 6550 -> 6551", false),
                ("ports [] -> [8080:30080]", false),
            ]
        );
        assert!(plan.check(false, &changed).is_err());
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

    #[tokio::test]
    async fn a_step_that_created_the_cluster_is_undone_by_the_runner() {
        let f = fixture("");
        f.add_server(true);
        let engine: Arc<dyn Engine> = f.engine.clone();
        let runner = crate::pipeline::Runner::new(&crate::ui::Ui::silent());
        let network = f.settings.resource_prefix();
        assert!(
            docker::ensure_network(engine.as_ref(), "t", &network)
                .await
                .unwrap()
        );
        let (e, n) = (engine.clone(), network.clone());
        runner.created(format!("network {network}"), move || {
            Box::pin(async move {
                docker::remove_network_if_unused(e.as_ref(), &n)
                    .await
                    .map(drop)
            })
        });
        let (e, s) = (engine.clone(), f.settings.clone());
        runner.created("k3s cluster", move || {
            Box::pin(async move { remove_nodes(e.as_ref(), &s).await.map(drop) })
        });
        let failed: Result<(), Error> = runner
            .step("Fails", None, |_| async { Err(Error::internal("boom")) })
            .await;
        assert!(failed.is_err());
        let rollback = runner.rollback(&Default::default()).await;
        assert!(rollback.complete(), "{rollback:?}");
        assert_eq!(
            rollback.undone,
            ["k3s cluster", &format!("network {network}")]
        );
        assert!(f.engine.container_names().is_empty());
        assert!(f.engine.volume_names().is_empty());
        assert!(f.engine.with(|s| s.networks.is_empty()));
    }
}
