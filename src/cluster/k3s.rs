//! K3s nodes as Docker containers, the way k3d runs them: privileged, named
//! volumes for the node's state, the API server published on 127.0.0.1,
//! every node on the stack's network. Needs nothing but Docker.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, PortBinding, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptions, DownloadFromContainerOptions, ListVolumesOptions, RemoveVolumeOptions,
};
use futures::StreamExt;

use crate::cluster::{Change, ClusterInfo, Plan, UpOptions, kubeconfig, node_name, preload};
use crate::docker;
use crate::error::{Error, Kind};
use crate::profile::{Provider, Settings};
use crate::ui::Step;

pub const ROLE_SERVER: &str = "k3s-server";
pub const ROLE_AGENT: &str = "k3s-agent";
const LABEL_API_PORT: &str = "dev.devstack.api-port";
const API_PORT: u16 = 6443;
/// How many of the server's arguments devstack sets before `k3sArgs`.
const SERVER_FIXED_ARGS: usize = 6;
const KUBECONFIG_IN_NODE: &str = "/etc/rancher/k3s/k3s.yaml";
const IMAGES_IN_NODE: &str = "/var/lib/rancher/k3s/agent/images";
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

/// Every K3s node container of the stack.
async fn nodes(
    docker: &Docker,
    settings: &Settings,
) -> Result<Vec<(String, String, bool, HashMap<String, String>)>, Error> {
    let mut filters = docker::stack_filter(Some(&settings.name));
    filters.push(docker::LABEL_ROLE.to_string());
    let containers = docker::find_containers(docker, filters).await?;
    let mut out: Vec<_> = containers
        .into_iter()
        .filter_map(|c| {
            let labels = c.labels.clone().unwrap_or_default();
            let role = labels.get(docker::LABEL_ROLE)?.clone();
            (role == ROLE_SERVER || role == ROLE_AGENT).then(|| {
                let running = c.state.as_ref().is_some_and(|s| s.to_string() == "running");
                (docker::container_name_of(&c), role, running, labels)
            })
        })
        .collect();
    // Servers first, then by name, so index 0 is the server.
    out.sort_by(|a, b| (a.1 != ROLE_SERVER, &a.0).cmp(&(b.1 != ROLE_SERVER, &b.0)));
    Ok(out)
}

/// K3s nodes as containers of the Docker engine `docker` talks to.
pub struct K3s {
    docker: Docker,
}

impl K3s {
    pub fn new(docker: Docker) -> Self {
        K3s { docker }
    }
}

/// Whether the stack has any K3s node container.
async fn any_node(docker: &Docker, settings: &Settings) -> Result<bool, Error> {
    Ok(!nodes(docker, settings).await?.is_empty())
}

super::provider::docker_provider!(K3s, Provider::K3s, exists: any_node, plan: plan, up: up, delete: remove_nodes);

/// Agent index of a node container name `devstack-<stack>-agent-<i>`.
fn agent_index(settings: &Settings, name: &str) -> Option<usize> {
    name.strip_prefix(&format!("{}-agent-", settings.resource_prefix()))?
        .parse()
        .ok()
}

/// The running cluster against the settings: the agent count changes in
/// place; the node image, the server's arguments and a fixed API port need
/// a new cluster.
async fn plan(docker: &Docker, settings: &Settings) -> Result<Plan, Error> {
    let existing = nodes(docker, settings).await?;
    if existing.is_empty() {
        return Ok(Plan::default());
    }
    let agents = existing.iter().filter(|n| n.1 == ROLE_AGENT).count();
    let server = docker::inspect(docker, &node_name(settings, "server", 0))
        .await?
        .map(|container| {
            let config = container.config.unwrap_or_default();
            ServerFacts {
                image: config.image.unwrap_or_default(),
                args: config.cmd.unwrap_or_default(),
                api_port: config
                    .labels
                    .unwrap_or_default()
                    .get(LABEL_API_PORT)
                    .and_then(|p| p.parse().ok()),
            }
        });
    Ok(plan_of(settings, agents, server.as_ref()))
}

/// What `plan` reads off the server node container.
struct ServerFacts {
    image: String,
    args: Vec<String>,
    api_port: Option<u16>,
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
    let extra = server.args.get(SERVER_FIXED_ARGS..).unwrap_or_default();
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
    Plan {
        exists: true,
        changes,
    }
}

/// Adds or removes agent nodes so the running cluster has as many as the
/// settings ask; returns what it did and the agents it removed (whose Node
/// objects must go too).
async fn scale_agents(
    docker: &Docker,
    settings: &Settings,
    existing: &[(String, String, bool, HashMap<String, String>)],
    step: &Step,
) -> Result<(Vec<String>, Vec<String>), Error> {
    let wanted = usize::from(settings.cluster.agents);
    let mut done = Vec::new();
    let mut removed = Vec::new();
    for (name, role, _, _) in existing {
        if role == ROLE_AGENT && agent_index(settings, name).is_none_or(|i| i >= wanted) {
            step.progress(format!("removing agent node {name}"));
            docker::remove_container(docker, name).await?;
            remove_node_volumes(docker, name).await?;
            done.push(format!("removed agent node {name}"));
            removed.push(name.clone());
        }
    }
    let have: Vec<usize> = existing
        .iter()
        .filter(|n| n.1 == ROLE_AGENT)
        .filter_map(|n| agent_index(settings, &n.0))
        .collect();
    let missing: Vec<usize> = (0..wanted).filter(|i| !have.contains(i)).collect();
    if !missing.is_empty() {
        let server = node_name(settings, "server", 0);
        // Agents join with the cluster's own token, which the server holds.
        let token = docker::inspect(docker, &server)
            .await?
            .and_then(|c| c.config)
            .and_then(|c| c.env)
            .unwrap_or_default()
            .into_iter()
            .find_map(|e| e.strip_prefix("K3S_TOKEN=").map(String::from))
            .ok_or_else(|| {
                Error::internal(format!(
                    "node {server} has no K3S_TOKEN to join agents with"
                ))
                .with_hint("`devstack up --recreate` creates the cluster again")
            })?;
        let wanted_images = preload::wanted_images(settings)?;
        let tarballs = preload::tarballs(docker, settings, &wanted_images).await?;
        for index in missing {
            let agent = node_name(settings, "agent", index);
            step.progress(format!("adding agent node {agent}"));
            create_node(
                docker,
                settings,
                &agent,
                ROLE_AGENT,
                agent_args(settings, &agent),
                &token,
                None,
                &tarballs,
            )
            .await?;
            done.push(format!("added agent node {agent}"));
        }
    }
    Ok((done, removed))
}

/// The server's command: devstack's own arguments (SERVER_FIXED_ARGS of
/// them, which `plan` skips), then the profile's `k3sArgs`.
fn server_args(settings: &Settings) -> Vec<String> {
    let server = node_name(settings, "server", 0);
    let mut args = vec![
        "server".to_string(),
        "--disable=traefik,servicelb,metrics-server,local-storage".into(),
        "--tls-san=127.0.0.1".into(),
        format!("--tls-san={server}"),
        format!("--node-name={server}"),
        format!("--https-listen-port={API_PORT}"),
    ];
    debug_assert_eq!(args.len(), SERVER_FIXED_ARGS);
    args.extend(settings.cluster.k3s_args.iter().cloned());
    args
}

fn agent_args(settings: &Settings, agent: &str) -> Vec<String> {
    vec![
        "agent".to_string(),
        format!("--node-name={agent}"),
        format!(
            "--server=https://{}:{API_PORT}",
            node_name(settings, "server", 0)
        ),
    ]
}

/// Removes the named volumes that hold one node's state.
async fn remove_node_volumes(docker: &Docker, node: &str) -> Result<(), Error> {
    for (suffix, _) in STATE_PATHS {
        let volume = format!("{node}-{suffix}");
        match docker
            .remove_volume(&volume, Some(RemoveVolumeOptions { force: true }))
            .await
        {
            Ok(()) => {}
            Err(e) if docker::is_not_found(&e) => {}
            Err(e) => return Err(docker::engine_error(format!("remove volume {volume}"), e)),
        }
    }
    Ok(())
}

pub async fn up(
    docker: &Docker,
    settings: &Settings,
    options: UpOptions,
    step: &Step,
) -> Result<ClusterInfo, Error> {
    let network = settings.resource_prefix();
    docker::ensure_network(docker, &settings.name, &network).await?;
    let existing = nodes(docker, settings).await?;
    let server = node_name(settings, "server", 0);
    let started = Instant::now();

    let mut removed_agents = Vec::new();
    let (api_port, created, repaired) =
        if let Some((_, _, _, labels)) = existing.iter().find(|n| n.0 == server) {
            let api_port: u16 = labels
                .get(LABEL_API_PORT)
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| {
                    Error::internal(format!("node {server} lacks its {LABEL_API_PORT} label"))
                        .with_hint(
                            "remove the stack with `devstack cluster down` and bring it up again",
                        )
                })?;
            let mut repaired = Vec::new();
            for (name, _, running, _) in &existing {
                if !running {
                    step.progress(format!("starting stopped node {name}"));
                    docker
                        .start_container(
                            name,
                            None::<bollard::query_parameters::StartContainerOptions>,
                        )
                        .await
                        .map_err(|e| docker::engine_error(format!("start node {name}"), e))?;
                    repaired.push(format!("started stopped node {name}"));
                }
            }
            let (scaled, removed) = scale_agents(docker, settings, &existing, step).await?;
            repaired.extend(scaled);
            removed_agents = removed;
            (api_port, false, repaired)
        } else {
            if !existing.is_empty() {
                // Agents without their server cannot join anything: start over.
                remove_nodes(docker, settings).await?;
            }
            let api_port = super::choose_api_port(settings)?;
            match create_nodes(docker, settings, api_port, step).await {
                Ok(()) => (api_port, true, Vec::new()),
                Err(err) => return Err(rollback(docker, settings, options, err).await),
            }
        };

    let finish = async {
        step.progress("waiting for the kubeconfig");
        let raw = read_kubeconfig(
            docker,
            &server,
            settings
                .timeouts
                .cluster
                .get()
                .saturating_sub(started.elapsed()),
        )
        .await?;
        let api_server = format!("https://127.0.0.1:{api_port}");
        let config = kubeconfig::rename_context(&raw, &settings.kube_context(), Some(&api_server))?;
        let client = crate::k8s::client_from_kubeconfig(&config).await?;
        for agent in &removed_agents {
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
        let names: Vec<String> = nodes(docker, settings)
            .await?
            .into_iter()
            .map(|n| n.0)
            .collect();
        let wanted: Vec<String> = preload::wanted_images(settings)?
            .into_iter()
            .map(|i| i.reference)
            .collect();
        wait_images_imported(
            docker,
            &names,
            &wanted,
            settings.timeouts.preload.get(),
            step,
        )
        .await?;
        Ok::<_, Error>(ClusterInfo {
            provider: Provider::K3s,
            nodes: names,
            api_server,
            kubeconfig: config,
            created,
            repaired,
        })
    };
    match finish.await {
        Ok(info) => Ok(info),
        Err(err) if created => Err(rollback(docker, settings, options, err).await),
        Err(err) => Err(err),
    }
}

/// Removes what a failed `up` created, unless `--retain`, and says which.
pub async fn rollback(
    docker: &Docker,
    settings: &Settings,
    options: UpOptions,
    err: Error,
) -> Error {
    if options.retain {
        return err.context("cluster creation failed; the half-created cluster is retained for debugging (--retain)");
    }
    match remove_nodes(docker, settings).await {
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
    docker: &Docker,
    settings: &Settings,
    api_port: u16,
    step: &Step,
) -> Result<(), Error> {
    let image = &settings.cluster.image;
    let bundle = preload::open_bundle(settings)?;
    step.progress(format!("node image {image}"));
    crate::bundle::ensure_image(docker, image, bundle.as_ref()).await?;
    let wanted = preload::wanted_images(settings)?;
    let tarballs = preload::tarballs(docker, settings, &wanted).await?;
    let token = hex::encode(rand::random::<[u8; 24]>());
    let server = node_name(settings, "server", 0);

    let server_args = server_args(settings);
    create_node(
        docker,
        settings,
        &server,
        ROLE_SERVER,
        server_args,
        &token,
        Some(api_port),
        &tarballs,
    )
    .await?;
    for index in 0..settings.cluster.agents as usize {
        let agent = node_name(settings, "agent", index);
        let args = agent_args(settings, &agent);
        create_node(
            docker, settings, &agent, ROLE_AGENT, args, &token, None, &tarballs,
        )
        .await?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn create_node(
    docker: &Docker,
    settings: &Settings,
    name: &str,
    role: &str,
    args: Vec<String>,
    token: &str,
    api_port: Option<u16>,
    tarballs: &[(String, std::path::PathBuf)],
) -> Result<(), Error> {
    let mut labels = node_labels(settings, role);
    if let Some(port) = api_port {
        labels.insert(LABEL_API_PORT.into(), port.to_string());
    }
    let mut binds = Vec::new();
    for (suffix, path) in STATE_PATHS {
        let volume = format!("{name}-{suffix}");
        docker
            .create_volume(VolumeCreateRequest {
                name: Some(volume.clone()),
                labels: Some(node_labels(settings, "volume")),
                ..Default::default()
            })
            .await
            .map_err(|e| docker::engine_error(format!("create volume {volume}"), e))?;
        binds.push(format!("{volume}:{path}"));
    }
    // k3s imports every tarball in its images directory at start.
    for (index, (_, tarball)) in tarballs.iter().enumerate() {
        let absolute = std::fs::canonicalize(tarball).unwrap_or_else(|_| tarball.clone());
        binds.push(format!(
            "{}:{IMAGES_IN_NODE}/{index:02}-{}:ro",
            absolute.display(),
            file_name(&absolute)
        ));
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
        cmd: Some(args),
        env: Some(env),
        hostname: Some(name.to_string()),
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
    docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.to_string()),
                ..Default::default()
            }),
            body,
        )
        .await
        .map_err(|e| {
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
    docker
        .start_container(
            name,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
        .map_err(|e| {
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

/// K3s imports its images directory in the background while the node turns
/// Ready; workloads must not start before the preloaded images are there, or
/// they would try to pull them.
async fn wait_images_imported(
    docker: &Docker,
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
            let (code, stdout) =
                docker::exec_in(docker, node, &["crictl", "images", "-o", "json"]).await?;
            let present = if code == 0 {
                image_tags(&stdout)
            } else {
                Default::default()
            };
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
    docker: &Docker,
    server: &str,
    timeout: Duration,
) -> Result<String, Error> {
    let started = Instant::now();
    loop {
        let state = docker::inspect(docker, server).await?.and_then(|c| c.state);
        if !state.as_ref().and_then(|s| s.running).unwrap_or(false) {
            let logs = docker::tail_logs(docker, server, 20).await;
            return Err(Error::new(
                Kind::Internal,
                format!("K3s node {server} stopped while starting; last log lines:\n{logs}"),
            )
            .with_hint("`docker logs` of the node shows more; check `devstack doctor`"));
        }
        let mut stream = docker.download_from_container(
            server,
            Some(DownloadFromContainerOptions {
                path: KUBECONFIG_IN_NODE.into(),
            }),
        );
        let mut bytes = Vec::new();
        let mut ok = true;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(c) => bytes.extend_from_slice(&c),
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        if ok
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
async fn remove_nodes(docker: &Docker, settings: &Settings) -> Result<bool, Error> {
    let mut removed = false;
    for (name, _, _, _) in nodes(docker, settings).await? {
        removed |= docker::remove_container(docker, &name).await?;
    }
    let options = ListVolumesOptions {
        filters: Some(HashMap::from([(
            "label".to_string(),
            docker::stack_filter(Some(&settings.name)),
        )])),
    };
    let volumes = docker
        .list_volumes(Some(options))
        .await
        .map_err(|e| docker::engine_error("list volumes", e))?;
    for volume in volumes.volumes.unwrap_or_default() {
        match docker
            .remove_volume(&volume.name, Some(RemoveVolumeOptions { force: true }))
            .await
        {
            Ok(()) => removed = true,
            Err(e) if docker::is_not_found(&e) => {}
            Err(e) => {
                return Err(docker::engine_error(
                    format!("remove volume {}", volume.name),
                    e,
                ));
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            args: server_args(settings),
            api_port: Some(api_port),
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
    fn agent_indexes_come_from_node_names() {
        let s = settings("");
        assert_eq!(agent_index(&s, "devstack-t-agent-3"), Some(3));
        assert_eq!(agent_index(&s, "devstack-t-server-0"), None);
        assert_eq!(agent_index(&s, "devstack-other-agent-0"), None);
    }
}
