//! Kind clusters, driven through the `kind` CLI. devstack writes the Kind
//! config from the profile, lets `kind` create and delete the node
//! containers, and does the rest itself through bollard: attaching the
//! nodes to the stack network, registry mirrors, image preload.
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

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use bollard::models::ContainerSummaryStateEnum;
use serde::Serialize;

use crate::bundle::normalize_reference;
use crate::cluster::preload::{self, PreloadImage};
use crate::cluster::{Change, ClusterInfo, Plan, UpOptions, kubeconfig};
use crate::docker::{self, Engine, exec_in};
use crate::error::Error;
use crate::hostinfo::{parse_semver, tool_version};
use crate::profile::{HumanDuration, Provider, Settings};
use crate::ui::Step;
use crate::versions::KIND_MIN_VERSION;

/// Labels kind puts on every container of a cluster; `kind get clusters`
/// and `kind get nodes` are queries on these.
const LABEL_CLUSTER: &str = "io.x-k8s.kind.cluster";
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
const DELETE_TIMEOUT: Duration = Duration::from_secs(180);
/// How much of kind's stderr an error quotes.
const STDERR_TAIL_LINES: usize = 20;

/// The kind cluster name, which also prefixes its node containers.
pub fn cluster_name(settings: &Settings) -> String {
    settings.resource_prefix()
}

// ---------------------------------------------------------------------------
// Kind config

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KindConfig<'a> {
    kind: &'static str,
    api_version: &'static str,
    name: String,
    networking: Networking,
    nodes: Vec<KindNodeConfig<'a>>,
    kubeadm_config_patches: Vec<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    containerd_config_patches: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Networking {
    api_server_address: &'static str,
    api_server_port: u16,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KindNodeConfig<'a> {
    role: &'static str,
    image: &'a str,
    extra_mounts: Vec<Mount>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    extra_port_mappings: Vec<PortMapping<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Mount {
    host_path: String,
    container_path: &'static str,
    read_only: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PortMapping<'a> {
    container_port: u16,
    host_port: u16,
    listen_address: &'a str,
    protocol: String,
}

/// Kubernetes >= 1.35 kubelets refuse to start on cgroup v1 hosts unless
/// told otherwise. Set in kubeadm's KubeletConfiguration (the
/// `kubelet-config` ConfigMap every joining node reads), so it holds for any
/// node image, not only the kit's (which also passes the kubelet flag).
const KUBELET_CGROUP_V1_PATCH: &str = "kind: KubeletConfiguration\nfailCgroupV1: false\n";

/// kube-proxy programs a Service's new endpoint within 0.1 s instead of at
/// most once a second (kind's `minSyncPeriod: 1s`): Flux's downloads from
/// the source-controller and the API server's calls to ESO's webhook go
/// through Services whose pods have just turned Ready (see the K3s
/// provider, where it was measured). Not 0: kube-proxy reads a zero in its
/// config file as unset and makes it 1 s. A sync of a cluster this size
/// takes milliseconds.
const KUBE_PROXY_SYNC_AT_ONCE_PATCH: &str =
    "kind: KubeProxyConfiguration\niptables:\n  minSyncPeriod: 100ms\n";

/// The directory whose bind mount marks a kind cluster as this stack's.
/// Absolute but not canonicalized: Docker records the source as given, and
/// the same settings must compute the same path on every run.
pub fn owner_marker_dir(settings: &Settings) -> PathBuf {
    let dir = crate::state::stack_dir(settings).join("kind-owner");
    std::path::absolute(&dir).unwrap_or(dir)
}

/// The Kind cluster config (`kind.x-k8s.io/v1alpha4`) for the profile.
///
/// Registry mirrors only switch containerd to `hosts.toml` files here; the
/// files themselves are written into the nodes after creation. The older
/// inline `registry.mirrors` table cannot be used: containerd refuses to
/// start its CRI plugin when it is combined with `config_path`, which
/// recent kind node images set by default.
pub fn config_yaml(settings: &Settings, api_port: u16) -> String {
    let cluster = &settings.cluster;
    let image = cluster.image.as_str();
    let marker = owner_marker_dir(settings).display().to_string();
    let node = |role| KindNodeConfig {
        role,
        image,
        extra_mounts: vec![Mount {
            host_path: marker.clone(),
            container_path: MARKER_IN_NODE,
            read_only: true,
        }],
        extra_port_mappings: Vec::new(),
    };
    let mut nodes: Vec<KindNodeConfig> = (0..cluster.servers)
        .map(|_| node(ROLE_CONTROL_PLANE))
        .chain((0..cluster.agents).map(|_| node(ROLE_WORKER)))
        .collect();
    // NodePorts answer on every node, so publishing on the first one is enough.
    if let Some(first) = nodes.first_mut() {
        first.extra_port_mappings = cluster
            .ports
            .iter()
            .map(|p| PortMapping {
                container_port: p.container_port,
                host_port: p.host_port,
                listen_address: &p.bind_address,
                protocol: p.protocol.to_ascii_uppercase(),
            })
            .collect();
    }
    let mut patches = Vec::new();
    if !cluster.registry_mirrors.is_empty() {
        patches.push(format!(
            "[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"{REGISTRY_CONFIG_DIR}\""
        ));
    }
    let config = KindConfig {
        kind: "Cluster",
        api_version: "kind.x-k8s.io/v1alpha4",
        name: cluster_name(settings),
        networking: Networking {
            api_server_address: "127.0.0.1",
            api_server_port: api_port,
        },
        nodes,
        kubeadm_config_patches: vec![KUBELET_CGROUP_V1_PATCH, KUBE_PROXY_SYNC_AT_ONCE_PATCH],
        containerd_config_patches: patches,
    };
    serde_saphyr::to_string(&config).expect("the kind config is plain strings and numbers")
}

/// containerd's `hosts.toml` for one mirrored registry: the mirrors in
/// order, then the registry itself as the fallback.
fn hosts_toml(registry: &str, endpoints: &[String]) -> String {
    // JSON string literals are valid TOML basic strings.
    let quote = |s: &str| serde_json::to_string(s).expect("strings serialize");
    let upstream = match registry {
        "docker.io" => "https://registry-1.docker.io".to_string(),
        other => format!("https://{other}"),
    };
    let mut out = format!("server = {}\n", quote(&upstream));
    for endpoint in endpoints {
        out.push_str(&format!(
            "\n[host.{}]\n  capabilities = [\"pull\", \"resolve\"]\n",
            quote(endpoint)
        ));
    }
    out
}

/// Registry keys become directory names inside the nodes.
fn validate_mirrors(settings: &Settings) -> Result<(), Error> {
    for registry in settings.cluster.registry_mirrors.keys() {
        let bad = registry.is_empty()
            || registry.starts_with('.')
            || registry
                .chars()
                .any(|c| c == '/' || c == '\\' || c.is_whitespace() || c.is_control());
        if bad {
            return Err(Error::user(format!(
                "`cluster.registryMirrors` key `{registry}` is not a registry host"
            ))
            .with_hint(
                "use a host with an optional port, such as `docker.io` or `localhost:5000`",
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Finding the kind binary

/// A usable kind CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindCli {
    pub path: PathBuf,
    pub version: (u64, u64, u64),
    /// What `kind version` printed.
    pub version_line: String,
    /// `DEVSTACK_KIND`, `PATH` or `the offline bundle`.
    pub origin: &'static str,
}

/// The kind CLI devstack drives: `DEVSTACK_KIND` when set (and then only
/// that one), else the first usable of `kind` on `PATH` and the offline
/// bundle's `bin/kind` (an airgapped machine gets kind with the bundle). A
/// kind older than [`KIND_MIN_VERSION`] is refused.
pub async fn find_kind(settings: &Settings) -> Result<KindCli, Error> {
    let found = find_installed_kind(settings).await;
    let Err(not_found) = found else {
        return found;
    };
    if crate::envvars::is_set(crate::envvars::DEVSTACK_KIND) {
        return Err(not_found);
    }
    // Kind needs nothing but Docker: the pinned release, checksum verified.
    match crate::artifacts::fetch_kind(settings).await {
        Ok(path) => check_kind(path, "devstack's cache").await,
        Err(fetch) => Err(Error::prerequisite(format!(
            "{}, and fetching kind {} failed: {}",
            not_found.message(),
            crate::versions::KIND_CLI_VERSION,
            fetch.message()
        ))
        .with_hint(
            not_found
                .hint()
                .map(String::from)
                .unwrap_or_else(|| INSTALL_HINT.to_string()),
        )),
    }
}

/// [`find_kind`] without fetching: what this machine has.
pub async fn find_installed_kind(settings: &Settings) -> Result<KindCli, Error> {
    find_kind_from(
        crate::envvars::get(crate::envvars::DEVSTACK_KIND).map(PathBuf::from),
        &path_var(),
        bundled_kind(settings),
    )
    .await
}

/// The offline bundle's kind binary (index entry `kind: binary`, `name: kind`).
pub fn bundled_kind(settings: &Settings) -> Option<PathBuf> {
    let bundle = preload::open_bundle(settings).ok().flatten()?;
    let artifact = bundle
        .index
        .artifacts
        .iter()
        .find(|a| a.kind == "binary" && a.name == "kind")?;
    Some(bundle.path_of(artifact))
}

/// [`find_kind`] with explicit inputs, so tests need not touch the
/// process-wide environment.
pub async fn find_kind_from(
    explicit: Option<PathBuf>,
    path_var: &OsStr,
    bundled: Option<PathBuf>,
) -> Result<KindCli, Error> {
    if let Some(path) = explicit {
        return check_kind(path, "DEVSTACK_KIND").await;
    }
    let candidates: Vec<(PathBuf, &'static str)> = locate("kind", path_var)
        .map(|p| (p, "PATH"))
        .into_iter()
        .chain(
            bundled
                .filter(|p| p.is_file())
                .map(|p| (p, "the offline bundle")),
        )
        .collect();
    if candidates.is_empty() {
        return Err(Error::prerequisite(
            "`kind` not found on PATH, in DEVSTACK_KIND or in the offline bundle (provider kind needs it)",
        )
        .with_hint(format!(
            "{INSTALL_HINT}; or use `--provider k3s`, which needs only Docker"
        )));
    }
    // An old kind on PATH must not hide a good one in the bundle; when none
    // works, the first one's problem is the one to fix.
    let mut first_error = None;
    for (path, origin) in candidates {
        match check_kind(path, origin).await {
            Ok(cli) => return Ok(cli),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.expect("at least one candidate"))
}

async fn check_kind(path: PathBuf, origin: &'static str) -> Result<KindCli, Error> {
    let line = tool_version(&path, &["version"]).await;
    let Some(version) = line.as_deref().and_then(parse_semver) else {
        return Err(Error::prerequisite(format!(
            "`{} version` ({origin}) does not report a version{}",
            path.display(),
            line.map(|l| format!(" (it printed `{l}`)"))
                .unwrap_or_default()
        ))
        .with_hint(format!("reinstall kind: {INSTALL_HINT}")));
    };
    if version < KIND_MIN_VERSION {
        let (a, b, c) = version;
        let (x, y, z) = KIND_MIN_VERSION;
        return Err(Error::prerequisite(format!(
            "kind v{a}.{b}.{c} at {} ({origin}) is older than v{x}.{y}.{z}, the oldest devstack supports",
            path.display()
        ))
        .with_hint(format!(
            "upgrade kind: {INSTALL_HINT}; or use `--provider k3s`, which needs only Docker"
        )));
    }
    Ok(KindCli {
        path,
        version,
        version_line: line.unwrap_or_default(),
        origin,
    })
}

fn path_var() -> OsString {
    std::env::var_os("PATH").unwrap_or_default()
}

fn locate(binary: &str, path_var: &OsStr) -> Option<PathBuf> {
    which::which_in_global(binary, Some(path_var)).ok()?.next()
}

/// kind shells out to the Docker CLI; without it every kind command fails
/// with a message about `docker` rather than about what is missing.
fn require_docker_cli() -> Result<(), Error> {
    match locate("docker", &path_var()) {
        Some(_) => Ok(()),
        None => Err(Error::prerequisite(
            "`docker` CLI not found on PATH (kind runs it to manage nodes)",
        )
        .with_hint(
            "install the Docker CLI, or use `--provider k3s`, which talks to the engine directly",
        )),
    }
}

// ---------------------------------------------------------------------------
// Running kind

/// Runs kind to completion within `timeout`; callers judge the exit status.
/// Failing to start kind is a prerequisite error (nothing happened), running
/// past `timeout` an internal one (kind may have done part of its work).
async fn run_kind(kind: &Path, args: &[&OsStr], timeout: Duration) -> Result<Output, Error> {
    let mut command = tokio::process::Command::new(kind);
    command
        .args(args)
        // devstack manages the engine through Docker; an inherited podman
        // selection would put the nodes where bollard cannot see them.
        .env("KIND_EXPERIMENTAL_PROVIDER", "docker")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that stopping kind also stops the `docker run`s
        // it started (see `KillGroup`); devstack handles Ctrl-C itself.
        .process_group(0)
        .kill_on_drop(true);
    let child = command.spawn().map_err(|e| {
        Error::prerequisite(format!("cannot run {}", kind.display()))
            .with_source(e)
            .with_hint(format!("reinstall kind: {INSTALL_HINT}"))
    })?;
    let mut group = KillGroup(child.id());
    let result = tokio::time::timeout(timeout, child.wait_with_output()).await;
    match result {
        Ok(Ok(output)) => {
            group.0 = None;
            Ok(output)
        }
        Ok(Err(e)) => {
            Err(Error::internal(format!("waiting for {} failed", kind.display())).with_source(e))
        }
        Err(_) => Err(Error::timeout(format!(
            "`{}` did not finish within {}",
            display_command(args),
            HumanDuration(timeout)
        ))),
    }
}

/// Kills a kind process group unless kind finished: Ctrl-C drops the `up`
/// future, and neither kind nor the Docker CLIs it runs may keep creating
/// nodes after devstack has started rolling back.
struct KillGroup(Option<u32>);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: signals the process group devstack created for kind.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

fn display_command(args: &[&OsStr]) -> String {
    std::iter::once("kind".into())
        .chain(args.iter().map(|a| a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn tail_lines(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A failed kind command as an error quoting the end of its stderr.
fn kind_failed(args: &[&OsStr], output: &Output) -> Error {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail = tail_lines(&stderr, STDERR_TAIL_LINES);
    let message = format!(
        "`{}` failed ({}){}",
        display_command(args),
        output.status,
        if tail.is_empty() {
            String::new()
        } else {
            format!("; kind said:\n{tail}")
        }
    );
    if stderr.contains("port is already allocated") || stderr.contains("address already in use") {
        Error::prerequisite(message).with_hint(
            "a host port is taken: change `cluster.apiServerPort` (0 picks a free one) or `cluster.ports`",
        )
    } else {
        Error::internal(message).with_hint(
            "`devstack doctor` checks what kind needs (Docker, inotify limits, memory, free ports)",
        )
    }
}

/// Runs kind and returns its stdout, failing on a non-zero exit.
async fn kind_stdout(kind: &Path, args: &[&OsStr], timeout: Duration) -> Result<String, Error> {
    let output = run_kind(kind, args, timeout).await?;
    if !output.status.success() {
        return Err(kind_failed(args, &output));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

async fn delete_cluster(kind: &Path, name: &str) -> Result<(), Error> {
    let scratch = scratch_dir()?;
    let kubeconfig = scratch.path().join("kubeconfig");
    let args = [
        OsStr::new("delete"),
        OsStr::new("cluster"),
        OsStr::new("--name"),
        OsStr::new(name),
        OsStr::new("--kubeconfig"),
        kubeconfig.as_os_str(),
    ];
    kind_stdout(kind, &args, DELETE_TIMEOUT).await.map(drop)
}

fn scratch_dir() -> Result<tempfile::TempDir, Error> {
    tempfile::Builder::new()
        .prefix("devstack-kind-")
        .tempdir()
        .map_err(|e| {
            Error::internal("cannot create a temporary directory for kind")
                .with_source(e)
                .with_hint("make the temporary directory (TMPDIR) writable")
        })
}

// ---------------------------------------------------------------------------
// Node containers

#[derive(Debug, Clone, PartialEq, Eq)]
struct KindNode {
    name: String,
    /// The container's full id.
    id: String,
    /// The node image the container was created from.
    image: String,
    /// `control-plane`, `worker` or `external-load-balancer`.
    role: String,
    state: Option<ContainerSummaryStateEnum>,
    networks: Vec<String>,
    /// Published ports: (port in the node, port on the host).
    ports: Vec<(u16, u16)>,
}

impl KindNode {
    fn is_kubernetes_node(&self) -> bool {
        self.role == ROLE_CONTROL_PLANE || self.role == ROLE_WORKER
    }

    fn is_running(&self) -> bool {
        self.state == Some(ContainerSummaryStateEnum::RUNNING)
    }
}

/// Control planes first, then workers, then anything else (the HA load
/// balancer); `x-control-plane` before `x-control-plane2` before `...10`.
fn sort_nodes(nodes: &mut [KindNode]) {
    let rank = |role: &str| match role {
        ROLE_CONTROL_PLANE => 0,
        ROLE_WORKER => 1,
        _ => 2,
    };
    nodes.sort_by(|a, b| {
        (rank(&a.role), a.name.len(), &a.name).cmp(&(rank(&b.role), b.name.len(), &b.name))
    });
}

/// Every container of the kind cluster, whatever its state.
async fn list_nodes(engine: &dyn Engine, cluster: &str) -> Result<Vec<KindNode>, Error> {
    let containers =
        docker::find_containers(engine, vec![format!("{LABEL_CLUSTER}={cluster}")]).await?;
    let mut nodes: Vec<KindNode> = containers
        .iter()
        .map(|c| KindNode {
            name: docker::container_name_of(c),
            id: c.id.clone().unwrap_or_default(),
            image: c.image.clone().unwrap_or_default(),
            role: c
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_ROLE))
                .cloned()
                .unwrap_or_default(),
            state: c.state,
            networks: c
                .network_settings
                .as_ref()
                .and_then(|n| n.networks.as_ref())
                .map(|n| n.keys().cloned().collect())
                .unwrap_or_default(),
            ports: c
                .ports
                .iter()
                .flatten()
                .filter_map(|p| Some((p.private_port, p.public_port?)))
                .collect(),
        })
        .collect();
    sort_nodes(&mut nodes);
    Ok(nodes)
}

/// What of the stack's kind cluster exists.
enum Found {
    None,
    /// Created by devstack for this stack (carries the owner marker).
    Ours(Vec<KindNode>),
    /// A cluster of the same name devstack did not create for this stack.
    Foreign,
}

async fn find_cluster(engine: &dyn Engine, settings: &Settings) -> Result<Found, Error> {
    let nodes = list_nodes(engine, &cluster_name(settings)).await?;
    if nodes.is_empty() {
        return Ok(Found::None);
    }
    let marker = owner_marker_dir(settings);
    let mut kubernetes_nodes = 0;
    for node in nodes.iter().filter(|n| n.is_kubernetes_node()) {
        kubernetes_nodes += 1;
        match node_mounts(engine, &node.name).await? {
            // Gone since the listing: nothing to judge it by.
            None => continue,
            Some(mounts) => {
                let marked = mounts.iter().any(|m| {
                    m.destination.as_deref() == Some(MARKER_IN_NODE)
                        && m.source.as_deref().map(Path::new) == Some(marker.as_path())
                });
                if !marked {
                    return Ok(Found::Foreign);
                }
            }
        }
    }
    Ok(if kubernetes_nodes == 0 {
        Found::Foreign
    } else {
        Found::Ours(nodes)
    })
}

/// A node container's mounts, or None once it is gone. Every kind node has
/// mounts (at least its /var volume); a container Docker is still creating,
/// as when Ctrl-C killed `kind create` mid `docker run`, shows none for a
/// moment, so that is waited out rather than read as someone else's node.
async fn node_mounts(
    engine: &dyn Engine,
    node: &str,
) -> Result<Option<Vec<bollard::models::MountPoint>>, Error> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let Some(container) = docker::inspect(engine, node).await? else {
            return Ok(None);
        };
        let mounts = container.mounts.unwrap_or_default();
        if !mounts.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(Some(mounts));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn foreign_cluster(settings: &Settings) -> Error {
    let name = cluster_name(settings);
    Error::prerequisite(format!(
        "a kind cluster named `{name}` exists, but devstack did not create it for stack `{}` \
         (its nodes lack the mount of {})",
        settings.name,
        owner_marker_dir(settings).display()
    ))
    .with_hint(format!(
        "devstack leaves it untouched: choose another stack name (`--name`), or remove it with \
         `kind delete cluster --name {name}` if it is yours to remove"
    ))
}

/// Starts stopped or paused node containers (the load balancer too, or the
/// API server is unreachable on multi-control-plane clusters).
async fn start_stopped(
    engine: &dyn Engine,
    nodes: &[KindNode],
    step: &Step,
) -> Result<Vec<String>, Error> {
    let mut repaired = Vec::new();
    for node in nodes {
        let name = &node.name;
        match node.state {
            Some(ContainerSummaryStateEnum::RUNNING)
            | Some(ContainerSummaryStateEnum::RESTARTING) => {}
            Some(ContainerSummaryStateEnum::PAUSED) => {
                step.progress(format!("unpausing node {name}"));
                engine
                    .unpause_container(name)
                    .await
                    .map_err(|e| docker::engine_error(format!("unpause node {name}"), e))?;
                repaired.push(format!("unpaused node {name}"));
            }
            _ => {
                let started = engine.start_container(name).await;
                started.map_err(|e| docker::engine_error(format!("start node {name}"), e))?;
                repaired.push(format!("started stopped node {name}"));
            }
        }
    }
    Ok(repaired)
}

/// Puts the Kubernetes nodes on the stack network, where LocalStack lives,
/// so pods reach it without going through the host. Returns the nodes it
/// had to connect.
async fn connect_to_stack_network(
    engine: &dyn Engine,
    settings: &Settings,
    nodes: &[&KindNode],
) -> Result<Vec<String>, Error> {
    let network = settings.resource_prefix();
    docker::ensure_network(engine, &settings.name, &network).await?;
    let mut connected = Vec::new();
    for node in nodes.iter().filter(|n| !n.networks.contains(&network)) {
        match engine.connect_network(&network, &node.name).await {
            Ok(()) => connected.push(node.name.clone()),
            // A concurrent `up` got there first.
            Err(e) if docker::docker_message(&e).contains("already exists") => {}
            Err(e) => {
                return Err(docker::engine_error(
                    format!("connect node {} to network {network}", node.name),
                    e,
                ));
            }
        }
    }
    Ok(connected)
}

/// Writes each mirrored registry's `hosts.toml` into every node. containerd
/// reads these per pull, so no restart is needed; rewriting is idempotent.
async fn write_registry_hosts(
    engine: &dyn Engine,
    settings: &Settings,
    nodes: &[&KindNode],
) -> Result<(), Error> {
    const SCRIPT: &str = "mkdir -p \"$1\" && printf '%s' \"$2\" > \"$1/hosts.toml\"";
    for (registry, endpoints) in &settings.cluster.registry_mirrors {
        let dir = format!("{REGISTRY_CONFIG_DIR}/{registry}");
        let content = hosts_toml(registry, endpoints);
        for node in nodes {
            let (code, _) = exec_in(
                engine,
                &node.name,
                &["sh", "-c", SCRIPT, "sh", &dir, &content],
            )
            .await?;
            if code != 0 {
                return Err(Error::internal(format!(
                    "cannot write {dir}/hosts.toml in node {} (exit code {code})",
                    node.name
                ))
                .with_hint("check that the node image is a kind node image (`cluster.image`)"));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Image preload

/// Images in a node's containerd, normalized like [`normalize_reference`].
/// Unknown (an empty set) when the node cannot tell, so the image is loaded.
async fn node_images(engine: &dyn Engine, node: &str) -> HashSet<String> {
    match exec_in(
        engine,
        node,
        &["ctr", "--namespace", "k8s.io", "images", "list", "--quiet"],
    )
    .await
    {
        Ok((0, stdout)) => parse_image_list(&stdout),
        Ok((code, _)) => {
            tracing::debug!("listing images in {node} exited with {code}; loading everything");
            HashSet::new()
        }
        Err(e) => {
            tracing::debug!("listing images in {node} failed: {e}; loading everything");
            HashSet::new()
        }
    }
}

fn parse_image_list(stdout: &str) -> HashSet<String> {
    stdout
        .lines()
        .map(str::trim)
        // Bare digests are the same images again under their content address.
        .filter(|l| !l.is_empty() && !l.starts_with("sha256:"))
        .map(normalize_reference)
        .collect()
}

/// The snapshotter the node's CRI unpacks images with (kind's nodes:
/// `overlayfs`; rootless ones `fuse-overlayfs`), as kind's own `load` reads it.
async fn node_snapshotter(engine: &dyn Engine, node: &str) -> String {
    let dump = exec_in(engine, node, &["containerd", "config", "dump"])
        .await
        .ok()
        .filter(|(code, _)| *code == 0)
        .map(|(_, out)| out)
        .unwrap_or_default();
    parse_snapshotter(&dump).unwrap_or_else(|| "overlayfs".to_string())
}

/// The first non-empty `snapshotter = ...` of `containerd config dump`: the
/// CRI images plugin's, which comes before the per-runtime ones.
fn parse_snapshotter(dump: &str) -> Option<String> {
    dump.lines().find_map(|line| {
        let value = line.trim().strip_prefix("snapshotter")?.trim_start();
        let value = value.strip_prefix('=')?.trim().trim_matches(['\'', '"']);
        (!value.is_empty()).then(|| value.to_string())
    })
}

/// Imports every wanted image into the nodes that lack it, straight into
/// each node's containerd (what `kind load` does, but all nodes at once:
/// measured 2x faster than `kind load image-archive`, which goes node by
/// node). Returns how many images were imported.
async fn preload_images(
    engine: &dyn Engine,
    settings: &Settings,
    nodes: &[&KindNode],
    step: &Step,
) -> Result<usize, Error> {
    let wanted = preload::wanted_images(settings)?;
    if wanted.is_empty() || nodes.is_empty() {
        return Ok(0);
    }
    let timeout = settings.timeouts.preload;
    let work = async {
        step.progress("checking images already in the nodes");
        let present =
            futures::future::join_all(nodes.iter().map(|n| node_images(engine, &n.name))).await;
        let mut todo: Vec<(PreloadImage, Vec<&str>)> = Vec::new();
        for image in wanted {
            let want = normalize_reference(&image.reference);
            let missing: Vec<&str> = nodes
                .iter()
                .zip(&present)
                .filter(|(_, have)| !have.contains(&want))
                .map(|(node, _)| node.name.as_str())
                .collect();
            if !missing.is_empty() {
                todo.push((image, missing));
            }
        }
        if todo.is_empty() {
            return Ok(0);
        }
        let images: Vec<PreloadImage> = todo.iter().map(|(i, _)| i.clone()).collect();
        // Local-store images become tarballs (cached) like the bundle's.
        let tarballs = preload::tarballs(engine, settings, &images).await?;
        let snapshotters: Vec<String> =
            futures::future::join_all(nodes.iter().map(|n| node_snapshotter(engine, &n.name)))
                .await;
        let snapshotter_of = |node: &str| {
            nodes
                .iter()
                .zip(&snapshotters)
                .find(|(n, _)| n.name == node)
                .map(|(_, s)| s.as_str())
                .unwrap_or("overlayfs")
        };
        for ((reference, tarball), (_, missing)) in tarballs.iter().zip(&todo) {
            step.progress(format!("importing {reference} into {}", missing.join(", ")));
            let span = step.span(format!("import {reference}"));
            span.finish(
                futures::future::try_join_all(
                    missing
                        .iter()
                        .map(|node| import_image(reference, tarball, node, snapshotter_of(node))),
                )
                .await,
            )?;
        }
        Ok(todo.len())
    };
    tokio::time::timeout(timeout.get(), work)
        .await
        .map_err(|_| {
            Error::timeout(format!(
                "importing images into kind cluster `{}` took longer than {timeout}",
                cluster_name(settings)
            ))
            .with_hint("raise `timeouts.preload` in the profile, or trim `images.preload`")
        })?
}

/// `docker exec -i NODE ctr images import -` fed with the image tarball.
async fn import_image(
    reference: &str,
    tarball: &Path,
    node: &str,
    snapshotter: &str,
) -> Result<(), Error> {
    let file = std::fs::File::open(tarball).map_err(|e| {
        Error::user(format!(
            "cannot open image tarball {} for {reference}: {e}",
            tarball.display()
        ))
        .with_hint("rebuild the bundle with `make kit`")
    })?;
    let output = tokio::process::Command::new("docker")
        .args([
            "exec",
            "-i",
            node,
            "ctr",
            "--namespace=k8s.io",
            "images",
            "import",
        ])
        .args(["--all-platforms", "--digests"])
        .arg(format!("--snapshotter={snapshotter}"))
        .arg("-")
        .stdin(Stdio::from(file))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            Error::prerequisite("cannot run the `docker` CLI to import images into kind nodes")
                .with_source(e)
        })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(Error::internal(format!(
        "importing {reference} into node {node} failed ({}): {}",
        output.status,
        tail_lines(&stderr, STDERR_TAIL_LINES)
    ))
    .with_hint("`docker exec NODE ctr -n k8s.io images ls` shows what the node has; check free disk with `devstack doctor`"))
}

// ---------------------------------------------------------------------------
// up / down

/// The API server URL of the (single) cluster in a kubeconfig.
fn server_of(kubeconfig: &str) -> Option<String> {
    let value: serde_json::Value = serde_saphyr::from_str(kubeconfig).ok()?;
    value["clusters"][0]["cluster"]["server"]
        .as_str()
        .map(str::to_string)
}

async fn up(
    engine: &dyn Engine,
    settings: &Settings,
    options: UpOptions,
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
            plan(engine, settings).await?.check(false, settings)?;
            let repaired = start_stopped(engine, &existing, step).await?;
            return converge(engine, settings, &kind, false, repaired, step).await;
        }
        Found::None => {}
    }

    let api_port = super::choose_api_port(settings)?;
    // kind would pull the node image itself, but only devstack knows the
    // offline bundle.
    step.progress(format!("node image {}", settings.cluster.image));
    let bundle = preload::open_bundle(settings)?;
    crate::bundle::ensure_image(engine, &settings.cluster.image, bundle.as_ref()).await?;

    // kubeadm's init and join take most of `kind create`; the nodes'
    // containerd serves from its first seconds, so the images go in
    // meanwhile instead of after it.
    let create = create(&kind, settings, api_port, step);
    let early = early_preload(engine, settings, step);
    tokio::pin!(create, early);
    let (created, early_done) = tokio::select! {
        created = &mut create => (created, false),
        () = &mut early => (create.await, true),
    };
    if created.is_ok() && !early_done {
        early.await;
    }
    if let Err(failure) = created {
        return Err(match failure {
            CreateFailure::NothingCreated(err) => err,
            CreateFailure::MayExist(err) => rollback(engine, settings, &kind, options, err).await,
        });
    }
    match converge(engine, settings, &kind, true, Vec::new(), step).await {
        Ok(info) => Ok(info),
        Err(err) => Err(rollback(engine, settings, &kind, options, err).await),
    }
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

enum CreateFailure {
    /// Nothing to roll back (and rolling back could delete someone else's cluster).
    NothingCreated(Error),
    /// kind may have left containers behind.
    MayExist(Error),
}

async fn create(
    kind: &Path,
    settings: &Settings,
    api_port: u16,
    step: &Step,
) -> Result<(), CreateFailure> {
    let name = cluster_name(settings);
    let scratch = scratch_dir().map_err(CreateFailure::NothingCreated)?;
    let config = scratch.path().join("kind-config.yaml");
    let kubeconfig = scratch.path().join("kubeconfig");
    let marker = owner_marker_dir(settings);
    std::fs::create_dir_all(&marker)
        .and_then(|()| std::fs::write(marker.join("stack"), format!("{}\n", settings.name)))
        .map_err(|e| {
            CreateFailure::NothingCreated(
                Error::internal(format!("cannot create {}", marker.display()))
                    .with_source(e)
                    .with_hint("make devstack's state directory (DEVSTACK_HOME) writable"),
            )
        })?;
    std::fs::write(&config, config_yaml(settings, api_port)).map_err(|e| {
        CreateFailure::NothingCreated(
            Error::internal(format!("cannot write {}", config.display())).with_source(e),
        )
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
    ];
    let output = run_kind(kind, &args, settings.timeouts.cluster.get())
        .await
        .map_err(|e| match e.kind() {
            // kind never started.
            crate::error::Kind::Prerequisite => CreateFailure::NothingCreated(e),
            _ => CreateFailure::MayExist(
                e.with_hint("raise `timeouts.cluster` in the profile if the machine is slow"),
            ),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let err = kind_failed(&args, &output);
    // kind checks this before creating anything; a concurrent `up` won the race.
    if String::from_utf8_lossy(&output.stderr).contains("already exist") {
        return Err(CreateFailure::NothingCreated(err.with_hint(format!(
            "another devstack run created kind cluster `{name}` meanwhile; run `up` again to reuse it"
        ))));
    }
    Err(CreateFailure::MayExist(err))
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
    let budget = crate::k8s::Budget::new(settings.timeouts.cluster.get(), "timeouts.cluster");
    if created {
        probe_coredns_readiness_every_second(&client).await;
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

/// kubeadm's CoreDNS probes readiness at the kubelet's default period,
/// 10 s, and its first probe comes as the container starts, before CoreDNS
/// has read the cluster's Services: a CoreDNS pod of a new cluster was
/// Ready 8-10 s after it ran, and Flux's step waited on it (its pods are
/// often recreated, their first sandbox failing on a worker whose pod
/// network is not up yet). Done as the cluster is created, while the pods
/// are still pending, so the rollout it causes replaces no serving pod; a
/// cluster `up` finds again is left as it is. K3s's own CoreDNS probes
/// every 2 s already. Best effort: a cluster without kubeadm's CoreDNS
/// keeps what it has.
async fn probe_coredns_readiness_every_second(client: &kube::Client) {
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
    match api.get_opt("coredns").await {
        Ok(Some(deployment)) if period(&deployment).is_some_and(|p| p > 1) => {
            let patch = serde_json::json!({"spec": {"template": {"spec": {"containers": [
                {"name": "coredns", "readinessProbe": {"periodSeconds": 1}}
            ]}}}});
            if let Err(e) = api
                .patch(
                    "coredns",
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await
            {
                tracing::debug!("probe CoreDNS's readiness every second: {e}");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::debug!("read Deployment kube-system/coredns: {e}"),
    }
}

/// Deletes what a failed `up` created, unless `--retain`, and says which.
async fn rollback(
    engine: &dyn Engine,
    settings: &Settings,
    kind: &Path,
    options: UpOptions,
    err: Error,
) -> Error {
    let name = cluster_name(settings);
    if options.retain && options.rollback_by_caller {
        return err.context(format!("kind cluster `{name}` creation failed"));
    }
    if options.retain {
        return err.context(format!(
            "kind cluster `{name}` creation failed; the half-created cluster is retained for debugging (--retain)"
        ));
    }
    match delete_ours(engine, settings, kind, true).await {
        Ok(_) => err.context(format!(
            "kind cluster `{name}` creation failed and was rolled back"
        )),
        Err(rollback_err) => err
            .context(format!(
                "kind cluster `{name}` creation failed, and rollback also failed ({})",
                rollback_err.message()
            ))
            .with_hint(format!(
                "delete the leftovers with `kind delete cluster --name {name}`"
            )),
    }
}

/// Whether the stack has any container of its kind cluster.
async fn any_node(engine: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    Ok(matches!(
        find_cluster(engine, settings).await?,
        Found::Ours(_)
    ))
}

super::provider::engine_provider!(
    /// Kind clusters, created and deleted with the `kind` CLI, their node
    /// containers on the engine it is given.
    Kind,
    Provider::Kind,
    exists: any_node,
    plan: plan,
    up: up,
    kubeconfig: kubeconfig,
    load_images: load_images,
    delete: down
);

/// The running cluster's kubeconfig from `kind get kubeconfig`, renamed
/// (kind reads it off the nodes itself).
async fn kubeconfig(_engine: &dyn Engine, settings: &Settings) -> Result<String, Error> {
    let kind = find_kind(settings).await?.path;
    Ok(kind_kubeconfig(&kind, settings).await?.1)
}

/// Imports the stack's images into the Kubernetes nodes that lack them.
async fn load_images(
    engine: &dyn Engine,
    settings: &Settings,
    step: &Step,
) -> Result<usize, Error> {
    let all = list_nodes(engine, &cluster_name(settings)).await?;
    let nodes: Vec<&KindNode> = all.iter().filter(|n| n.is_kubernetes_node()).collect();
    preload_images(engine, settings, &nodes, step).await
}

/// The running cluster against the settings. Kind cannot add or remove
/// nodes or change a node's image in place: every difference needs a new
/// cluster.
async fn plan(engine: &dyn Engine, settings: &Settings) -> Result<Plan, Error> {
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
    changes.extend(super::provider::ports_change(extra.collect(), settings));
    Ok(Plan {
        exists: true,
        changes,
    })
}

/// Deletes the stack's kind cluster. Only kind's own containers are
/// touched; the stack network and LocalStack are other modules' business. A
/// cluster of the same name devstack did not create is left alone, with a
/// warning.
pub async fn down(engine: &dyn Engine, settings: &Settings) -> Result<bool, Error> {
    match find_cluster(engine, settings).await? {
        Found::None => Ok(false),
        Found::Foreign => {
            tracing::warn!("{}; left untouched", foreign_cluster(settings).message());
            Ok(false)
        }
        Found::Ours(_) => {
            let name = cluster_name(settings);
            let kind = find_kind(settings)
                .await
                .map_err(|e| {
                    e.context(format!(
                        "kind cluster `{name}` exists but cannot be deleted"
                    ))
                    .with_hint(format!(
                        "{INSTALL_HINT}; or remove its nodes by hand: \
                             `docker rm -f $(docker ps -aq --filter label={LABEL_CLUSTER}={name})`"
                    ))
                })?
                .path;
            require_docker_cli()?;
            // A cluster whose kubeconfig devstack never wrote is one whose
            // `up` was stopped while kind created it (the runner's rollback
            // after Ctrl-C): nodes may still be on their way.
            let in_flight = !crate::state::kubeconfig_path(settings).exists();
            delete_ours(engine, settings, &kind, in_flight).await
        }
    }
}

/// Readies a node for deletion: no container may be half-created when its
/// processes are killed. On cgroup v1, runc's systemd driver (kind's)
/// freezes a container while it sets its device rules; a `runc create`
/// killed in between (a timeout on a loaded machine, or the node's own
/// removal while its kubelet starts pods, as after a restart) leaves its
/// `runc init` frozen for good. A frozen process cannot die: the node's
/// init, killed, waits for it, and `docker rm -f` gives up ("tried to kill
/// container, but did not receive an exit event"), leaving the node behind.
/// So: stop the kubelet (nothing new gets created), let runc calls already
/// under way end (each takes well under a second), then thaw every frozen
/// cgroup, printing each. Once the node's init is dying nothing can enter
/// it any more, so this runs before the delete.
const QUIESCE_NODE: &str = r#"if command -v systemctl >/dev/null 2>&1; then
  timeout 5 systemctl stop kubelet >/dev/null 2>&1 || true
fi
i=0
while [ $i -lt 30 ]; do
  busy=
  for c in /proc/[0-9]*/comm; do
    [ "$(cat "$c" 2>/dev/null)" = runc ] && busy=1 && break
  done
  [ -z "$busy" ] && break
  sleep 0.1
  i=$((i + 1))
done
thaw_below /sys/fs/cgroup
"#;

/// A shell function that thaws every frozen cgroup below a directory (cgroup
/// v1's `freezer.state`, v2's `cgroup.freeze`), printing each. A thawed node
/// may die at once and its cgroups vanish under the loops: their complaints
/// are dropped.
const THAW_BELOW: &str = r#"thaw_below() {
  for f in $(find "$1" -name freezer.state 2>/dev/null); do
    case $(cat "$f" 2>/dev/null) in
      FROZEN|FREEZING) echo THAWED 2>/dev/null >"$f" && echo "$f" ;;
    esac
  done
  for f in $(find "$1" -name cgroup.freeze 2>/dev/null); do
    [ "$(cat "$f" 2>/dev/null)" = 1 ] && echo 0 2>/dev/null >"$f" && echo "$f"
  done
  true
}
"#;

/// Best effort: a node that cannot run it is deleted as it is.
async fn quiesce_for_deletion(engine: &dyn Engine, node: &str) {
    let script = format!("{THAW_BELOW}{QUIESCE_NODE}");
    match exec_in(engine, node, &["sh", "-c", &script]).await {
        Ok((0, thawed)) if !thawed.trim().is_empty() => tracing::info!(
            "node {node}: thawed frozen cgroup(s) so that it can be removed: {}",
            thawed.split_whitespace().collect::<Vec<_>>().join(", ")
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!("node {node}: readying it for deletion failed: {e}"),
    }
}

/// Thaws, from the host's side, the frozen cgroups of the nodes named (by
/// container id): what [`QUIESCE_NODE`] cannot reach once a node is dying.
/// A privileged container of the node image (present, since the nodes run
/// it) sees the host's cgroup trees; the node's own tree is the directory
/// whose name holds its id (cgroupfs `docker/ID`, systemd `docker-ID.scope`).
const THAW_FROM_HOST: &str = r#"for id in "$@"; do
  for d in $(find /sys/fs/cgroup -type d -name "*$id*" 2>/dev/null); do
    thaw_below "$d"
  done
done
"#;

/// How long the host-side thaw may take, its helper container included.
const THAW_FROM_HOST_LIMIT: Duration = Duration::from_secs(30);

/// Runs [`THAW_FROM_HOST`] for `node_ids` in a short-lived helper container,
/// removed afterwards; its output (the cgroups thawed) on success.
async fn thaw_from_host(
    engine: &dyn Engine,
    settings: &Settings,
    image: &str,
    node_ids: &[String],
) -> Result<String, Error> {
    use bollard::models::{ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum};
    let helper = format!("{}-thaw", cluster_name(settings));
    let _ = engine.remove_container(&helper).await;
    let mut cmd = vec![
        "-c".to_string(),
        format!("{THAW_BELOW}{THAW_FROM_HOST}"),
        "thaw".to_string(),
    ];
    cmd.extend(node_ids.iter().cloned());
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec!["sh".into()]),
        cmd: Some(cmd),
        labels: Some(crate::docker::labels(&settings.name, "kind-thaw")),
        host_config: Some(HostConfig {
            privileged: Some(true),
            cgroupns_mode: Some(HostConfigCgroupnsModeEnum::HOST),
            binds: Some(vec!["/sys/fs/cgroup:/sys/fs/cgroup:rw".into()]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let run = async {
        engine
            .create_container(&helper, body)
            .await
            .map_err(|e| crate::docker::engine_error(format!("create container {helper}"), e))?;
        engine
            .start_container(&helper)
            .await
            .map_err(|e| crate::docker::engine_error(format!("start container {helper}"), e))?;
        loop {
            let state = engine
                .inspect_container(&helper)
                .await
                .map_err(|e| crate::docker::engine_error(format!("inspect {helper}"), e))?
                .state
                .unwrap_or_default();
            if state.running != Some(true) {
                let output = engine.logs_tail(&helper, 200).await;
                return match state.exit_code {
                    Some(0) => Ok(output),
                    code => Err(Error::internal(format!(
                        "{helper} exited with {code:?}: {}",
                        tail_lines(&output, STDERR_TAIL_LINES)
                    ))),
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let outcome = tokio::time::timeout(THAW_FROM_HOST_LIMIT, run)
        .await
        .unwrap_or_else(|_| {
            Err(Error::timeout(format!(
                "{helper} did not finish within {}",
                HumanDuration(THAW_FROM_HOST_LIMIT)
            )))
        });
    let _ = engine.remove_container(&helper).await;
    outcome
}

/// How long a rollback keeps deleting the nodes of a `kind create` it
/// stopped: the engine finishes a container whose `docker run` was killed
/// mid-request, seconds later on a loaded machine.
const ROLLBACK_PATIENCE: Duration = Duration::from_secs(90);
/// No node seen for this long: no creation is still in flight.
const ROLLBACK_QUIET: Duration = Duration::from_secs(3);

/// `kind delete cluster` until no node of the stack's own cluster is left.
/// After a stopped create (`in_flight`), nodes can still appear once the
/// first delete is done, so it also waits for a quiet spell.
async fn delete_ours(
    engine: &dyn Engine,
    settings: &Settings,
    kind: &Path,
    in_flight: bool,
) -> Result<bool, Error> {
    let name = cluster_name(settings);
    let started = std::time::Instant::now();
    let mut deleted = false;
    let mut quiet_since = None;
    loop {
        match find_cluster(engine, settings).await? {
            Found::Ours(nodes) => {
                if started.elapsed() >= ROLLBACK_PATIENCE {
                    return Err(Error::internal(format!(
                        "kind cluster `{name}` still has nodes after deleting it for {}: {}",
                        HumanDuration(ROLLBACK_PATIENCE),
                        nodes
                            .iter()
                            .map(|n| n.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                    .with_hint(format!(
                        "`kind delete cluster --name {name}` once Docker settles"
                    )));
                }
                if deleted {
                    // kind listed no node, or a node it removed was still
                    // being created: remove the (verified) nodes directly.
                    for node in &nodes {
                        crate::docker::remove_container(engine, &node.name).await?;
                    }
                    // The engine may still be creating them: look again
                    // after a pause rather than in a tight loop.
                    tokio::time::sleep(Duration::from_millis(250)).await;
                } else {
                    futures::future::join_all(
                        nodes
                            .iter()
                            .filter(|n| n.is_running())
                            .map(|n| quiesce_for_deletion(engine, &n.name)),
                    )
                    .await;
                    if let Err(failed) = delete_cluster(kind, &name).await {
                        // kind could not remove a node: a process in it that
                        // cannot die, frozen while the node was being killed.
                        // Thawed from the host, the next round removes it.
                        let left = match find_cluster(engine, settings).await? {
                            Found::Ours(left) => left,
                            _ => Vec::new(),
                        };
                        if !left.is_empty() {
                            let ids: Vec<String> = left.iter().map(|n| n.id.clone()).collect();
                            match thaw_from_host(engine, settings, &left[0].image, &ids).await {
                                Ok(thawed) => tracing::info!(
                                    "kind could not remove {}; thawed from the host: {}",
                                    left.iter()
                                        .map(|n| n.name.as_str())
                                        .collect::<Vec<_>>()
                                        .join(", "),
                                    thawed.split_whitespace().collect::<Vec<_>>().join(", ")
                                ),
                                Err(e) => {
                                    tracing::debug!("thawing the nodes from the host: {e}");
                                    return Err(failed);
                                }
                            }
                        }
                    }
                }
                deleted = true;
                quiet_since = None;
            }
            Found::None | Found::Foreign if !in_flight => return Ok(deleted),
            Found::None | Found::Foreign => {
                let since = *quiet_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= ROLLBACK_QUIET {
                    return Ok(deleted);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use crate::profile::Overrides;
    use crate::profile::schema::PortMappingSpec;
    use serde_json::{Value, json};

    fn kind_settings() -> Settings {
        let mut settings = Settings::builtin(&Overrides {
            provider: Some(Provider::Kind),
            ..Default::default()
        })
        .expect("built-in settings resolve");
        settings.state_dir = "/state".into();
        settings
    }

    fn parsed(settings: &Settings, port: u16) -> Value {
        let yaml = config_yaml(settings, port);
        serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("invalid YAML {e}:\n{yaml}"))
    }

    fn roles(config: &Value) -> Vec<&str> {
        config["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["role"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn single_node_config() {
        let settings = kind_settings();
        let config = parsed(&settings, 41234);
        assert_eq!(
            config,
            json!({
                "kind": "Cluster",
                "apiVersion": "kind.x-k8s.io/v1alpha4",
                "name": cluster_name(&settings),
                "networking": {"apiServerAddress": "127.0.0.1", "apiServerPort": 41234},
                "nodes": [{
                    "role": "control-plane",
                    "image": crate::versions::KIND_NODE_IMAGE,
                    "extraMounts": [{
                        "hostPath": "/state/stacks/devstack/kind-owner",
                        "containerPath": "/etc/devstack",
                        "readOnly": true,
                    }],
                }],
                "kubeadmConfigPatches": [
                    "kind: KubeletConfiguration\nfailCgroupV1: false\n",
                    "kind: KubeProxyConfiguration\niptables:\n  minSyncPeriod: 100ms\n",
                ],
            })
        );
        assert_eq!(
            cluster_name(&settings),
            format!("devstack-{}", settings.name)
        );
    }

    #[test]
    fn config_text_is_deterministic() {
        let mut settings = kind_settings();
        settings.name = "dev".into();
        settings.cluster.agents = 1;
        settings.cluster.ports = vec![PortMappingSpec {
            host_port: 8080,
            container_port: 30080,
            protocol: "tcp".into(),
            bind_address: "127.0.0.1".into(),
        }];
        settings
            .cluster
            .registry_mirrors
            .insert("docker.io".into(), vec!["http://m:5000".into()]);
        let text = config_yaml(&settings, 6443);
        assert_eq!(text, config_yaml(&settings, 6443));
        assert_eq!(
            text,
            r#"kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: devstack-dev
networking:
  apiServerAddress: "127.0.0.1"
  apiServerPort: 6443
nodes:
- role: control-plane
  image: kindest/node:v1.36.4
  extraMounts:
  - hostPath: /state/stacks/dev/kind-owner
    containerPath: /etc/devstack
    readOnly: true
  extraPortMappings:
  - containerPort: 30080
    hostPort: 8080
    listenAddress: "127.0.0.1"
    protocol: TCP
- role: worker
  image: kindest/node:v1.36.4
  extraMounts:
  - hostPath: /state/stacks/dev/kind-owner
    containerPath: /etc/devstack
    readOnly: true
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
- |
  kind: KubeProxyConfiguration
  iptables:
    minSyncPeriod: 100ms
containerdConfigPatches:
- |-
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
"#
        );
    }

    #[test]
    fn control_planes_and_workers() {
        let mut settings = kind_settings();
        settings.cluster.servers = 3;
        settings.cluster.agents = 2;
        settings.cluster.image = "kindest/node:v1.33.1".into();
        let config = parsed(&settings, 6443);
        assert_eq!(
            roles(&config),
            [
                "control-plane",
                "control-plane",
                "control-plane",
                "worker",
                "worker"
            ]
        );
        for node in config["nodes"].as_array().unwrap() {
            assert_eq!(node["image"], "kindest/node:v1.33.1");
            assert!(node.get("extraPortMappings").is_none());
        }
    }

    #[test]
    fn port_mappings_go_on_the_first_control_plane() {
        let mut settings = kind_settings();
        settings.cluster.servers = 2;
        settings.cluster.agents = 1;
        settings.cluster.ports = vec![
            PortMappingSpec {
                host_port: 8080,
                container_port: 30080,
                protocol: "tcp".into(),
                bind_address: "127.0.0.1".into(),
            },
            PortMappingSpec {
                host_port: 5353,
                container_port: 30053,
                protocol: "udp".into(),
                bind_address: "0.0.0.0".into(),
            },
        ];
        let config = parsed(&settings, 6443);
        let nodes = config["nodes"].as_array().unwrap();
        assert_eq!(
            nodes[0]["extraPortMappings"],
            json!([
                {"containerPort": 30080, "hostPort": 8080, "listenAddress": "127.0.0.1", "protocol": "TCP"},
                {"containerPort": 30053, "hostPort": 5353, "listenAddress": "0.0.0.0", "protocol": "UDP"},
            ])
        );
        assert!(
            nodes[1..]
                .iter()
                .all(|n| n.get("extraPortMappings").is_none())
        );
    }

    #[test]
    fn registry_mirrors_switch_containerd_to_hosts_files() {
        let mut settings = kind_settings();
        assert!(
            parsed(&settings, 6443)
                .get("containerdConfigPatches")
                .is_none()
        );
        settings.cluster.registry_mirrors.insert(
            "docker.io".into(),
            vec!["http://mirror:5000".into(), "https://mirror.example".into()],
        );
        let config = parsed(&settings, 6443);
        assert_eq!(
            config["containerdConfigPatches"],
            json!([
                "[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\""
            ])
        );
        assert_eq!(
            hosts_toml("docker.io", &settings.cluster.registry_mirrors["docker.io"]),
            "server = \"https://registry-1.docker.io\"\n\
             \n[host.\"http://mirror:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n\
             \n[host.\"https://mirror.example\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        );
        assert_eq!(
            hosts_toml("ghcr.io", &["http://a\"b".into()]),
            "server = \"https://ghcr.io\"\n\n[host.\"http://a\\\"b\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        );
    }

    #[test]
    fn registry_keys_must_be_hosts() {
        let mut settings = kind_settings();
        settings
            .cluster
            .registry_mirrors
            .insert("localhost:5000".into(), vec![]);
        assert!(validate_mirrors(&settings).is_ok());
        for bad in ["../etc", "a/b", "", "a b"] {
            let mut settings = kind_settings();
            settings.cluster.registry_mirrors.insert(bad.into(), vec![]);
            let err = validate_mirrors(&settings).unwrap_err();
            assert_eq!(err.kind(), Kind::User, "{bad}");
            assert!(err.hint().is_some());
        }
    }

    #[tokio::test]
    async fn missing_kind_is_a_prerequisite_error_with_a_hint() {
        let empty = tempfile::tempdir().unwrap();
        let missing_bundle = Some(empty.path().join("bin/kind"));
        let err = find_kind_from(None, empty.path().as_os_str(), missing_bundle)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        assert_eq!(
            err.message(),
            "`kind` not found on PATH, in DEVSTACK_KIND or in the offline bundle (provider kind needs it)"
        );
        let hint = err.hint().unwrap();
        assert!(
            hint.contains("go install sigs.k8s.io/kind@v0.33.0"),
            "{hint}"
        );
        assert!(hint.contains("DEVSTACK_KIND"), "{hint}");
        assert!(hint.contains("--provider k3s"), "{hint}");
    }

    /// A fake `kind` printing `version_line`, in its own directory.
    fn fake_kind(version_line: &str) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kind");
        std::fs::write(&path, format!("#!/bin/sh\necho '{version_line}'\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    /// Retried because executing a freshly written script can fail with
    /// ETXTBSY while another test thread forks.
    async fn retried<F, Fut>(find: F) -> Result<KindCli, Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<KindCli, Error>>,
    {
        let mut result = find().await;
        for _ in 0..3 {
            match &result {
                Err(e) if e.message().contains("does not report a version") => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    result = find().await;
                }
                _ => break,
            }
        }
        result
    }

    /// `find_kind_from` with a fake kind on PATH.
    async fn find_fake(version_line: &str) -> Result<KindCli, Error> {
        let dir = fake_kind(version_line);
        retried(|| find_kind_from(None, dir.path().as_os_str(), None)).await
    }

    #[tokio::test]
    async fn old_kind_is_refused() {
        let err = find_fake("kind v0.20.0 go1.20 linux/amd64")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        assert!(err.message().contains("kind v0.20.0"), "{}", err.message());
        assert!(
            err.message().contains("older than v0.30.0"),
            "{}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("upgrade kind"));
    }

    #[tokio::test]
    async fn supported_kind_is_found() {
        let cli = find_fake("kind v0.33.0 go1.26.8 linux/amd64")
            .await
            .unwrap();
        assert!(cli.path.ends_with("kind"));
        assert_eq!(cli.version, (0, 33, 0));
        assert_eq!(cli.origin, "PATH");
    }

    #[tokio::test]
    async fn kind_without_a_version_is_refused() {
        let err = find_fake("something else").await.unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        assert!(err.message().contains("does not report a version"));
        assert!(err.message().contains("`something else`"));
    }

    #[tokio::test]
    async fn the_bundle_kind_is_used_when_path_has_none_or_an_old_one() {
        let bundled = fake_kind("kind v0.33.0 go1.26.8 linux/amd64");
        let bundled_path = bundled.path().join("kind");
        let empty = tempfile::tempdir().unwrap();
        let cli =
            retried(|| find_kind_from(None, empty.path().as_os_str(), Some(bundled_path.clone())))
                .await
                .unwrap();
        assert_eq!(
            (cli.path.as_path(), cli.origin),
            (bundled_path.as_path(), "the offline bundle")
        );

        let old = fake_kind("kind v0.20.0 go1.20 linux/amd64");
        let cli =
            retried(|| find_kind_from(None, old.path().as_os_str(), Some(bundled_path.clone())))
                .await
                .unwrap();
        assert_eq!(cli.origin, "the offline bundle");
    }

    #[tokio::test]
    async fn devstack_kind_wins_and_is_not_second_guessed() {
        let good = fake_kind("kind v0.33.0 go1.26.8 linux/amd64");
        let old = fake_kind("kind v0.20.0 go1.20 linux/amd64");
        let cli = retried(|| {
            find_kind_from(Some(old.path().join("kind")), good.path().as_os_str(), None)
        })
        .await
        .unwrap_err();
        assert!(
            cli.message().contains("(DEVSTACK_KIND)"),
            "{}",
            cli.message()
        );
        let cli = retried(|| {
            find_kind_from(Some(good.path().join("kind")), old.path().as_os_str(), None)
        })
        .await
        .unwrap();
        assert_eq!(cli.origin, "DEVSTACK_KIND");
    }

    #[test]
    fn snapshotter_from_the_containerd_config() {
        let dump = "[plugins]\n  [plugins.'io.containerd.cri.v1.images']\n    snapshotter = 'overlayfs'\n    snapshotter_x = 'no'\n  [x]\n          snapshotter = ''\n";
        assert_eq!(parse_snapshotter(dump).as_deref(), Some("overlayfs"));
        let dump = "          snapshotter = \"\"\n    snapshotter = \"fuse-overlayfs\"\n";
        assert_eq!(parse_snapshotter(dump).as_deref(), Some("fuse-overlayfs"));
        assert_eq!(parse_snapshotter(""), None);
    }

    fn node(name: &str, role: &str) -> KindNode {
        KindNode {
            name: name.into(),
            id: String::new(),
            image: String::new(),
            role: role.into(),
            state: None,
            networks: Vec::new(),
            ports: Vec::new(),
        }
    }

    #[test]
    fn nodes_sort_control_planes_first() {
        let mut nodes = vec![
            node("c-worker2", "worker"),
            node("c-external-load-balancer", "external-load-balancer"),
            node("c-control-plane10", "control-plane"),
            node("c-worker", "worker"),
            node("c-control-plane2", "control-plane"),
            node("c-control-plane", "control-plane"),
        ];
        sort_nodes(&mut nodes);
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "c-control-plane",
                "c-control-plane2",
                "c-control-plane10",
                "c-worker",
                "c-worker2",
                "c-external-load-balancer"
            ]
        );
        assert!(!nodes[5].is_kubernetes_node());
    }

    #[test]
    fn image_lists_normalize_like_profile_references() {
        let have = parse_image_list(
            "docker.io/library/nginx:1.25\n\
             sha256:0123456789abcdef\n\
             docker.io/kindest/kindnetd:v20241212\n\
             registry.k8s.io/pause:3.10\n\n",
        );
        for wanted in [
            "nginx:1.25",
            "docker.io/library/nginx:1.25",
            "kindest/kindnetd:v20241212",
            "registry.k8s.io/pause:3.10",
        ] {
            assert!(
                have.contains(&normalize_reference(wanted)),
                "{wanted} in {have:?}"
            );
        }
        assert_eq!(have.len(), 3);
        assert!(!have.contains(&normalize_reference("nginx:1.26")));
    }

    #[test]
    fn server_comes_from_the_kubeconfig() {
        let yaml = "apiVersion: v1\nkind: Config\nclusters:\n- name: kind-x\n  cluster:\n    server: https://127.0.0.1:40123\n    certificate-authority-data: AAAA\n";
        assert_eq!(server_of(yaml).as_deref(), Some("https://127.0.0.1:40123"));
        assert_eq!(server_of("apiVersion: v1\nclusters: []\n"), None);
    }

    #[test]
    fn kind_failures_quote_the_end_of_stderr() {
        use std::os::unix::process::ExitStatusExt;
        let stderr: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let output = Output {
            status: std::process::ExitStatus::from_raw(256),
            stdout: Vec::new(),
            stderr: stderr.into_bytes(),
        };
        let args = [OsStr::new("create"), OsStr::new("cluster")];
        let err = kind_failed(&args, &output);
        assert_eq!(err.kind(), Kind::Internal);
        let message = err.message();
        assert!(
            message.starts_with("`kind create cluster` failed"),
            "{message}"
        );
        assert!(
            message.contains("line 11\n") && message.ends_with("line 30"),
            "{message}"
        );
        assert!(!message.contains("line 10\n"), "{message}");
        assert!(err.hint().is_some());

        let output = Output {
            stderr: b"Bind for 127.0.0.1:8080 failed: port is already allocated\n".to_vec(),
            ..output
        };
        assert_eq!(kind_failed(&args, &output).kind(), Kind::Prerequisite);
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
        // `down` leaves it alone (and needs no kind binary to decide so).
        assert!(!down(&engine, &s).await.unwrap());
        assert_eq!(engine.container_names().len(), 1);
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
