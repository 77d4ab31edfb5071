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
            let settings = &on_this_cluster(&client, settings, &config).await?;
            let shares_cluster = settings.names.shares_cluster();
            if shares_cluster {
                step.progress(format!(
                    "another stack runs on the cluster: this one's objects are named `*-{}`",
                    settings.name
                ));
            }
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
                shares_cluster,
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
/// devstack needs (a refusal lists all the missing ones), and the stack can
/// join the stacks already there. Returns the context's name and server.
pub async fn preflight(settings: &Settings) -> Result<(String, String), Error> {
    let config = load(settings)?;
    let client = context::client(&config).await?;
    version(&client, &config).await?;
    let missing = access::missing(&client, &needed_permissions(settings)).await?;
    if !missing.is_empty() {
        return Err(access::refusal(&config.context, &missing));
    }
    let settings = on_this_cluster(&client, settings, &config).await?;
    // A stack that joins works in namespaces of its own name.
    if settings.names.shares_cluster() {
        let missing = access::missing(&client, &needed_permissions(&settings)).await?;
        if !missing.is_empty() {
            return Err(access::refusal(&config.context, &missing));
        }
    }
    super::eso::on_cluster(&client, &settings, &config.context).await?;
    Ok((config.context, config.server))
}

/// A devstack stack on a cluster, known by the facts ConfigMap it keeps in
/// flux-system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackOnCluster {
    pub name: String,
    /// It uses the shipped names: it came first.
    pub first: bool,
}

/// The devstack stacks on the cluster.
pub async fn stacks_on_cluster(client: &kube::Client) -> Result<Vec<StackOnCluster>, Error> {
    use crate::profile::names::base;
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "flux-system");
    let params = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=devstack");
    let list = match api.list(&params).await {
        Ok(list) => list.items,
        // No flux-system yet: no stack either.
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(e) => {
            return Err(Error::internal(format!(
                "list ConfigMaps in flux-system: {e}"
            )));
        }
    };
    let mut stacks: Vec<StackOnCluster> = list
        .into_iter()
        .filter_map(|facts| {
            let name = facts.metadata.name?;
            if !name.starts_with(base::FACTS) {
                return None;
            }
            let stack = facts.data.and_then(|d| d.get("STACK_NAME").cloned())?;
            Some(StackOnCluster {
                first: name == base::FACTS,
                name: stack,
            })
        })
        .collect();
    stacks.sort_by(|a, b| (!a.first, &a.name).cmp(&(!b.first, &b.name)));
    Ok(stacks)
}

/// The stack that came first on the cluster, when it is not `stack`: it
/// holds the shipped names, which `stack` then must not use.
pub fn first_other<'s>(stacks: &'s [StackOnCluster], stack: &str) -> Option<&'s StackOnCluster> {
    stacks.iter().find(|s| s.first && s.name != stack)
}

/// The settings as the stack runs on this cluster: under the shipped names
/// when it is alone there or came first, under its own when another stack
/// came first (its record says so once it is up). A stack joins only when
/// the first one's store names an ESO controller class: a store without
/// one is served by every controller, the joining stack's too, which would
/// reach the wrong LocalStack for it.
async fn on_this_cluster(
    client: &kube::Client,
    settings: &Settings,
    config: &ContextConfig,
) -> Result<Settings, Error> {
    use crate::profile::names::base;
    let mut settings = settings.clone();
    refuse_taking_over_external_secrets(client, &settings, config).await?;
    if settings.names.shares_cluster() {
        return Ok(settings);
    }
    let stacks = stacks_on_cluster(client).await?;
    let Some(first) = first_other(&stacks, &settings.name) else {
        return Ok(settings);
    };
    let stores =
        crate::k8s::dynamic_api(client, "external-secrets.io/v1", "ClusterSecretStore", None);
    let class = match stores.get_opt(base::STORE).await {
        Ok(Some(store)) => store.data["spec"]["controller"]
            .as_str()
            .filter(|class| !class.is_empty())
            .map(str::to_string),
        _ => None,
    };
    if class.is_none() {
        return Err(Error::user(format!(
            "the cluster of context `{}` runs devstack stack `{}`, whose ClusterSecretStore `{}` names no ESO controller class, so the controller a second stack adds would serve it too",
            config.context, first.name, base::STORE
        ))
        .with_hint(format!(
            "run `devstack --name {0} up` again with this devstack (on a cluster it did not create, devstack now gives its ESO controller and store a class), or give the cluster's ESO that serves it a `--controller-class`; nothing was created",
            first.name
        )));
    }
    settings.share_cluster();
    Ok(settings)
}

/// Stacks on one cluster must not sync the profile's secrets to the same
/// place: the later one's ExternalSecret would take over the other's, and
/// its `down` would delete it.
async fn refuse_taking_over_external_secrets(
    client: &kube::Client,
    settings: &Settings,
    config: &ContextConfig,
) -> Result<(), Error> {
    for secret in settings.secrets.iter().filter(|s| s.sync.is_some()) {
        let (namespace, name) = crate::profile::settings::profile_external_secret_name(secret);
        let api = crate::k8s::dynamic_api(
            client,
            "external-secrets.io/v1",
            "ExternalSecret",
            Some(&namespace),
        );
        // Without ESO's CRDs there is none.
        let Ok(Some(existing)) = api.get_opt(&name).await else {
            continue;
        };
        let labels = existing.metadata.labels.unwrap_or_default();
        let owner = labels.get(crate::docker::LABEL_STACK);
        if let Some(owner) = owner.filter(|owner| **owner != settings.name) {
            return Err(Error::user(format!(
                "secret `{}` syncs to {namespace}/{name} on the cluster of context `{}`, where stack `{owner}` already syncs one",
                secret.name, config.context
            ))
            .with_hint(format!(
                "give this stack's profile another `sync.namespace` or `sync.secretName` for `{}`; nothing was created",
                secret.name
            )));
        }
    }
    Ok(())
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
