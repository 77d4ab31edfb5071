//! K3s nodes as Docker containers, the way k3d runs them: privileged, named
//! volumes for the node's state, the API server published on 127.0.0.1,
//! every node on the stack's network. Needs nothing but Docker.

mod images;
mod node;
mod restore;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::cluster::plan::ports_change;
use crate::cluster::{Change, ClusterInfo, Plan, ProvisionOptions, kubeconfig, node_name};
use crate::docker::{self, Engine};
use crate::error::{Error, Kind};
use crate::profile::{Provider, Settings};
use crate::ui::Step;

pub use restore::{
    RestoredNodes, SHARED_DIRS, SNAPSHOT_PATHS, SavedCluster, SavedNode, create_restored_nodes,
    restored_addressing, saved_cluster, start_restored_nodes,
};

pub(super) use images::load_images;
use images::node_tarballs;
use node::{NewNode, create_node, create_nodes};

/// Where a node restored from a snapshot finds, read-only, the image layers
/// and content blobs the snapshot shares among every stack restored from it.
pub const SHARED_IN_NODE: &str = "/devstack/snapshot";
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
/// Where K3s reads its registry mirrors, as it starts.
const REGISTRIES_IN_NODE: &str = "/etc/rancher/k3s/registries.yaml";
const IMAGES_IN_NODE: &str = "/var/lib/rancher/k3s/agent/images";
/// Where a node finds the tarballs devstack imports into its containerd
/// itself, while the node boots (see `stage_tarballs`).
const PRELOAD_IN_NODE: &str = "/devstack/images";
/// The node's state, as named volumes so `down` can find them by label.
const STATE_PATHS: &[(&str, &str)] = &[
    ("k3s", "/var/lib/rancher/k3s"),
    ("kubelet", "/var/lib/kubelet"),
    ("cni", "/var/lib/cni"),
    ("log", "/var/log"),
];

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

/// The names of the stack's K3s node containers, the server first.
pub(super) async fn node_names(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<Vec<String>, Error> {
    Ok(nodes(engine, settings)
        .await?
        .into_iter()
        .map(|n| n.name)
        .collect())
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
pub(super) async fn any_node(engine: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    Ok(!nodes(engine, settings).await?.is_empty())
}

/// Agent index of a node container name `devstack-<stack>-agent-<i>`.
fn agent_index(settings: &Settings, name: &str) -> Option<usize> {
    name.strip_prefix(&format!("{}-agent-", settings.resource_prefix()))?
        .parse()
        .ok()
}

/// The running cluster against the settings: the agent count changes in
/// place; the node image, the server's arguments and a fixed API port need
/// a new cluster.
pub(super) async fn plan(engine: &dyn Engine, settings: &Settings) -> Result<Plan, Error> {
    let existing = nodes(engine, settings).await?;
    if existing.is_empty() {
        return Ok(Plan::default());
    }
    let agents = existing.iter().filter(|n| n.role == ROLE_AGENT).count();
    let server = docker::inspect(engine, &node_name(settings, "server", 0))
        .await?
        .map(|container| {
            let config = container.config.unwrap_or_default();
            let host_config = container.host_config.unwrap_or_default();
            let registries = host_config
                .binds
                .unwrap_or_default()
                .iter()
                .any(|b| b.contains(&format!(":{REGISTRIES_IN_NODE}")));
            let bindings = host_config.port_bindings.unwrap_or_default();
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
                registries,
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
    /// The node reads the stack's `registries.yaml`.
    registries: bool,
}

/// The host ports a node publishes besides the API server's.
fn published_ports(bindings: &docker::models::PortMap) -> Vec<(u16, u16)> {
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
    changes.extend(ports_change(server.ports.clone(), settings));
    // K3s reads registries.yaml as it starts, from a file bound in when the
    // node was made (the registry's mirror lives there too).
    if !settings.cluster.registry_mirrors.is_empty() && !server.registries {
        changes.push(Change {
            what: format!(
                "registry mirrors [{}] (the nodes were made without {REGISTRIES_IN_NODE})",
                settings
                    .cluster
                    .registry_mirrors
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            in_place: false,
        });
    }
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
/// when it has no server, else starts stopped nodes and adds or removes
/// agents in place. What a failed create leaves is the rollback's.
async fn converge_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    step: &Step,
) -> Result<Converged, Error> {
    docker::ensure_network(engine, &settings.name, &settings.resource_prefix()).await?;
    let existing = nodes(engine, settings).await?;
    let server = node_name(settings, "server", 0);
    let Some(found) = existing.iter().find(|n| n.name == server) else {
        if !existing.is_empty() {
            // Agents without their server cannot join anything: start over.
            delete(engine, settings).await?;
        }
        let api_port = super::choose_api_port(settings)?;
        create_nodes(engine, settings, api_port, step)
            .await
            .map_err(|err| err.context("cluster creation failed"))?;
        return Ok(Converged {
            api_port,
            created: true,
            repaired: Vec::new(),
            removed_agents: Vec::new(),
        });
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
    _options: ProvisionOptions,
    step: &Step,
) -> Result<ClusterInfo, Error> {
    let started = Instant::now();
    let span = step.span("node containers");
    let converged = span.finish(converge_nodes(engine, settings, step).await)?;
    // A new node's images are imported while it boots, off the path to
    // its Ready (see `stage_tarballs`).
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
        let _system_pods = converged
            .created
            .then(|| crate::k8s::system_pods::watch(&client, step));
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
    let finish = async {
        tokio::select! {
            done = async { tokio::try_join!(ready, images).map(|(info, ())| info) } => done,
            exited = a_node_exits(engine, settings) => Err(exited),
        }
    };
    let result = match finish.await {
        // An import into a node that is exiting fails first: the exit is the cause.
        Err(err) => match stopping_node(engine, settings).await {
            Some(node) => Err(node_exited(engine, &node).await),
            None => Err(err),
        },
        done => done,
    };
    match result {
        Err(err) if converged.created => Err(err.context("cluster creation failed")),
        done => done,
    }
}

/// The error for the first of the stack's node containers to stop while
/// `up` waits for the cluster (K3s exits at once on a bad `cluster.k3sArgs`
/// entry): its exit code and last lines, within a second, not at the end of
/// `timeouts.cluster`. Never returns while every node runs.
async fn a_node_exits(engine: &dyn Engine, settings: &Settings) -> Error {
    const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
    let mut started_again = std::collections::BTreeSet::new();
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let Some(node) = stopped_node(engine, settings).await else {
            continue;
        };
        if !started_again.contains(&node)
            && lost_the_startup_race(&engine.logs_tail(&node, 8).await)
            && engine.start_container(&node).await.is_ok()
        {
            tracing::info!(
                "node {node} lost K3s's startup race (k3s-io/k3s#7328): started it again"
            );
            started_again.insert(node);
            continue;
        }
        return node_exited(engine, &node).await;
    }
}

/// K3s releases before k3s-io/k3s#14201 (June 2026) can stop while they
/// start: the cloud-controller-manager asks for a ConfigMap before K3s has
/// granted it the RBAC to read it, and its failure stops the server. Seen
/// with three stacks starting at once on two cores. Started again, the
/// server finds its RBAC in place.
fn lost_the_startup_race(last_lines: &str) -> bool {
    last_lines.contains("cloud-controller-manager exited")
        && last_lines.contains("extension-apiserver-authentication")
        && last_lines.contains("forbidden")
}

/// A node that stops within a few seconds of an error: the error may be
/// what its exit caused (its containerd went away under an import).
async fn stopping_node(engine: &dyn Engine, settings: &Settings) -> Option<String> {
    for _ in 0..12 {
        if let Some(node) = stopped_node(engine, settings).await {
            return Some(node);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    None
}

async fn stopped_node(engine: &dyn Engine, settings: &Settings) -> Option<String> {
    let nodes = nodes(engine, settings).await.ok()?;
    nodes.into_iter().find(|n| !n.running).map(|n| n.name)
}

async fn node_exited(engine: &dyn Engine, node: &str) -> Error {
    let exit_code = engine
        .inspect_container(node)
        .await
        .ok()
        .and_then(|info| info.state)
        .and_then(|state| state.exit_code);
    let code = exit_code.map_or("an unknown code".to_string(), |c| format!("code {c}"));
    let last_lines = engine.logs_tail(node, 8).await;
    Error::user(format!(
        "node {node} exited with {code} while the cluster came up; its last lines:\n{}",
        last_lines.trim_end()
    ))
    .with_hint(format!(
        "a K3s argument it refuses (`cluster.k3sArgs` in the profile) stops it at once; `docker logs {node}` shows its whole log"
    ))
}

fn api_server_url(port: u16) -> String {
    format!("https://127.0.0.1:{port}")
}

/// The running cluster's kubeconfig, renamed to the stack's context.
pub(super) async fn kubeconfig(engine: &dyn Engine, settings: &Settings) -> Result<String, Error> {
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

/// Deletes the stack's K3s cluster: its node containers and their volumes.
pub(super) async fn delete(engine: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    let mut removed = false;
    for node in nodes(engine, settings).await? {
        removed |= docker::remove_container(engine, &node.name).await?;
    }
    // The nodes' volumes only: the registry's outlives a recreated cluster.
    let mut filters = docker::stack_filter(Some(&settings.name));
    filters.push(format!("{}=volume", docker::LABEL_ROLE));
    let volumes = engine
        .list_volumes(filters)
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

#[cfg(test)]
mod tests {
    use super::node::{own_server_args, server_args};
    use super::*;

    pub(super) fn settings(cluster: &str) -> Settings {
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
            registries: false,
        }
    }

    #[test]
    fn a_registry_on_nodes_made_without_registries_yaml_needs_a_recreate() {
        let mut with = settings("");
        with.cluster
            .registry_mirrors
            .insert("localhost:5111".into(), vec!["http://r:5000".into()]);
        let without = server(&with, 6550);
        let plan = plan_of(&with, 0, Some(&without));
        assert!(plan.needs_recreate(), "{plan:?}");
        assert!(plan.changes[0].what.contains("localhost:5111"));
        let made_with = ServerFacts {
            registries: true,
            ..server(&with, 6550)
        };
        assert_eq!(plan_of(&with, 0, Some(&made_with)).changes, []);
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

/// Converge, drift and rollback against the in-memory engine, and the
/// fixture the images tests share.
#[cfg(test)]
mod engine_tests {
    use std::sync::Arc;

    use super::node::{agent_args, host_args, own_server_args, server_args};
    use super::*;
    use crate::docker::fake::{FakeContainer, FakeEngine};

    pub(super) struct Fixture {
        pub(super) engine: Arc<FakeEngine>,
        /// Holds the state directory (image cache) for the test's length.
        _state: tempfile::TempDir,
        pub(super) settings: Settings,
    }

    /// The nodes' containerd, faked: `crictl images` lists `present` and
    /// what was imported since, `ctr import PATH` adds `image_of(PATH)`.
    /// The imported paths, in order.
    pub(super) fn fixture(cluster: &str) -> Fixture {
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
        pub(super) fn with(&self, cluster: &str) -> Settings {
            let mut next = fixture(cluster).settings;
            next.state_dir = self.settings.state_dir.clone();
            next
        }

        /// A server node as `up` leaves it, running or stopped.
        pub(super) fn add_server(&self, running: bool) {
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

    pub(super) fn step() -> Step {
        crate::ui::Ui::silent().step("test")
    }

    #[tokio::test]
    async fn a_node_that_stops_while_up_waits_fails_it_at_once_naming_the_node() {
        let f = fixture("");
        f.add_server(true);
        let engine = f.engine.as_ref();
        let waiting = a_node_exits(engine, &f.settings);
        tokio::pin!(waiting);
        let still_running =
            tokio::time::timeout(std::time::Duration::from_millis(1500), &mut waiting).await;
        assert!(still_running.is_err(), "no error while every node runs");
        f.engine
            .with(|s| s.containers.get_mut("devstack-t-server-0").unwrap().running = false);
        let err = tokio::time::timeout(std::time::Duration::from_secs(3), waiting)
            .await
            .expect("the stopped node is noticed within a second or two");
        assert!(
            err.message()
                .starts_with("node devstack-t-server-0 exited with "),
            "{err:?}"
        );
        assert!(err.hint().is_some_and(|h| h.contains("cluster.k3sArgs")));
    }

    #[tokio::test]
    async fn a_server_that_lost_k3s_startup_race_is_started_again_once() {
        const RACE: &str = "time=\"2026-11-29T10:35:32Z\" level=error msg=\"cloud-controller-manager exited: unable to load configmap based request-header-client-ca-file: configmaps \\\"extension-apiserver-authentication\\\" is forbidden: User \\\"k3s-cloud-controller-manager\\\" cannot get resource \\\"configmaps\\\"\"";
        assert!(lost_the_startup_race(RACE));
        assert!(!lost_the_startup_race(
            "Error: unknown flag: --no-such-flag"
        ));
        let f = fixture("");
        f.add_server(true);
        let engine = f.engine.as_ref();
        let stop = |log: &str| {
            f.engine.with(|s| {
                let node = s.containers.get_mut("devstack-t-server-0").unwrap();
                node.running = false;
                node.log = log.to_string();
            })
        };
        stop(RACE);
        let waiting = a_node_exits(engine, &f.settings);
        tokio::pin!(waiting);
        let still_waiting =
            tokio::time::timeout(std::time::Duration::from_millis(2500), &mut waiting).await;
        assert!(
            still_waiting.is_err(),
            "the node was started again: no error"
        );
        assert!(
            f.engine
                .calls()
                .contains(&"start devstack-t-server-0".to_string())
        );
        assert!(f.engine.container("devstack-t-server-0").unwrap().running);
        // Lost again: once is enough, the error names the node.
        stop(RACE);
        let err = tokio::time::timeout(std::time::Duration::from_secs(3), waiting)
            .await
            .expect("the second stop is an error");
        assert!(
            err.message()
                .starts_with("node devstack-t-server-0 exited with "),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn converge_starts_stopped_nodes_and_scales_agents_in_place() {
        let f = fixture("");
        f.add_server(false);
        let one = f.with("  agents: 1\n");
        let engine = f.engine.as_ref();

        let done = converge_nodes(engine, &one, &step()).await.unwrap();
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
        // The fake engine is a cgroup v1 host: the kubelet is told to run on it.
        let mut expected = agent_args(&one, "devstack-t-agent-0");
        expected.splice(1..1, host_args(&one, crate::docker::Cgroup::V1));
        assert_eq!(agent.cmd, expected);
        assert_eq!(f.engine.volume_names().len(), 2 * STATE_PATHS.len());
        assert!(f.engine.container("devstack-t-server-0").unwrap().running);

        // Nothing to do: no engine call changes anything.
        let before = f.engine.calls().len();
        let again = converge_nodes(engine, &one, &step()).await.unwrap();
        assert!(again.repaired.is_empty(), "{:?}", again.repaired);
        assert_eq!(f.engine.calls().len(), before, "{:?}", f.engine.calls());

        let none = f.with("");
        let done = converge_nodes(engine, &none, &step()).await.unwrap();
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

    /// `cluster up` as the command runs it: one step of a runner, which
    /// rolls back after it. The provider leaves its half-created cluster to
    /// the rollback, which removes it once.
    async fn failed_cluster_up(retain: bool) -> (Fixture, Error, Vec<String>) {
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
        let mut settings = f.settings.clone();
        settings.cluster.merge_kubeconfig = false;
        let engine: Arc<dyn Engine> = f.engine.clone();
        let runner = crate::pipeline::Runner::new(&crate::ui::Ui::silent());
        let err = crate::cluster::provision_step(
            &runner,
            &engine,
            &settings,
            ProvisionOptions::default(),
        )
        .await
        .unwrap_err();
        let before_rollback = f.engine.calls();
        let err = runner
            .roll_back_after(err, false, retain, &Default::default())
            .await;
        (f, err, before_rollback)
    }

    #[tokio::test]
    async fn a_failed_cluster_up_is_removed_by_the_rollback_alone_and_once() {
        let (f, err, before_rollback) = failed_cluster_up(false).await;
        assert!(
            !before_rollback.iter().any(|c| c.starts_with("remove ")),
            "the provider removed something itself: {before_rollback:?}"
        );
        assert!(
            err.message().starts_with(
                "rolled back: cluster creation failed: create node devstack-t-agent-0"
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
        let removals: Vec<&String> = calls
            .iter()
            .filter(|c| *c == "remove container devstack-t-server-0")
            .collect();
        assert_eq!(removals.len(), 1, "{calls:?}");
        let created = calls
            .iter()
            .position(|c| c == "create container devstack-t-server-0");
        let removed = calls
            .iter()
            .position(|c| c == "remove container devstack-t-server-0");
        assert!(created < removed, "{calls:?}");
    }

    #[tokio::test]
    async fn a_failed_cluster_up_with_retain_keeps_the_wreck() {
        let (f, err, _) = failed_cluster_up(true).await;
        assert!(err.message().contains("retained"), "{}", err.message());
        assert!(
            !f.engine.calls().iter().any(|c| c.starts_with("remove ")),
            "{:?}",
            f.engine.calls()
        );
        assert_eq!(
            f.engine.container_names(),
            ["devstack-other-server-0", "devstack-t-server-0"]
        );
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
            Box::pin(async move { delete(e.as_ref(), &s).await.map(drop) })
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
