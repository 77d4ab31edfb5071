//! Can this machine run the profile? Every check `devstack doctor` shows,
//! for the CLI and for a test suite that wants to skip with a reason.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::cluster::choice::{Choice, Reason};
use crate::docker::{self, Engine};
use crate::envvars;
use crate::error::{Error, Kind};
use crate::hostinfo;
use crate::profile::settings::Origin;
use crate::profile::{Provider, Settings};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Check {
    fn pass(name: &str, detail: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            status: Status::Pass,
            detail: detail.into(),
            hint: None,
        }
    }
    fn warn(name: &str, detail: impl Into<String>, hint: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            status: Status::Warn,
            detail: detail.into(),
            hint: Some(hint.into()),
        }
    }
    fn fail(name: &str, detail: impl Into<String>, hint: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            status: Status::Fail,
            detail: detail.into(),
            hint: Some(hint.into()),
        }
    }
}

const MIN_MEMORY: u64 = 2 << 30;
const GOOD_MEMORY: u64 = 4 << 30;
const MIN_DISK: u64 = 2 << 30;
const GOOD_DISK: u64 = 10 << 30;
/// kind's known-issues page: clusters exhaust lower limits ("too many open files").
const INOTIFY_WATCHES: u64 = 524_288;
const INOTIFY_INSTANCES: u64 = 512;

/// The checks for the provider `up` would use (an existing stack's, or the
/// K3s fallback); without Docker, for the profile's.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DoctorReport {
    pub ok: bool,
    /// `devstack doctor`'s exit code: 0, or the class `up` would fail
    /// with: 2 for what the user gave (pins, bundle, profile), else 3.
    pub exit_code: i32,
    pub profile: String,
    pub stack: String,
    pub provider: Provider,
    pub checks: Vec<Check>,
}

impl DoctorReport {
    /// What was assessed: ``stack `ci` (the shipped profile ci, provider k3s)``.
    pub fn subject(&self) -> String {
        let profile = match self
            .profile
            .strip_prefix('<')
            .and_then(|p| p.strip_suffix('>'))
        {
            Some("built-in default") => "the built-in default profile".to_string(),
            Some(described) => format!("the {described}"),
            None => format!("profile {}", self.profile),
        };
        format!(
            "stack `{}` ({profile}, provider {})",
            self.stack,
            self.provider.as_str()
        )
    }
}

pub async fn examine(settings: &Settings) -> DoctorReport {
    let engine = docker::connect().await.ok();
    let recorded = crate::stack::Found::recorded(settings).provider();
    let (settings, choice) = match &engine {
        // Predicted, not settled: doctor fetches nothing and writes nothing.
        Some(docker) => match crate::cluster::choice::predict(docker, settings, recorded).await {
            Ok((settled, choice)) => (settled, Some(choice)),
            Err(_) => (settings.clone(), None),
        },
        None => (settings.clone(), None),
    };
    let mut checks = vec![provider_check(&settings, choice.as_ref(), engine.is_some())];
    let input = input_checks(&settings, engine.as_deref()).await;
    let refused_input = input.iter().any(|c| c.status == Status::Fail);
    checks.extend(input);
    checks.extend(machine_checks(&settings, choice.as_ref()).await);
    let ok = checks.iter().all(|c| c.status != Status::Fail);
    DoctorReport {
        ok,
        exit_code: match (ok, refused_input) {
            (true, _) => 0,
            (false, true) => Kind::User.exit_code(),
            (false, false) => Kind::Prerequisite.exit_code(),
        },
        profile: settings.profile.clone(),
        stack: settings.name.clone(),
        provider: settings.cluster.provider,
        checks,
    }
}

/// Which provider the checks are for, and why that one.
fn provider_check(settings: &Settings, choice: Option<&Choice>, engine: bool) -> Check {
    let provider = settings.cluster.provider.as_str();
    let detail = match choice.map(|c| &c.reason) {
        Some(Reason::KindMissing(_)) => {
            format!("{provider} instead of Kind, the default: no usable kind CLI (see kind)")
        }
        Some(Reason::Recorded) => {
            format!("{provider}, the provider the stack's cluster was made with")
        }
        Some(Reason::Default) => format!("{provider}, the default, with a usable kind CLI"),
        _ if settings.provider_pinned() => {
            // `--context` (DEVSTACK_CONTEXT) names the existing provider too.
            let context = settings.cluster.provider == Provider::Existing
                && settings.origins.get("cluster.context")
                    == settings.origins.get("cluster.provider");
            match (settings.origins.get("cluster.provider"), context) {
                (Some(Origin::Flag), true) => format!("{provider}, implied by --context"),
                (Some(Origin::Env), true) => {
                    format!("{provider}, implied by {}", envvars::DEVSTACK_CONTEXT)
                }
                (Some(Origin::Flag), false) => format!("{provider}, named by --provider"),
                (Some(Origin::Env), false) => {
                    format!("{provider}, named by {}", envvars::DEVSTACK_PROVIDER)
                }
                _ => format!("{provider}, named by the profile"),
            }
        }
        _ if !engine => format!(
            "{provider}, the default (no Docker engine answers to tell an existing stack's provider)"
        ),
        _ => format!("{provider}, the default"),
    };
    Check::pass("provider", detail)
}

/// What `up` refuses before it reaches anything, of what the user gave:
/// the pins file, `cluster.version`, the offline bundle and the values
/// Flux substitutes. Each is a check only when the profile uses it.
async fn input_checks(settings: &Settings, engine: Option<&dyn Engine>) -> Vec<Check> {
    let mut out = Vec::new();
    let failed = |name: &str, err: Error| {
        Check::fail(
            name,
            err.message(),
            err.hint().unwrap_or("fix it as the message says"),
        )
    };
    let pins = match crate::artifacts::Pins::load(settings.images.pins_file.as_deref()) {
        Ok(pins) => {
            if let Some(path) = &pins.replaced_by {
                out.push(Check::pass(
                    "pins",
                    format!("{} replaces the built-in pins", path.display()),
                ));
            }
            Some(pins)
        }
        Err(err) => {
            out.push(failed("pins", err));
            None
        }
    };
    if let (Some(version), Some(pins)) = (&settings.cluster.version, &pins) {
        out.push(match crate::artifacts::check_version(settings, pins) {
            Ok(()) => Check::pass(
                "cluster version",
                format!("{version}: node image {}", settings.cluster.image),
            ),
            Err(err) => failed("cluster version", err),
        });
    }
    if let Some(dir) = &settings.images.bundle {
        // Without an engine, what it already holds cannot stand in for the
        // bundle's images: only the bundle itself is judged.
        let checked = match engine {
            Some(docker) => crate::bundle::open_checked(settings, docker)
                .await
                .map(|_| ()),
            None => crate::bundle::Bundle::open(dir).map(|_| ()),
        };
        out.push(match checked {
            Ok(()) => Check::pass(
                "bundle",
                format!("{}: holds what the profile asks for", dir.display()),
            ),
            Err(err) => failed("bundle", err),
        });
    }
    if let Err(err) = crate::gitops::repository::check_substitution(settings) {
        out.push(failed("gitops", err));
    }
    out
}

/// Every check of the machine for the profile; never fails as a whole.
async fn machine_checks(settings: &Settings, choice: Option<&Choice>) -> Vec<Check> {
    let mut checks = Vec::new();
    let engine = docker_checks(&mut checks, settings).await;
    checks.extend(binary_checks(settings, choice).await);
    checks.extend(port_checks(settings, engine.as_deref()).await);
    if settings.cluster.provider == Provider::Existing {
        checks.push(existing_cluster_check(settings).await);
    }
    checks.push(kubernetes_check(settings).await);
    if settings.cluster.provider == Provider::K3s {
        checks.push(k3s_support_check(settings));
    }
    checks.push(memory_check());
    let creates_nodes = settings.cluster.provider != Provider::Existing;
    if settings.cluster.provider == Provider::Kind || (creates_nodes && cfg!(target_os = "linux")) {
        checks.push(inotify_check(settings.cluster.provider));
    }
    checks
}

async fn docker_checks(checks: &mut Vec<Check>, settings: &Settings) -> Option<Arc<dyn Engine>> {
    let docker = match docker::connect().await {
        Ok(d) => d,
        // Its nodes pull their images themselves; LocalStack runs in it.
        Err(err) if settings.cluster.provider == Provider::Existing => {
            checks.push(Check::pass(
                "docker",
                format!(
                    "none answers ({}): a stack on an existing cluster needs no Docker engine on this machine (the nodes pull their images)",
                    err.message()
                ),
            ));
            return None;
        }
        Err(err) => {
            checks.push(Check::fail(
                "docker",
                err.message(),
                err.hint().unwrap_or_default(),
            ));
            return None;
        }
    };
    match docker.host().await {
        Ok(host) => {
            checks.push(Check::pass(
                "docker",
                // Which engine, and why that one: `... at unix:///x.sock
                // (context `colima` from ~/.docker/config.json)`.
                format!(
                    "{} at {}",
                    host.summary(),
                    docker::endpoint().map(|e| e.describe()).unwrap_or_default()
                ),
            ));
            if settings.cluster.provider != Provider::Existing {
                checks.push(cgroup_check(&host));
            }
            checks.push(image_store_check(&host));
            if let Some(root) = host.root_dir.as_deref() {
                checks.push(disk_check(Path::new(root)));
            }
        }
        Err(err) => checks.push(Check::fail(
            "docker",
            format!(
                "engine answered ping but not info: {}",
                docker::docker_message(&err)
            ),
            "check the engine's log; devstack needs a working engine",
        )),
    }
    Some(docker)
}

/// Nodes run on either cgroup version; v1 is on its way out upstream.
fn cgroup_check(host: &docker::EngineHost) -> Check {
    match host.cgroup {
        docker::Cgroup::V2 => Check::pass(
            "cgroup",
            "v2: each node empties its root cgroup before Kubernetes starts, whatever the engine's init setting",
        ),
        docker::Cgroup::V1 => Check::warn(
            "cgroup",
            "v1: Kubernetes 1.35 and later refuse it by default (devstack tells its nodes' kubelets to run anyway), \
             and kind's node images since v0.31 are no longer tested on it upstream",
            "move this machine to cgroup v2: a current distribution has it by default; otherwise boot the kernel with \
             `systemd.unified_cgroup_hierarchy=1` (Docker Desktop runs cgroup v2 already)",
        ),
        docker::Cgroup::Unknown => Check::warn(
            "cgroup",
            "the engine does not say which cgroup version its host runs",
            "a Docker engine from 20.10 on reports it; upgrade the engine if `up` fails to start a node",
        ),
    }
}

/// On the containerd image store an image pulled from a multi-platform
/// index holds only this platform: devstack exports that platform alone,
/// which needs API 1.48 (Docker 28).
fn image_store_check(host: &docker::EngineHost) -> Check {
    match (&host.image_store, host.export_platform()) {
        (docker::ImageStore::Classic { driver }, _) => {
            Check::pass("image store", format!("classic ({driver})"))
        }
        (docker::ImageStore::Containerd { snapshotter }, Some(platform)) => Check::pass(
            "image store",
            format!("containerd ({snapshotter}): images are saved for {platform} only"),
        ),
        (docker::ImageStore::Containerd { snapshotter }, None) => Check::warn(
            "image store",
            format!(
                "containerd ({snapshotter}) on API {}: this engine cannot save one platform of a multi-platform image, \
                 so filling devstack's cache from a pull fails",
                host.api
            ),
            "upgrade to Docker 28 or later, or turn the containerd image store off \
             (Docker Desktop: Settings > General > \"Use containerd for pulling and storing images\")",
        ),
    }
}

fn disk_check(root: &Path) -> Check {
    match hostinfo::free_disk(root) {
        // The engine may be remote (DOCKER_HOST); its root dir is not ours to measure.
        None => Check::pass(
            "disk",
            format!("{} not visible from here; skipped", root.display()),
        ),
        Some(free) if free < MIN_DISK => Check::fail(
            "disk",
            format!(
                "{} free under {}",
                hostinfo::human_bytes(free),
                root.display()
            ),
            "free at least 2 GiB (`docker system prune` removes unused images and containers)",
        ),
        Some(free) if free < GOOD_DISK => Check::warn(
            "disk",
            format!(
                "{} free under {}",
                hostinfo::human_bytes(free),
                root.display()
            ),
            "10 GiB or more is recommended for node images and LocalStack",
        ),
        Some(free) => Check::pass(
            "disk",
            format!(
                "{} free under {}",
                hostinfo::human_bytes(free),
                root.display()
            ),
        ),
    }
}

async fn binary_checks(settings: &Settings, choice: Option<&Choice>) -> Vec<Check> {
    let mut out = vec![kind_check(settings, choice).await];
    // Optional: devstack installs Flux and charts itself; these only help
    // inspecting the stack by hand.
    let tools: [(&str, &[&str]); 3] = [
        ("kubectl", &["version", "--client"]),
        ("flux", &["version", "--client"]),
        ("helm", &["version", "--short"]),
    ];
    for (tool, args) in tools {
        match which::which(tool) {
            Ok(path) => {
                let version = hostinfo::tool_version(&path, args).await;
                out.push(Check::pass(
                    tool,
                    format!(
                        "{} ({})",
                        version.unwrap_or_else(|| "version unknown".into()),
                        path.display()
                    ),
                ));
            }
            Err(_) => out.push(Check::pass(tool, "not installed (optional)")),
        }
    }
    out
}

/// An existing cluster: its context, its API server and the rights `up`
/// needs, as `up`'s preflight judges them.
async fn existing_cluster_check(settings: &Settings) -> Check {
    match crate::stack::check_existing_cluster(settings).await {
        Ok((context, server)) => Check::pass(
            "cluster",
            format!(
                "context `{context}` at {server}: the API server answers and allows all devstack does"
            ),
        ),
        Err(e) => Check::fail(
            "cluster",
            e.message().to_string(),
            e.hint()
                .unwrap_or("check the context (`--context NAME`)")
                .to_string(),
        ),
    }
}

/// The Kubernetes version against the ranges devstack knows (Flux 2.9,
/// ESO 2.9): the running stack's API server, else the node image's tag.
/// Outside a range is a warning: the stack still runs.
async fn kubernetes_check(settings: &Settings) -> Check {
    let existing = match settings.cluster.provider {
        Provider::Existing => crate::cluster::existing::server_version(settings)
            .await
            .ok(),
        _ => None,
    };
    let (version, source) = match crate::k8s::version::check(settings).await {
        Some(check) => (
            crate::versions::parse_kube_version(&check.version),
            format!("{} (the stack's API server)", check.version),
        ),
        None if existing.is_some() => {
            let version = existing.unwrap_or_default();
            (
                crate::versions::parse_kube_version(&version),
                format!("{version} (the existing cluster's API server)"),
            )
        }
        None if settings.cluster.provider == Provider::Existing => (
            None,
            "the existing cluster's API server does not answer".into(),
        ),
        None => (
            crate::versions::kubernetes_of_image(&settings.cluster.image),
            format!("from the node image {}", settings.cluster.image),
        ),
    };
    let Some(version) = version else {
        return Check::pass(
            "kubernetes",
            format!("version unknown ({source}); not checked"),
        );
    };
    let (major, minor, patch) = version;
    let warnings = crate::versions::kubernetes_warnings(version);
    if warnings.is_empty() {
        return Check::pass(
            "kubernetes",
            format!("{major}.{minor}.{patch} {source}: within Flux 2.9's and ESO 2.9's ranges"),
        );
    }
    Check::warn(
        "kubernetes",
        format!("{major}.{minor}.{patch} {source}: {}", warnings.join("; ")),
        format!(
            "Kind runs Kubernetes 1.36 (`--provider kind`, node image {})",
            crate::versions::KIND_NODE_IMAGE
        ),
    )
}

/// K3s's support status, from the version matrix.
fn k3s_support_check(settings: &Settings) -> Check {
    let k3s = crate::versions::component("k3s").expect("the matrix has K3s");
    if settings.cluster.image == k3s.default {
        Check::warn(
            "k3s",
            format!(
                "{}: {} ({})",
                k3s.default,
                k3s.support.as_str(),
                k3s.support_note
            ),
            "the Kind provider runs a supported Kubernetes; any `rancher/k3s` tag works online with `cluster.image`",
        )
    } else {
        Check::pass(
            "k3s",
            format!(
                "{} (devstack's default {} is {})",
                settings.cluster.image,
                k3s.default,
                k3s.support.as_str()
            ),
        )
    }
}

/// kind as the Kind provider finds it (DEVSTACK_KIND, PATH, the bundle or
/// devstack's cache). Without one, `up` fetches the pinned release, so only
/// a broken DEVSTACK_KIND (which is used alone) fails. A profile that lets
/// `up` choose gets K3s instead: a warning, as `up`'s notice is.
async fn kind_check(settings: &Settings, choice: Option<&Choice>) -> Check {
    if let Some(Reason::KindMissing(why)) = choice.map(|c| &c.reason) {
        let fix = match crate::cluster::kind::find_installed_kind(settings).await {
            Err(err) if envvars::is_set(envvars::DEVSTACK_KIND) => err
                .hint()
                .unwrap_or(crate::cluster::kind::INSTALL_HINT)
                .to_string(),
            _ => crate::cluster::kind::INSTALL_HINT.to_string(),
        };
        return Check::warn(
            "kind",
            format!("{why}: a new stack uses K3s instead of Kind, the default provider"),
            format!(
                "{fix}; `--provider k3s` (or `cluster.provider: k3s`) chooses K3s without this warning"
            ),
        );
    }
    let wanted = settings.cluster.provider == Provider::Kind;
    match crate::cluster::kind::find_installed_kind(settings).await {
        Ok(cli) => Check::pass(
            "kind",
            format!(
                "{} ({}, from {})",
                cli.version_line,
                cli.path.display(),
                cli.origin
            ),
        ),
        Err(err) if crate::envvars::is_set(crate::envvars::DEVSTACK_KIND) => Check::fail(
            "kind",
            err.message(),
            err.hint().unwrap_or(crate::cluster::kind::INSTALL_HINT),
        ),
        Err(err) if wanted => match crate::artifacts::kind_reachable(settings).await {
            Ok(url) => Check::warn(
                "kind",
                format!(
                    "not installed: `devstack up` fetches kind {} from {url} (checksum verified) into devstack's cache",
                    crate::versions::KIND_CLI_VERSION
                ),
                format!(
                    "nothing to do; to skip the download, install kind {} (https://kind.sigs.k8s.io/docs/user/quick-start/#installation) or point {} at one",
                    crate::versions::KIND_CLI_VERSION,
                    crate::envvars::DEVSTACK_KIND
                ),
            ),
            Err(why) => Check::fail(
                "kind",
                format!("{}, and it cannot be fetched: {why}", err.message()),
                format!(
                    "{}; or set {} to a mirror of the download; or use `--provider k3s`, which needs only Docker",
                    crate::cluster::kind::INSTALL_HINT,
                    crate::envvars::DEVSTACK_DOWNLOAD_MIRROR
                ),
            ),
        },
        Err(_) => Check::pass("kind", "not found (only the Kind provider needs it)"),
    }
}

/// Ports the profile publishes on the host.
pub fn required_ports(settings: &Settings) -> Vec<(String, IpAddr, u16)> {
    let mut ports = Vec::new();
    // `auto` ports are chosen free at creation: nothing to check.
    if let Some(port) = settings.localstack.port.fixed() {
        ports.push((
            "localstack".to_string(),
            settings.localstack.bind_address,
            port,
        ));
    }
    if let Some(port) = settings.cluster.api_server_port.fixed() {
        ports.push(("api-server".into(), IpAddr::from([127, 0, 0, 1]), port));
    }
    for mapping in &settings.cluster.ports {
        let addr = mapping
            .bind_address
            .parse()
            .unwrap_or(IpAddr::from([127, 0, 0, 1]));
        ports.push((
            format!("port {}", mapping.host_port),
            addr,
            mapping.host_port,
        ));
    }
    ports
}

async fn port_checks(settings: &Settings, engine: Option<&dyn Engine>) -> Vec<Check> {
    let mut out = Vec::new();
    let owned = match engine {
        Some(d) => docker_port_owners(d).await,
        None => Vec::new(),
    };
    for (what, address, port) in required_ports(settings) {
        let name = format!("port {port}");
        let owner = owned.iter().find(|(p, _, _)| *p == port);
        if let Some((_, container, stack)) = owner
            && stack.as_deref() == Some(settings.name.as_str())
        {
            out.push(Check::pass(
                &name,
                format!("{what}: held by this stack's {container}"),
            ));
            continue;
        }
        if hostinfo::port_is_free(address, port) {
            out.push(Check::pass(&name, format!("{what}: free on {address}")));
            continue;
        }
        let holder = match owner {
            Some((_, container, _)) => format!("container {container}"),
            None => hostinfo::port_holder(port).unwrap_or_else(|| "another process".into()),
        };
        out.push(Check::fail(
            &name,
            format!("{what}: {address}:{port} is taken by {holder}"),
            format!("stop {holder}, or choose another port in the profile (e.g. `localstack.port`) or with the matching environment variable"),
        ));
    }
    out
}

/// (host port, container name, devstack stack label) for running containers.
async fn docker_port_owners(docker: &dyn Engine) -> Vec<(u16, String, Option<String>)> {
    let Ok(containers) = docker.running_containers().await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in containers {
        let name = c
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_default();
        let stack = c
            .labels
            .as_ref()
            .and_then(|l| l.get(docker::LABEL_STACK).cloned());
        for p in c.ports.unwrap_or_default() {
            if let Some(public) = p.public_port {
                out.push((public, name.clone(), stack.clone()));
            }
        }
    }
    out
}

fn memory_check() -> Check {
    match hostinfo::available_memory() {
        None => Check::pass("memory", "unknown (no /proc/meminfo); skipped"),
        Some(m) if m < MIN_MEMORY => Check::fail(
            "memory",
            format!("{} available", hostinfo::human_bytes(m)),
            "a stack needs about 2 GiB: close other programs or stop other clusters (`devstack down --all`)",
        ),
        Some(m) if m < GOOD_MEMORY => Check::warn(
            "memory",
            format!("{} available", hostinfo::human_bytes(m)),
            "4 GiB or more is recommended",
        ),
        Some(m) => Check::pass("memory", format!("{} available", hostinfo::human_bytes(m))),
    }
}

fn inotify_check(provider: Provider) -> Check {
    let watches = hostinfo::read_sysctl("/proc/sys/fs/inotify/max_user_watches");
    let instances = hostinfo::read_sysctl("/proc/sys/fs/inotify/max_user_instances");
    let (Some(watches), Some(instances)) = (watches, instances) else {
        return Check::pass("inotify", "limits not readable; skipped");
    };
    let detail = format!("max_user_watches={watches}, max_user_instances={instances}");
    if watches >= INOTIFY_WATCHES && instances >= INOTIFY_INSTANCES {
        return Check::pass("inotify", detail);
    }
    let hint = format!(
        "raise the limits: `sudo sysctl fs.inotify.max_user_watches={INOTIFY_WATCHES} fs.inotify.max_user_instances={INOTIFY_INSTANCES}` (persist in /etc/sysctl.d/)"
    );
    // Kind nodes run systemd and many watchers; they fail with "too many open
    // files" below these limits. A single K3s node rarely does.
    match provider {
        Provider::Kind => Check::fail("inotify", format!("{detail} (too low for Kind)"), hint),
        Provider::K3s => Check::warn("inotify", format!("{detail} (low)"), hint),
        Provider::Existing => Check::pass("inotify", detail),
    }
}
