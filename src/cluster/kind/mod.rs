//! Kind clusters, created with the `kind` CLI. devstack writes the Kind
//! config from the profile, lets `kind` create the node containers, and
//! does the rest itself through bollard: attaching the nodes to the stack
//! network, registry mirrors, image preload, and deleting the nodes (as
//! `kind delete cluster` does, without needing kind: see [`delete`]).
//!
//! `kind` is always pointed at a throw-away kubeconfig, so it never edits
//! the user's; devstack merges its own renamed context instead.
//!
//! kind sets its own Docker labels on node containers and offers no way to
//! add more, so devstack marks the clusters it creates with a read-only
//! bind mount of a directory under the stack's state
//! ([`owner_marker_dir`]): it is in each node's container metadata from the
//! moment the container exists (before any Ctrl-C could interrupt `kind
//! create`), and a cluster of the same name without it is someone else's,
//! which devstack neither converges nor deletes.

mod cli;
mod config;
mod delete;
mod images;

pub(super) use images::import_into_nodes;
mod nodes;
mod restart;
pub mod snapshot;

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use crate::bundle::normalize_reference;
use crate::cluster::plan::ports_change;
use crate::cluster::{Change, ClusterInfo, Plan, ProvisionOptions, kubeconfig};
use crate::docker::{Engine, exec_in};
use crate::error::Error;
use crate::profile::{Provider, Settings};
use crate::ui::Step;

pub use cli::{KindCli, bundled_kind, find_installed_kind, find_kind, find_kind_from};
use config::write_owner_marker;
pub use config::{config_yaml, owner_marker_dir};
pub use delete::delete;

use cli::{
    KindPhases, kind_failed, kind_stdout, require_docker_cli, run_kind_streaming, scratch_dir,
};
use config::validate_mirrors;
use images::preload_images;
use nodes::{
    Found, KindNode, connect_to_stack_network, find_cluster, foreign_cluster, list_nodes,
    start_stopped, write_registry_hosts,
};

/// Labels kind puts on every container of a cluster; `kind get clusters`
/// and `kind get nodes` are queries on these.
pub const LABEL_CLUSTER: &str = "io.x-k8s.kind.cluster";
const LABEL_ROLE: &str = "io.x-k8s.kind.role";
const ROLE_CONTROL_PLANE: &str = "control-plane";
const ROLE_WORKER: &str = "worker";
/// The API server's port inside a control-plane node.
const KIND_API_PORT: u16 = 6443;

/// Where the nodes' containerd reads per-registry `hosts.toml` files.
const REGISTRY_CONFIG_DIR: &str = "/etc/containerd/certs.d";

pub const INSTALL_HINT: &str = "install kind (`go install sigs.k8s.io/kind@v0.33.0`, or see \
     https://kind.sigs.k8s.io/docs/user/quick-start/#installation), set DEVSTACK_KIND to its path, \
     or use an offline bundle that carries `bin/kind`";
/// Where the owner marker directory is mounted in every node.
const MARKER_IN_NODE: &str = "/etc/devstack";
/// `kind get ...` answers from `docker ps`; anything slower is stuck.
const QUERY_TIMEOUT: Duration = Duration::from_secs(60);
/// How much of kind's stderr an error quotes.
const STDERR_TAIL_LINES: usize = 20;

/// The kind cluster name, which also prefixes its node containers.
pub fn cluster_name(settings: &Settings) -> String {
    settings.resource_prefix()
}

/// The API server URL of the (single) cluster in a kubeconfig.
fn server_of(kubeconfig: &str) -> Option<String> {
    let value: serde_json::Value = serde_saphyr::from_str(kubeconfig).ok()?;
    value["clusters"][0]["cluster"]["server"]
        .as_str()
        .map(str::to_string)
}

/// Creates the stack's kind cluster, or converges the one it has.
pub(super) async fn up(
    engine: &dyn Engine,
    settings: &Settings,
    _options: ProvisionOptions,
    step: &Step,
) -> Result<ClusterInfo, Error> {
    let kind = find_kind(settings).await?.path;
    require_docker_cli()?;
    validate_mirrors(settings)?;

    match find_cluster(engine, settings).await? {
        Found::Foreign => return Err(foreign_cluster(settings)),
        Found::Ours(existing) => {
            // Kind cannot change a running cluster's shape: `plan` reports it
            // and the caller recreates or refuses before this point.
            let repaired = start_stopped(engine, &existing, step).await?;
            return converge(engine, settings, &kind, false, repaired, step).await;
        }
        Found::None => {}
    }

    let api_port = super::choose_api_port(settings)?;
    // kind would pull the node image itself, but only devstack knows the
    // offline bundle.
    step.progress(format!("node image {}", settings.cluster.image));
    let bundle = crate::bundle::open(settings)?;
    crate::bundle::ensure_image(engine, &settings.cluster.image, bundle.as_ref()).await?;

    let cgroup = engine
        .host()
        .await
        .map_err(|e| crate::docker::engine_error("read the engine's info", e))?
        .cgroup;
    // The nodes' containerd serves long before kubeadm is done: images go in meanwhile.
    let create = create(&kind, settings, api_port, cgroup, step);
    let early = early_preload(engine, settings, step);
    tokio::pin!(create, early);
    let (created, early_done) = tokio::select! {
        created = &mut create => (created, false),
        () = &mut early => (create.await, true),
    };
    if created.is_ok() && !early_done {
        early.await;
    }
    let name = cluster_name(settings);
    created.map_err(|err| err.context(format!("kind cluster `{name}` creation failed")))?;
    converge(engine, settings, &kind, true, Vec::new(), step)
        .await
        .map_err(|err| err.context(format!("kind cluster `{name}` creation failed")))
}

/// Imports the stack's images into the nodes of a cluster `kind create` is
/// still bringing up, once every node's containerd answers. Best effort:
/// whatever it does not import, `converge` does.
async fn early_preload(engine: &dyn Engine, settings: &Settings, step: &Step) {
    let name = cluster_name(settings);
    let expected = usize::from(settings.cluster.servers) + usize::from(settings.cluster.agents);
    let work = async {
        loop {
            let all = list_nodes(engine, &name).await?;
            let nodes: Vec<&KindNode> = all.iter().filter(|n| n.is_kubernetes_node()).collect();
            if nodes.len() == expected {
                let answers = futures::future::join_all(nodes.iter().map(|n| {
                    exec_in(
                        engine,
                        &n.name,
                        &["ctr", "--namespace", "k8s.io", "version"],
                    )
                }))
                .await;
                if answers.iter().all(|a| matches!(a, Ok((0, _)))) {
                    return preload_images(engine, settings, &nodes, step).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    match tokio::time::timeout(settings.timeouts.cluster.get(), work).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!("importing images while kind creates the cluster: {e}"),
        Err(_) => tracing::debug!("the nodes' containerd did not answer while kind created them"),
    }
}

async fn create(
    kind: &Path,
    settings: &Settings,
    api_port: u16,
    cgroup: crate::docker::Cgroup,
    step: &Step,
) -> Result<(), Error> {
    let name = cluster_name(settings);
    let scratch = scratch_dir()?;
    let config = scratch.path().join("kind-config.yaml");
    let kubeconfig = scratch.path().join("kubeconfig");
    write_owner_marker(settings)?;
    std::fs::write(&config, config_yaml(settings, api_port, cgroup)).map_err(|e| {
        Error::internal(format!("cannot write {}", config.display())).with_source(e)
    })?;
    let nodes = usize::from(settings.cluster.servers) + usize::from(settings.cluster.agents);
    step.progress(format!("creating kind cluster {name} ({nodes} node(s))"));
    let args = [
        OsStr::new("create"),
        OsStr::new("cluster"),
        OsStr::new("--name"),
        OsStr::new(&name),
        OsStr::new("--config"),
        config.as_os_str(),
        // Keeps kind away from the user's kubeconfig.
        OsStr::new("--kubeconfig"),
        kubeconfig.as_os_str(),
        // devstack waits for Ready itself, with progress and its own timeout.
        OsStr::new("--wait"),
        OsStr::new("0s"),
        // A failed create leaves its nodes: devstack's rollback alone removes
        // them, and `--retain` keeps them to look at.
        OsStr::new("--retain"),
    ];
    // kind's phases (nodes, control plane, CNI, StorageClass, workers) are
    // the parts of the Cluster step a waterfall must show.
    let span = step.span("kind create cluster");
    let mut phases = KindPhases::new(
        step.timeline()
            .zip(span.id())
            .map(|((t, _), id)| (t.clone(), id)),
    );
    let ran = run_kind_streaming(kind, &args, settings.timeouts.cluster.get(), |line| {
        phases.line(line);
    })
    .await;
    let succeeded = ran.as_ref().is_ok_and(|o| o.status.success());
    phases.end(succeeded);
    let _ = span.finish(if succeeded { Ok(()) } else { Err(()) });
    let output = ran.map_err(|e| match e.kind() {
        // kind never started.
        crate::error::Kind::Prerequisite => e,
        _ => e.with_hint("raise `timeouts.cluster` in the profile if the machine is slow"),
    })?;
    if output.status.success() {
        return Ok(());
    }
    let err = kind_failed(&args, &output);
    // kind checks this before creating anything; a concurrent `up` won the race.
    if String::from_utf8_lossy(&output.stderr).contains("already exist") {
        return Err(err.with_hint(format!(
            "another devstack run created kind cluster `{name}` meanwhile; run `up` again to reuse it"
        )));
    }
    Err(err)
}

/// The API server URL and the renamed kubeconfig, from `kind get kubeconfig`.
async fn kind_kubeconfig(kind: &Path, settings: &Settings) -> Result<(String, String), Error> {
    let name = cluster_name(settings);
    let args = [
        OsStr::new("get"),
        OsStr::new("kubeconfig"),
        OsStr::new("--name"),
        OsStr::new(&name),
    ];
    let raw = kind_stdout(kind, &args, QUERY_TIMEOUT).await.map_err(|e| {
        e.with_hint("the cluster looks half-created: `devstack cluster down`, then `up` again")
    })?;
    let api_server = server_of(&raw).ok_or_else(|| {
        Error::internal(format!(
            "the kubeconfig kind gave for `{name}` has no server URL"
        ))
    })?;
    let kubeconfig = kubeconfig::rename_context(&raw, &settings.kube_context(), None)?;
    Ok((api_server, kubeconfig))
}

/// Brings an existing (or just created) cluster to the profile's shape and
/// waits for it: stack network, registry mirrors, kubeconfig, Ready. Images
/// are [`load_images`]' business.
async fn converge(
    engine: &dyn Engine,
    settings: &Settings,
    kind: &Path,
    created: bool,
    mut repaired: Vec<String>,
    step: &Step,
) -> Result<ClusterInfo, Error> {
    let name = cluster_name(settings);
    let all = list_nodes(engine, &name).await?;
    let nodes: Vec<&KindNode> = all.iter().filter(|n| n.is_kubernetes_node()).collect();
    if nodes.is_empty() {
        return Err(
            Error::internal(format!("kind cluster `{name}` has no node containers"))
                .with_hint("`devstack cluster down`, then `up` again"),
        );
    }

    let network = settings.resource_prefix();
    step.progress(format!("connecting nodes to network {network}"));
    for node in connect_to_stack_network(engine, settings, &nodes).await? {
        if !created {
            repaired.push(format!("connected node {node} to network {network}"));
        }
    }
    write_registry_hosts(engine, settings, &nodes).await?;

    step.progress("reading the kubeconfig");
    let (api_server, kubeconfig) = kind_kubeconfig(kind, settings).await?;

    // Ready first: on a cluster whose nodes were just restarted, containerd
    // (which `kind load` imports into) may not be up yet.
    step.progress(format!("waiting for {} node(s) Ready", nodes.len()));
    let client = crate::k8s::client_from_kubeconfig(&kubeconfig).await?;
    let _system_pods = created.then(|| crate::k8s::system_pods::watch(&client, step));
    let budget = crate::k8s::Budget::new(settings.timeouts.cluster.get(), "timeouts.cluster");
    if created {
        one_coredns_probed_every_second(&client).await;
    }
    crate::k8s::wait_nodes_ready(&client, nodes.len(), budget, step).await?;
    crate::k8s::wait_node_networking_ready(&client, budget, step).await?;

    Ok(ClusterInfo {
        provider: Provider::Kind,
        nodes: nodes.iter().map(|n| n.name.clone()).collect(),
        api_server,
        kubeconfig,
        created,
        repaired,
        images_loaded: false,
    })
}

/// kubeadm's CoreDNS runs two replicas, whose second pod only adds a sandbox
/// and a start to the nodes' busiest seconds: one stack's lookups need one
/// (K3s runs one). It first probes readiness before it serves, then 10 s
/// later: every second, it is Ready once it serves. Patched at creation,
/// while its pods are pending, so the rollout replaces no serving pod.
/// Best effort.
async fn one_coredns_probed_every_second(client: &kube::Client) {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};
    let api: kube::Api<Deployment> = kube::Api::namespaced(client.clone(), "kube-system");
    let period = |deployment: &Deployment| {
        deployment
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == "coredns"))
            .and_then(|c| c.readiness_probe.as_ref())
            .map(|p| p.period_seconds.unwrap_or(10))
    };
    let tuned = |deployment: &Deployment| {
        period(deployment).is_none_or(|p| p <= 1) && deployment.spec.replicas == Some(1)
    };
    match api.get_opt("coredns").await {
        Ok(Some(deployment)) if !tuned(&deployment) => {
            let mut patch = serde_json::json!({"spec": {"replicas": 1}});
            if period(&deployment).is_some_and(|p| p > 1) {
                patch["spec"]["template"] = serde_json::json!({"spec": {"containers": [
                    {"name": "coredns", "readinessProbe": {"periodSeconds": 1}}
                ]}});
            }
            if let Err(e) = api
                .patch(
                    "coredns",
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await
            {
                tracing::debug!("run one CoreDNS, probed every second: {e}");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::debug!("read Deployment kube-system/coredns: {e}"),
    }
}

/// Whether the stack has any container of its kind cluster.
pub(super) async fn any_node(engine: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    Ok(matches!(
        find_cluster(engine, settings).await?,
        Found::Ours(_)
    ))
}

/// The running cluster's kubeconfig from `kind get kubeconfig`, renamed
/// (kind reads it off the nodes itself).
pub(super) async fn kubeconfig(_engine: &dyn Engine, settings: &Settings) -> Result<String, Error> {
    let kind = find_kind(settings).await?.path;
    Ok(kind_kubeconfig(&kind, settings).await?.1)
}

/// Imports the stack's images into the Kubernetes nodes that lack them.
pub(super) async fn load_images(
    engine: &dyn Engine,
    settings: &Settings,
    step: &Step,
) -> Result<usize, Error> {
    let all = list_nodes(engine, &cluster_name(settings)).await?;
    let nodes: Vec<&KindNode> = all.iter().filter(|n| n.is_kubernetes_node()).collect();
    preload_images(engine, settings, &nodes, step).await
}

/// The names of the cluster's Kubernetes node containers.
pub(super) async fn node_names(
    engine: &dyn Engine,
    settings: &Settings,
) -> Result<Vec<String>, Error> {
    let all = list_nodes(engine, &cluster_name(settings)).await?;
    Ok(all
        .into_iter()
        .filter(|n| n.is_kubernetes_node())
        .map(|n| n.name)
        .collect())
}

/// The running cluster against the settings. Kind cannot add or remove
/// nodes or change a node's image in place: every difference needs a new
/// cluster.
pub(super) async fn plan(engine: &dyn Engine, settings: &Settings) -> Result<Plan, Error> {
    let all = match find_cluster(engine, settings).await? {
        Found::None => return Ok(Plan::default()),
        Found::Foreign => return Err(foreign_cluster(settings)),
        Found::Ours(nodes) => nodes,
    };
    let nodes: Vec<&KindNode> = all.iter().filter(|n| n.is_kubernetes_node()).collect();
    let count = |role: &str| nodes.iter().filter(|n| n.role == role).count();
    let mut changes = Vec::new();
    for (role, key, want) in [
        (ROLE_CONTROL_PLANE, "servers", settings.cluster.servers),
        (ROLE_WORKER, "agents", settings.cluster.agents),
    ] {
        let have = count(role);
        if have != usize::from(want) {
            changes.push(Change {
                what: format!("{key} {have} -> {want}"),
                in_place: false,
            });
        }
    }
    let want_image = normalize_reference(&settings.cluster.image);
    let mut images: Vec<&str> = nodes.iter().map(|n| n.image.as_str()).collect();
    images.dedup();
    for image in images {
        if normalize_reference(image) != want_image {
            changes.push(Change {
                what: format!("image {image} -> {}", settings.cluster.image),
                in_place: false,
            });
        }
    }
    // Published ports live on the first control plane (kind's API server
    // port, then `cluster.ports`); a port is part of the container.
    let published = nodes
        .first()
        .map(|n| n.ports.as_slice())
        .unwrap_or_default();
    let api_port = published
        .iter()
        .find(|(inside, _)| *inside == KIND_API_PORT)
        .map(|(_, host)| *host);
    if let (Some(have), Some(want)) = (api_port, settings.cluster.api_server_port.fixed())
        && have != want
    {
        changes.push(Change {
            what: format!("apiServerPort {have} -> {want}"),
            in_place: false,
        });
    }
    let extra = published
        .iter()
        .filter(|(inside, _)| *inside != KIND_API_PORT)
        .copied();
    changes.extend(ports_change(extra.collect(), settings));
    Ok(Plan {
        exists: true,
        changes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_comes_from_the_kubeconfig() {
        let yaml = "apiVersion: v1\nkind: Config\nclusters:\n- name: kind-x\n  cluster:\n    server: https://127.0.0.1:40123\n    certificate-authority-data: AAAA\n";
        assert_eq!(server_of(yaml).as_deref(), Some("https://127.0.0.1:40123"));
        assert_eq!(server_of("apiVersion: v1\nclusters: []\n"), None);
    }
}

/// Drift against the in-memory engine.
#[cfg(test)]
mod engine_tests {
    use super::*;
    use crate::docker::fake::{FakeContainer, FakeEngine};

    fn settings(cluster: &str) -> Settings {
        let text = format!(
            "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\ncluster:\n  provider: kind\n{cluster}"
        );
        let loaded = crate::profile::load::parse("t.yaml", &text, ".".into()).unwrap();
        let mut settings = Settings::resolve(loaded, &Default::default()).unwrap();
        settings.state_dir = "/state".into();
        settings
    }

    /// A node as `kind create` leaves it; `marked`: with devstack's owner mount.
    fn add_node(engine: &FakeEngine, settings: &Settings, name: &str, role: &str, marked: bool) {
        let cluster = cluster_name(settings);
        let mut node = FakeContainer {
            image: settings.cluster.image.clone(),
            labels: [
                (LABEL_CLUSTER.to_string(), cluster.clone()),
                (LABEL_ROLE.to_string(), role.to_string()),
            ]
            .into(),
            running: true,
            ..Default::default()
        };
        if marked {
            node.binds.push(format!(
                "{}:{MARKER_IN_NODE}:ro",
                owner_marker_dir(settings).display()
            ));
        }
        if role == ROLE_CONTROL_PLANE {
            node.ports = vec![(KIND_API_PORT, 41234), (30080, 8080)];
        }
        engine.with(|s| s.containers.insert(format!("{cluster}-{name}"), node));
    }

    fn changes(plan: &Plan) -> Vec<(&str, bool)> {
        plan.changes
            .iter()
            .map(|c| (c.what.as_str(), c.in_place))
            .collect()
    }

    #[tokio::test]
    async fn every_difference_needs_a_new_cluster() {
        let ports = "  ports:\n  - {hostPort: 8080, containerPort: 30080}\n";
        let same = settings(ports);
        let engine = FakeEngine::new();
        assert_eq!(plan(&engine, &same).await.unwrap(), Plan::default());
        add_node(&engine, &same, "control-plane", ROLE_CONTROL_PLANE, true);
        let plan_now = plan(&engine, &same).await.unwrap();
        assert!(plan_now.exists);
        assert_eq!(changes(&plan_now), []);

        let other = settings(
            "  agents: 1\n  image: kindest/node:v9.9.9\n  apiServerPort: 41235\n  ports:\n  - {hostPort: 8081, containerPort: 30080}\n",
        );
        let plan_now = plan(&engine, &other).await.unwrap();
        let image = format!("image {} -> kindest/node:v9.9.9", same.cluster.image);
        assert_eq!(
            changes(&plan_now),
            [
                ("agents 0 -> 1", false),
                (image.as_str(), false),
                ("apiServerPort 41234 -> 41235", false),
                ("ports [8080:30080] -> [8081:30080]", false),
            ]
        );
        let err = plan_now.check(false, &other).unwrap_err();
        assert!(err.hint().unwrap().contains("--recreate"));

        // `auto` keeps whatever port the cluster has.
        assert_eq!(changes(&plan(&engine, &same).await.unwrap()), []);
    }

    #[tokio::test]
    async fn a_cluster_without_the_owner_mount_is_someone_elses() {
        let s = settings("");
        let engine = FakeEngine::new();
        add_node(&engine, &s, "control-plane", ROLE_CONTROL_PLANE, false);
        let err = plan(&engine, &s).await.unwrap_err();
        assert_eq!(err.kind(), crate::error::Kind::Prerequisite);
        assert!(
            err.message().contains("devstack did not create it"),
            "{}",
            err.message()
        );
        assert!(!any_node(&engine, &s).await.unwrap());
        // `delete` leaves it alone (and needs no kind binary to decide so).
        assert!(!delete(&engine, &s).await.unwrap());
        assert_eq!(engine.container_names().len(), 1);
    }

    /// `delete` removes the stack's nodes through the engine alone: no kind
    /// binary or Docker CLI is looked for (the fake engine is all there is),
    /// and another kind cluster's node stays.
    #[tokio::test]
    async fn delete_removes_its_nodes_through_the_engine_alone() {
        let mut s = settings("  agents: 1\n");
        let state = tempfile::tempdir().unwrap();
        s.state_dir = state.path().to_path_buf();
        // A kubeconfig: a finished `up`, so no node creation is in flight.
        let kubeconfig = crate::state::kubeconfig_path(&s);
        std::fs::create_dir_all(kubeconfig.parent().unwrap()).unwrap();
        std::fs::write(&kubeconfig, "apiVersion: v1\n").unwrap();
        let engine = FakeEngine::new();
        add_node(&engine, &s, "control-plane", ROLE_CONTROL_PLANE, true);
        add_node(&engine, &s, "worker", ROLE_WORKER, true);
        let other = FakeContainer {
            labels: [(LABEL_CLUSTER.to_string(), "someone-else".to_string())].into(),
            running: true,
            ..Default::default()
        };
        engine.with(|st| {
            st.containers
                .insert("someone-else-control-plane".into(), other)
        });

        assert!(delete(&engine, &s).await.unwrap());
        let cluster = cluster_name(&s);
        assert_eq!(engine.container_names(), ["someone-else-control-plane"]);
        let removals: Vec<String> = engine
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("remove container"))
            .collect();
        assert_eq!(
            removals,
            [
                format!("remove container {cluster}-control-plane"),
                format!("remove container {cluster}-worker"),
            ]
        );
        // Nothing left: a second `delete` finds nothing to remove.
        assert!(!delete(&engine, &s).await.unwrap());
    }

    #[tokio::test]
    async fn converging_starts_and_unpauses_nodes_and_joins_the_stack_network() {
        let s = settings("  agents: 1\n");
        let engine = FakeEngine::new();
        add_node(&engine, &s, "control-plane", ROLE_CONTROL_PLANE, true);
        add_node(&engine, &s, "worker", ROLE_WORKER, true);
        let cluster = cluster_name(&s);
        engine.with(|st| {
            st.containers
                .get_mut(&format!("{cluster}-control-plane"))
                .unwrap()
                .running = false;
            st.containers
                .get_mut(&format!("{cluster}-worker"))
                .unwrap()
                .paused = true;
        });
        let Found::Ours(nodes) = find_cluster(&engine, &s).await.unwrap() else {
            panic!("the cluster is ours");
        };
        let step = crate::ui::Ui::silent().step("test");
        let repaired = start_stopped(&engine, &nodes, &step).await.unwrap();
        assert_eq!(
            repaired,
            [
                format!("started stopped node {cluster}-control-plane"),
                format!("unpaused node {cluster}-worker"),
            ]
        );
        let kubernetes: Vec<&KindNode> = nodes.iter().collect();
        let connected = connect_to_stack_network(&engine, &s, &kubernetes)
            .await
            .unwrap();
        assert_eq!(connected.len(), 2);
        let network = s.resource_prefix();
        assert!(
            engine
                .container(&format!("{cluster}-worker"))
                .unwrap()
                .networks
                .contains(&network)
        );
    }
}
