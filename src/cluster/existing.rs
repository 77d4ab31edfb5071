//! `cluster.provider: existing`: a cluster devstack did not create, reached
//! through a context of the user's kubeconfig; it is never created,
//! changed or removed. This provider reaches the cluster and reports what
//! it is like (its nodes, whether they pull their images themselves, the
//! rights of the context's user); what the stack makes of the stacks and
//! the ESO already there is the orchestrator's to decide
//! (`stack::joining`), and what devstack installs into the cluster is
//! removed by the stack's `down` (the GitOps and LocalStack layers'
//! business).

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

use super::provider::ClusterProvider;
use super::{ClusterInfo, Plan, ProvisionOptions};
use crate::docker::Engine;
use crate::error::Error;
use crate::k8s::access::{self, Permission};
use crate::k8s::context::{self, ContextConfig};
use crate::profile::{Provider, Settings};
use crate::ui::Step;

/// An existing cluster; its nodes may be containers of `engine` (Kind, k3d,
/// K3s in Docker), which devstack then gives the stack's images.
pub struct Existing {
    engine: Arc<dyn Engine>,
}

impl Existing {
    pub fn new(engine: Arc<dyn Engine>) -> Self {
        Existing { engine }
    }
}

impl ClusterProvider for Existing {
    fn provider(&self) -> Provider {
        Provider::Existing
    }

    /// The stack is on the cluster once an `up` wrote its kubeconfig.
    fn exists<'a>(&'a self, settings: &'a Settings) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(async move { Ok(crate::state::kubeconfig_path(settings).is_file()) })
    }

    /// Nothing of the cluster is devstack's to change; whether devstack may
    /// work in it is checked when the stack joins it (`stack::joining`).
    fn plan<'a>(&'a self, settings: &'a Settings) -> BoxFuture<'a, Result<Plan, Error>> {
        Box::pin(async move {
            Ok(Plan {
                exists: crate::state::kubeconfig_path(settings).is_file(),
                changes: Vec::new(),
            })
        })
    }

    fn up<'a>(
        &'a self,
        settings: &'a Settings,
        _options: ProvisionOptions,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<ClusterInfo, Error>> {
        Box::pin(async move {
            let (config, client) = connect(settings).await?;
            let nodes = node_names(&client, &config).await?;
            step.progress(format!(
                "context `{}`: {} node(s) at {}",
                config.context,
                nodes.len(),
                config.server
            ));
            Ok(ClusterInfo {
                provider: Provider::Existing,
                nodes,
                api_server: config.server.clone(),
                kubeconfig: config.kubeconfig_yaml.clone(),
                created: false,
                repaired: Vec::new(),
                images_loaded: false,
            })
        })
    }

    fn kubeconfig<'a>(&'a self, settings: &'a Settings) -> BoxFuture<'a, Result<String, Error>> {
        Box::pin(async move { Ok(load(settings)?.kubeconfig_yaml) })
    }

    /// Nodes that are containers of the local engine get the images as
    /// devstack's own Kind nodes do; others pull from their registries.
    fn load_images<'a>(
        &'a self,
        settings: &'a Settings,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<usize, Error>> {
        Box::pin(async move {
            let (config, client) = connect(settings).await?;
            let nodes = node_names(&client, &config).await?;
            let local = local_nodes(self.engine.as_ref(), &nodes).await;
            if local.len() != nodes.len() {
                step.progress("the nodes are not containers here: they pull images themselves");
                return Ok(0);
            }
            let what = format!("the nodes of context `{}`", config.context);
            super::kind::import_into_nodes(self.engine.as_ref(), settings, &local, &what, step)
                .await
        })
    }

    /// The cluster is not devstack's to remove.
    fn delete<'a>(&'a self, _settings: &'a Settings) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(async { Ok(false) })
    }
}

/// The nodes that are running containers of `engine` (none when no engine
/// answers on this machine).
async fn local_nodes<'n>(engine: &dyn Engine, nodes: &'n [String]) -> Vec<&'n str> {
    let mut local = Vec::new();
    for node in nodes {
        let running = engine
            .inspect_container(node)
            .await
            .ok()
            .and_then(|c| c.state)
            .and_then(|s| s.running)
            .unwrap_or(false);
        if running {
            local.push(node.as_str());
        }
    }
    local
}

const CONTEXT_HINT: &str =
    "check that the cluster runs and the context is right (`--context NAME`, or `cluster.context`)";

fn load(settings: &Settings) -> Result<ContextConfig, Error> {
    context::load(settings.cluster.context.as_deref())
}

async fn node_names(client: &kube::Client, config: &ContextConfig) -> Result<Vec<String>, Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&Default::default()).await.map_err(|e| {
        Error::prerequisite(format!(
            "the API server of context `{}` ({}) does not answer: {e}",
            config.context, config.server
        ))
        .with_hint(CONTEXT_HINT)
    })?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect())
}

/// The Kubernetes version the context's API server reports.
pub async fn server_version(settings: &Settings) -> Result<String, Error> {
    let (config, client) = connect(settings).await?;
    version(&client, &config).await
}

/// `/version` answers any user, so a refusal after it is about rights alone.
async fn version(client: &kube::Client, config: &ContextConfig) -> Result<String, Error> {
    let info = client.apiserver_version().await.map_err(|e| {
        Error::prerequisite(format!(
            "the API server of context `{}` ({}) does not answer: {e}",
            config.context, config.server
        ))
        .with_hint(CONTEXT_HINT)
    })?;
    Ok(info.git_version)
}

/// The context the settings name and a client of it.
pub async fn connect(settings: &Settings) -> Result<(ContextConfig, kube::Client), Error> {
    let config = load(settings)?;
    let client = context::client(&config).await?;
    Ok((config, client))
}

/// The API server answers and the context's user holds every permission
/// devstack needs for the stack (a refusal lists all the missing ones).
pub async fn check_access(
    client: &kube::Client,
    config: &ContextConfig,
    settings: &Settings,
) -> Result<(), Error> {
    version(client, config).await?;
    check_permissions(client, config, settings).await
}

/// The context's user holds every permission devstack needs for the stack,
/// under the names its objects take (a refusal lists all the missing ones).
pub async fn check_permissions(
    client: &kube::Client,
    config: &ContextConfig,
    settings: &Settings,
) -> Result<(), Error> {
    let missing = access::missing(client, &needed_permissions(settings)).await?;
    if !missing.is_empty() {
        return Err(access::refusal(&config.context, &missing));
    }
    Ok(())
}

/// Whether the cluster's nodes pull the stack's images themselves: some
/// are not running containers of `engine` (or no engine answers here).
pub async fn nodes_pull(
    engine: &dyn Engine,
    client: &kube::Client,
    config: &ContextConfig,
) -> Result<bool, Error> {
    let nodes = node_names(client, config).await?;
    Ok(local_nodes(engine, &nodes).await.len() != nodes.len())
}

/// What `up`, `verify` and `down` do on the cluster: Flux's and ESO's
/// CRDs and cluster roles, the namespaces of the stack, Flux's objects,
/// LocalStack and the port-forward to it, and the probe's secrets.
pub fn needed_permissions(settings: &Settings) -> Vec<Permission> {
    let mut out = Vec::new();
    for verb in ["create", "patch", "delete"] {
        for (group, resource) in [
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            ("rbac.authorization.k8s.io", "clusterroles"),
            ("rbac.authorization.k8s.io", "clusterrolebindings"),
            ("", "namespaces"),
        ] {
            out.push(Permission::cluster_wide(verb, group, resource));
        }
    }
    out.push(Permission::cluster_wide("list", "", "nodes"));
    for (verb, group, resource, namespace) in [
        ("create", "apps", "deployments", "flux-system"),
        ("create", "", "services", "flux-system"),
        ("create", "", "serviceaccounts", "flux-system"),
        ("create", "", "configmaps", "flux-system"),
        (
            "create",
            "source.toolkit.fluxcd.io",
            "buckets",
            "flux-system",
        ),
        (
            "create",
            "kustomize.toolkit.fluxcd.io",
            "kustomizations",
            "flux-system",
        ),
    ] {
        out.push(Permission::namespaced(verb, group, resource, namespace));
    }
    let names = &settings.names;
    let (localstack, eso) = (names.localstack_namespace(), names.eso_namespace());
    let verify = &settings.verify.namespace;
    for (verb, group, resource, namespace) in [
        ("create", "apps", "deployments", &localstack),
        ("create", "", "services", &localstack),
        ("create", "", "pods/portforward", &localstack),
        ("list", "", "pods", &localstack),
        ("create", "", "secrets", &eso),
        ("get", "", "secrets", verify),
    ] {
        out.push(Permission::namespaced(verb, group, resource, namespace));
    }
    out
}
