//! The stack's health model, one set of rules for `up`, `status` and the
//! library API: one row per part of the stack — cluster and nodes,
//! LocalStack, Flux controllers, the Kustomization chain, the ESO
//! HelmRelease, the ClusterSecretStore and every ExternalSecret — each
//! healthy, reconciling, unhealthy or missing. Nothing missing is a crash:
//! it is a row.
//!
//! "Reconciling" is a Flux object re-applying a revision it has already
//! applied (a requested or periodic reconcile in flight, or a level waiting
//! for its dependency's reconcile): healthy, but not settled. Scripts that
//! need a quiet stack wait for [`StatusReport::settled`].

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams};
use serde::Serialize;

use crate::error::Error;
use crate::gitops::FLUX_NAMESPACE;
use crate::k8s::conditions::{self, one_line};
use crate::k8s::dynamic_api;
use crate::profile::Settings;
use crate::verify::{ESO_GROUP, ESO_VERSION};
use crate::{docker, localstack, state};

mod registry;
mod stopped;
pub use stopped::{START_HINT, StackContainer, stack_containers};

const KUSTOMIZATION_API: &str = "kustomize.toolkit.fluxcd.io/v1";
const HELM_RELEASE_API: &str = "helm.toolkit.fluxcd.io/v2";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Healthy,
    /// Healthy, but Flux is re-applying a revision it already applied.
    Reconciling,
    Unhealthy,
    Missing,
}

impl Health {
    /// Whether the part works (reconciling included).
    pub fn is_ok(self) -> bool {
        matches!(self, Health::Healthy | Health::Reconciling)
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRow {
    /// `cluster`, `node`, `localstack`, `flux`, `kustomization`,
    /// `helmrelease` (or `eso`: the cluster's own ESO controller),
    /// `clustersecretstore`, `externalsecret`.
    pub component: String,
    /// The object (`namespace/name` for namespaced ones).
    pub name: String,
    pub health: Health,
    /// Healthy or reconciling: the part works.
    pub healthy: bool,
    /// Short state: `Ready`, `running`, `missing`, the failing reason...
    pub state: String,
    /// One line of detail: the condition message, versions, addresses.
    pub detail: String,
    /// What to do about an unhealthy row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl StatusRow {
    pub fn new(
        component: &str,
        name: impl Into<String>,
        health: Health,
        state: impl Into<String>,
    ) -> Self {
        StatusRow {
            component: component.into(),
            name: name.into(),
            health,
            healthy: health.is_ok(),
            state: state.into(),
            detail: String::new(),
            hint: None,
        }
    }
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = one_line(&detail.into());
        self
    }
    /// What to do about it; kept only on a row that is not healthy.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        if !self.healthy {
            self.hint = Some(hint.into());
        }
        self
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub stack: String,
    /// Every part works (some may still be reconciling).
    pub healthy: bool,
    /// Every part is healthy and nothing is reconciling: what scripts wait for.
    pub settled: bool,
    /// Host ports the stack uses, as recorded when it was created.
    pub ports: crate::state::Ports,
    pub rows: Vec<StatusRow>,
}

impl StatusReport {
    /// The first row that keeps the stack from being settled, with how many
    /// more there are: `kustomization flux-system/x Progressing (and 2 more)`.
    pub fn first_problem(&self, include_reconciling: bool) -> Option<String> {
        let bad: Vec<&StatusRow> = self
            .rows
            .iter()
            .filter(|r| {
                r.health != Health::Healthy
                    && (include_reconciling || r.health != Health::Reconciling)
            })
            .collect();
        let first = bad.first()?;
        Some(format!(
            "{} {} {}{}",
            first.component,
            first.name,
            first.state,
            match bad.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            }
        ))
    }

    /// The stack's verdict as an error: `None` when healthy.
    pub fn to_error(&self) -> Option<Error> {
        let problem = self.first_problem(false)?;
        let mut err = Error::unhealthy(format!("stack `{}` is not healthy: {problem}", self.stack));
        let hint = self
            .rows
            .iter()
            .filter(|r| !r.healthy)
            .find_map(|r| r.hint.clone());
        if let Some(hint) = hint {
            err = err.with_hint(hint);
        }
        Some(err)
    }
}

/// Collects the health model until the stack is settled or `limit`
/// passes, telling `waiting` what it waits for whenever that changes;
/// returns the last report either way.
pub async fn wait_settled(
    settings: &Settings,
    limit: std::time::Duration,
    waiting: &(dyn Fn(&str) + Sync),
) -> StatusReport {
    let started = std::time::Instant::now();
    let mut told = None;
    loop {
        let report = collect(settings).await;
        if report.settled || started.elapsed() >= limit {
            return report;
        }
        let now = report.first_problem(true);
        if now != told {
            if let Some(what) = &now {
                waiting(what);
            }
            told = now;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Every row, LocalStack and the cluster looked at concurrently (a stopped
/// stack's rows say so instead).
pub async fn collect(settings: &Settings) -> StatusReport {
    if let Some(stopped) = stopped::report(settings).await {
        return stopped;
    }
    let (mut rows, localstack) = tokio::join!(cluster_rows(settings), localstack_row(settings));
    // The cluster and its nodes first, then LocalStack, then what runs in
    // the cluster.
    let split = rows
        .iter()
        .take_while(|r| matches!(r.component.as_str(), "cluster" | "node"))
        .count();
    let in_cluster = rows.split_off(split);
    rows.push(localstack);
    rows.extend(registry::row(settings).await);
    rows.extend(in_cluster);
    StatusReport {
        stack: settings.name.clone(),
        healthy: rows.iter().all(|r| r.healthy),
        settled: rows.iter().all(|r| r.health == Health::Healthy),
        ports: crate::state::StackRecord::load(settings).ports,
        rows,
    }
}

async fn localstack_row(settings: &Settings) -> StatusRow {
    if settings.localstack.mode == crate::profile::LocalStackMode::InCluster {
        return in_cluster_localstack_row(settings).await;
    }
    let name = localstack::container_name(settings);
    let up = "`devstack localstack up` starts or repairs it";
    let docker = match docker::connect().await {
        Ok(d) => d,
        Err(e) => {
            return StatusRow::new("localstack", name, Health::Unhealthy, "Docker unreachable")
                .detail(e.message())
                .hint(e.hint().unwrap_or("start the Docker engine").to_string());
        }
    };
    let container = match docker::inspect(docker.as_ref(), &name).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return StatusRow::new("localstack", name, Health::Missing, "missing")
                .detail("no container")
                .hint(up);
        }
        Err(e) => {
            return StatusRow::new("localstack", name, Health::Unhealthy, "unknown")
                .detail(e.message())
                .hint(up);
        }
    };
    let state = container
        .state
        .and_then(|s| s.status)
        .map(|s| s.to_string())
        .unwrap_or_else(|| "unknown".into());
    let endpoint = match localstack::describe(docker.as_ref(), settings).await {
        Ok(e) => e.url,
        Err(_) => settings.localstack.endpoint_url(),
    };
    if state != "running" {
        return StatusRow::new("localstack", name, Health::Unhealthy, state)
            .detail(format!("at {endpoint}"))
            .hint(up);
    }
    let repair = "`devstack localstack logs` shows why; `devstack localstack up` repairs it";
    services_row(settings, name, (&endpoint, &endpoint), up, repair).await
}

/// LocalStack in the cluster: its Deployment, then its services through a
/// port-forward.
async fn in_cluster_localstack_row(settings: &Settings) -> StatusRow {
    let namespace = settings.names.localstack_namespace();
    let service = settings.names.localstack_service();
    let name = format!("{namespace}/{service}");
    let up = "`devstack up` starts or repairs it";
    let client = match crate::k8s::stack_client(settings).await {
        Ok(client) => client,
        Err(e) => {
            return StatusRow::new("localstack", name, Health::Unhealthy, "cluster unreachable")
                .detail(e.message())
                .hint(up);
        }
    };
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &namespace);
    match deployments.get_opt(service).await {
        Ok(Some(d)) if crate::k8s::deployment_available(&d) => {}
        Ok(Some(d)) => {
            let selector = localstack::in_cluster::SELECTOR;
            let detail = match waiting_container(&client, &namespace, selector).await {
                Some(why) => format!("{}; {why}", crate::k8s::deployment_state(&d)),
                None => crate::k8s::deployment_state(&d),
            };
            return StatusRow::new("localstack", name, Health::Unhealthy, "not available")
                .detail(detail)
                .hint(format!(
                    "`kubectl -n {namespace} describe pods` shows why; `devstack up` repairs it"
                ));
        }
        Ok(None) => {
            return StatusRow::new("localstack", name, Health::Missing, "missing")
                .detail("no Deployment")
                .hint(up);
        }
        Err(e) => {
            return StatusRow::new("localstack", name, Health::Unhealthy, "unknown")
                .detail(e.to_string())
                .hint(up);
        }
    }
    let forward = match localstack::in_cluster::open_forward(&client, &settings.names, None).await {
        Ok(forward) => forward,
        Err(e) => {
            return StatusRow::new("localstack", name, Health::Unhealthy, "no port-forward")
                .detail(e.message())
                .hint(up);
        }
    };
    let repair = format!(
        "`kubectl -n {namespace} logs deploy/localstack` shows why; `devstack up` repairs it"
    );
    let shown = format!(
        "{} in the cluster",
        crate::k8s::localstack_in_cluster_url(&settings.names)
    );
    services_row(settings, name, (&forward.url(), &shown), up, &repair).await
}

/// Why a container of the pods matching `selector` does not run, as its
/// pod says (an image the node cannot pull: `ErrImagePull: ... not found`).
async fn waiting_container(
    client: &kube::Client,
    namespace: &str,
    selector: &str,
) -> Option<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(selector);
    let list = pods.list(&params).await.ok()?;
    list.items.into_iter().find_map(|pod| {
        let statuses = pod.status?.container_statuses?;
        statuses.into_iter().find_map(|s| {
            let waiting = s.state?.waiting?;
            let reason = waiting.reason?;
            Some(match waiting.message {
                Some(message) => format!("{reason}: {}", one_line(&message)),
                None => reason,
            })
        })
    })
}

/// LocalStack's own health check at `endpoint` (shown to the user as
/// `shown`), judged by the services the stack needs.
async fn services_row(
    settings: &Settings,
    name: String,
    (endpoint, shown): (&str, &str),
    up: &str,
    repair: &str,
) -> StatusRow {
    let health = match localstack::HealthClient::new(endpoint) {
        Ok(client) => client.services().await,
        Err(e) => Err(e.message().to_string()),
    };
    match health {
        Ok(services) => {
            let bad: Vec<String> = localstack::unavailable_services(settings, &services)
                .into_iter()
                .map(|s| {
                    format!(
                        "{s} {}",
                        services.get(s).map(String::as_str).unwrap_or("absent")
                    )
                })
                .collect();
            if bad.is_empty() {
                StatusRow::new("localstack", name, Health::Healthy, "running").detail(format!(
                    "{} at {shown}",
                    settings.localstack.services.join(", ")
                ))
            } else {
                StatusRow::new(
                    "localstack",
                    name,
                    Health::Unhealthy,
                    "services unavailable",
                )
                .detail(bad.join(", "))
                .hint(repair)
            }
        }
        Err(why) => StatusRow::new("localstack", name, Health::Unhealthy, "not answering")
            .detail(why)
            .hint(up),
    }
}

/// A row from a kube object read with `get_opt`.
fn object_row<E: std::fmt::Display>(
    component: &str,
    name: String,
    result: Result<Option<serde_json::Value>, E>,
    judge: impl Fn(&serde_json::Value) -> (Health, String, String),
    hint: &str,
) -> StatusRow {
    match result {
        Ok(Some(object)) => {
            let (health, state, detail) = judge(&object);
            StatusRow::new(component, name, health, state)
                .detail(detail)
                .hint(hint)
        }
        Ok(None) => StatusRow::new(component, name, Health::Missing, "missing").hint(hint),
        Err(e) => StatusRow::new(component, name, Health::Unhealthy, "unreadable")
            .detail(e.to_string())
            .hint(hint),
    }
}

/// `Ready` condition judged as (health, state, detail).
fn ready_judgement(object: &serde_json::Value) -> (Health, String, String) {
    judge_condition(object, "Ready", None)
}

/// Healthy when condition `type_` is True (and has `reason`, when given),
/// with the reason as state and the message as detail.
fn judge_condition(
    object: &serde_json::Value,
    type_: &str,
    reason: Option<&str>,
) -> (Health, String, String) {
    match conditions::condition(object, type_) {
        Some(c) => {
            let ok = c.is_true() && reason.is_none_or(|r| c.reason.as_deref() == Some(r));
            let state = match (&c.reason, ok) {
                (_, true) => type_.to_string(),
                (Some(reason), false) => reason.clone(),
                (None, false) => format!("{type_}={}", c.status),
            };
            let health = if ok {
                Health::Healthy
            } else {
                Health::Unhealthy
            };
            (health, state, c.message.unwrap_or_default())
        }
        None => (Health::Unhealthy, "no status yet".into(), String::new()),
    }
}

/// Ready reasons of a Flux object that is working, not failing: a reconcile
/// in flight, or a wait for a dependency that is itself reconciling.
const IN_FLIGHT_REASONS: &[&str] = &["Progressing", "DependencyNotReady"];

/// A Flux Kustomization or HelmRelease: Ready for its current generation is
/// healthy; re-applying what it has already applied (`applied_current`: the
/// last applied revision is the source's current one, or the release's last
/// attempt is deployed) is reconciling; anything else is judged by Ready.
pub fn judge_flux(object: &serde_json::Value, applied_current: bool) -> (Health, String, String) {
    let ready = conditions::condition(object, "Ready");
    let observed = object["metadata"]["generation"].as_i64()
        == object["status"]["observedGeneration"].as_i64();
    match ready {
        Some(c) if c.is_true() && observed => (
            Health::Healthy,
            "Ready".into(),
            c.message.unwrap_or_default(),
        ),
        Some(c)
            if applied_current
                && (c.is_true()
                    || IN_FLIGHT_REASONS.contains(&c.reason.as_deref().unwrap_or_default())) =>
        {
            let state = match c.reason.as_deref() {
                Some("DependencyNotReady") => "Reconciling (waiting for its dependency)",
                _ => "Reconciling",
            };
            (
                Health::Reconciling,
                state.into(),
                c.message.unwrap_or_default(),
            )
        }
        _ => ready_judgement(object),
    }
}

/// Whether a HelmRelease's latest release is deployed.
fn release_deployed(object: &serde_json::Value) -> bool {
    object["status"]["history"][0]["status"].as_str() == Some("deployed")
}

/// The whole object as JSON: `metadata` too, which the Flux rules read
/// (`generation`, the namespace a source reference defaults to), not only
/// the `data` (spec and status) a `DynamicObject` keeps apart.
fn dynamic_to_json(object: DynamicObject) -> serde_json::Value {
    serde_json::to_value(object).unwrap_or_default()
}

async fn get_json(
    api: &Api<DynamicObject>,
    name: &str,
) -> Result<Option<serde_json::Value>, kube::Error> {
    api.get_opt(name).await.map(|o| o.map(dynamic_to_json))
}

/// What `devstack up` does about a missing or broken cluster.
const UP_HINT: &str = "`devstack up` creates or repairs the stack";
/// What `devstack sync` does about missing Flux objects.
const FLUX_HINT: &str = "`devstack sync` installs Flux and the External Secrets chain";

/// The cluster's rows, in order: cluster, nodes, Flux controllers, the
/// Kustomization chain, the HelmRelease, the store, the ExternalSecrets.
async fn cluster_rows(settings: &Settings) -> Vec<StatusRow> {
    let (client, nodes) = match reach_cluster(settings).await {
        Ok(reached) => reached,
        Err(row) => return vec![row],
    };
    let mut rows = vec![cluster_row(&client, settings, nodes.len()).await];
    rows.extend(nodes.iter().map(node_row));
    rows.extend(flux_controller_rows(&client, settings).await);
    rows.extend(kustomization_rows(&client, settings).await);
    match &settings.eso.cluster {
        None => rows.push(helm_release_row(&client, &settings.names).await),
        Some(eso) => rows.push(cluster_eso_row(&client, eso).await),
    }
    rows.push(cluster_secret_store_row(&client, &settings.names.store()).await);
    if !settings.parameters.is_empty() {
        rows.push(cluster_secret_store_row(&client, &settings.names.parameter_store()).await);
    }
    let eso_api = format!("{ESO_GROUP}/{ESO_VERSION}");
    rows.extend(external_secret_rows(&client, settings, &eso_api).await);
    rows
}

/// A client for the stack's cluster and its nodes, or the one row saying
/// why the cluster cannot be reached.
async fn reach_cluster(settings: &Settings) -> Result<(kube::Client, Vec<Node>), StatusRow> {
    let context = settings.kube_context();
    let path = state::kubeconfig_path(settings);
    let yaml = match std::fs::read_to_string(&path) {
        Ok(yaml) => yaml,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(
                StatusRow::new("cluster", context, Health::Missing, "missing")
                    .detail(format!("stack `{}` has no cluster", settings.name))
                    .hint(UP_HINT),
            );
        }
        Err(e) => {
            return Err(StatusRow::new(
                "cluster",
                context,
                Health::Unhealthy,
                "unreadable kubeconfig",
            )
            .detail(format!("{}: {}", path.display(), e.kind())));
        }
    };
    let client = crate::k8s::client_from_kubeconfig(&yaml)
        .await
        .map_err(|e| {
            StatusRow::new("cluster", &context, Health::Unhealthy, "bad kubeconfig")
                .detail(e.message())
                .hint(UP_HINT)
        })?;
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.list(&ListParams::default()).await {
        Ok(list) => Ok((client, list.items)),
        Err(e) => Err(
            StatusRow::new("cluster", context, Health::Unhealthy, "API unreachable")
                .detail(e.to_string())
                .hint(format!(
                    "{UP_HINT}; `docker ps --filter label={}={}` lists its nodes",
                    docker::LABEL_STACK,
                    settings.name
                )),
        ),
    }
}

async fn cluster_row(client: &kube::Client, settings: &Settings, nodes: usize) -> StatusRow {
    let version = client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_else(|_| "version unknown".into());
    StatusRow::new(
        "cluster",
        settings.kube_context(),
        Health::Healthy,
        "reachable",
    )
    .detail(format!(
        "{}, Kubernetes {version}, {nodes} node(s)",
        settings.cluster.provider.as_str(),
    ))
}

fn node_row(node: &Node) -> StatusRow {
    let name = node.metadata.name.clone().unwrap_or_default();
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let ok = ready.is_some_and(|c| c.status == "True");
    let kubelet = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| format!("kubelet {}", i.kubelet_version))
        .unwrap_or_default();
    let message = ready
        .filter(|_| !ok)
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    let detail = [kubelet, message]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let health = if ok {
        Health::Healthy
    } else {
        Health::Unhealthy
    };
    StatusRow::new("node", name, health, if ok { "Ready" } else { "NotReady" })
        .detail(detail)
        .hint(format!(
            "{UP_HINT}; `docker logs <node>` shows the node's log"
        ))
}

async fn flux_controller_rows(client: &kube::Client, settings: &Settings) -> Vec<StatusRow> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), FLUX_NAMESPACE);
    let mut rows = Vec::new();
    for component in &settings.flux.components {
        let result = deployments
            .get_opt(component)
            .await
            .map(|d| d.map(|d| serde_json::to_value(d).unwrap_or_default()));
        let row = object_row(
            "flux",
            format!("{FLUX_NAMESPACE}/{component}"),
            result,
            |d| judge_condition(d, "Available", None),
            FLUX_HINT,
        );
        rows.push(
            with_waiting_reason(client, row, FLUX_NAMESPACE, &format!("app={component}")).await,
        );
    }
    rows
}

/// An unhealthy workload's row, with why its container waits (an image
/// the node cannot pull) when a pod says so.
async fn with_waiting_reason(
    client: &kube::Client,
    row: StatusRow,
    namespace: &str,
    selector: &str,
) -> StatusRow {
    if row.healthy {
        return row;
    }
    match waiting_container(client, namespace, selector).await {
        Some(why) if row.detail.is_empty() => row.detail(why),
        Some(why) => {
            let detail = format!("{}; {why}", row.detail);
            row.detail(detail)
        }
        None => row,
    }
}

/// The root Kustomization and the chain's levels, each judged against the
/// revision its source serves now.
async fn kustomization_rows(client: &kube::Client, settings: &Settings) -> Vec<StatusRow> {
    let kustomizations = dynamic_api(
        client,
        KUSTOMIZATION_API,
        "Kustomization",
        Some(FLUX_NAMESPACE),
    );
    let mut rows = Vec::new();
    for name in crate::gitops::levels(settings) {
        let object = get_json(&kustomizations, &name).await;
        let current = match &object {
            Ok(Some(o)) => crate::gitops::chain::source_revision(client, o).await,
            _ => None,
        };
        let applied_current = |o: &serde_json::Value| {
            current.is_some() && o["status"]["lastAppliedRevision"].as_str() == current.as_deref()
        };
        rows.push(object_row(
            "kustomization",
            format!("{FLUX_NAMESPACE}/{name}"),
            object,
            |o| judge_flux(o, applied_current(o)),
            FLUX_HINT,
        ));
    }
    rows
}

async fn helm_release_row(client: &kube::Client, names: &crate::profile::StackNames) -> StatusRow {
    let (release_ns, release) = names.helm_release();
    let releases = dynamic_api(client, HELM_RELEASE_API, "HelmRelease", Some(&release_ns));
    object_row(
        "helmrelease",
        format!("{release_ns}/{release}"),
        get_json(&releases, &release).await,
        |o| judge_flux(o, release_deployed(o)),
        FLUX_HINT,
    )
}

/// The cluster's own ESO controller that serves the stack: its
/// Deployment, which devstack neither installed nor repairs.
async fn cluster_eso_row(client: &kube::Client, eso: &crate::profile::ClusterEso) -> StatusRow {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &eso.namespace);
    let result = deployments
        .get_opt(&eso.deployment)
        .await
        .map(|d| d.map(|d| serde_json::to_value(d).unwrap_or_default()));
    let hint = format!(
        "the cluster's External Secrets Operator is not devstack's to repair: `kubectl -n {} describe deployment {}` shows why it does not run",
        eso.namespace, eso.deployment
    );
    let row = object_row(
        "eso",
        format!("{}/{} (the cluster's)", eso.namespace, eso.deployment),
        result,
        |d| judge_condition(d, "Available", None),
        &hint,
    );
    with_waiting_reason(
        client,
        row,
        &eso.namespace,
        crate::cluster::eso::CONTROLLER_LABEL,
    )
    .await
}

async fn cluster_secret_store_row(client: &kube::Client, store: &str) -> StatusRow {
    let stores = crate::gitops::cluster_secret_stores(client);
    object_row(
        "clustersecretstore",
        store.to_string(),
        get_json(&stores, store).await,
        ready_judgement,
        "`devstack status` rows above show whether the chain delivered it; `devstack sync` converges it",
    )
}

async fn external_secret_rows(
    client: &kube::Client,
    settings: &Settings,
    eso_api: &str,
) -> Vec<StatusRow> {
    let hint = "`devstack seed` writes the profile's secrets; `devstack verify` proves the path";
    let all = dynamic_api(client, eso_api, "ExternalSecret", None);
    let mut rows = Vec::new();
    let mut seen = Vec::new();
    match all.list(&ListParams::default()).await {
        Ok(list) => {
            for es in list.items {
                let ns = es.metadata.namespace.clone().unwrap_or_default();
                let name = es.metadata.name.clone().unwrap_or_default();
                seen.push((ns.clone(), name.clone()));
                rows.push(object_row::<kube::Error>(
                    "externalsecret",
                    format!("{ns}/{name}"),
                    Ok(Some(es.data)),
                    |o| judge_condition(o, "Ready", Some(crate::verify::REASON_SECRET_SYNCED)),
                    hint,
                ));
            }
        }
        // No ExternalSecret kind served: ESO's CRDs are absent, which the
        // store row already reports; the profile's ones are missing below.
        Err(kube::Error::Api(s)) if s.is_not_found() => {}
        Err(e) => rows.push(
            StatusRow::new("externalsecret", "*", Health::Unhealthy, "unreadable")
                .detail(e.to_string()),
        ),
    }
    for target in crate::profile::parameters::sync_targets(settings) {
        let (ns, name) = (target.namespace, target.name);
        if !seen.contains(&(ns.clone(), name.clone())) {
            rows.push(
                StatusRow::new(
                    "externalsecret",
                    format!("{ns}/{name}"),
                    Health::Missing,
                    "missing",
                )
                .detail(format!("declared by the profile for {}", target.of))
                .hint("`devstack up` creates the profile's ExternalSecrets"),
            );
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_decide_rows() {
        let ready = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "Applied revision: x"}
        ]}});
        assert_eq!(
            ready_judgement(&ready),
            (
                Health::Healthy,
                "Ready".into(),
                "Applied revision: x".into()
            )
        );
        let failing = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "SecretSyncedError", "message": "could not get secret data from provider"}
        ]}});
        assert_eq!(
            judge_condition(&failing, "Ready", Some("SecretSynced")),
            (
                Health::Unhealthy,
                "SecretSyncedError".into(),
                "could not get secret data from provider".into()
            )
        );
        // Ready but for another reason is not synced.
        let deleted = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "SecretDeleted"}
        ]}});
        assert_eq!(
            judge_condition(&deleted, "Ready", Some("SecretSynced")).0,
            Health::Unhealthy
        );
        assert_eq!(
            ready_judgement(&json!({})),
            (Health::Unhealthy, "no status yet".into(), String::new())
        );
        let available =
            json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}});
        assert_eq!(
            judge_condition(&available, "Available", None).0,
            Health::Healthy
        );
    }

    #[test]
    fn object_rows_report_missing_and_errors_without_crashing() {
        let missing = object_row::<String>(
            "helmrelease",
            "a/b".into(),
            Ok(None),
            ready_judgement,
            "fix it",
        );
        assert_eq!(missing.health, Health::Missing);
        assert!(!missing.healthy);
        assert_eq!(missing.hint.as_deref(), Some("fix it"));
        let broken = object_row::<String>(
            "helmrelease",
            "a/b".into(),
            Err("timeout".into()),
            ready_judgement,
            "fix it",
        );
        assert_eq!(broken.health, Health::Unhealthy);
        assert_eq!(broken.detail, "timeout");
        let fine = object_row::<String>(
            "helmrelease",
            "a/b".into(),
            Ok(Some(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            )),
            ready_judgement,
            "fix it",
        );
        assert!(fine.healthy);
        assert!(fine.hint.is_none(), "healthy rows carry no hint");
        let json = serde_json::to_value(&fine).unwrap();
        assert_eq!(json["health"], "healthy");
        assert!(json.get("hint").is_none());
    }

    fn kustomization(
        generation: i64,
        observed: i64,
        ready: serde_json::Value,
    ) -> serde_json::Value {
        json!({"metadata": {"generation": generation},
               "status": {"observedGeneration": observed, "conditions": [ready]}})
    }

    #[test]
    fn flux_objects_reapplying_an_applied_revision_are_reconciling() {
        let ready = json!({"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded"});
        let progressing = json!({"type": "Ready", "status": "Unknown", "reason": "Progressing",
                                 "message": "Reconciliation in progress"});
        let waiting = json!({"type": "Ready", "status": "False", "reason": "DependencyNotReady",
                             "message": "dependency 'flux-system/external-secrets-crds' is not ready"});
        let failed = json!({"type": "Ready", "status": "False", "reason": "ReconciliationFailed",
                            "message": "apply failed"});

        assert_eq!(
            judge_flux(&kustomization(2, 2, ready.clone()), true).0,
            Health::Healthy
        );
        // Ready counts even when the source moved on: a new revision is the
        // chain's business, not a failure.
        assert_eq!(
            judge_flux(&kustomization(2, 2, ready), false).0,
            Health::Healthy
        );
        let (health, state, _) = judge_flux(&kustomization(2, 2, progressing.clone()), true);
        assert_eq!(
            (health, state.as_str()),
            (Health::Reconciling, "Reconciling")
        );
        assert_eq!(
            judge_flux(&kustomization(2, 2, waiting.clone()), true).0,
            Health::Reconciling
        );
        // Progressing towards a revision never applied is not healthy yet.
        assert_eq!(
            judge_flux(&kustomization(2, 2, progressing), false).0,
            Health::Unhealthy
        );
        assert_eq!(
            judge_flux(&kustomization(2, 2, waiting), false).0,
            Health::Unhealthy
        );
        // A failure is a failure, whatever was applied before.
        let (health, state, _) = judge_flux(&kustomization(2, 2, failed), true);
        assert_eq!(
            (health, state.as_str()),
            (Health::Unhealthy, "ReconciliationFailed")
        );
        assert_eq!(judge_flux(&json!({}), true).0, Health::Unhealthy);
        assert!(Health::Reconciling.is_ok() && !Health::Missing.is_ok());
    }

    #[test]
    fn reports_tell_settled_from_healthy() {
        let row = |health| StatusRow::new("kustomization", "flux-system/x", health, "s");
        let report = |rows: Vec<StatusRow>| StatusReport {
            stack: "t".into(),
            healthy: rows.iter().all(|r| r.healthy),
            settled: rows.iter().all(|r| r.health == Health::Healthy),
            ports: Default::default(),
            rows,
        };
        let reconciling = report(vec![row(Health::Healthy), row(Health::Reconciling)]);
        assert!(reconciling.healthy && !reconciling.settled);
        assert!(reconciling.to_error().is_none());
        assert_eq!(
            reconciling.first_problem(true).as_deref(),
            Some("kustomization flux-system/x s")
        );
        let broken = report(vec![
            row(Health::Reconciling),
            row(Health::Missing).hint("`devstack up` repairs it"),
            row(Health::Unhealthy),
        ]);
        let err = broken
            .to_error()
            .unwrap()
            .with_command_flags(" -p ci --name x");
        assert_eq!(
            err.message(),
            "stack `t` is not healthy: kustomization flux-system/x s (and 1 more)"
        );
        assert_eq!(err.hint(), Some("`devstack -p ci --name x up` repairs it"));
    }

    #[allow(dead_code)]
    fn collect_is_send(settings: &Settings) {
        fn send<T: Send>(_: &T) {}
        send(&collect(settings));
    }
}
