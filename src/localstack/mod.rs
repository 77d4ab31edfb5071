//! The stack's LocalStack container: created, reused, restarted or
//! recreated to match the settings, and waited on until the services the
//! stack uses report available; or LocalStack in the cluster ([`in_cluster`]).

mod health;
pub mod in_cluster;
mod route;

pub use health::{HealthClient, unavailable_services};
pub use route::route_for_pods;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::docker::models::{
    ContainerCreateBody, HostConfig, PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
use crate::docker::{self, Engine, LABEL_SPEC_HASH};
use crate::envvars;
use crate::error::{Error, Kind};
use crate::hostinfo;
use crate::pipeline::Runner;
use crate::profile::{HostPort, Settings};

/// The port LocalStack listens on inside its container, which pods reach.
pub const CONTAINER_PORT: u16 = crate::k8s::LOCALSTACK_PORT;
pub const ROLE: &str = "localstack";
/// Label holding the spec (as JSON) so a recreate can say what changed.
const LABEL_SPEC: &str = "dev.devstack.spec";
const LOG_LINES_ON_ERROR: usize = 25;

/// What `up` did to reach the desired state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "action", content = "reason")]
pub enum Action {
    Created,
    Reused,
    Restarted,
    Recreated(String),
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Created => f.write_str("created"),
            Action::Reused => f.write_str("reused"),
            Action::Restarted => f.write_str("restarted"),
            Action::Recreated(why) => write!(f, "recreated ({why})"),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    pub container: String,
    /// URL for clients on this host.
    pub url: String,
    pub host_port: u16,
    /// Address of the container on the stack network (for in-cluster routing).
    pub network_ip: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalStackReport {
    pub action: Action,
    pub endpoint: Endpoint,
    pub services: BTreeMap<String, String>,
    #[serde(with = "millis")]
    pub healthy_after: Duration,
}

mod millis {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
}

/// The desired container, reduced to what decides "same or different".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
struct Spec {
    image: String,
    bind_address: String,
    port: u16,
    services: Vec<String>,
    env: BTreeMap<String, String>,
    auth_token: bool,
}

impl Spec {
    /// The desired container for `settings`, whose host port is known.
    fn from_settings(settings: &Settings) -> Self {
        let ls = &settings.localstack;
        Spec {
            image: ls.image.clone(),
            bind_address: ls.bind_address.to_string(),
            port: ls.host_port().unwrap_or_default(),
            services: ls.services.clone(),
            env: ls.env.clone(),
            auth_token: ls.auth_token_present,
        }
    }

    fn hash(&self) -> String {
        let json = serde_json::to_vec(self).expect("spec serializes");
        hex::encode(&Sha256::digest(&json)[..8])
    }

    /// Human summary of what differs from `old`.
    fn differences(&self, old: Option<&Spec>) -> String {
        let Some(old) = old else {
            return "created by an older devstack".into();
        };
        let mut out = Vec::new();
        if self.image != old.image {
            out.push(format!("image {} -> {}", old.image, self.image));
        }
        if self.port != old.port || self.bind_address != old.bind_address {
            out.push(format!(
                "address {}:{} -> {}:{}",
                old.bind_address, old.port, self.bind_address, self.port
            ));
        }
        if self.services != old.services {
            out.push(format!(
                "services {} -> {}",
                old.services.join(","),
                self.services.join(",")
            ));
        }
        if self.env != old.env {
            out.push("environment changed".into());
        }
        if self.auth_token != old.auth_token {
            out.push(
                if self.auth_token {
                    "auth token added"
                } else {
                    "auth token removed"
                }
                .into(),
            );
        }
        if out.is_empty() {
            "spec changed".into()
        } else {
            out.join(", ")
        }
    }
}

pub fn container_name(settings: &Settings) -> String {
    format!("{}-localstack", settings.resource_prefix())
}

pub fn network_name(settings: &Settings) -> String {
    settings.resource_prefix()
}

/// The LocalStack host port, or a clear error when the stack has not
/// created its LocalStack yet (only `port: auto` can be unknown).
pub fn require_port(settings: &Settings) -> Result<u16, Error> {
    settings.localstack.host_port().ok_or_else(|| {
        Error::unhealthy(format!(
            "stack `{}` has no LocalStack yet: its port (`localstack.port: auto`) is chosen when LocalStack is created",
            settings.name
        ))
        .with_hint("run `devstack up` (or `devstack localstack up`) first")
    })
}

/// The host port this run gives LocalStack: the fixed one; for `auto`, the
/// port of the stack's existing container, else the one recorded for the
/// stack when it is still free, else a free one.
fn choose_port(settings: &Settings, existing: Option<&Spec>) -> Result<u16, Error> {
    if let HostPort::Fixed(port) = settings.localstack.port {
        return Ok(port);
    }
    if let Some(spec) = existing.filter(|s| s.port != 0) {
        return Ok(spec.port);
    }
    if let Some(port) = settings.localstack.bound_port
        && hostinfo::port_is_free(settings.localstack.bind_address, port)
    {
        return Ok(port);
    }
    hostinfo::free_port()
        .map_err(|e| Error::internal(format!("pick a free port for LocalStack: {e}")))
}

/// Brings LocalStack to the desired state and waits until it is healthy.
/// `runner` is told how to remove the container before this creates one,
/// and this never removes one that failed to start (or to become healthy):
/// the runner's rollback does, unless the run retains what it created.
pub async fn up(
    engine: &Arc<dyn Engine>,
    settings: &Settings,
    runner: &Runner,
    progress: &dyn Fn(&str),
) -> Result<LocalStackReport, Error> {
    let docker = engine.as_ref();
    let creating = || record_container(runner, engine, settings);
    let name = container_name(settings);
    let network = network_name(settings);
    let started = Instant::now();

    docker::ensure_network(docker, &settings.name, &network).await?;

    let existing = docker::inspect(docker, &name).await?;
    let existing_labels = existing
        .as_ref()
        .and_then(|c| c.config.as_ref())
        .and_then(|c| c.labels.clone());
    let old: Option<Spec> = existing_labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SPEC))
        .and_then(|s| serde_json::from_str(s).ok());
    let mut bound = settings.with_localstack_port(choose_port(settings, old.as_ref())?);
    let mut spec = Spec::from_settings(&bound);
    let running = existing
        .as_ref()
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.running)
        .unwrap_or(false);
    let found = existing_labels.as_ref().map(|labels| (labels, running));
    let action = match decide(settings, found, &spec, old.as_ref()) {
        Decision::Foreign => {
            return Err(Error::prerequisite(format!(
                "a container named `{name}` exists but devstack did not create it"
            ))
            .with_hint(format!(
                "rename or remove it (`docker rm -f {name}`), or choose another stack name with --name"
            )));
        }
        Decision::Create => {
            create_on_free_port(docker, &mut bound, &mut spec, &creating).await?;
            Action::Created
        }
        Decision::Reuse => Action::Reused,
        Decision::Recreate(why) => {
            progress(&format!("recreating: {why}"));
            docker::remove_container(docker, &name).await?;
            create_on_free_port(docker, &mut bound, &mut spec, &creating).await?;
            Action::Recreated(why)
        }
        Decision::Restart => {
            progress("restarting stopped container");
            match start(docker, &bound, &name).await {
                Ok(()) => Action::Restarted,
                // Something took an `auto` port while the stack was
                // stopped: LocalStack keeps no state, so move it.
                Err(e)
                    if e.kind() == Kind::Prerequisite
                        && settings.localstack.port == HostPort::Auto =>
                {
                    progress("its port was taken: recreating on a free port");
                    docker::remove_container(docker, &name).await?;
                    bound = settings.with_localstack_port(choose_port(settings, None)?);
                    spec = Spec::from_settings(&bound);
                    create_on_free_port(docker, &mut bound, &mut spec, &creating).await?;
                    Action::Recreated("its host port was taken by another process".into())
                }
                Err(e) => return Err(e),
            }
        }
    };
    let settings = &bound;

    progress("waiting for services to report available");
    let services = wait_healthy(docker, settings, started).await?;
    let endpoint = describe(docker, settings).await?;
    Ok(LocalStackReport {
        action,
        endpoint,
        services,
        healthy_after: started.elapsed(),
    })
}

/// What `up` does about the container found under the stack's name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    Create,
    Reuse,
    Restart,
    /// The spec changed: the reason, as the user reads it.
    Recreate(String),
    /// Not devstack's, or another stack's: never touched.
    Foreign,
}

/// The converge rule, on what was found (`labels` and whether it runs) and
/// the desired spec: kept apart from Docker so it is tested without it.
fn decide(
    settings: &Settings,
    found: Option<(&HashMap<String, String>, bool)>,
    spec: &Spec,
    old: Option<&Spec>,
) -> Decision {
    let Some((labels, running)) = found else {
        return Decision::Create;
    };
    let ours = labels.get(docker::LABEL_MANAGED_BY).map(String::as_str)
        == Some(docker::MANAGED_BY_VALUE)
        && labels.get(docker::LABEL_STACK) == Some(&settings.name);
    if !ours {
        Decision::Foreign
    } else if labels.get(LABEL_SPEC_HASH) != Some(&spec.hash()) {
        Decision::Recreate(spec.differences(old))
    } else if running {
        Decision::Reuse
    } else {
        Decision::Restart
    }
}

fn port_taken_error(settings: &Settings) -> Error {
    let ls = &settings.localstack;
    let port = ls.host_port().unwrap_or_default();
    let holder = hostinfo::port_holder(port)
        .map(|h| format!(" (held by {h})"))
        .unwrap_or_default();
    Error::prerequisite(format!(
        "LocalStack cannot publish {}:{port}: the port is already in use{holder}",
        ls.bind_address
    ))
    .with_hint(format!(
        "stop what holds the port, or let devstack pick a free one: `localstack.port: auto` in the profile (the default), `--port auto`, or {}=auto",
        envvars::DEVSTACK_LOCALSTACK_PORT
    ))
}

/// Tells `runner` how to remove the stack's LocalStack container, once
/// per run however many times the run creates it.
fn record_container(runner: &Runner, engine: &Arc<dyn Engine>, settings: &Settings) {
    let what = format!("LocalStack container {}", container_name(settings));
    if runner.created_names().contains(&what) {
        return;
    }
    let (engine, owned) = (engine.clone(), settings.clone());
    runner.created(what, move || {
        Box::pin(async move { down(engine.as_ref(), &owned).await.map(drop) })
    });
}

/// Creates and starts the container; with `port: auto`, a port taken
/// between choosing and binding it (another stack starting at the same
/// moment) is replaced by a fresh free port, a few times. `creating` is
/// called before each container is created.
async fn create_on_free_port(
    docker: &dyn Engine,
    bound: &mut Settings,
    spec: &mut Spec,
    creating: &(dyn Fn() + Sync),
) -> Result<(), Error> {
    let auto = bound.localstack.port == HostPort::Auto;
    let mut attempts = 0;
    loop {
        match create_and_start(docker, bound, spec, creating).await {
            Err(e) if auto && e.kind() == Kind::Prerequisite && attempts < 3 => {
                attempts += 1;
                // The container that could not bind its port makes way for
                // one on another port.
                docker::remove_container(docker, &container_name(bound)).await?;
                let port = hostinfo::free_port().map_err(|e| {
                    Error::internal(format!("pick a free port for LocalStack: {e}"))
                })?;
                *bound = bound.with_localstack_port(port);
                *spec = Spec::from_settings(bound);
            }
            result => return result,
        }
    }
}

async fn create_and_start(
    docker: &dyn Engine,
    settings: &Settings,
    spec: &Spec,
    creating: &(dyn Fn() + Sync),
) -> Result<(), Error> {
    let ls = &settings.localstack;
    if !hostinfo::port_is_free(ls.bind_address, spec.port) {
        return Err(port_taken_error(settings));
    }
    let bundle = crate::bundle::open(settings)?;
    crate::bundle::ensure_image(docker, &ls.image, bundle.as_ref()).await?;
    let name = container_name(settings);
    let mut env = vec![
        format!("SERVICES={}", ls.services.join(",")),
        format!("GATEWAY_LISTEN=0.0.0.0:{CONTAINER_PORT}"),
        "EAGER_SERVICE_LOADING=1".to_string(),
        format!("AWS_DEFAULT_REGION={}", ls.region),
    ];
    if let Some(token) = envvars::get(&ls.auth_token_env) {
        env.push(format!("LOCALSTACK_AUTH_TOKEN={token}"));
    }
    env.extend(ls.env.iter().map(|(k, v)| format!("{k}={v}")));

    let mut labels = docker::labels(&settings.name, ROLE);
    labels.insert(LABEL_SPEC_HASH.into(), spec.hash());
    labels.insert(
        LABEL_SPEC.into(),
        serde_json::to_string(spec).expect("spec serializes"),
    );
    let port_key = format!("{CONTAINER_PORT}/tcp");
    let body = ContainerCreateBody {
        image: Some(ls.image.clone()),
        env: Some(env),
        labels: Some(labels),
        exposed_ports: Some(vec![port_key.clone()]),
        host_config: Some(HostConfig {
            port_bindings: Some(HashMap::from([(
                port_key,
                Some(vec![PortBinding {
                    host_ip: Some(ls.bind_address.to_string()),
                    host_port: Some(spec.port.to_string()),
                }]),
            )])),
            network_mode: Some(network_name(settings)),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    creating();
    docker
        .create_container(&name, body)
        .await
        .map_err(|e| docker::engine_error(format!("create container {name}"), e))?;
    start(docker, settings, &name).await
}

async fn start(docker: &dyn Engine, settings: &Settings, name: &str) -> Result<(), Error> {
    match docker.start_container(name).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let message = docker::docker_message(&e);
            if message.contains("port is already allocated")
                || message.contains("address already in use")
            {
                Err(port_taken_error(settings))
            } else {
                Err(docker::engine_error(format!("start container {name}"), e))
            }
        }
    }
}

/// Polls `/_localstack/health` and the container state until every service
/// the stack needs reports available, the container dies, or time runs out.
async fn wait_healthy(
    docker: &dyn Engine,
    settings: &Settings,
    started: Instant,
) -> Result<BTreeMap<String, String>, Error> {
    let name = container_name(settings);
    let timeout = settings.timeouts.localstack.get();
    let client = HealthClient::new(&settings.localstack.endpoint_url())?;
    let mut last_state;
    loop {
        let state = docker::inspect(docker, &name).await?.and_then(|c| c.state);
        let running = state.as_ref().and_then(|s| s.running).unwrap_or(false);
        if !running {
            let exit = state.as_ref().and_then(|s| s.exit_code).unwrap_or(-1);
            let logs = docker::tail_logs(docker, &name, LOG_LINES_ON_ERROR).await;
            return Err(Error::new(
                Kind::Internal,
                format!("LocalStack container {name} exited (code {exit}) before it was healthy; last log lines:\n{}", indent(&logs)),
            )
            .with_hint(format!("`devstack localstack logs` shows the full log; check the image `{}`", settings.localstack.image)));
        }
        match client.services().await {
            Ok(services) => {
                let missing = unavailable_services(settings, &services);
                if missing.is_empty() {
                    return Ok(services);
                }
                last_state = format!(
                    "waiting for {}",
                    missing
                        .iter()
                        .map(|s| format!(
                            "{s}={}",
                            services.get(*s).map(String::as_str).unwrap_or("absent")
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            Err(e) => last_state = e,
        }
        if started.elapsed() >= timeout {
            let logs = docker::tail_logs(docker, &name, LOG_LINES_ON_ERROR).await;
            return Err(Error::new(
                Kind::Timeout,
                format!(
                    "LocalStack was not healthy within {} ({last_state}); last log lines:\n{}",
                    settings.timeouts.localstack,
                    indent(&logs)
                ),
            )
            .with_hint(
                "raise `timeouts.localstack` in the profile, or check `devstack localstack logs`",
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn indent(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return "    (no output)".into();
    }
    lines
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where the running container is.
pub async fn describe(docker: &dyn Engine, settings: &Settings) -> Result<Endpoint, Error> {
    let name = container_name(settings);
    let container = docker::inspect(docker, &name).await?;
    let network_ip = container
        .as_ref()
        .and_then(|c| c.network_settings.as_ref())
        .and_then(|n| n.networks.as_ref())
        .and_then(|n| n.get(&network_name(settings)))
        .and_then(|e| e.ip_address.clone())
        .filter(|ip| !ip.is_empty());
    // The container's own binding is the truth; the settings say what it
    // should be when there is no container.
    let bound = container
        .as_ref()
        .and_then(|c| c.host_config.as_ref())
        .and_then(|h| h.port_bindings.as_ref())
        .and_then(|b| b.get(&format!("{CONTAINER_PORT}/tcp")).cloned().flatten())
        .and_then(|b| b.first().and_then(|b| b.host_port.clone()))
        .and_then(|p| p.parse::<u16>().ok());
    let with_port;
    let settings = match bound {
        Some(port) => {
            with_port = settings.with_localstack_port(port);
            &with_port
        }
        None => settings,
    };
    Ok(Endpoint {
        container: name,
        url: settings.localstack.endpoint_url(),
        host_port: settings.localstack.host_port().unwrap_or_default(),
        network_ip,
    })
}

/// Removes the container, and the network when nothing else uses it.
pub async fn down(docker: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    let name = container_name(settings);
    let removed = match docker::inspect(docker, &name).await? {
        Some(c) => {
            let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
            if labels.get(docker::LABEL_STACK) != Some(&settings.name)
                || labels.get(docker::LABEL_MANAGED_BY).map(String::as_str)
                    != Some(docker::MANAGED_BY_VALUE)
            {
                return Err(Error::user(format!(
                    "container `{name}` was not created by devstack; leaving it alone"
                )));
            }
            docker::remove_container(docker, &name).await?
        }
        None => false,
    };
    docker::remove_network_if_unused(docker, &network_name(settings)).await?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Settings {
        let text = format!("apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\n{yaml}");
        let loaded = crate::profile::load::parse("t.yaml", &text, ".".into()).unwrap();
        Settings::resolve(loaded, &Default::default()).unwrap()
    }

    fn labels_of(settings: &Settings, spec: &Spec) -> HashMap<String, String> {
        let mut labels = docker::labels(&settings.name, ROLE);
        labels.insert(LABEL_SPEC_HASH.into(), spec.hash());
        labels.insert(LABEL_SPEC.into(), serde_json::to_string(spec).unwrap());
        labels
    }

    #[test]
    fn converge_creates_reuses_restarts_recreates_and_leaves_foreign_containers_alone() {
        let bound = settings("").with_localstack_port(4600);
        let spec = Spec::from_settings(&bound);
        let labels = labels_of(&bound, &spec);
        assert_eq!(decide(&bound, None, &spec, None), Decision::Create);
        assert_eq!(
            decide(&bound, Some((&labels, true)), &spec, Some(&spec)),
            Decision::Reuse
        );
        assert_eq!(
            decide(&bound, Some((&labels, false)), &spec, Some(&spec)),
            Decision::Restart
        );

        let pinned = settings("localstack:\n  image: localstack/localstack:4.3.0\n")
            .with_localstack_port(4600);
        let wanted = Spec::from_settings(&pinned);
        assert_eq!(
            decide(&pinned, Some((&labels, true)), &wanted, Some(&spec)),
            Decision::Recreate(format!(
                "image {} -> localstack/localstack:4.3.0",
                crate::versions::LOCALSTACK_IMAGE
            ))
        );

        let other_stack = labels_of(&settings("").with_localstack_port(1), &spec)
            .into_iter()
            .map(|(k, v)| {
                if k == docker::LABEL_STACK {
                    (k, "other".into())
                } else {
                    (k, v)
                }
            })
            .collect();
        assert_eq!(
            decide(&bound, Some((&other_stack, true)), &spec, None),
            Decision::Foreign
        );
        assert_eq!(
            decide(&bound, Some((&HashMap::new(), true)), &spec, None),
            Decision::Foreign
        );
    }

    /// A container that does not start is not removed by `up` itself: the
    /// runner was told how to remove it before it was created, once, and
    /// its rollback (or `--retain`, which skips it) decides.
    #[tokio::test]
    async fn a_container_that_fails_to_start_is_left_to_the_runners_rollback() {
        use crate::docker::fake::FakeEngine;
        let settings = settings("");
        let name = container_name(&settings);
        let fake = Arc::new(FakeEngine::new());
        fake.with(|s| {
            s.images.insert(settings.localstack.image.clone());
            s.fail_on = Some(format!("start {name}"));
        });
        let engine: Arc<dyn Engine> = fake.clone();
        let runner = Runner::new(&crate::ui::Ui::silent());
        let err = up(&engine, &settings, &runner, &|_| {}).await.unwrap_err();
        assert!(err.message().contains("injected failure"), "{err}");
        assert_eq!(
            fake.container_names(),
            [name.as_str()],
            "left for the rollback"
        );
        assert_eq!(
            runner.created_names(),
            [format!("LocalStack container {name}")]
        );
        let rollback = runner.rollback(&Default::default()).await;
        assert!(rollback.complete(), "{rollback:?}");
        assert!(fake.container_names().is_empty());
    }

    #[test]
    fn an_auto_port_stays_with_the_container_and_a_fixed_one_is_the_profiles() {
        let auto = settings("");
        let existing = Spec::from_settings(&auto.with_localstack_port(4711));
        assert_eq!(
            choose_port(&auto, Some(&existing)).unwrap(),
            4711,
            "reuse keeps the port"
        );
        let fresh = choose_port(&auto, None).unwrap();
        assert_ne!(fresh, 0);
        let fixed = settings("localstack:\n  port: 4599\n");
        assert_eq!(choose_port(&fixed, Some(&existing)).unwrap(), 4599);
        // The same spec on the port `auto` kept: the container is reused, not
        // recreated, on every later `up`.
        let bound = auto.with_localstack_port(4711);
        assert_eq!(Spec::from_settings(&bound).hash(), existing.hash());
    }

    #[tokio::test]
    async fn the_container_is_described_by_its_binding_and_down_removes_only_ours() {
        use crate::docker::fake::{FakeContainer, FakeEngine};
        let auto = settings("");
        let (name, network) = (container_name(&auto), network_name(&auto));
        let engine = FakeEngine::new();
        docker::ensure_network(&engine, &auto.name, &network)
            .await
            .unwrap();
        let ours = FakeContainer {
            labels: docker::labels(&auto.name, ROLE),
            running: true,
            networks: [network.clone()].into(),
            ports: vec![(CONTAINER_PORT, 4711)],
            ..Default::default()
        };
        engine.with(|s| s.containers.insert(name.clone(), ours));
        let endpoint = describe(&engine, &auto).await.unwrap();
        assert_eq!(endpoint.host_port, 4711);
        assert_eq!(endpoint.url, "http://127.0.0.1:4711");

        assert!(down(&engine, &auto).await.unwrap());
        assert_eq!(engine.container_names(), Vec::<String>::new());
        assert!(engine.with(|s| s.networks.is_empty()));

        engine.with(|s| s.containers.insert(name.clone(), FakeContainer::default()));
        let err = down(&engine, &auto).await.unwrap_err();
        assert!(err.message().contains("not created by devstack"), "{err}");
        assert_eq!(engine.container_names(), [name]);
    }
}
