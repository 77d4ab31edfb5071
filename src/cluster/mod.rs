//! Kubernetes clusters in Docker. Two providers behind one interface:
//! `k3s` runs K3s node containers through bollard (nothing but Docker
//! needed), `kind` drives the `kind` CLI.

pub mod choice;
pub mod eso;
pub mod existing;
pub mod k3s;
pub mod kind;
pub mod kubeconfig;
mod plan;
pub mod preload;
pub mod provider;

pub use plan::{Change, Plan};
pub use provider::ClusterProvider;

use std::sync::Arc;

use serde::Serialize;

use crate::docker::Engine;
use crate::error::Error;
use crate::pipeline::Runner;
use crate::profile::{Provider, Settings};
use crate::ui::Step;

/// What `up` produced.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    pub provider: Provider,
    /// Node container names, servers first.
    pub nodes: Vec<String>,
    /// API server URL reachable from this host.
    pub api_server: String,
    /// Kubeconfig (YAML) whose context, cluster and user are `devstack-<name>`.
    #[serde(skip)]
    pub kubeconfig: String,
    /// Whether `up` created the cluster (false: it existed and was reused).
    pub created: bool,
    /// What `up` repaired on an existing cluster (started a stopped node, ...).
    pub repaired: Vec<String>,
    /// The provider put the profile's images into the nodes itself (K3s,
    /// while new nodes boot), so `up` need not check them again.
    #[serde(skip)]
    pub images_loaded: bool,
}

impl ClusterInfo {
    /// `created`, `reused` or `repaired`, with the node count and API server.
    pub fn summary(&self) -> String {
        let what = if self.provider == Provider::Existing {
            "existing (devstack leaves it as it is)"
        } else if self.created {
            "created"
        } else if self.repaired.is_empty() {
            "reused"
        } else {
            "repaired"
        };
        format!(
            "{what}, {} node(s), API {}",
            self.nodes.len(),
            self.api_server
        )
    }

    /// The host port of the API server.
    pub fn api_port(&self) -> Option<u16> {
        url_port(&self.api_server)
    }
}

/// Options for [`provision`] and [`up`] that are not settings. None is
/// about a failure: removing a cluster that failed half-way is the
/// rollback's business ([`crate::pipeline::Runner`]), never the provider's.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProvisionOptions {
    /// Recreate a running cluster whose differences from the profile cannot
    /// be applied in place (image, Kubernetes version, Kind node count...).
    pub recreate: bool,
    /// Return once the nodes are Ready and the images loaded, leaving
    /// CoreDNS to the caller ([`crate::k8s::wait_coredns`]): `up` installs Flux, which
    /// needs no DNS, while CoreDNS starts.
    pub coredns_later: bool,
    /// The nodes were restored from a snapshot of a cluster of the same
    /// profile and versions, whose containerd holds every image already.
    pub images_restored: bool,
}

/// The API server's host port for a new cluster: the profile's, which
/// must be free, or a free one for `auto`.
pub fn choose_api_port(settings: &Settings) -> Result<u16, Error> {
    let port = match settings.cluster.api_server_port {
        crate::profile::HostPort::Auto => crate::hostinfo::free_port().map_err(|e| {
            Error::internal("cannot pick a free port for the API server").with_source(e)
        })?,
        crate::profile::HostPort::Fixed(port) => port,
    };
    if !crate::hostinfo::port_is_free(std::net::IpAddr::from([127, 0, 0, 1]), port) {
        let holder = crate::hostinfo::port_holder(port)
            .map(|h| format!(" (held by {h})"))
            .unwrap_or_default();
        return Err(Error::prerequisite(format!(
            "the API server port 127.0.0.1:{port} is already in use{holder}"
        ))
        .with_hint("stop what holds it, or set `cluster.apiServerPort: auto` (the default) to get a free one"));
    }
    Ok(port)
}

/// The port of an `https://host:port` API server URL.
fn url_port(url: &str) -> Option<u16> {
    url.rsplit(':').next()?.trim_end_matches('/').parse().ok()
}

/// Creates a node container of `provider` (a word for the error); a name
/// some other container holds is the user's to free, said as such.
pub(crate) async fn create_node_container(
    engine: &dyn Engine,
    name: &str,
    body: crate::docker::models::ContainerCreateBody,
    provider: &str,
) -> Result<(), Error> {
    engine.create_container(name, body).await.map_err(|e| {
        if crate::docker::is_conflict(&e) {
            Error::prerequisite(format!(
                "a container named `{name}` exists but is not this stack's {provider} node"
            ))
            .with_hint(format!(
                "remove it (`docker rm -f {name}`) or use another stack name with --name"
            ))
        } else {
            crate::docker::engine_error(format!("create node {name}"), e)
        }
    })
}

/// Starts a node container; ports another process holds are the profile's
/// to change, said as such.
pub(crate) async fn start_node_container(engine: &dyn Engine, name: &str) -> Result<(), Error> {
    engine.start_container(name).await.map_err(|e| {
        let message = crate::docker::docker_message(&e);
        if message.contains("port is already allocated")
            || message.contains("address already in use")
        {
            Error::prerequisite(format!("node {name} cannot publish its ports: {message}"))
                .with_hint("choose other ports (`cluster.apiServerPort`, `cluster.ports`)")
        } else {
            crate::docker::engine_error(format!("start node {name}"), e)
        }
    })
}

/// Kubernetes node container name `devstack-<stack>-<role><index>`.
pub fn node_name(settings: &Settings, role: &str, index: usize) -> String {
    format!("{}-{role}-{index}", settings.resource_prefix())
}

/// Brings the cluster up (or converges an existing one) as `plan` says,
/// which the caller computed and checked ([`Plan::check`]), loads the
/// stack's images into its nodes and waits for CoreDNS (unless
/// `coredns_later`), all within `timeouts.cluster` (images:
/// `timeouts.preload`). What a failure leaves is the caller's runner's to
/// roll back.
pub async fn up(
    engine: &Arc<dyn Engine>,
    settings: &Settings,
    plan: &Plan,
    options: ProvisionOptions,
    step: &Step,
) -> Result<ClusterInfo, Error> {
    let started = std::time::Instant::now();
    let provider = provider_for(engine.clone(), settings);
    if plan.needs_recreate() {
        step.progress("recreating the cluster (--recreate)");
        provider.delete(settings).await?;
        // The old cluster's kubeconfig no longer reaches anything, and
        // without one a rollback knows the new cluster's creation may still
        // be under way (kind's nodes can appear after it was stopped).
        let _ = std::fs::remove_file(crate::state::kubeconfig_path(settings));
    }
    let info = provider.up(settings, options, step).await?;
    let ready = async {
        // Converging an existing cluster imports images added to the profile
        // since; workloads must not start before they are there.
        if !options.images_restored && !info.images_loaded {
            let span = step.span("image loads");
            span.finish(provider.load_images(settings, step).await)?;
        }
        if options.coredns_later {
            return Ok(());
        }
        let client = crate::k8s::client_from_kubeconfig(&info.kubeconfig).await?;
        let budget =
            crate::k8s::Budget::since(started, settings.timeouts.cluster.get(), "timeouts.cluster");
        crate::k8s::wait_coredns(&client, budget, step).await
    };
    ready.await.map(|()| info)
}

/// A cluster brought up and wired to this host: its kubeconfig written
/// (mode 0600) and, when the profile asks, merged into the user's.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Provisioned {
    #[serde(flatten)]
    pub info: ClusterInfo,
    pub kubeconfig_path: std::path::PathBuf,
    pub merged_into: Option<std::path::PathBuf>,
}

/// Whether the stack is (or is to be) on a cluster devstack did not create,
/// by `settings` with what the stack's record knows
/// (`stack::recorded_settings`). Such a stack needs no Docker engine on
/// this machine ([`crate::docker::connect_or_absent`]).
pub fn on_existing_cluster(settings: &Settings) -> bool {
    settings.cluster.provider == Provider::Existing
}

/// The provider the settings name, on `engine`.
pub fn provider_for(engine: Arc<dyn Engine>, settings: &Settings) -> Box<dyn ClusterProvider> {
    match settings.cluster.provider {
        Provider::K3s => Box::new(provider::K3s::new(engine)),
        Provider::Kind => Box::new(provider::Kind::new(engine)),
        Provider::Existing => Box::new(existing::Existing::new(engine)),
    }
}

/// Whether the stack has a cluster of any provider, running or not.
pub async fn exists(engine: &Arc<dyn Engine>, settings: &Settings) -> Result<bool, Error> {
    if settings.cluster.provider == Provider::Existing {
        return provider_for(engine.clone(), settings)
            .exists(settings)
            .await;
    }
    Ok(found_provider(engine, settings).await?.is_some())
}

/// The provider whose cluster of this stack exists (running or not), if any.
pub async fn found_provider(
    engine: &Arc<dyn Engine>,
    settings: &Settings,
) -> Result<Option<Provider>, Error> {
    for kind in [Provider::K3s, Provider::Kind] {
        let mut other = settings.clone();
        other.cluster.provider = kind;
        if provider_for(engine.clone(), &other).exists(&other).await? {
            return Ok(Some(kind));
        }
    }
    Ok(None)
}

/// How the stack's running cluster differs from the settings.
pub async fn plan(engine: &Arc<dyn Engine>, settings: &Settings) -> Result<Plan, Error> {
    provider_for(engine.clone(), settings).plan(settings).await
}

/// The kubeconfig files [`provision`] writes can be written: checked
/// before anything is created.
pub fn check_kubeconfig_writable(settings: &Settings) -> Result<(), Error> {
    kubeconfig::check_writable(&crate::state::kubeconfig_path(settings))?;
    if settings.cluster.merge_kubeconfig {
        kubeconfig::check_writable(&settings.user_kubeconfig)?;
    }
    Ok(())
}

/// [`up`], then the kubeconfig files, which the caller checked it can
/// write ([`check_kubeconfig_writable`]).
pub async fn provision(
    engine: &Arc<dyn Engine>,
    settings: &Settings,
    plan: &Plan,
    options: ProvisionOptions,
    step: &Step,
) -> Result<Provisioned, Error> {
    let path = crate::state::kubeconfig_path(settings);
    let info = up(engine, settings, plan, options, step).await?;
    kubeconfig::write_private(&path, &info.kubeconfig)?;
    let merged_into = settings
        .cluster
        .merge_kubeconfig
        .then(|| {
            kubeconfig::merge_into_user(
                &settings.user_kubeconfig,
                &info.kubeconfig,
                settings.cluster.switch_context,
            )
        })
        .transpose()?;
    Ok(Provisioned {
        info,
        kubeconfig_path: path,
        merged_into,
    })
}

/// [`provision`] as one step of `runner`, which is told first how to remove
/// the cluster when this run creates (or recreates) it: a failure or a
/// Ctrl-C then leaves `runner`'s rollback to remove it, once.
pub async fn provision_step(
    runner: &Runner,
    engine: &Arc<dyn Engine>,
    settings: &Settings,
    options: ProvisionOptions,
) -> Result<Provisioned, Error> {
    // A change the cluster cannot take in place is refused before anything
    // is touched.
    let plan = plan(engine, settings).await?;
    plan.check(options.recreate, settings)?;
    check_kubeconfig_writable(settings)?;
    if plan.creates(options.recreate) {
        let (engine, owned) = (engine.clone(), settings.clone());
        runner.created(
            format!("{} cluster", settings.cluster.provider.as_str()),
            move || Box::pin(async move { delete(&engine, &owned).await.map(drop) }),
        );
    }
    let title = format!(
        "Cluster ({}, {})",
        settings.cluster.provider.as_str(),
        settings.cluster.image
    );
    runner
        .step(title, None, |step| async move {
            let provisioned = provision(engine, settings, &plan, options, &step).await?;
            let summary = provisioned.info.summary();
            Ok((provisioned, summary))
        })
        .await
}

/// `devstack load`: images of this machine's Docker image store into
/// every node of the stack's cluster, through the import `images.preload`
/// uses (`ClusterProvider::load_images`). Every image is checked first, so
/// nothing is imported unless all exist; a name a node already holds is
/// dropped from it first, so a rebuilt image replaces the old one (pods
/// running the old one keep it). Returns how many imports it did.
pub async fn load_local_images(
    engine: &Arc<dyn Engine>,
    settings: &Settings,
    images: &[String],
    step: &Step,
) -> Result<usize, Error> {
    if settings.cluster.provider == Provider::Existing {
        return Err(Error::user(
            "`devstack load` puts images into node containers of this machine, which a cluster devstack did not create does not have",
        )
        .with_hint("push the image to a registry the cluster pulls from"));
    }
    let mut missing = Vec::new();
    for image in images {
        if engine.image_id(image).await.is_err() {
            missing.push(format!("`{image}`"));
        }
    }
    if !missing.is_empty() {
        return Err(Error::user(format!(
            "{} {} not in this machine's Docker image store; nothing was loaded",
            missing.join(", "),
            if missing.len() == 1 { "is" } else { "are" }
        ))
        .with_hint("build or pull it first (`docker build -t NAME .`, `docker pull NAME`); `docker images` lists what is there"));
    }
    let names = match settings.cluster.provider {
        Provider::K3s => k3s::node_names(engine.as_ref(), settings).await?,
        Provider::Kind => kind::node_names(engine.as_ref(), settings).await?,
        Provider::Existing => Vec::new(),
    };
    if names.is_empty() {
        return Err(Error::unhealthy(format!(
            "stack `{}` has no {} cluster to load images into",
            settings.name,
            settings.cluster.provider.as_str()
        ))
        .with_hint(format!("`devstack{} up` creates it", settings.cli_flags())));
    }
    for node in &names {
        for image in images {
            let reference = containerd_reference(image);
            // Absent is fine: `ctr` then says so and exits non-zero.
            let _ = crate::docker::exec_in(
                engine.as_ref(),
                node,
                &["ctr", "--namespace", "k8s.io", "images", "rm", &reference],
            )
            .await;
        }
    }
    let mut only = settings.clone();
    only.images.bundle = None;
    only.images.preload = images.to_vec();
    provider_for(engine.clone(), settings)
        .load_images(&only, step)
        .await
}

/// The full name containerd keeps an image under: `app:1` is
/// `docker.io/library/app:1`, a name without a tag is `:latest`.
pub fn containerd_reference(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let first = name.split('/').next().unwrap_or_default();
    let has_domain =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = match (has_domain, name.contains('/')) {
        (true, _) => name.to_string(),
        (false, true) => format!("docker.io/{name}"),
        (false, false) => format!("docker.io/library/{name}"),
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if !last.contains(':') && digest.is_none() {
        full.push_str(":latest");
    }
    match digest {
        Some(digest) => format!("{full}@{digest}"),
        None => full,
    }
}

/// Deletes the cluster (its provider's [`ClusterProvider::delete`]: nodes and
/// volumes; absent is fine), its kubeconfig file and context, and the stack
/// network when nothing else uses it. Returns whether anything was removed.
pub async fn delete(engine: &Arc<dyn Engine>, settings: &Settings) -> Result<bool, Error> {
    let removed = provider_for(engine.clone(), settings)
        .delete(settings)
        .await?;
    let path = crate::state::kubeconfig_path(settings);
    let had_file = std::fs::remove_file(&path).is_ok();
    let had_context =
        kubeconfig::remove_from_user(&settings.user_kubeconfig, &settings.kube_context())?;
    if settings.cluster.provider != Provider::Existing {
        crate::docker::remove_network_if_unused(engine.as_ref(), &settings.resource_prefix())
            .await?;
    }
    Ok(removed || had_file || had_context)
}

/// How a provider's nodes go into a snapshot: the paths read from each
/// node, the first of them split into the node's own part and the part
/// every restored stack shares, and which directories below that first
/// path's last component are the shared part (with their place in the
/// shared volume).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotLayout {
    pub paths: &'static [&'static str],
    pub shared_dirs: &'static [(&'static str, &'static str)],
}

/// The snapshot layout of the provider's nodes (K3s's for a provider
/// whose clusters are not snapshotted, which `snapshot::require_supported`
/// refuses first).
pub fn snapshot_layout(provider: Provider) -> SnapshotLayout {
    match provider {
        Provider::Kind => SnapshotLayout {
            paths: kind::snapshot::SNAPSHOT_PATHS,
            shared_dirs: kind::snapshot::SHARED_DIRS,
        },
        Provider::K3s | Provider::Existing => SnapshotLayout {
            paths: k3s::SNAPSHOT_PATHS,
            shared_dirs: k3s::SHARED_DIRS,
        },
    }
}

/// The stack's nodes, every one running, as a snapshot records them.
pub async fn saved_cluster(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<k3s::SavedCluster, Error> {
    match settings.cluster.provider {
        Provider::Kind => kind::snapshot::saved_cluster(engine, settings).await,
        _ => k3s::saved_cluster(engine, settings).await,
    }
}

/// The versions a snapshot records beyond the profile's: for Kind, the
/// kind release and the node image's ID.
pub async fn snapshot_versions(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<std::collections::BTreeMap<String, String>, Error> {
    match settings.cluster.provider {
        Provider::Kind => kind::snapshot::snapshot_versions(engine, settings).await,
        _ => Ok(Default::default()),
    }
}

/// Whether this machine can restore snapshot `name` recorded with
/// `versions` ([`snapshot_versions`]'s among them). Creates nothing but
/// the node image, when it must be loaded.
pub async fn check_restorable(
    engine: &dyn Engine,
    settings: &Settings,
    name: &str,
    versions: &std::collections::BTreeMap<String, String>,
) -> Result<(), Error> {
    match settings.cluster.provider {
        Provider::Kind => kind::snapshot::check_restorable(engine, settings, name, versions).await,
        _ => Ok(()),
    }
}

/// The node containers of a cluster restored from a snapshot, created
/// stopped for the caller to fill; `shared` names, by node, the snapshot
/// volume it shares.
pub async fn create_restored_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    saved: &k3s::SavedCluster,
    shared: &[Option<String>],
) -> Result<k3s::RestoredNodes, Error> {
    match settings.cluster.provider {
        Provider::Kind => {
            kind::snapshot::create_restored_nodes(engine, settings, saved, shared).await
        }
        _ => k3s::create_restored_nodes(engine, settings, saved, shared).await,
    }
}

/// Starts the restored node containers, once filled.
pub async fn start_restored_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    restored: &k3s::RestoredNodes,
    step: &Step,
) -> Result<(), Error> {
    match settings.cluster.provider {
        Provider::Kind => {
            kind::snapshot::start_restored_nodes(engine, settings, restored, step).await
        }
        _ => k3s::start_restored_nodes(engine, settings, restored, step).await,
    }
}

#[cfg(test)]
mod tests {
    use super::containerd_reference;

    #[test]
    fn images_get_the_name_containerd_keeps_them_under() {
        for (given, full) in [
            ("app:1", "docker.io/library/app:1"),
            ("app", "docker.io/library/app:latest"),
            ("team/app:1", "docker.io/team/app:1"),
            ("localhost:5111/app:dev", "localhost:5111/app:dev"),
            ("localhost/app", "localhost/app:latest"),
            ("ghcr.io/o/app:v2", "ghcr.io/o/app:v2"),
            ("app@sha256:ab", "docker.io/library/app@sha256:ab"),
        ] {
            assert_eq!(containerd_reference(given), full, "{given}");
        }
    }
}
