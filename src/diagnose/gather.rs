//! Reads everything the detectors need, through the clients the rest of
//! devstack uses: Docker for LocalStack and the node containers, LocalStack's
//! health endpoint and Secrets Manager (names only), and the kube API for
//! the cluster's objects. A part that cannot be read is recorded in
//! [`Evidence::unread`], never an error: a broken stack is what this reads.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject, ListParams, LogParams};
use serde_json::Value;

use super::evidence::*;
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::gitops::{self, FLUX_NAMESPACE};
use crate::profile::Settings;
use crate::{k8s, localstack, state};

/// Log lines kept per failing container.
const LOG_LINES: usize = 5;
/// What `unread` says of a kind the API does not serve (its CRDs absent).
pub const NOT_SERVED: &str = "not served (its CRDs are not installed)";

/// Reads the stack. Fails only when there is no stack at all, or Docker
/// does not answer for a stack that has containers.
pub async fn gather(settings: &Settings) -> Result<Evidence, Error> {
    let docker = docker::connect_or_absent(crate::cluster::on_existing_cluster(settings)).await?;
    let (localstack, node_containers) = tokio::join!(
        read_localstack(docker.as_ref(), settings),
        read_node_containers(docker.as_ref(), settings)
    );
    let kubeconfig = std::fs::read_to_string(state::kubeconfig_path(settings)).ok();
    if kubeconfig.is_none() && localstack.container.is_none() && node_containers.is_empty() {
        return Err(Error::unhealthy(format!(
            "stack `{}` does not exist: it has no cluster and no LocalStack",
            settings.name
        ))
        .with_hint("create it with `devstack up`"));
    }
    let mut evidence = Evidence {
        stack: settings.name.clone(),
        collected_at: k8s_openapi::jiff::Timestamp::now().to_string(),
        localstack,
        ..Evidence::default()
    };
    evidence.cluster.node_containers = node_containers;
    evidence.cluster.kubeconfig = kubeconfig.is_some();
    if let Some(yaml) = kubeconfig {
        match k8s::client_from_kubeconfig(&yaml).await {
            Ok(client) => read_cluster(&client, settings, &mut evidence).await,
            Err(e) => evidence.cluster.api_error = Some(e.message().to_string()),
        }
    }
    scrub(&mut evidence, settings);
    Ok(evidence)
}

fn container_of(
    name: &str,
    inspected: &docker::models::ContainerInspectResponse,
) -> ContainerEvidence {
    let state = inspected.state.clone().unwrap_or_default();
    ContainerEvidence {
        name: name.to_string(),
        status: state
            .status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "unknown".into()),
        health: state
            .health
            .and_then(|h| h.status)
            .map(|s| s.to_string())
            .filter(|s| !s.is_empty() && s != "none"),
        exit_code: state.exit_code,
        oom_killed: state.oom_killed.unwrap_or(false),
        error: state.error.filter(|e| !e.is_empty()),
        log_tail: Vec::new(),
    }
}

fn last_lines(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let skip = lines.len().saturating_sub(LOG_LINES);
    lines[skip..]
        .iter()
        .map(|l| l.trim_end().to_string())
        .collect()
}

async fn read_localstack(docker: &dyn Engine, settings: &Settings) -> LocalStackEvidence {
    if settings.localstack.in_cluster() {
        return read_localstack_in_cluster(settings).await;
    }
    let name = localstack::container_name(settings);
    let mut out = LocalStackEvidence {
        endpoint: settings.localstack.endpoint_url(),
        ..LocalStackEvidence::default()
    };
    let Ok(Some(inspected)) = docker::inspect(docker, &name).await else {
        return out;
    };
    let mut container = container_of(&name, &inspected);
    if let Ok(endpoint) = localstack::describe(docker, settings).await {
        out.endpoint = endpoint.url;
        out.network_ip = endpoint.network_ip;
    }
    let endpoint = out.endpoint.clone();
    let serving = container.status == "running" && read_health(&mut out, &endpoint, settings).await;
    if !serving {
        container.log_tail = last_lines(&docker::tail_logs(docker, &name, LOG_LINES).await);
    }
    out.container = Some(container);
    out
}

/// LocalStack in the cluster, through a port-forward devstack opens as
/// the other commands do: its health, and the names of its secrets.
async fn read_localstack_in_cluster(settings: &Settings) -> LocalStackEvidence {
    let mut out = LocalStackEvidence {
        endpoint: k8s::localstack_in_cluster_url(&settings.names),
        ..LocalStackEvidence::default()
    };
    let reached = match localstack::in_cluster::reach(settings).await {
        Ok(reached) => reached,
        Err(e) => {
            out.health_error = Some(e.message().to_string());
            return out;
        }
    };
    let endpoint = reached.settings.localstack.endpoint_url();
    read_health(&mut out, &endpoint, &reached.settings).await;
    out
}

/// LocalStack's health at `endpoint`, and the names of its secrets (read
/// with `settings`) once its Secrets Manager serves; whether it does.
async fn read_health(out: &mut LocalStackEvidence, endpoint: &str, settings: &Settings) -> bool {
    let health = match localstack::HealthClient::new(endpoint) {
        Ok(client) => client.services().await,
        Err(e) => Err(e.message().to_string()),
    };
    match health {
        Ok(services) => out.services = Some(services),
        Err(why) => out.health_error = Some(why),
    }
    let serving = out.services.as_ref().is_some_and(|s| {
        matches!(
            s.get("secretsmanager").map(String::as_str),
            Some("available" | "running")
        )
    });
    if serving {
        out.secret_names = secret_names(settings).await.ok();
        if !settings.parameters.is_empty() {
            out.parameter_names = crate::seed::parameters::parameter_names(settings)
                .await
                .ok();
        }
        if settings.eso.auth == crate::profile::parameters::EsoAuth::ServiceAccount {
            out.eso_role = Some(eso_role(settings).await);
        }
    }
    serving
}

/// The role `eso.auth: serviceAccount` assumes, read from LocalStack's IAM.
async fn eso_role(settings: &Settings) -> super::evidence::RoleEvidence {
    use crate::seed::role;
    let name = role::role_name(settings);
    let mut out = super::evidence::RoleEvidence {
        name: name.clone(),
        ..Default::default()
    };
    match crate::aws::iam(settings)
        .get_role()
        .role_name(&name)
        .send()
        .await
    {
        Ok(found) => {
            out.exists = true;
            let policy = found
                .role()
                .and_then(|r| r.assume_role_policy_document())
                .unwrap_or_default();
            out.trust_problem = role::trust_policy_problem(settings, policy);
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_no_such_entity_exception()) => {}
        Err(e) => out.error = Some(e.to_string()),
    }
    out
}

/// Names of the secrets in the stack's Secrets Manager; values are never read.
async fn secret_names(settings: &Settings) -> Result<Vec<String>, String> {
    let sm = crate::aws::secrets_manager(settings);
    let mut names = Vec::new();
    let mut pages = sm.list_secrets().into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| e.to_string())?;
        names.extend(
            page.secret_list()
                .iter()
                .filter_map(|s| s.name().map(String::from)),
        );
    }
    names.sort();
    Ok(names)
}

/// The cluster's node containers: K3s nodes carry devstack's labels, Kind
/// nodes kind's.
async fn read_node_containers(engine: &dyn Engine, settings: &Settings) -> Vec<ContainerEvidence> {
    let ours = docker::find_containers(engine, docker::stack_filter(Some(&settings.name)))
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            c.labels
                .as_ref()
                .and_then(|l| l.get(docker::LABEL_ROLE))
                .map(String::as_str)
                != Some(localstack::ROLE)
        });
    let kind_label = format!(
        "{}={}",
        crate::cluster::kind::LABEL_CLUSTER,
        crate::cluster::kind::cluster_name(settings)
    );
    let kind = engine
        .list_containers(vec![kind_label])
        .await
        .unwrap_or_default();
    let names: BTreeSet<String> = ours
        .chain(kind)
        .map(|c| docker::container_name_of(&c))
        .collect();
    let mut out = Vec::new();
    for name in names {
        let Ok(Some(inspected)) = docker::inspect(engine, &name).await else {
            continue;
        };
        let mut container = container_of(&name, &inspected);
        if container.status != "running" {
            container.log_tail = last_lines(&docker::tail_logs(engine, &name, LOG_LINES).await);
        }
        out.push(container);
    }
    out
}

/// A read that failed becomes an `unread` entry and the default.
fn keep<T: Default>(evidence: &mut Evidence, what: &str, result: Result<T, String>) -> T {
    result.unwrap_or_else(|why| {
        evidence.unread.insert(what.to_string(), why);
        T::default()
    })
}

fn served<T>(result: Result<T, kube::Error>) -> Result<T, String> {
    result.map_err(|e| match e {
        kube::Error::Api(s) if s.is_not_found() => NOT_SERVED.to_string(),
        other => other.to_string(),
    })
}

/// Every object of a kind, as JSON with its `kind` (which list items may omit).
async fn list_values(api: Api<DynamicObject>, kind: &str) -> Result<Vec<Value>, String> {
    let listed = served(api.list(&ListParams::default()).await)?;
    Ok(listed
        .items
        .into_iter()
        .map(|o| {
            let mut value = serde_json::to_value(o).unwrap_or_default();
            if value["kind"].is_null() {
                value["kind"] = Value::from(kind);
            }
            value
        })
        .collect())
}

async fn list<K>(api: Api<K>, params: ListParams) -> Result<Vec<K>, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    served(api.list(&params).await).map(|l| l.items)
}

async fn read_cluster(client: &kube::Client, settings: &Settings, evidence: &mut Evidence) {
    let nodes = match Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            evidence.cluster.api_error = Some(e.to_string());
            return;
        }
    };
    evidence.cluster.nodes = nodes.iter().map(NodeEvidence::from_node).collect();
    let eso_namespace = settings.names.eso_namespace();
    read_workloads(client, &eso_namespace, evidence).await;
    if settings.localstack.in_cluster() {
        read_localstack_workload(client, &settings.names, evidence).await;
    }
    read_flux(client, settings, evidence).await;
    read_eso(client, evidence).await;
    let route = read_route(client, &settings.names).await;
    evidence.cluster.localstack_route = keep(evidence, "the localstack Service", route);
    attach_logs(client, &eso_namespace, evidence).await;
}

/// Pods and Deployments of Flux and ESO, Pending pods anywhere, and
/// Warning events.
async fn read_workloads(client: &kube::Client, eso_namespace: &str, evidence: &mut Evidence) {
    let namespaces = [FLUX_NAMESPACE, eso_namespace];
    let pods = |ns: &str| {
        list(
            Api::<Pod>::namespaced(client.clone(), ns),
            ListParams::default(),
        )
    };
    let deployments = |ns: &str| {
        list(
            Api::<Deployment>::namespaced(client.clone(), ns),
            ListParams::default(),
        )
    };
    let (flux_pods, eso_pods, pending, flux_deployments, eso_deployments, events) = tokio::join!(
        pods(namespaces[0]),
        pods(namespaces[1]),
        list(
            Api::<Pod>::all(client.clone()),
            ListParams::default().fields("status.phase=Pending")
        ),
        deployments(namespaces[0]),
        deployments(namespaces[1]),
        list(
            Api::<Event>::all(client.clone()),
            ListParams::default().fields("type=Warning")
        ),
    );
    let mut all: Vec<Pod> = keep(evidence, "pods in flux-system", flux_pods);
    all.extend(keep(
        evidence,
        &format!("pods in {eso_namespace}"),
        eso_pods,
    ));
    for pod in keep(evidence, "Pending pods", pending) {
        if !namespaces.contains(&pod.metadata.namespace.as_deref().unwrap_or_default()) {
            all.push(pod);
        }
    }
    evidence.cluster.pods = all.iter().map(PodEvidence::from_pod).collect();
    let mut found = keep(evidence, "Deployments in flux-system", flux_deployments);
    found.extend(keep(
        evidence,
        &format!("Deployments in {eso_namespace}"),
        eso_deployments,
    ));
    evidence.cluster.deployments = found
        .iter()
        .map(DeploymentEvidence::from_deployment)
        .collect();
    let events = keep(evidence, "events", events);
    evidence.cluster.events = events.iter().map(EventEvidence::from_event).collect();
}

/// LocalStack's pods and Deployment in the cluster (`localstack.mode:
/// in-cluster`).
async fn read_localstack_workload(
    client: &kube::Client,
    names: &crate::profile::StackNames,
    evidence: &mut Evidence,
) {
    let namespace = &names.localstack_namespace();
    let (pods, deployments) = tokio::join!(
        list(
            Api::<Pod>::namespaced(client.clone(), namespace),
            ListParams::default()
        ),
        list(
            Api::<Deployment>::namespaced(client.clone(), namespace),
            ListParams::default()
        ),
    );
    for pod in keep(evidence, &format!("pods in {namespace}"), pods) {
        let pod = PodEvidence::from_pod(&pod);
        if !evidence.cluster.pods.contains(&pod) {
            evidence.cluster.pods.push(pod);
        }
    }
    let deployments = keep(
        evidence,
        &format!("Deployments in {namespace}"),
        deployments,
    );
    evidence
        .cluster
        .deployments
        .extend(deployments.iter().map(DeploymentEvidence::from_deployment));
}

/// Flux's Kustomizations, the HelmRelease and the sources in flux-system.
async fn read_flux(client: &kube::Client, settings: &Settings, evidence: &mut Evidence) {
    let source = |kind: &'static str| {
        list_values(
            k8s::dynamic_api(
                client,
                "source.toolkit.fluxcd.io/v1",
                kind,
                Some(FLUX_NAMESPACE),
            ),
            kind,
        )
    };
    let (release_namespace, release_name) = settings.names.helm_release();
    let release = async {
        served(
            gitops::chain::helm_releases(client, &release_namespace)
                .get_opt(&release_name)
                .await,
        )
        .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default()))
    };
    let (kustomizations, release, buckets, repositories, helm_repositories, charts) = tokio::join!(
        list_values(gitops::chain::kustomizations(client), "Kustomization"),
        release,
        source("Bucket"),
        source("GitRepository"),
        source("HelmRepository"),
        source("HelmChart"),
    );
    evidence.cluster.kustomizations = keep(evidence, "kustomizations", kustomizations);
    evidence.cluster.helm_release = keep(evidence, "helmrelease", release);
    let source_kind = gitops::source::source_ref(settings).kind;
    let mut sources = Vec::new();
    for (kind, listed) in [
        ("Bucket", buckets),
        ("GitRepository", repositories),
        ("HelmRepository", helm_repositories),
        ("HelmChart", charts),
    ] {
        // Only the stack's own source kind must be readable to call it missing.
        let what = if kind == source_kind { "source" } else { kind };
        sources.extend(keep(evidence, what, listed));
    }
    evidence.cluster.sources = sources;
}

/// ESO's stores, ExternalSecrets, webhook and the store's credentials.
async fn read_eso(client: &kube::Client, evidence: &mut Evidence) {
    let external_secrets = k8s::dynamic_api(
        client,
        &format!("{}/{}", gitops::ESO_GROUP, gitops::ESO_VERSION),
        "ExternalSecret",
        None,
    );
    let (stores, external_secrets, webhook) = tokio::join!(
        list_values(gitops::cluster_secret_stores(client), "ClusterSecretStore"),
        list_values(external_secrets, "ExternalSecret"),
        read_webhook(client),
    );
    evidence.cluster.cluster_secret_stores = keep(evidence, "clustersecretstores", stores);
    evidence.cluster.external_secrets = keep(evidence, "externalsecrets", external_secrets);
    evidence.cluster.webhook = keep(evidence, "the ESO webhook", webhook);
    let mut store_secrets = Vec::new();
    for (namespace, name) in credential_secrets(&evidence.cluster.cluster_secret_stores) {
        let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        match api.get_opt(&name).await {
            Ok(secret) => store_secrets.push(SecretKeys::of(&namespace, &name, secret.as_ref())),
            Err(e) => {
                evidence
                    .unread
                    .insert(format!("Secret {namespace}/{name}"), e.to_string());
            }
        }
    }
    evidence.cluster.store_secrets = store_secrets;
}

/// The Secrets (namespace, name) the stores' AWS credentials refer to.
pub fn credential_secrets(stores: &[Value]) -> BTreeSet<(String, String)> {
    stores
        .iter()
        .flat_map(|store| {
            let refs = &store["spec"]["provider"]["aws"]["auth"]["secretRef"];
            refs.as_object()
                .into_iter()
                .flat_map(|refs| refs.values())
                .filter_map(|r| {
                    Some((
                        r["namespace"].as_str()?.to_string(),
                        r["name"].as_str()?.to_string(),
                    ))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The webhook every stack on the cluster shares: the first stack's.
async fn read_webhook(client: &kube::Client) -> Result<WebhookEvidence, String> {
    let (namespace, release) = gitops::SHARED_ESO_RELEASE;
    let [_, service, _] = gitops::chain::eso_deployments(release);
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    if served(services.get_opt(&service).await)?.is_none() {
        return Ok(WebhookEvidence::default());
    }
    let slices = list(
        Api::<EndpointSlice>::namespaced(client.clone(), namespace),
        ListParams::default().labels(&format!("kubernetes.io/service-name={service}")),
    )
    .await?;
    let endpoints: Vec<bool> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .map(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .collect();
    // The chart names the certificate Secret like the Service.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let certificate = served(secrets.get_opt(&service).await)?.map(|secret| {
        let data = secret.data.clone().unwrap_or_default();
        let fingerprints = |key: &str| {
            data.get(key)
                .map(|b| certificate_fingerprints(&b.0))
                .unwrap_or_default()
        };
        CertificateEvidence {
            secret: service.clone(),
            ca: fingerprints(gitops::webhook::CA_CERT),
            serving: fingerprints(gitops::webhook::SERVER_CERT),
            issued_by_devstack: secret
                .metadata
                .annotations
                .is_some_and(|a| a.contains_key(gitops::webhook::ISSUED_CA_ANNOTATION)),
        }
    });
    let configurations = list(
        Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        ListParams::default(),
    )
    .await?;
    let service = service.as_str();
    let callers = configurations
        .iter()
        .flat_map(|c| {
            let configuration = c.metadata.name.clone().unwrap_or_default();
            c.webhooks.iter().flatten().filter_map(move |w| {
                let target = w.client_config.service.as_ref()?;
                (target.namespace == namespace && target.name == service).then(|| WebhookCaller {
                    name: format!("{configuration}/{}", w.name),
                    ca_bundle: w
                        .client_config
                        .ca_bundle
                        .as_ref()
                        .map(|b| certificate_fingerprints(&b.0))
                        .unwrap_or_default(),
                })
            })
        })
        .collect();
    Ok(WebhookEvidence {
        service: Some(service.to_string()),
        ready_endpoints: endpoints.iter().filter(|r| **r).count(),
        not_ready_endpoints: endpoints.iter().filter(|r| !**r).count(),
        certificate,
        callers,
    })
}

async fn read_route(
    client: &kube::Client,
    names: &crate::profile::StackNames,
) -> Result<RouteEvidence, String> {
    let (namespace, name) = (&names.localstack_namespace(), names.localstack_service());
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let Some(service) = served(services.get_opt(name).await)? else {
        return Ok(RouteEvidence::default());
    };
    let slices = list(
        Api::<EndpointSlice>::namespaced(client.clone(), namespace),
        ListParams::default().labels(&format!("kubernetes.io/service-name={name}")),
    )
    .await?;
    let addresses = slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .flat_map(|e| e.addresses.clone())
        .collect();
    Ok(RouteEvidence {
        service: true,
        cluster_ip: service.spec.and_then(|s| s.cluster_ip),
        addresses,
    })
}

/// The last log lines of each Flux or ESO pod that fails or is not ready:
/// the previous run's when its container restarts.
async fn attach_logs(client: &kube::Client, eso_namespace: &str, evidence: &mut Evidence) {
    for pod in &mut evidence.cluster.pods {
        if ![FLUX_NAMESPACE, eso_namespace].contains(&pod.namespace.as_str()) {
            continue;
        }
        let Some((container, previous)) = pod.failing_container() else {
            continue;
        };
        let params = LogParams {
            container: Some(container.to_string()),
            tail_lines: Some(LOG_LINES as i64),
            previous,
            ..LogParams::default()
        };
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
        if let Ok(log) = api.logs(&pod.name, &params).await {
            pod.log_tail = last_lines(&log);
        }
    }
}

/// Replaces every value the profile states inline (a literal or a JSON
/// field) wherever a log line or event message might repeat it.
fn scrub(evidence: &mut Evidence, settings: &Settings) {
    let values: Vec<String> = settings
        .secrets
        .iter()
        .flat_map(|s| match &s.source {
            crate::profile::SecretSource::Json(map) => {
                map.values().map(|v| v.expose().to_string()).collect()
            }
            source => source
                .inline_value()
                .map(|v| vec![v.expose().to_string()])
                .unwrap_or_default(),
        })
        .filter(|v| v.len() >= 4)
        .collect();
    if values.is_empty() {
        return;
    }
    let clean = |text: &mut String| {
        for value in &values {
            if text.contains(value.as_str()) {
                *text = text.replace(value.as_str(), "***");
            }
        }
    };
    let ls = &mut evidence.localstack;
    ls.container
        .iter_mut()
        .flat_map(|c| c.log_tail.iter_mut())
        .for_each(clean);
    let cluster = &mut evidence.cluster;
    cluster
        .node_containers
        .iter_mut()
        .flat_map(|c| c.log_tail.iter_mut())
        .for_each(clean);
    for pod in &mut cluster.pods {
        pod.log_tail.iter_mut().for_each(clean);
        pod.containers
            .iter_mut()
            .filter_map(|c| c.message.as_mut())
            .for_each(clean);
    }
    cluster
        .events
        .iter_mut()
        .for_each(|e| clean(&mut e.message));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_keep_their_last_lines() {
        let log = "a\nb\n\nc\nd\ne\nf\n";
        assert_eq!(last_lines(log), ["b", "c", "d", "e", "f"]);
        assert!(last_lines("").is_empty());
    }

    #[test]
    fn the_stores_credentials_name_their_secrets() {
        let fixture = super::super::fixtures::healthy_json();
        let stores = fixture["cluster"]["clusterSecretStores"]
            .as_array()
            .unwrap();
        assert_eq!(
            credential_secrets(stores),
            BTreeSet::from([(
                "external-secrets".to_string(),
                "localstack-credentials".to_string()
            )])
        );
    }

    #[test]
    fn inline_secret_values_are_scrubbed_from_logs_and_events() {
        let text = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\nsecrets:\n  - name: app/db\n    json: {password: hunter2-secret}\n  - name: app/key\n    value: abcd-literal\n";
        let loaded = crate::profile::load::parse("t.yaml", text, ".".into()).unwrap();
        let settings = Settings::resolve(loaded, &Default::default()).unwrap();
        let mut evidence = Evidence::default();
        evidence.cluster.events.push(EventEvidence {
            message: "bad value hunter2-secret and abcd-literal".into(),
            ..Default::default()
        });
        evidence.cluster.pods.push(PodEvidence {
            log_tail: vec!["saw abcd-literal".into()],
            ..Default::default()
        });
        scrub(&mut evidence, &settings);
        assert_eq!(evidence.cluster.events[0].message, "bad value *** and ***");
        assert_eq!(evidence.cluster.pods[0].log_tail, ["saw ***"]);
    }
}
