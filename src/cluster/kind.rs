//! Kind clusters, driven through the `kind` CLI. devstack writes the Kind
//! config from the profile, lets `kind` create and delete the node
//! containers, and does the rest itself through bollard: attaching the
//! nodes to the stack network, registry mirrors, image preload.
//!
//! `kind` is always pointed at a throw-away kubeconfig, so it never edits
//! the user's; devstack merges its own renamed context instead.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerSummaryStateEnum, NetworkConnectRequest};
use bollard::query_parameters::StartContainerOptions;
use serde::Serialize;

use crate::bundle::normalize_reference;
use crate::cluster::preload::{self, PreloadImage};
use crate::cluster::{Change, ClusterInfo, Plan, UpOptions, kubeconfig};
use crate::docker::{self, exec_in};
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

/// Where the nodes' containerd reads per-registry `hosts.toml` files.
const REGISTRY_CONFIG_DIR: &str = "/etc/containerd/certs.d";

const INSTALL_HINT: &str = "install kind (`go install sigs.k8s.io/kind@v0.30.0`, or see \
     https://kind.sigs.k8s.io/docs/user/quick-start/#installation)";
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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    extra_port_mappings: Vec<PortMapping<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PortMapping<'a> {
    container_port: u16,
    host_port: u16,
    listen_address: &'a str,
    protocol: String,
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
    let mut nodes: Vec<KindNodeConfig> = (0..cluster.servers)
        .map(|_| KindNodeConfig {
            role: ROLE_CONTROL_PLANE,
            image,
            extra_port_mappings: Vec::new(),
        })
        .chain((0..cluster.agents).map(|_| KindNodeConfig {
            role: ROLE_WORKER,
            image,
            extra_port_mappings: Vec::new(),
        }))
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

/// The `kind` binary on `PATH` and its version, refusing one older than
/// [`KIND_MIN_VERSION`].
pub async fn find_kind() -> Result<(PathBuf, (u64, u64, u64)), Error> {
    find_kind_in(&path_var()).await
}

/// [`find_kind`] with an explicit search path, so tests need not touch the
/// process-wide `PATH`.
pub async fn find_kind_in(path_var: &OsStr) -> Result<(PathBuf, (u64, u64, u64)), Error> {
    let path = locate("kind", path_var).ok_or_else(|| {
        Error::prerequisite("`kind` not found on PATH (provider kind needs it)").with_hint(format!(
            "{INSTALL_HINT}; or use `--provider k3s`, which needs only Docker"
        ))
    })?;
    let line = tool_version(&path, &["version"]).await;
    let Some(version) = line.as_deref().and_then(parse_semver) else {
        return Err(Error::prerequisite(format!(
            "`{} version` does not report a version{}",
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
            "kind v{a}.{b}.{c} at {} is older than v{x}.{y}.{z}, the oldest devstack supports",
            path.display()
        ))
        .with_hint(format!(
            "upgrade kind: {INSTALL_HINT}; or use `--provider k3s`, which needs only Docker"
        )));
    }
    Ok((path, version))
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
        // Ctrl-C drops the `up` future; kind must not keep creating nodes.
        .kill_on_drop(true);
    match tokio::time::timeout(timeout, command.output()).await {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(e)) => Err(
            Error::prerequisite(format!("cannot run {}", kind.display()))
                .with_source(e)
                .with_hint(format!("reinstall kind: {INSTALL_HINT}")),
        ),
        Err(_) => Err(Error::timeout(format!(
            "`{}` did not finish within {}",
            display_command(args),
            HumanDuration(timeout)
        ))),
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
    /// The node image the container was created from.
    image: String,
    /// `control-plane`, `worker` or `external-load-balancer`.
    role: String,
    state: Option<ContainerSummaryStateEnum>,
    networks: Vec<String>,
}

impl KindNode {
    fn is_kubernetes_node(&self) -> bool {
        self.role == ROLE_CONTROL_PLANE || self.role == ROLE_WORKER
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
async fn list_nodes(docker: &Docker, cluster: &str) -> Result<Vec<KindNode>, Error> {
    let containers =
        docker::find_containers(docker, vec![format!("{LABEL_CLUSTER}={cluster}")]).await?;
    let mut nodes: Vec<KindNode> = containers
        .iter()
        .map(|c| KindNode {
            name: docker::container_name_of(c),
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
        })
        .collect();
    sort_nodes(&mut nodes);
    Ok(nodes)
}

/// Starts stopped or paused node containers (the load balancer too, or the
/// API server is unreachable on multi-control-plane clusters).
async fn start_stopped(
    docker: &Docker,
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
                docker
                    .unpause_container(name)
                    .await
                    .map_err(|e| docker::engine_error(format!("unpause node {name}"), e))?;
                repaired.push(format!("unpaused node {name}"));
            }
            _ => {
                step.progress(format!("starting stopped node {name}"));
                docker
                    .start_container(name, None::<StartContainerOptions>)
                    .await
                    .map_err(|e| docker::engine_error(format!("start node {name}"), e))?;
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
    docker: &Docker,
    settings: &Settings,
    nodes: &[&KindNode],
) -> Result<Vec<String>, Error> {
    let network = settings.resource_prefix();
    docker::ensure_network(docker, &settings.name, &network).await?;
    let mut connected = Vec::new();
    for node in nodes.iter().filter(|n| !n.networks.contains(&network)) {
        let request = NetworkConnectRequest {
            container: node.name.clone(),
            endpoint_config: None,
        };
        match docker.connect_network(&network, request).await {
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
    docker: &Docker,
    settings: &Settings,
    nodes: &[&KindNode],
) -> Result<(), Error> {
    const SCRIPT: &str = "mkdir -p \"$1\" && printf '%s' \"$2\" > \"$1/hosts.toml\"";
    for (registry, endpoints) in &settings.cluster.registry_mirrors {
        let dir = format!("{REGISTRY_CONFIG_DIR}/{registry}");
        let content = hosts_toml(registry, endpoints);
        for node in nodes {
            let (code, _) = exec_in(
                docker,
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
async fn node_images(docker: &Docker, node: &str) -> HashSet<String> {
    match exec_in(
        docker,
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

/// The equivalent of `kind load` for every wanted image, only into the
/// nodes that lack it. Returns how many images were loaded.
async fn preload_images(
    docker: &Docker,
    settings: &Settings,
    kind: &Path,
    cluster: &str,
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
        let mut present = Vec::with_capacity(nodes.len());
        for node in nodes {
            present.push(node_images(docker, &node.name).await);
        }
        let mut loaded = 0;
        for image in &wanted {
            let want = normalize_reference(&image.reference);
            let missing: Vec<&str> = nodes
                .iter()
                .zip(&present)
                .filter(|(_, have)| !have.contains(&want))
                .map(|(node, _)| node.name.as_str())
                .collect();
            if missing.is_empty() {
                continue;
            }
            step.progress(format!(
                "loading {} into {}",
                image.reference,
                missing.join(", ")
            ));
            load_image(docker, kind, cluster, image, &missing, timeout.get()).await?;
            loaded += 1;
        }
        Ok(loaded)
    };
    tokio::time::timeout(timeout.get(), work)
        .await
        .map_err(|_| {
            Error::internal(format!(
                "loading images into kind cluster `{cluster}` took longer than {timeout}"
            ))
            .with_hint("raise `timeouts.preload` in the profile, or trim `images.preload`")
        })?
}

async fn load_image(
    docker: &Docker,
    kind: &Path,
    cluster: &str,
    image: &PreloadImage,
    nodes: &[&str],
    timeout: Duration,
) -> Result<(), Error> {
    let node_list = nodes.join(",");
    let (source, subcommand): (&OsStr, &str) = match &image.tarball {
        Some(tarball) => {
            if !tarball.is_file() {
                return Err(Error::user(format!(
                    "offline bundle file {} for {} is missing",
                    tarball.display(),
                    image.reference
                ))
                .with_hint("rebuild the bundle with `make kit`"));
            }
            (tarball.as_os_str(), "image-archive")
        }
        None => {
            // kind's own message for this names neither the profile key nor the fix.
            if docker.inspect_image(&image.reference).await.is_err() {
                return Err(Error::user(format!(
                    "image `{}` (images.preload) is neither in the offline bundle nor in the local Docker image store",
                    image.reference
                ))
                .with_hint(format!(
                    "`docker pull {}` or build it first, or remove it from images.preload",
                    image.reference
                )));
            }
            (OsStr::new(&image.reference), "docker-image")
        }
    };
    let args = [
        OsStr::new("load"),
        OsStr::new(subcommand),
        source,
        OsStr::new("--name"),
        OsStr::new(cluster),
        OsStr::new("--nodes"),
        OsStr::new(&node_list),
    ];
    kind_stdout(kind, &args, timeout).await.map(drop)
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

pub async fn up(
    docker: &Docker,
    settings: &Settings,
    options: UpOptions,
    step: &Step,
) -> Result<ClusterInfo, Error> {
    let (kind, _) = find_kind().await?;
    require_docker_cli()?;
    validate_mirrors(settings)?;
    let name = cluster_name(settings);

    let existing = list_nodes(docker, &name).await?;
    if !existing.is_empty() {
        // Kind cannot change a running cluster's shape: `plan` reports it
        // and the caller recreates or refuses before this point.
        plan(docker, settings).await?.check(false, settings)?;
        let repaired = start_stopped(docker, &existing, step).await?;
        return converge(docker, settings, &kind, false, repaired, step).await;
    }

    let api_port = super::choose_api_port(settings)?;
    // kind would pull the node image itself, but only devstack knows the
    // offline bundle.
    step.progress(format!("node image {}", settings.cluster.image));
    let bundle = preload::open_bundle(settings)?;
    crate::bundle::ensure_image(docker, &settings.cluster.image, bundle.as_ref()).await?;

    if let Err(failure) = create(&kind, settings, api_port, step).await {
        return Err(match failure {
            CreateFailure::NothingCreated(err) => err,
            CreateFailure::MayExist(err) => rollback(&kind, &name, options, err).await,
        });
    }
    match converge(docker, settings, &kind, true, Vec::new(), step).await {
        Ok(info) => Ok(info),
        Err(err) => Err(rollback(&kind, &name, options, err).await),
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

/// Brings an existing (or just created) cluster to the profile's shape and
/// waits for it: stack network, registry mirrors, kubeconfig, Ready, images.
async fn converge(
    docker: &Docker,
    settings: &Settings,
    kind: &Path,
    created: bool,
    mut repaired: Vec<String>,
    step: &Step,
) -> Result<ClusterInfo, Error> {
    let name = cluster_name(settings);
    let all = list_nodes(docker, &name).await?;
    let nodes: Vec<&KindNode> = all.iter().filter(|n| n.is_kubernetes_node()).collect();
    if nodes.is_empty() {
        return Err(
            Error::internal(format!("kind cluster `{name}` has no node containers"))
                .with_hint("`devstack cluster down`, then `up` again"),
        );
    }

    let network = settings.resource_prefix();
    step.progress(format!("connecting nodes to network {network}"));
    for node in connect_to_stack_network(docker, settings, &nodes).await? {
        if !created {
            repaired.push(format!("connected node {node} to network {network}"));
        }
    }
    write_registry_hosts(docker, settings, &nodes).await?;

    step.progress("reading the kubeconfig");
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

    // Ready first: on a cluster whose nodes were just restarted, containerd
    // (which `kind load` imports into) may not be up yet.
    step.progress(format!("waiting for {} node(s) Ready", nodes.len()));
    let client = crate::k8s::client_from_kubeconfig(&kubeconfig).await?;
    let budget = crate::k8s::Budget::new(settings.timeouts.cluster.get(), "timeouts.cluster");
    crate::k8s::wait_nodes_ready(&client, nodes.len(), budget, step).await?;

    preload_images(docker, settings, kind, &name, &nodes, step).await?;

    Ok(ClusterInfo {
        provider: Provider::Kind,
        nodes: nodes.iter().map(|n| n.name.clone()).collect(),
        api_server,
        kubeconfig,
        created,
        repaired,
    })
}

/// Deletes what a failed `up` created, unless `--retain`, and says which.
async fn rollback(kind: &Path, name: &str, options: UpOptions, err: Error) -> Error {
    if options.retain {
        return err.context(format!(
            "kind cluster `{name}` creation failed; the half-created cluster is retained for debugging (--retain)"
        ));
    }
    match delete_cluster(kind, name).await {
        Ok(()) => err.context(format!(
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

/// Kind clusters, created and deleted with the `kind` CLI, their node
/// containers on the Docker engine `docker` talks to.
pub struct Kind {
    docker: Docker,
}

impl Kind {
    pub fn new(docker: Docker) -> Self {
        Kind { docker }
    }
}

/// Whether the stack has any container of its kind cluster.
async fn any_node(docker: &Docker, settings: &Settings) -> Result<bool, Error> {
    Ok(!list_nodes(docker, &cluster_name(settings))
        .await?
        .is_empty())
}

super::provider::docker_provider!(Kind, Provider::Kind, exists: any_node, plan: plan, up: up, delete: down);

/// The running cluster against the settings. Kind cannot add or remove
/// nodes or change a node's image in place: every difference needs a new
/// cluster.
async fn plan(docker: &Docker, settings: &Settings) -> Result<Plan, Error> {
    let all = list_nodes(docker, &cluster_name(settings)).await?;
    if all.is_empty() {
        return Ok(Plan::default());
    }
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
    Ok(Plan {
        exists: true,
        changes,
    })
}

/// Deletes the kind cluster. Only kind's own containers are touched; the
/// stack network and LocalStack are other modules' business.
pub async fn down(docker: &Docker, settings: &Settings) -> Result<bool, Error> {
    let name = cluster_name(settings);
    if list_nodes(docker, &name).await?.is_empty() {
        return Ok(false);
    }
    let kind = locate("kind", &path_var()).ok_or_else(|| {
        Error::prerequisite(format!(
            "kind cluster `{name}` exists but `kind` is not on PATH to delete it"
        ))
        .with_hint(format!(
            "{INSTALL_HINT}; or remove its nodes by hand: \
             `docker rm -f $(docker ps -aq --filter label={LABEL_CLUSTER}={name})`"
        ))
    })?;
    require_docker_cli()?;
    delete_cluster(&kind, &name).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use crate::profile::Overrides;
    use crate::profile::schema::PortMappingSpec;
    use serde_json::{Value, json};

    fn kind_settings() -> Settings {
        Settings::builtin(&Overrides {
            provider: Some(Provider::Kind),
            ..Default::default()
        })
        .expect("built-in settings resolve")
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
                "nodes": [{"role": "control-plane", "image": crate::versions::KIND_NODE_IMAGE}],
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
  image: kindest/node:v1.32.0
  extraPortMappings:
  - containerPort: 30080
    hostPort: 8080
    listenAddress: "127.0.0.1"
    protocol: TCP
- role: worker
  image: kindest/node:v1.32.0
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
        let err = find_kind_in(empty.path().as_os_str()).await.unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        assert_eq!(
            err.message(),
            "`kind` not found on PATH (provider kind needs it)"
        );
        let hint = err.hint().unwrap();
        assert!(hint.contains("go install sigs.k8s.io/kind@"), "{hint}");
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

    /// `find_kind_in` on a fake kind. Retried because executing a freshly
    /// written script can fail with ETXTBSY while another test thread forks.
    async fn find_fake(version_line: &str) -> Result<(PathBuf, (u64, u64, u64)), Error> {
        let dir = fake_kind(version_line);
        let mut result = find_kind_in(dir.path().as_os_str()).await;
        for _ in 0..3 {
            match &result {
                Err(e) if e.message().contains("does not report a version") => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    result = find_kind_in(dir.path().as_os_str()).await;
                }
                _ => break,
            }
        }
        result
    }

    #[tokio::test]
    async fn old_kind_is_refused() {
        let err = find_fake("kind v0.10.0 go1.16 linux/amd64")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        assert!(err.message().contains("kind v0.10.0"), "{}", err.message());
        assert!(
            err.message().contains("older than v0.20.0"),
            "{}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("upgrade kind"));
    }

    #[tokio::test]
    async fn supported_kind_is_found() {
        let (path, version) = find_fake("kind v0.30.0 go1.24.6 linux/amd64")
            .await
            .unwrap();
        assert!(path.ends_with("kind"));
        assert_eq!(version, (0, 30, 0));
    }

    #[tokio::test]
    async fn kind_without_a_version_is_refused() {
        let err = find_fake("something else").await.unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        assert!(err.message().contains("does not report a version"));
        assert!(err.message().contains("`something else`"));
    }

    fn node(name: &str, role: &str) -> KindNode {
        KindNode {
            name: name.into(),
            image: String::new(),
            role: role.into(),
            state: None,
            networks: Vec::new(),
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
