//! `cluster.provider: existing`: a cluster devstack did not create, reached
//! through a context of the user's kubeconfig. Preflight checks that its
//! API server answers and that the context's user may do everything
//! devstack does, before anything is created; the cluster itself is never
//! created, changed or removed. What devstack installs into it is removed
//! by the stack's `down` (the GitOps and LocalStack layers' business).

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

    fn plan<'a>(&'a self, settings: &'a Settings) -> BoxFuture<'a, Result<Plan, Error>> {
        Box::pin(async move {
            preflight(settings).await?;
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
            let config = load(settings)?;
            let client = context::client(&config).await?;
            let nodes = node_names(&client, &config).await?;
            step.progress(format!(
                "context `{}`: {} node(s) at {}",
                config.context,
                nodes.len(),
                config.server
            ));
            let nodes_pull = local_nodes(self.engine.as_ref(), &nodes).await.len() != nodes.len();
            let cluster_eso = super::eso::on_cluster(&client, settings, &config.context).await?;
            if let Some(eso) = &cluster_eso {
                step.progress(format!(
                    "the External Secrets Operator of the cluster serves the stack (Deployment {}/{})",
                    eso.namespace, eso.deployment
                ));
            }
            Ok(ClusterInfo {
                provider: Provider::Existing,
                nodes,
                api_server: config.server.clone(),
                kubeconfig: config.kubeconfig_yaml.clone(),
                created: false,
                repaired: Vec::new(),
                images_loaded: false,
                nodes_pull,
                cluster_eso,
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
            let config = load(settings)?;
            let client = context::client(&config).await?;
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
    let config = load(settings)?;
    let client = context::client(&config).await?;
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

/// The API server answers and the context's user holds every permission
/// devstack needs (a refusal lists all the missing ones), and no other
/// stack runs there. Returns the context's name and server.
pub async fn preflight(settings: &Settings) -> Result<(String, String), Error> {
    let config = load(settings)?;
    let client = context::client(&config).await?;
    version(&client, &config).await?;
    let missing = access::missing(&client, &needed_permissions()).await?;
    if !missing.is_empty() {
        return Err(access::refusal(&config.context, &missing));
    }
    refuse_another_stack(&client, settings, &config).await?;
    super::eso::on_cluster(&client, settings, &config.context).await?;
    Ok((config.context, config.server))
}

/// One stack per cluster for now: a second one would take over the first
/// one's LocalStack and Flux objects, which have fixed names.
async fn refuse_another_stack(
    client: &kube::Client,
    settings: &Settings,
    config: &ContextConfig,
) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let facts: Api<ConfigMap> = Api::namespaced(client.clone(), "flux-system");
    let Ok(Some(facts)) = facts.get_opt("devstack-stack-facts").await else {
        return Ok(());
    };
    let other = facts.data.and_then(|d| d.get("STACK_NAME").cloned());
    match other {
        Some(other) if other != settings.name => Err(Error::user(format!(
            "the cluster of context `{}` already runs devstack stack `{other}`, and one cluster holds one stack for now",
            config.context
        ))
        .with_hint(format!(
            "use that stack (`--name {other}`), take it down first (`devstack --name {other} down`), or use another cluster"
        ))),
        _ => Ok(()),
    }
}

/// What `up`, `verify` and `down` do on the cluster: Flux's and ESO's
/// CRDs and cluster roles, the namespaces of the stack, Flux's objects,
/// LocalStack and the port-forward to it, and the probe's secrets.
pub fn needed_permissions() -> Vec<Permission> {
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
        ("create", "apps", "deployments", "localstack"),
        ("create", "", "services", "localstack"),
        ("create", "", "pods/portforward", "localstack"),
        ("list", "", "pods", "localstack"),
        ("create", "", "secrets", "external-secrets"),
        ("get", "", "secrets", "devstack-verify"),
    ] {
        out.push(Permission::namespaced(verb, group, resource, namespace));
    }
    out
}
