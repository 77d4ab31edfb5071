//! Kubernetes access: clients from kubeconfig text, watch-driven bounded
//! waits and server-side apply.

pub mod access;
pub mod apply;
pub mod conditions;
pub mod context;
pub mod forward;
pub mod sandbox;
pub mod system_pods;
pub mod version;
pub mod wait;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::error::Error;
use crate::profile::StackNames;
use crate::ui::Step;
pub use wait::{Budget, Verdict, Wait};

/// Both rustls crypto back ends end up linked (the AWS SDK and kube pick
/// different ones), so rustls cannot choose by itself: pick ring, once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub async fn client_from_kubeconfig(yaml: &str) -> Result<kube::Client, Error> {
    client_with_read_timeout(yaml, Some(Duration::from_secs(30))).await
}

async fn client_with_read_timeout(
    yaml: &str,
    read_timeout: Option<Duration>,
) -> Result<kube::Client, Error> {
    install_crypto_provider();
    let kubeconfig = Kubeconfig::from_yaml(yaml)
        .map_err(|e| Error::internal(format!("invalid kubeconfig: {e}")))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| Error::internal(format!("invalid kubeconfig: {e}")))?;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = read_timeout;
    kube::Client::try_from(config).map_err(|e| Error::internal(format!("kube client: {e}")))
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Deletes a Node object (its machine is gone); absent is fine.
pub async fn delete_node(client: &kube::Client, name: &str) -> Result<(), Error> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    match nodes.delete(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(Error::internal(format!("delete node {name}: {e}"))),
    }
}

/// Waits until `expected` nodes exist and all are Ready.
pub async fn wait_nodes_ready(
    client: &kube::Client,
    expected: usize,
    budget: Budget,
    step: &Step,
) -> Result<(), Error> {
    let span = step.span("nodes Ready");
    let wait = Wait::new("the cluster's nodes", "Ready", budget)
        .advice("`docker logs <node>` shows the node's log");
    let result = wait
        .list(
            Api::<Node>::all(client.clone()),
            Default::default(),
            |nodes| {
                let ready = nodes.iter().filter(|n| node_ready(n)).count();
                if nodes.len() >= expected && ready == nodes.len() {
                    return Verdict::Done;
                }
                let state = format!("{ready}/{expected} nodes Ready");
                step.progress(&state);
                Verdict::Waiting(state)
            },
        )
        .await
        .map(|_| ());
    span.finish(result)
}

/// Namespaces of the DaemonSets that give a node its pod network (kube-proxy
/// and the CNI: kindnet in kube-system, the kit's flannel in kube-flannel).
const NODE_NETWORK_NAMESPACES: [&str; 2] = ["kube-system", "kube-flannel"];

/// Waits until the node-networking DaemonSets run Ready on every node they
/// target. A node turns Ready as soon as its CNI config file is in place,
/// but a pod sandbox made before the CNI daemon has leased the node's
/// subnet fails and backs off for up to tens of seconds; holding workloads
/// back until then is faster than letting them collide with it.
pub async fn wait_node_networking_ready(
    client: &kube::Client,
    budget: Budget,
    step: &Step,
) -> Result<(), Error> {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let span = step.span("node networking Ready");
    let wait = Wait::new(
        format!("the DaemonSets in {}", NODE_NETWORK_NAMESPACES.join(", ")),
        "Ready on every node",
        budget,
    )
    .advice("`kubectl -n kube-flannel get pods -o wide` (or kube-system) shows which node lags");
    let result = wait
        .list(
            Api::<DaemonSet>::all(client.clone()),
            Default::default(),
            |sets| {
                let verdict = daemonsets_verdict(sets.iter());
                if let Verdict::Waiting(state) = &verdict {
                    step.progress(state);
                }
                verdict
            },
        )
        .await
        .map(|_| ());
    span.finish(result)
}

fn daemonsets_verdict<'a>(
    sets: impl Iterator<Item = &'a k8s_openapi::api::apps::v1::DaemonSet>,
) -> Verdict {
    let lagging: Vec<String> = sets
        .filter(|ds| {
            ds.metadata
                .namespace
                .as_deref()
                .is_some_and(|ns| NODE_NETWORK_NAMESPACES.contains(&ns))
        })
        .filter_map(|ds| {
            let name = ds.metadata.name.clone().unwrap_or_default();
            let Some(status) = &ds.status else {
                return Some(format!("{name}: no status yet"));
            };
            let observed = status.observed_generation.unwrap_or(0);
            if observed < ds.metadata.generation.unwrap_or(0) {
                return Some(format!("{name}: not yet seen by its controller"));
            }
            let desired = status.desired_number_scheduled;
            let ready = status.number_ready;
            let updated = status.updated_number_scheduled.unwrap_or(0);
            (ready < desired || updated < desired)
                .then(|| format!("{name}: {ready}/{desired} pods Ready"))
        })
        .collect();
    if lagging.is_empty() {
        Verdict::Done
    } else {
        Verdict::Waiting(lagging.join("; "))
    }
}

/// Server-side applies one object given as JSON (apiVersion, kind,
/// metadata.name, optional metadata.namespace).
pub async fn apply(client: &kube::Client, object: &serde_json::Value) -> Result<(), Error> {
    use kube::api::{DynamicObject, Patch, PatchParams};
    use kube::discovery::ApiResource;
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(|_| ())
    .map_err(|e| Error::internal(format!("apply {kind}/{name}: {e}")))
}

/// Deletes one object (in the background: its dependents go after it);
/// absent is fine. Returns whether it was there.
pub async fn delete(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<bool, Error> {
    use kube::api::DeleteParams;
    let api = dynamic_api(client, api_version, kind, namespace);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(Error::internal(format!("delete {kind}/{name}: {e}"))),
    }
}

/// Waits until the object is gone, for at most `limit`; says whether it is.
pub async fn wait_gone(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    limit: Duration,
) -> bool {
    let api = dynamic_api(client, api_version, kind, namespace);
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Ok(None) = api.get_opt(name).await {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether the API server reaches node `name`'s kubelet, verifying its
/// certificate as it does for `kubectl logs` (`nodes/NAME/proxy/healthz`).
pub async fn kubelet_reachable(client: &kube::Client, name: &str) -> bool {
    let Ok(request) =
        http::Request::get(format!("/api/v1/nodes/{name}/proxy/healthz")).body(Vec::new())
    else {
        return false;
    };
    client.request_text(request).await.is_ok()
}

pub const FIELD_MANAGER: &str = "devstack";

/// LocalStack's port inside its container and behind the in-cluster Service.
pub const LOCALSTACK_PORT: u16 = 4566;

/// The in-cluster address pods use for the stack's LocalStack, on either
/// provider: its Service's DNS name.
pub fn localstack_in_cluster_url(names: &StackNames) -> String {
    format!(
        "http://{}.{}.svc.cluster.local:{LOCALSTACK_PORT}",
        names.localstack_service(),
        names.localstack_namespace()
    )
}

/// The cluster IP of Service `namespace/name` as a URL host (IPv6 in
/// brackets); `None` for a headless Service or one not given an IP yet.
pub async fn service_host(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, Error> {
    use k8s_openapi::api::core::v1::Service;
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    let service = api
        .get_opt(name)
        .await
        .map_err(|e| Error::internal(format!("read Service {namespace}/{name}: {e}")))?;
    let ip = service
        .and_then(|s| s.spec)
        .and_then(|s| s.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None");
    Ok(ip.map(|ip| {
        if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip
        }
    }))
}

/// LocalStack's address for pods by its Service's cluster IP, which needs
/// no cluster DNS: a pod that starts with its node (a restart, a restore)
/// reaches it before CoreDNS serves. The DNS name when the IP is unknown.
pub async fn localstack_in_cluster_address(client: &kube::Client, names: &StackNames) -> String {
    let namespace = names.localstack_namespace();
    match service_host(client, &namespace, names.localstack_service()).await {
        Ok(Some(host)) => format!("{host}:{LOCALSTACK_PORT}"),
        _ => localstack_in_cluster_url(names)
            .trim_start_matches("http://")
            .to_string(),
    }
}

/// Writes the selectorless `localstack` Service and the EndpointSlice that
/// points it at `container_ip`, the LocalStack container's address on the
/// stack network. Re-run whenever that address may have changed.
pub async fn apply_localstack_service_and_endpoints(
    client: &kube::Client,
    names: &StackNames,
    container_ip: &str,
) -> Result<(), Error> {
    use serde_json::json;
    let port = LOCALSTACK_PORT;
    let (namespace, service) = (names.localstack_namespace(), names.localstack_service());
    apply(
        client,
        &json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {"app.kubernetes.io/managed-by": "devstack"}},
        }),
    )
    .await?;
    apply(client, &json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "devstack"}},
        "spec": {"ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]},
    }))
    .await?;
    apply(
        client,
        &json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{service}-devstack"), "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": service,
                                    "endpointslice.kubernetes.io/managed-by": "devstack",
                                    "app.kubernetes.io/managed-by": "devstack"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [container_ip], "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        }),
    )
    .await
}

/// Available, and serving from at least one pod when it asks for any: a
/// Deployment whose maxUnavailable covers all its replicas (K3s's CoreDNS:
/// 1 of 1) is Available with no pod at all.
pub fn deployment_available(deployment: &Deployment) -> bool {
    let Some(status) = &deployment.status else {
        return false;
    };
    let condition = status.conditions.as_ref().is_some_and(|c| {
        c.iter()
            .any(|c| c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True"))
    });
    let wanted = deployment.spec.replicas.unwrap_or(1);
    condition && status.available_replicas.unwrap_or(0) >= wanted.min(1)
}

/// Waits until each named Deployment exists and is Available.
pub async fn wait_deployments_available(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
    budget: Budget,
    advice: &str,
) -> Result<(), Error> {
    let what = match names {
        [name] => format!("Deployment {namespace}/{name}"),
        _ => format!("Deployments {} in {namespace}", names.join(", ")),
    };
    let wait = Wait::new(what, "Available", budget).advice(advice);
    wait.list(
        Api::<Deployment>::namespaced(client.clone(), namespace),
        Default::default(),
        |deployments| deployments_verdict(deployments, names),
    )
    .await
    .map(|_| ())
}

/// Ready nodes are not yet a usable cluster: pods resolve service names
/// only once CoreDNS serves.
pub async fn wait_coredns(client: &kube::Client, budget: Budget, step: &Step) -> Result<(), Error> {
    step.progress("waiting for CoreDNS");
    let span = step.span("CoreDNS available");
    let names = ["coredns".to_string()];
    let available = wait_deployments_available(
        client,
        "kube-system",
        &names,
        budget,
        "`kubectl -n kube-system describe pods -l k8s-app=kube-dns` shows why CoreDNS is not running",
    );
    let available = sandbox::wait_recreating_failed_sandboxes(
        available,
        client,
        "kube-system",
        "k8s-app=kube-dns",
        |pod| {
            step.progress(format!("recreated CoreDNS pod {pod}: its sandbox failed"));
            let _ = step
                .span(format!("CoreDNS pod {pod} recreated"))
                .finish(Ok::<(), ()>(()));
        },
    );
    span.finish(available.await)
}

fn deployments_verdict(deployments: &wait::Objects<Deployment>, names: &[String]) -> Verdict {
    wait::every_named(names, |name| match deployments.get(name) {
        None => Verdict::Waiting(format!("{name} does not exist yet")),
        Some(d) if deployment_available(d) => Verdict::Done,
        Some(d) => Verdict::Waiting(format!("{name}: {}", deployment_state(d))),
    })
}

/// Why a Deployment is not Available, from its Available condition.
pub fn deployment_state(deployment: &Deployment) -> String {
    let available = deployment
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_.as_deref() == Some("Available")));
    match available {
        Some(c) if c.status.as_deref() != Some("True") => conditions::Condition::new(
            "Available",
            c.status.as_deref().unwrap_or("Unknown"),
            c.reason.as_deref(),
            c.message.as_deref(),
        )
        .summary(),
        Some(_) => "Available, but no pod is available yet".into(),
        None => "no Available condition yet".into(),
    }
}

/// A client for the stack's cluster, from its kubeconfig file. A stack
/// without one is unhealthy (exit 4), with the command that creates it.
pub async fn stack_client(settings: &crate::profile::Settings) -> Result<kube::Client, Error> {
    client_from_kubeconfig(&crate::state::read_kubeconfig(settings)?).await
}

/// [`stack_client`] without a read timeout, for responses that may stay
/// quiet for minutes and are still alive (a followed log).
pub async fn stack_streaming_client(
    settings: &crate::profile::Settings,
) -> Result<kube::Client, Error> {
    client_with_read_timeout(&crate::state::read_kubeconfig(settings)?, None).await
}

/// An API for any kind by apiVersion and kind, namespaced or cluster-wide.
pub fn dynamic_api(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<kube::api::DynamicObject> {
    use kube::discovery::ApiResource;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, version, kind));
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DaemonSet, DaemonSetStatus, DeploymentCondition, DeploymentStatus,
    };
    use kube::runtime::watcher::Event;

    fn deployment(name: &str, available: Option<(&str, &str)>) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.name = Some(name.into());
        d.status = Some(DeploymentStatus {
            conditions: available.map(|(status, reason)| {
                vec![DeploymentCondition {
                    type_: Some("Available".into()),
                    status: Some(status.into()),
                    reason: Some(reason.into()),
                    message: Some("Deployment does not have minimum availability.".into()),
                    ..Default::default()
                }]
            }),
            available_replicas: available.filter(|(status, _)| *status == "True").map(|_| 1),
            ..Default::default()
        });
        d
    }

    #[test]
    fn pods_reach_localstack_by_its_service_name_alone_or_sharing() {
        assert_eq!(
            localstack_in_cluster_url(&StackNames::alone()),
            "http://localstack.localstack.svc.cluster.local:4566"
        );
        assert_eq!(
            localstack_in_cluster_url(&StackNames::sharing("b")),
            "http://localstack.localstack-b.svc.cluster.local:4566"
        );
    }

    #[test]
    fn deployments_wait_names_each_one_not_available() {
        let mut set = wait::Objects::default();
        set.apply(Event::Init);
        set.apply(Event::InitApply(deployment(
            "a",
            Some(("True", "MinimumReplicasAvailable")),
        )));
        set.apply(Event::InitApply(deployment(
            "b",
            Some(("False", "MinimumReplicasUnavailable")),
        )));
        set.apply(Event::InitDone);
        let names = ["a".to_string(), "b".to_string(), "c".to_string()];
        let Verdict::Waiting(state) = deployments_verdict(&set, &names) else {
            panic!("b and c are not Available");
        };
        assert_eq!(
            state,
            "b: MinimumReplicasUnavailable: Deployment does not have minimum availability.; \
             c does not exist yet"
        );
        assert!(matches!(
            deployments_verdict(&set, &names[..1]),
            Verdict::Done
        ));
    }

    #[test]
    fn a_deployment_available_with_no_pod_is_waited_for() {
        // K3s's CoreDNS: maxUnavailable 1 of 1 keeps Available True while
        // its only pod has no sandbox yet.
        let mut coredns = deployment("coredns", Some(("True", "MinimumReplicasAvailable")));
        coredns.spec.replicas = Some(1);
        coredns.status.as_mut().unwrap().available_replicas = None;
        let mut set = wait::Objects::default();
        set.apply(Event::Init);
        set.apply(Event::InitApply(coredns.clone()));
        set.apply(Event::InitDone);
        let names = ["coredns".to_string()];
        let Verdict::Waiting(state) = deployments_verdict(&set, &names) else {
            panic!("no CoreDNS pod is available");
        };
        assert_eq!(state, "coredns: Available, but no pod is available yet");

        coredns.status.as_mut().unwrap().available_replicas = Some(1);
        set.apply(Event::Apply(coredns.clone()));
        assert!(matches!(deployments_verdict(&set, &names), Verdict::Done));

        // A Deployment scaled to zero is available with no pod.
        coredns.spec.replicas = Some(0);
        coredns.status.as_mut().unwrap().available_replicas = None;
        set.apply(Event::Apply(coredns));
        assert!(matches!(deployments_verdict(&set, &names), Verdict::Done));
    }

    fn daemonset(namespace: &str, name: &str, desired: i32, ready: i32) -> DaemonSet {
        let mut ds = DaemonSet::default();
        ds.metadata.namespace = Some(namespace.into());
        ds.metadata.name = Some(name.into());
        ds.metadata.generation = Some(2);
        ds.status = Some(DaemonSetStatus {
            observed_generation: Some(2),
            desired_number_scheduled: desired,
            number_ready: ready,
            updated_number_scheduled: Some(desired),
            ..Default::default()
        });
        ds
    }

    #[test]
    fn node_networking_waits_for_every_node_and_ignores_workload_daemonsets() {
        let flannel = daemonset("kube-flannel", "kube-flannel-ds", 2, 1);
        let proxy = daemonset("kube-system", "kube-proxy", 2, 2);
        let workload = daemonset("monitoring", "node-exporter", 2, 0);
        let Verdict::Waiting(state) = daemonsets_verdict([&flannel, &proxy, &workload].into_iter())
        else {
            panic!("flannel is Ready on one of two nodes");
        };
        assert_eq!(state, "kube-flannel-ds: 1/2 pods Ready");

        let mut unseen = daemonset("kube-system", "kube-proxy", 2, 2);
        unseen.metadata.generation = Some(3);
        assert!(matches!(
            daemonsets_verdict([&unseen].into_iter()),
            Verdict::Waiting(s) if s.contains("not yet seen")
        ));

        let flannel = daemonset("kube-flannel", "kube-flannel-ds", 2, 2);
        assert!(matches!(
            daemonsets_verdict([&flannel, &proxy, &workload].into_iter()),
            Verdict::Done
        ));
    }
}
