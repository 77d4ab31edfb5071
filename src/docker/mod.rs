//! The only module that talks to the Docker engine (through bollard).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, ContainerSummary, NetworkCreateRequest};

use crate::envvars;
use crate::error::{Error, Kind};

pub mod endpoint;
pub mod engine;
#[cfg(test)]
pub mod fake;
pub mod host;

pub use endpoint::{Endpoint, Source};
pub use engine::{Engine, EngineResult};
pub use host::{Cgroup, EngineHost, ImageStore};

/// The engine's data shapes (containers, networks, images, the bodies of
/// their requests), named through this module: outside it, the engine is
/// an [`Engine`] and no code names bollard.
pub use bollard::models;

/// Label carried by everything devstack creates; listing and deleting go by
/// label filters, never by name patterns.
pub const LABEL_MANAGED_BY: &str = "dev.devstack.managed-by";
pub const MANAGED_BY_VALUE: &str = "devstack";
/// The stack a resource belongs to.
pub const LABEL_STACK: &str = "dev.devstack.stack";
/// What the resource is within the stack (localstack, node, network, ...).
pub const LABEL_ROLE: &str = "dev.devstack.role";
/// Hash of the settings a container was created from; a different hash
/// means the container must be recreated.
pub const LABEL_SPEC_HASH: &str = "dev.devstack.spec-hash";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The engine devstack talks to, and why: [`endpoint::resolve`].
pub fn endpoint() -> Result<Endpoint, Error> {
    endpoint::resolve()
}

/// The environment for a `docker` or `kind` process, so that it reaches
/// the engine devstack does ([`Endpoint::cli_env`]); empty when devstack
/// itself cannot tell which engine (it has failed by then).
pub fn cli_env() -> Vec<(&'static str, String)> {
    endpoint().map(|e| e.cli_env()).unwrap_or_default()
}

fn unreachable(endpoint: &Endpoint, detail: impl std::fmt::Display) -> Error {
    let address = &endpoint.host;
    let env = endpoint::Environment::current();
    let (message, hint) = match &endpoint.source {
        Source::DockerHost => (
            format!("cannot reach the Docker engine at {address}: {detail}"),
            format!(
                "start the Docker engine at {address}, or unset DOCKER_HOST to use {}",
                endpoint::without(&env, envvars::DOCKER_HOST)
            ),
        ),
        Source::DefaultSocket => (
            format!("cannot reach the Docker engine at {address}: {detail}"),
            "start the Docker engine (e.g. `sudo systemctl start docker`, or `sudo dockerd &`), \
             or set DOCKER_HOST to its address (or DOCKER_CONTEXT to its Docker context)"
                .to_string(),
        ),
        Source::EnvContext(name) => (
            format!(
                "cannot reach the Docker engine at {address} (context `{name}` from DOCKER_CONTEXT): {detail}"
            ),
            format!(
                "start the engine of context `{name}` (Colima: `colima start`; Docker Desktop, Rancher Desktop, OrbStack: open the app), \
                 or set DOCKER_CONTEXT to another context (`docker context ls` lists them), or unset it to use {}",
                endpoint::without(&env, envvars::DOCKER_CONTEXT)
            ),
        ),
        Source::ConfigContext { name, .. } => (
            format!(
                "cannot reach the Docker engine at {address} ({}): {detail}",
                endpoint.source.describe()
            ),
            format!(
                "start the engine of context `{name}` (Colima: `colima start`; Docker Desktop, Rancher Desktop, OrbStack: open the app), \
                 or switch with `docker context use default` (the local socket) or `docker context use NAME` (`docker context ls` lists them), \
                 or choose one for a single run with `DOCKER_CONTEXT=NAME`"
            ),
        ),
    };
    Error::prerequisite(message).with_hint(hint)
}

/// [`unreachable`] for the engine this process resolves to, where the
/// caller holds only a client.
fn unreachable_now(detail: impl std::fmt::Display) -> Error {
    match endpoint() {
        Ok(endpoint) => unreachable(&endpoint, detail),
        Err(err) => err,
    }
}

/// Connects, negotiates the API version with the engine and asks its version.
pub async fn connect() -> Result<Arc<dyn Engine>, Error> {
    let endpoint = endpoint()?;
    let docker = endpoint.client().map_err(|e| unreachable(&endpoint, e))?;
    let docker = tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version())
        .await
        .map_err(|_| unreachable(&endpoint, "no answer within 10s"))?
        .map_err(|e| unreachable(&endpoint, e))?;
    // The version's answer proves the engine answers (as a ping would) and
    // names the product, within the same bound.
    let version = tokio::time::timeout(CONNECT_TIMEOUT, docker.version())
        .await
        .map_err(|_| unreachable(&endpoint, "no answer within 10s"))?
        .map_err(|e| unreachable(&endpoint, e))?;
    refuse_unsupported(&version, &endpoint.describe())?;
    Ok(Arc::new(docker))
}

/// Engines that answer Docker's API but would fail a stack halfway are
/// refused before anything is created, naming what they lack. Podman 4's
/// compatible API, tried with devstack's node spec: it names images loaded
/// from tarballs `localhost/<name>` (nodes miss their preloaded images, and
/// every later `up` sees the node image drift), ignores
/// `HostConfig.CgroupnsMode`, and answers name conflicts with 500, not 409.
pub fn refuse_unsupported(
    version: &bollard::models::SystemVersion,
    address: &str,
) -> Result<(), Error> {
    let Some(podman) = version
        .components
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|c| c.name.starts_with("Podman"))
    else {
        return Ok(());
    };
    Err(Error::prerequisite(format!(
        "the engine at {} is {} {}, whose Docker-compatible API devstack does not support: \
         it names images loaded from tarballs `localhost/<name>`, so nodes would not find their images and every later `up` would see the node image drift; \
         it ignores the private cgroup namespace devstack's nodes ask for (`HostConfig.CgroupnsMode`); \
         and it answers name conflicts with 500 instead of 409",
        address,
        podman.name,
        podman.version
    ))
    .with_hint(
        "use Docker Engine (docker-ce, Docker Desktop, Colima or Rancher Desktop's moby); \
         or make the cluster with Podman yourself (`KIND_EXPERIMENTAL_PROVIDER=podman kind create cluster`) \
         and run the stack on it with `--provider existing` and `localstack.mode: in-cluster`, which need no engine at all",
    ))
}

/// [`connect`], or, when `optional` and no engine answers, [`absent`]: a run
/// on a cluster devstack did not create needs the engine only for nodes
/// that are containers of it.
pub async fn connect_or_absent(optional: bool) -> Result<Arc<dyn Engine>, Error> {
    match connect().await {
        Ok(docker) => Ok(docker),
        Err(_) if optional => Ok(absent()),
        Err(e) => Err(e),
    }
}

/// An engine every call of which fails as an unreachable one does
/// (`cannot reach the Docker engine at ...`), for code that asks the engine
/// only about what may be on it.
pub fn absent() -> Arc<dyn Engine> {
    // bollard builds a Unix client for any path that exists and connects per
    // call; /dev/null exists and is no socket, so every call fails at once.
    Arc::new(
        Docker::connect_with_unix("/dev/null", 1, bollard::API_DEFAULT_VERSION)
            .expect("/dev/null exists"),
    )
}

/// Whether `engine` answers a ping within a second.
pub async fn answers(engine: &dyn Engine) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(1), engine.ping()).await,
        Ok(Ok(_))
    )
}

/// `docker save` of one image into `dest`, as the engine's image store
/// allows: on the containerd store only the engine's own platform of an
/// image pulled from a multi-platform index is there, so that platform
/// alone is exported (API 1.48+, Docker 28+). An older engine on that store
/// fails with what to change.
pub async fn save_image(
    engine: &dyn Engine,
    reference: &str,
    dest: std::path::PathBuf,
) -> Result<(), Error> {
    let host = engine
        .host()
        .await
        .map_err(|e| engine_error("read the engine's info", e))?;
    let platform = host.export_platform();
    engine
        .export_image(reference, dest, platform)
        .await
        .map_err(|err| {
            if host.containerd_store() && platform.is_none() {
                Error::prerequisite(format!(
                    "cannot save image `{reference}` from {}: {}",
                    host.summary(),
                    err.message()
                ))
                .with_hint(
                    "on the containerd image store Docker saves one platform of an image only from Docker 28 (API 1.48) on: \
                     upgrade the engine, or turn the containerd image store off (Docker Desktop: Settings > General > \
                     \"Use containerd for pulling and storing images\"; Docker Engine: \
                     `\"features\": {\"containerd-snapshotter\": false}` in daemon.json)",
                )
            } else {
                err
            }
        })
}

/// Label filter selecting one stack's resources (or all stacks' with `None`).
pub fn stack_filter(stack: Option<&str>) -> Vec<String> {
    let mut labels = vec![format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")];
    if let Some(stack) = stack {
        labels.push(format!("{LABEL_STACK}={stack}"));
    }
    labels
}

/// Maps an engine error to a devstack error, recognising the engine going away.
pub fn engine_error(what: impl std::fmt::Display, err: bollard::errors::Error) -> Error {
    use bollard::errors::Error as E;
    match &err {
        E::HyperResponseError { .. }
        | E::HyperLegacyError { .. }
        | E::IOError { .. }
        | E::RequestTimeoutError
        | E::SocketNotFoundError(_) => unreachable_now(format!("{what}: {err}")),
        _ => Error::new(Kind::Internal, format!("{what}: {}", docker_message(&err))),
    }
}

/// The engine's own message for a failed request, without bollard's wrapping.
pub fn docker_message(err: &bollard::errors::Error) -> String {
    match err {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

pub fn is_not_found(err: &bollard::errors::Error) -> bool {
    matches!(
        err,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

pub fn is_conflict(err: &bollard::errors::Error) -> bool {
    matches!(
        err,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            ..
        }
    )
}

/// Labels for a resource of `stack` with `role`.
pub fn labels(stack: &str, role: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (LABEL_STACK.to_string(), stack.to_string()),
        (LABEL_ROLE.to_string(), role.to_string()),
    ])
}

fn is_ours(labels: Option<&HashMap<String, String>>, stack: &str) -> bool {
    labels.is_some_and(|l| {
        l.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
            && l.get(LABEL_STACK).map(String::as_str) == Some(stack)
    })
}

/// Creates the stack's labelled bridge network unless it exists. A network
/// of that name that devstack does not own is an error, never reused.
pub async fn ensure_network(engine: &dyn Engine, stack: &str, name: &str) -> Result<bool, Error> {
    ensure_network_in(engine, stack, name, None).await
}

/// The addresses a new network should have: its subnet, and the part of it
/// Docker hands out to containers that ask for no particular address (the
/// rest is kept for containers that do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addressing {
    pub subnet: String,
    pub ip_range: String,
}

/// [`ensure_network`], creating it with `addressing` when it is given and
/// Docker can (the subnet may be taken by another network): the network
/// is made either way.
pub async fn ensure_network_in(
    engine: &dyn Engine,
    stack: &str,
    name: &str,
    addressing: Option<&Addressing>,
) -> Result<bool, Error> {
    match engine.inspect_network(name).await {
        Ok(network) if is_ours(network.labels.as_ref(), stack) => return Ok(false),
        Ok(_) => {
            return Err(Error::prerequisite(format!(
                "Docker network `{name}` exists but was not created by devstack for stack `{stack}`"
            ))
            .with_hint(format!(
                "remove it (`docker network rm {name}`) or choose another stack name with --name"
            )));
        }
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(engine_error(format!("inspect network {name}"), e)),
    }
    let request = NetworkCreateRequest {
        name: name.to_string(),
        driver: Some("bridge".into()),
        labels: Some(labels(stack, "network")),
        ..Default::default()
    };
    if let Some(addressing) = addressing {
        let ipam = bollard::models::Ipam {
            config: Some(vec![bollard::models::IpamConfig {
                subnet: Some(addressing.subnet.clone()),
                ip_range: Some(addressing.ip_range.clone()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let wanted = NetworkCreateRequest {
            ipam: Some(ipam),
            ..request.clone()
        };
        match engine.create_network(wanted).await {
            Ok(()) => return Ok(true),
            Err(e) if is_conflict(&e) => return Ok(false),
            // Most likely another network holds the subnet: any will do.
            Err(e) => tracing::debug!(
                "network {name} with subnet {}: {}",
                addressing.subnet,
                docker_message(&e)
            ),
        }
    }
    match engine.create_network(request).await {
        Ok(()) => Ok(true),
        // Lost a race with a concurrent `up`: the network exists now.
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(engine_error(format!("create network {name}"), e)),
    }
}

/// The subnet of a network, when it has one.
pub async fn network_subnet(engine: &dyn Engine, name: &str) -> Result<Option<String>, Error> {
    let network = engine
        .inspect_network(name)
        .await
        .map_err(|e| engine_error(format!("inspect network {name}"), e))?;
    Ok(network
        .ipam
        .and_then(|ipam| ipam.config)
        .and_then(|configs| configs.into_iter().find_map(|c| c.subnet)))
}

/// A container's IPv4 address on a network.
pub async fn address_on(
    engine: &dyn Engine,
    container: &str,
    network: &str,
) -> Result<Option<String>, Error> {
    Ok(inspect(engine, container)
        .await?
        .and_then(|c| c.network_settings)
        .and_then(|n| n.networks)
        .and_then(|mut networks| networks.remove(network))
        .and_then(|endpoint| endpoint.ip_address)
        .filter(|ip| !ip.is_empty()))
}

/// Removes the stack's network when no container is attached to it.
pub async fn remove_network_if_unused(engine: &dyn Engine, name: &str) -> Result<bool, Error> {
    match engine.inspect_network(name).await {
        Ok(network) if network.containers.as_ref().is_some_and(|c| !c.is_empty()) => Ok(false),
        Ok(_) => match engine.remove_network(name).await {
            Ok(()) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(engine_error(format!("remove network {name}"), e)),
        },
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(engine_error(format!("inspect network {name}"), e)),
    }
}

/// Containers (running or not) carrying all `label_filters`.
pub async fn find_containers(
    engine: &dyn Engine,
    label_filters: Vec<String>,
) -> Result<Vec<ContainerSummary>, Error> {
    engine
        .list_containers(label_filters)
        .await
        .map_err(|e| engine_error("list containers", e))
}

pub async fn inspect(
    engine: &dyn Engine,
    name: &str,
) -> Result<Option<ContainerInspectResponse>, Error> {
    match engine.inspect_container(name).await {
        Ok(c) => Ok(Some(c)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(engine_error(format!("inspect container {name}"), e)),
    }
}

/// Force-removes a container and its anonymous volumes; absent is fine.
pub async fn remove_container(engine: &dyn Engine, name: &str) -> Result<bool, Error> {
    match engine.remove_container(name).await {
        Ok(()) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        // Removal already in progress (concurrent down): treat as gone.
        Err(e) if is_conflict(&e) => Ok(true),
        Err(e) => Err(engine_error(format!("remove container {name}"), e)),
    }
}

/// Removes a named volume; absent is fine. Returns whether it existed.
pub async fn remove_volume(engine: &dyn Engine, name: &str) -> Result<bool, Error> {
    match engine.remove_volume(name).await {
        Ok(()) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(engine_error(format!("remove volume {name}"), e)),
    }
}

/// The last `lines` lines of a container's output, for error messages.
pub async fn tail_logs(engine: &dyn Engine, name: &str, lines: usize) -> String {
    engine.logs_tail(name, lines).await
}

pub fn container_name_of(summary: &ContainerSummary) -> String {
    summary
        .names
        .as_ref()
        .and_then(|n| n.first())
        .map(|n| n.trim_start_matches('/').to_string())
        .unwrap_or_else(|| summary.id.clone().unwrap_or_default())
}

/// Pulls an image, or explains how to get it when no registry answers.
pub async fn pull_image(engine: &dyn Engine, image: &str) -> Result<(), Error> {
    let (repo, tag) = match image.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r.to_string(), t.to_string()),
        _ => (image.to_string(), "latest".to_string()),
    };
    engine.pull_image(&repo, &tag).await.map_err(|e| {
        Error::prerequisite(format!(
            "image `{image}` is not on this machine and cannot be pulled: {}",
            docker_message(&e)
        ))
        .with_hint(format!(
            "check network access to the registry, or load the image from an offline bundle \
             (`docker load -i <bundle>/images/...tar`, or set {} to the bundle directory)",
            crate::envvars::DEVSTACK_BUNDLE
        ))
    })
}

const EXEC_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a command in a container; returns its exit code and stdout.
pub async fn exec_in(
    engine: &dyn Engine,
    node: &str,
    cmd: &[&str],
) -> Result<(i64, String), Error> {
    exec_within(engine, node, cmd, EXEC_TIMEOUT).await
}

/// [`exec_in`] for commands that may take longer (image imports).
pub async fn exec_within(
    engine: &dyn Engine,
    node: &str,
    cmd: &[&str],
    limit: Duration,
) -> Result<(i64, String), Error> {
    let what = || format!("run `{}` in {node}", cmd.join(" "));
    tokio::time::timeout(limit, engine.exec(node, cmd))
        .await
        .map_err(|_| {
            Error::timeout(format!(
                "{} did not finish within {}",
                what(),
                crate::profile::HumanDuration(limit)
            ))
        })?
        .map_err(|e| engine_error(what(), e))
}

#[cfg(test)]
mod tests {
    use bollard::models::{SystemVersion, SystemVersionComponents};

    fn version_of(component: &str, version: &str) -> SystemVersion {
        SystemVersion {
            components: Some(vec![SystemVersionComponents {
                name: component.into(),
                version: version.into(),
                details: None,
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn podman_is_refused_naming_what_it_lacks_and_docker_is_not() {
        let err =
            super::refuse_unsupported(&version_of("Podman Engine", "4.3.1"), "unix:///p.sock")
                .unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        for gap in [
            "Podman Engine 4.3.1",
            "localhost/<name>",
            "CgroupnsMode",
            "409",
        ] {
            assert!(err.message().contains(gap), "{gap}: {}", err.message());
        }
        assert!(err.hint().unwrap().contains("--provider existing"));
        assert!(super::refuse_unsupported(&version_of("Engine", "28.5.2"), "a").is_ok());
        assert!(super::refuse_unsupported(&SystemVersion::default(), "a").is_ok());
    }

    use super::*;

    #[tokio::test]
    async fn an_absent_engine_fails_every_call_as_unreachable_at_once() {
        let engine = absent();
        let started = std::time::Instant::now();
        assert!(!answers(engine.as_ref()).await);
        let err = engine
            .list_networks(Vec::new())
            .await
            .map_err(|e| engine_error("list networks", e))
            .unwrap_err();
        assert!(
            err.message()
                .starts_with("cannot reach the Docker engine at "),
            "{}",
            err.message()
        );
        assert!(err.hint().is_some());
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
