//! The stack's image registry (`registry.enabled`): a `registry:3` container
//! on the stack network, published on `127.0.0.1:<port>`, with its storage
//! in a named volume of the stack. The nodes pull `localhost:<port>/…` from
//! it through the mechanism `cluster.registryMirrors` uses (containerd's
//! `hosts.toml` on Kind, `registries.yaml` on K3s), so one image reference
//! works for `docker push` on this machine and in pod specs; the cluster
//! advertises it with KEP-1755's `kube-public/local-registry-hosting`
//! ConfigMap, which Tilt and other tools read.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::docker::models::{
    ContainerCreateBody, HostConfig, PortBinding, RestartPolicy, RestartPolicyNameEnum,
    VolumeCreateRequest,
};
use crate::docker::{self, Engine, LABEL_SPEC_HASH};
use crate::error::Error;
use crate::hostinfo;
use crate::pipeline::Runner;
use crate::profile::{HostPort, Settings};

pub const ROLE: &str = "registry";
/// The port the registry listens on inside its container.
pub const CONTAINER_PORT: u16 = 5000;
/// Where the registry keeps what is pushed (the image's volume).
const STORAGE: &str = "/var/lib/registry";
/// The KEP-1755 ConfigMap.
pub const CONFIGMAP_NAMESPACE: &str = "kube-public";
pub const CONFIGMAP_NAME: &str = "local-registry-hosting";
/// No public address of devstack's docs exists to link: the page's name.
const HELP_URL: &str = "devstack: docs/registry.md (`devstack env` prints DEVSTACK_REGISTRY)";
/// The registry answers within a second of starting; more means it will not.
const READY_WITHIN: Duration = Duration::from_secs(30);
const LOG_LINES_ON_ERROR: usize = 20;

pub fn container_name(settings: &Settings) -> String {
    format!("{}-registry", settings.resource_prefix())
}

pub fn volume_name(settings: &Settings) -> String {
    format!("{}-registry-data", settings.resource_prefix())
}

/// How the nodes' containerd reaches the registry: by the container's name
/// on the stack network, which the nodes share.
pub fn endpoint_for_nodes(settings: &Settings) -> String {
    format!("http://{}:{CONTAINER_PORT}", container_name(settings))
}

/// What `up` did to the registry container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    Created,
    /// It was missing on a stack that exists (removed by hand).
    Repaired,
    Started,
    Recreated,
    Kept,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Action::Created => "created",
            Action::Repaired => "created again (it was missing)",
            Action::Started => "started",
            Action::Recreated => "recreated",
            Action::Kept => "running",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryReport {
    pub action: Action,
    /// `localhost:<port>`: what to tag, push and name in pod specs.
    pub host: String,
    pub container: String,
    pub image: String,
    pub volume: String,
    /// Milliseconds from start (or from finding it) to answering `/v2/`.
    pub ready_after_ms: u64,
}

/// What the container is made from; hashed into a label, so that a change
/// recreates it (the volume, and what was pushed, stay).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Spec {
    image: String,
    port: u16,
    volume: String,
}

impl Spec {
    fn of(settings: &Settings, port: u16) -> Spec {
        Spec {
            image: settings.registry.image.clone(),
            port,
            volume: volume_name(settings),
        }
    }

    fn hash(&self) -> String {
        let json = serde_json::to_vec(self).expect("spec serializes");
        hex::encode(&Sha256::digest(&json)[..8])
    }
}

/// The port the registry is to be published on, once `stack::Found` has
/// put the recorded or chosen one into the settings.
fn port(settings: &Settings) -> Result<u16, Error> {
    settings.registry.host_port().ok_or_else(|| {
        Error::internal("the registry's port was not chosen before the registry step")
    })
}

/// Refuses, before anything is created, a registry port something else
/// holds. The stack's own running registry holding it is fine.
pub async fn check_port(docker: &dyn Engine, settings: &Settings) -> Result<(), Error> {
    if !settings.registry.enabled {
        return Ok(());
    }
    let port = port(settings)?;
    if let Some(container) = docker::inspect(docker, &container_name(settings)).await?
        && container.state.as_ref().and_then(|s| s.running) == Some(true)
        && published_port(&container) == Some(port)
    {
        return Ok(());
    }
    let localhost = std::net::IpAddr::from([127, 0, 0, 1]);
    if hostinfo::port_is_free(localhost, port) {
        return Ok(());
    }
    Err(port_taken(settings, port))
}

/// The error of a registry port in use, with the fix for where the port
/// came from.
pub fn port_taken(settings: &Settings, port: u16) -> Error {
    let holder = hostinfo::port_holder(port)
        .map(|h| format!(" (held by {h})"))
        .unwrap_or_default();
    let hint = match settings.registry.port {
        HostPort::Fixed(_) => "stop what holds the port, or give `registry.port` another one (`auto` picks a free port)".to_string(),
        HostPort::Auto => format!(
            "stop what holds the port: the stack's nodes know its registry by this port; or remove the stack (`devstack{} down`, which also removes what was pushed) so that the next `up` picks another",
            settings.cli_flags()
        ),
    };
    Error::prerequisite(format!(
        "the registry of stack `{}` cannot publish 127.0.0.1:{port}: the port is already in use{holder}",
        settings.name
    ))
    .with_hint(hint)
}

fn published_port(container: &docker::models::ContainerInspectResponse) -> Option<u16> {
    container
        .host_config
        .as_ref()?
        .port_bindings
        .as_ref()?
        .get(&format!("{CONTAINER_PORT}/tcp"))?
        .as_ref()?
        .first()?
        .host_port
        .as_ref()?
        .parse()
        .ok()
}

/// Creates, starts, recreates or keeps the registry container so that it
/// runs as the settings say, then waits until it answers. What this run
/// creates is recorded with `runner` for a rollback: the container, and the
/// volume only when this run made it (a volume that was there holds what
/// was pushed before).
pub async fn up(
    engine: &Arc<dyn Engine>,
    settings: &Settings,
    runner: &Runner,
    existed: bool,
    progress: &(dyn Fn(String) + Sync),
) -> Result<RegistryReport, Error> {
    let docker = engine.as_ref();
    let port = port(settings)?;
    let spec = Spec::of(settings, port);
    let name = container_name(settings);
    let started = Instant::now();
    let action = match docker::inspect(docker, &name).await? {
        Some(container) => {
            let labels = container
                .config
                .as_ref()
                .and_then(|c| c.labels.clone())
                .unwrap_or_default();
            if !ours(&labels, settings) {
                return Err(Error::user(format!(
                    "container `{name}` was not created by devstack; leaving it alone"
                ))
                .with_hint("remove or rename it, or give the stack another name (--name)"));
            }
            if labels.get(LABEL_SPEC_HASH) != Some(&spec.hash()) {
                progress("recreating the registry container (its image or port changed)".into());
                docker::remove_container(docker, &name).await?;
                create(engine, settings, &spec, runner).await?;
                Action::Recreated
            } else if container.state.as_ref().and_then(|s| s.running) == Some(true) {
                Action::Kept
            } else {
                progress("starting the registry container".into());
                start(docker, settings, port).await?;
                Action::Started
            }
        }
        None => {
            // A stack that had a registry kept its volume: the container
            // was removed by hand. Otherwise the registry is new.
            let had_one = create(engine, settings, &spec, runner).await?;
            if existed && had_one {
                Action::Repaired
            } else {
                Action::Created
            }
        }
    };
    wait_ready(docker, settings, port).await?;
    Ok(RegistryReport {
        action,
        host: format!("localhost:{port}"),
        container: name,
        image: spec.image,
        volume: spec.volume,
        ready_after_ms: started.elapsed().as_millis() as u64,
    })
}

fn ours(labels: &HashMap<String, String>, settings: &Settings) -> bool {
    labels.get(docker::LABEL_STACK) == Some(&settings.name)
        && labels.get(docker::LABEL_MANAGED_BY).map(String::as_str)
            == Some(docker::MANAGED_BY_VALUE)
}

/// Creates and starts the container, and its volume unless it exists;
/// returns whether the volume existed.
async fn create(
    engine: &Arc<dyn Engine>,
    settings: &Settings,
    spec: &Spec,
    runner: &Runner,
) -> Result<bool, Error> {
    let docker = engine.as_ref();
    let bundle = crate::bundle::open(settings)?;
    crate::bundle::ensure_image(docker, &spec.image, bundle.as_ref()).await?;
    let labels = docker::labels(&settings.name, ROLE);
    let filters = [
        docker::stack_filter(Some(&settings.name)),
        vec![format!("{}={ROLE}", docker::LABEL_ROLE)],
    ]
    .concat();
    let volume_existed = docker
        .list_volumes(filters)
        .await
        .map_err(|e| docker::engine_error("list volumes", e))?
        .contains(&spec.volume);
    if !volume_existed {
        docker
            .create_volume(VolumeCreateRequest {
                name: Some(spec.volume.clone()),
                labels: Some(labels.clone()),
                ..Default::default()
            })
            .await
            .map_err(|e| docker::engine_error(format!("create volume {}", spec.volume), e))?;
    }
    let mut labels = labels;
    labels.insert(LABEL_SPEC_HASH.into(), spec.hash());
    let port_key = format!("{CONTAINER_PORT}/tcp");
    let body = ContainerCreateBody {
        image: Some(spec.image.clone()),
        // The registry binary links OpenTelemetry's exporter: without a
        // collector it would only log failed connections.
        env: Some(vec!["OTEL_TRACES_EXPORTER=none".into()]),
        labels: Some(labels),
        exposed_ports: Some(vec![port_key.clone()]),
        host_config: Some(HostConfig {
            port_bindings: Some(HashMap::from([(
                port_key,
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(spec.port.to_string()),
                }]),
            )])),
            binds: Some(vec![format!("{}:{STORAGE}", spec.volume)]),
            network_mode: Some(settings.resource_prefix()),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let name = container_name(settings);
    docker
        .create_container(&name, body)
        .await
        .map_err(|e| docker::engine_error(format!("create container {name}"), e))?;
    let (owned, volume) = (settings.clone(), spec.volume.clone());
    let what = if volume_existed {
        format!("registry container {name}")
    } else {
        format!("registry container {name} and volume {volume}")
    };
    let engine = engine.clone();
    runner.created(what, move || {
        Box::pin(async move {
            docker::remove_container(engine.as_ref(), &container_name(&owned)).await?;
            if !volume_existed {
                docker::remove_volume(engine.as_ref(), &volume).await?;
            }
            Ok(())
        })
    });
    start(docker, settings, spec.port).await?;
    Ok(volume_existed)
}

async fn start(docker: &dyn Engine, settings: &Settings, port: u16) -> Result<(), Error> {
    let name = container_name(settings);
    docker.start_container(&name).await.map_err(|e| {
        let message = docker::docker_message(&e);
        if message.contains("address already in use")
            || message.contains("port is already allocated")
        {
            port_taken(settings, port)
        } else {
            docker::engine_error(format!("start container {name}"), e)
        }
    })
}

/// Polls `GET /v2/` on the published port until the registry answers 200.
async fn wait_ready(docker: &dyn Engine, settings: &Settings, port: u16) -> Result<(), Error> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .no_proxy()
        .build()
        .map_err(|e| Error::internal(format!("HTTP client: {e}")))?;
    let url = format!("http://127.0.0.1:{port}/v2/");
    let started = Instant::now();
    loop {
        let answer = client.get(&url).send().await;
        if let Ok(response) = &answer
            && response.status().is_success()
        {
            return Ok(());
        }
        let name = container_name(settings);
        let running = docker::inspect(docker, &name)
            .await?
            .and_then(|c| c.state)
            .and_then(|s| s.running)
            == Some(true);
        if !running || started.elapsed() > READY_WITHIN {
            let logs = docker::tail_logs(docker, &name, LOG_LINES_ON_ERROR).await;
            let why = if running {
                format!("did not answer {url} within {}s", READY_WITHIN.as_secs())
            } else {
                "stopped".to_string()
            };
            return Err(Error::prerequisite(format!(
                "the registry container {name} {why}; its last lines:\n{logs}"
            ))
            .with_hint(format!(
                "`docker logs {name}` shows all of it; `devstack up` creates it again once it is removed"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Removes the registry container and its volume (what was pushed).
/// Returns whether anything was there.
pub async fn down(docker: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    let name = container_name(settings);
    let mut removed = false;
    if let Some(container) = docker::inspect(docker, &name).await? {
        let labels = container.config.and_then(|c| c.labels).unwrap_or_default();
        if !ours(&labels, settings) {
            return Err(Error::user(format!(
                "container `{name}` was not created by devstack; leaving it alone"
            )));
        }
        removed |= docker::remove_container(docker, &name).await?;
    }
    let filters = [
        docker::stack_filter(Some(&settings.name)),
        vec![format!("{}={ROLE}", docker::LABEL_ROLE)],
    ]
    .concat();
    let volumes = docker
        .list_volumes(filters)
        .await
        .map_err(|e| docker::engine_error("list volumes", e))?;
    for volume in volumes {
        removed |= docker::remove_volume(docker, &volume).await?;
    }
    Ok(removed)
}

/// The registry as `status` shows it: where it is, and whether its
/// container runs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryStatus {
    pub host: String,
    pub container: String,
    pub running: bool,
}

pub async fn status(docker: &dyn Engine, settings: &Settings) -> Option<RegistryStatus> {
    let host = settings.registry.host()?;
    let name = container_name(settings);
    let running = docker::inspect(docker, &name)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.state)
        .and_then(|s| s.running)
        == Some(true);
    Some(RegistryStatus {
        host,
        container: name,
        running,
    })
}

/// The container's address on the stack network.
async fn network_ip(docker: &dyn Engine, settings: &Settings) -> Result<Option<String>, Error> {
    Ok(docker::inspect(docker, &container_name(settings))
        .await?
        .and_then(|c| c.network_settings)
        .and_then(|n| n.networks)
        .and_then(|n| n.get(&settings.resource_prefix()).cloned())
        .and_then(|e| e.ip_address)
        .filter(|ip| !ip.is_empty()))
}

/// KEP-1755's `localRegistryHosting.v1` for the stack's registry: this
/// machine and the nodes' container runtime both use `localhost:<port>`;
/// pods reach the container at its address on the stack network.
pub fn hosting_yaml(host: &str, from_cluster_network: Option<&str>) -> String {
    let quote = |s: &str| serde_json::to_string(s).expect("strings serialize");
    let mut out = format!(
        "host: {}\nhostFromContainerRuntime: {}\n",
        quote(host),
        quote(host)
    );
    if let Some(address) = from_cluster_network {
        out.push_str(&format!("hostFromClusterNetwork: {}\n", quote(address)));
    }
    out.push_str(&format!("help: {}\n", quote(HELP_URL)));
    out
}

/// Applies the `kube-public/local-registry-hosting` ConfigMap.
pub async fn advertise(
    docker: &dyn Engine,
    settings: &Settings,
    client: &kube::Client,
) -> Result<String, Error> {
    let host = settings
        .registry
        .host()
        .ok_or_else(|| Error::internal("the registry has no port to advertise"))?;
    let ip = network_ip(docker, settings).await?;
    let from_network = ip.map(|ip| format!("{ip}:{CONTAINER_PORT}"));
    let data = hosting_yaml(&host, from_network.as_deref());
    let object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": CONFIGMAP_NAMESPACE,
            "labels": {docker::LABEL_MANAGED_BY: docker::MANAGED_BY_VALUE, docker::LABEL_STACK: settings.name},
        },
        "data": {"localRegistryHosting.v1": data},
    });
    crate::k8s::apply(client, &object).await?;
    Ok(host)
}

/// The settings Tilt and Skaffold need for the stack's kube context and
/// its registry `host`, one line each: both treat a context not named
/// `kind-*`, `k3d-*`, `minikube` or `docker-desktop` as remote.
pub fn tool_settings(context: &str, host: &str) -> Vec<String> {
    vec![
        format!("Tiltfile: allow_k8s_contexts('{context}'); default_registry('{host}')"),
        format!(
            "Skaffold: skaffold config set --kube-context {context} local-cluster true; skaffold config set --kube-context {context} default-repo {host}"
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Settings {
        let text = format!("apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\n{yaml}");
        let loaded = crate::profile::load::parse("t.yaml", &text, ".".into()).unwrap();
        Settings::resolve(loaded, &Default::default()).unwrap()
    }

    #[test]
    fn the_hosting_document_names_one_host_for_this_machine_and_the_nodes() {
        let yaml = hosting_yaml("localhost:5111", Some("172.18.0.3:5000"));
        let parsed: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({
                "host": "localhost:5111",
                "hostFromContainerRuntime": "localhost:5111",
                "hostFromClusterNetwork": "172.18.0.3:5000",
                "help": HELP_URL,
            })
        );
    }

    #[test]
    fn a_taken_port_says_how_to_free_it_for_where_the_port_came_from() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fixed = settings(&format!("registry: {{enabled: true, port: {port}}}\n"));
        let err = port_taken(&fixed, port);
        assert_eq!(err.kind(), crate::error::Kind::Prerequisite);
        assert!(
            err.message().contains(&format!(
                "cannot publish 127.0.0.1:{port}: the port is already in use"
            )),
            "{}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("`registry.port`"));
        let auto = settings("registry: {enabled: true}\n");
        assert!(port_taken(&auto, port).hint().unwrap().contains("down"));
        assert!(!hostinfo::port_is_free(
            std::net::IpAddr::from([127, 0, 0, 1]),
            port
        ));
    }

    #[test]
    fn tools_get_the_stack_context_and_its_registry() {
        let lines = tool_settings("devstack-t", "localhost:5111");
        assert_eq!(
            lines[0],
            "Tiltfile: allow_k8s_contexts('devstack-t'); default_registry('localhost:5111')"
        );
        assert!(lines[1].contains("--kube-context devstack-t local-cluster true"));
        assert!(lines[1].contains("default-repo localhost:5111"));
    }

    #[test]
    fn a_changed_image_or_port_changes_the_spec_hash() {
        let s = settings("registry: {enabled: true}\n");
        let a = Spec::of(&s, 5111);
        assert_eq!(a.hash(), Spec::of(&s, 5111).hash());
        assert_ne!(a.hash(), Spec::of(&s, 5112).hash());
    }

    /// Answers 200 to every request on a local port, as a registry's
    /// `/v2/` does; the port.
    async fn answering() -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = [0u8; 2048];
                let _ = stream.read(&mut request).await;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                    )
                    .await;
            }
        });
        port
    }

    /// Created with its volume (both recorded for a rollback), kept, started
    /// again, created again keeping the volume when removed by hand, and
    /// `down` removes both; a rollback of a new registry leaves nothing.
    #[tokio::test]
    async fn the_registry_container_converges_and_goes_with_its_volume() {
        use crate::docker::fake::FakeEngine;
        let port = answering().await;
        let mut settings = settings("registry: {enabled: true}\n");
        settings.registry.bound_port = Some(port);
        let name = container_name(&settings);
        let fake = Arc::new(FakeEngine::new());
        fake.with(|s| {
            s.images.insert(settings.registry.image.clone());
        });
        let engine: Arc<dyn Engine> = fake.clone();
        let runner = Runner::new(&crate::ui::Ui::silent());
        let up_now = |existed| {
            let (engine, settings, runner) = (&engine, &settings, &runner);
            async move { up(engine, settings, runner, existed, &|_| {}).await }
        };

        let report = up_now(false).await.unwrap();
        assert_eq!(report.action, Action::Created);
        assert_eq!(report.host, format!("localhost:{port}"));
        let container = fake.container(&name).unwrap();
        assert!(container.running);
        assert_eq!(container.ports, [(CONTAINER_PORT, port)]);
        assert_eq!(container.networks, [settings.resource_prefix()].into());
        assert_eq!(
            container.binds,
            [format!("{}:/var/lib/registry", volume_name(&settings))]
        );
        assert_eq!(container.labels[docker::LABEL_ROLE], ROLE);
        assert_eq!(fake.volume_names(), [volume_name(&settings)]);
        assert_eq!(
            runner.created_names(),
            [format!(
                "registry container {name} and volume {}",
                volume_name(&settings)
            )]
        );
        assert_eq!(up_now(true).await.unwrap().action, Action::Kept);
        fake.with(|s| s.containers.get_mut(&name).unwrap().running = false);
        assert_eq!(up_now(true).await.unwrap().action, Action::Started);
        fake.with(|s| s.containers.remove(&name));
        assert_eq!(up_now(true).await.unwrap().action, Action::Repaired);

        assert!(down(engine.as_ref(), &settings).await.unwrap());
        assert!(fake.container_names().is_empty());
        assert!(fake.volume_names().is_empty());

        let runner = Runner::new(&crate::ui::Ui::silent());
        up(&engine, &settings, &runner, false, &|_| {})
            .await
            .unwrap();
        let rollback = runner.rollback(&Default::default()).await;
        assert!(rollback.complete(), "{rollback:?}");
        assert!(fake.container_names().is_empty() && fake.volume_names().is_empty());
    }
}
