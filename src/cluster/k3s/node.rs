//! Creating K3s node containers: their command, volumes, staged images,
//! registry mirrors and published ports.

use std::collections::HashMap;

use super::images::{NodeTarball, Stage, file_name, node_tarballs, staged_images_dir};
use super::{
    API_PORT, IMAGES_IN_NODE, LABEL_API_PORT, LABEL_FIXED_ARGS, LABEL_NODE_NAME, PRELOAD_IN_NODE,
    REGISTRIES_IN_NODE, ROLE_AGENT, ROLE_SERVER, SHARED_IN_NODE, STATE_PATHS, node_labels,
};
use crate::cluster::{kubeconfig, node_name};
use crate::docker::models::{
    ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum, PortBinding, PortMap,
    VolumeCreateRequest,
};
use crate::docker::{self, Cgroup, Engine};
use crate::error::Error;
use crate::profile::Settings;
use crate::ui::Step;

/// Where flannel's subnet file lives across a node's restarts, in its K3s
/// volume; `/run/flannel` points here (see [`node_entrypoint`]).
const FLANNEL_RUN_IN_NODE: &str = "/var/lib/rancher/k3s/agent/flannel-run";

/// Runs K3s with `/run/flannel` kept in the node's K3s volume: `/run` is a
/// tmpfs, and without flannel's `subnet.env` a node that starts again fails
/// its pods' first sandboxes. The shell's `$0` is `k3s`; the node's
/// arguments follow.
///
/// On cgroup v2 the kubelet needs the container's root cgroup free of
/// processes before it creates its own below it ("cannot enter cgroupv2
/// ... with domain controllers", k3s #4085). K3s moves them itself only
/// when it is PID 1 outside a user namespace; an engine whose daemon.json
/// says `"init": true` makes docker-init PID 1 instead. So, as moby's
/// dind does, the node moves every process of its root cgroup into
/// `init/` and enables the controllers for the children before K3s starts,
/// whatever PID 1 is. Shell builtins only: node images need not carry
/// xargs or sed.
fn node_entrypoint() -> Vec<String> {
    let script = format!(
        "{}\nmkdir -p {FLANNEL_RUN_IN_NODE} && rm -rf /run/flannel \
         && ln -s {FLANNEL_RUN_IN_NODE} /run/flannel && exec /bin/k3s \"$@\"",
        evacuate_root_cgroup("/sys/fs/cgroup")
    );
    vec!["/bin/sh".into(), "-c".into(), script, "k3s".into()]
}

/// The shell that empties the root cgroup `root` on cgroup v2 (a no-op on
/// v1, where `cgroup.controllers` does not exist). Controllers cannot be
/// enabled for children while processes sit in the root, hence the move
/// first; a process that exits meanwhile makes its write fail, not the node.
pub(crate) fn evacuate_root_cgroup(root: &str) -> String {
    [
        format!("if [ -f {root}/cgroup.controllers ]; then"),
        format!("mkdir -p {root}/init"),
        format!(
            "while read -r pid; do echo \"$pid\" >> {root}/init/cgroup.procs 2>/dev/null || :; done < {root}/cgroup.procs"
        ),
        format!("read -r controllers < {root}/cgroup.controllers || :"),
        "enable=".to_string(),
        "for c in $controllers; do enable=\"${enable:+$enable }+$c\"; done".to_string(),
        format!("[ -z \"$enable\" ] || echo \"$enable\" > {root}/cgroup.subtree_control || :"),
        "fi".to_string(),
    ]
    .join("\n")
}

/// Flux's downloads and ESO's webhook go through Services of pods just turned
/// Ready: kube-proxy programs them at once, not within its default second.
const KUBE_PROXY_SYNC_AT_ONCE: &str = "--kube-proxy-arg=iptables-min-sync-period=0s";

/// The kubelet sees the host's disk, which the node shares with everything
/// else there: on a disk over 85 % full its defaults would taint the node
/// DiskPressure (pods stay Pending) and garbage-collect the images devstack
/// imported. As kind does, a node leaves the host's disk to its owner.
const KUBELET_LEAVES_THE_HOST_DISK_ALONE: [&str; 2] = [
    "--kubelet-arg=eviction-hard=imagefs.available<0%,nodefs.available<0%,nodefs.inodesFree<0%",
    "--kubelet-arg=image-gc-high-threshold=100",
];

/// Kubelets from Kubernetes 1.35 on refuse cgroup v1 hosts unless told
/// otherwise; the flag exists from 1.31 on.
const KUBELET_ALLOWS_CGROUP_V1: &str = "--kubelet-arg=fail-cgroupv1=false";

/// Arguments the host's shape asks of a node: on a cgroup v1 host, a
/// kubelet that knows `fail-cgroupv1` is told to run anyway. Nothing on
/// cgroup v2, where the flag's default is right, nor for K3s older than
/// 1.31, whose kubelet would refuse the unknown flag.
pub(super) fn host_args(settings: &Settings, cgroup: Cgroup) -> Vec<String> {
    let knows_the_flag = k3s_version(&settings.cluster.image).is_some_and(|v| v >= (1, 31));
    if cgroup == Cgroup::V1 && knows_the_flag {
        vec![KUBELET_ALLOWS_CGROUP_V1.to_string()]
    } else {
        Vec::new()
    }
}

/// Kubernetes' `(major, minor)` from a K3s image's tag (`rancher/k3s:v1.32.0-k3s1`).
fn k3s_version(image: &str) -> Option<(u64, u64)> {
    let without_digest = image.split('@').next()?;
    let (_, tag) = without_digest
        .rsplit_once('/')
        .unwrap_or(("", without_digest));
    let (_, tag) = tag.split_once(':')?;
    crate::hostinfo::parse_semver(tag).map(|(major, minor, _)| (major, minor))
}

/// devstack's own arguments of the server (recorded as LABEL_FIXED_ARGS,
/// which `plan` skips). `identity` is its Kubernetes node name: the
/// container's name, or for a node restored from a snapshot the name it had
/// there, which its pods and leases are bound to.
pub(super) fn own_server_args(settings: &Settings, identity: &str) -> Vec<String> {
    let server = node_name(settings, "server", 0);
    let mut args = vec![
        "server".to_string(),
        "--disable=traefik,servicelb,metrics-server,local-storage".into(),
        "--tls-san=127.0.0.1".into(),
        format!("--tls-san={server}"),
        KUBE_PROXY_SYNC_AT_ONCE.into(),
    ];
    args.extend(KUBELET_LEAVES_THE_HOST_DISK_ALONE.map(String::from));
    if identity != server {
        args.push(format!("--tls-san={identity}"));
    }
    args.push(format!("--node-name={identity}"));
    args.push(format!("--https-listen-port={API_PORT}"));
    args
}

/// The server's command: devstack's own arguments, then the profile's
/// `k3sArgs`.
pub(super) fn server_args(settings: &Settings, identity: &str) -> Vec<String> {
    let mut args = own_server_args(settings, identity);
    args.extend(settings.cluster.k3s_args.iter().cloned());
    args
}

/// An agent's command: it joins the server by its container name.
pub(super) fn agent_args(settings: &Settings, identity: &str) -> Vec<String> {
    let mut args = vec!["agent".to_string(), KUBE_PROXY_SYNC_AT_ONCE.into()];
    args.extend(KUBELET_LEAVES_THE_HOST_DISK_ALONE.map(String::from));
    args.push(format!("--node-name={identity}"));
    args.push(format!(
        "--server=https://{}:{API_PORT}",
        node_name(settings, "server", 0)
    ));
    args
}

/// Creates and starts a new cluster's server and agents, with a new token.
pub(super) async fn create_nodes(
    engine: &dyn Engine,
    settings: &Settings,
    api_port: u16,
    step: &Step,
) -> Result<(), Error> {
    let image = &settings.cluster.image;
    let bundle = crate::bundle::open(settings)?;
    step.progress(format!("node image {image}"));
    crate::bundle::ensure_image(engine, image, bundle.as_ref()).await?;
    let tarballs = node_tarballs(engine, settings).await?;
    let token = hex::encode(rand::random::<[u8; 24]>());
    let server = node_name(settings, "server", 0);
    let node = NewNode {
        name: &server,
        identity: &server,
        role: ROLE_SERVER,
        args: server_args(settings, &server),
        token: &token,
        api_port: Some(api_port),
        fixed_args: Some(own_server_args(settings, &server).len()),
        start: true,
        ip: None,
        shared: None,
    };
    create_node(engine, settings, node, &tarballs).await?;
    for index in 0..settings.cluster.agents as usize {
        let agent = node_name(settings, "agent", index);
        let node = NewNode::agent(settings, &agent, &token);
        create_node(engine, settings, node, &tarballs).await?;
    }
    Ok(())
}

/// A node container to create.
pub(super) struct NewNode<'a> {
    pub(super) name: &'a str,
    /// Its Kubernetes node name and hostname.
    pub(super) identity: &'a str,
    pub(super) role: &'a str,
    pub(super) args: Vec<String>,
    pub(super) token: &'a str,
    /// The server's published API port.
    pub(super) api_port: Option<u16>,
    /// How many of the server's `args` are devstack's own.
    pub(super) fixed_args: Option<usize>,
    /// Start it once created (a restored node is filled first).
    pub(super) start: bool,
    /// The address it must have on the stack's network.
    pub(super) ip: Option<&'a str>,
    /// The snapshot volume a restored node shares (at [`SHARED_IN_NODE`]).
    pub(super) shared: Option<&'a str>,
}

impl<'a> NewNode<'a> {
    pub(super) fn agent(settings: &Settings, name: &'a str, token: &'a str) -> Self {
        NewNode {
            name,
            identity: name,
            role: ROLE_AGENT,
            args: agent_args(settings, name),
            token,
            api_port: None,
            fixed_args: None,
            start: true,
            ip: None,
            shared: None,
        }
    }
}

/// Creates a node container (its volumes, staged images, registry mirrors
/// and published ports with it) and starts it unless `node.start` is false.
pub(super) async fn create_node(
    engine: &dyn Engine,
    settings: &Settings,
    node: NewNode<'_>,
    tarballs: &[NodeTarball],
) -> Result<(), Error> {
    let mut node = node;
    let name = node.name;
    let start = node.start;
    let host = engine
        .host()
        .await
        .map_err(|e| docker::engine_error("read the engine's info", e))?;
    // After the role word, among devstack's own arguments (which `plan`
    // skips), so that a node made on another host shape is no drift.
    let extra = host_args(settings, host.cgroup);
    if let Some(fixed) = node.fixed_args.as_mut() {
        *fixed += extra.len();
    }
    node.args.splice(1..1, extra);
    let mut binds = create_state_volumes(engine, settings, name).await?;
    binds.extend(stage_tarballs(settings, name, tarballs)?);
    if let Some(volume) = node.shared {
        binds.push(format!("{volume}:{SHARED_IN_NODE}:ro"));
    }
    if !settings.cluster.registry_mirrors.is_empty() {
        let path = crate::state::stack_dir(settings).join("registries.yaml");
        kubeconfig::write_private(&path, &registries_yaml(settings))?;
        binds.push(format!("{}:{REGISTRIES_IN_NODE}:ro", path.display()));
    }
    let body = container_body(settings, node, binds);
    crate::cluster::create_node_container(engine, name, body, "K3s").await?;
    if !start {
        return Ok(());
    }
    crate::cluster::start_node_container(engine, name).await
}

/// Creates the named volumes of a node's state; returns their binds.
async fn create_state_volumes(
    engine: &dyn Engine,
    settings: &Settings,
    name: &str,
) -> Result<Vec<String>, Error> {
    let mut binds = Vec::new();
    for (suffix, path) in STATE_PATHS {
        let volume = format!("{name}-{suffix}");
        engine
            .create_volume(VolumeCreateRequest {
                name: Some(volume.clone()),
                labels: Some(node_labels(settings, "volume")),
                ..Default::default()
            })
            .await
            .map_err(|e| docker::engine_error(format!("create volume {volume}"), e))?;
        binds.push(format!("{volume}:{path}"));
    }
    Ok(binds)
}

/// Hard-links the tarballs into the node's two staged directories (K3s
/// imports what its own pods run, devstack the rest while the node boots:
/// K3s leaves its imports packed, `ctr import` unpacks); returns the binds
/// of both directories and of each tarball that could not be linked.
fn stage_tarballs(
    settings: &Settings,
    name: &str,
    tarballs: &[NodeTarball],
) -> Result<Vec<String>, Error> {
    let mut binds = Vec::new();
    let staged = staged_images_dir(settings, name);
    let _ = std::fs::remove_dir_all(&staged);
    for (stage, in_node) in [
        (Stage::Boot, IMAGES_IN_NODE),
        (Stage::Devstack, PRELOAD_IN_NODE),
    ] {
        let dir = stage.dir(&staged);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::internal(format!("create {}", dir.display())).with_source(e))?;
        binds.push(format!("{}:{in_node}", dir.display()));
    }
    for (index, tarball) in tarballs.iter().enumerate() {
        let absolute =
            std::fs::canonicalize(&tarball.path).unwrap_or_else(|_| tarball.path.clone());
        let file = format!("{index:02}-{}", file_name(&absolute));
        let (stage, in_node) = if tarball.at_boot {
            (Stage::Boot, IMAGES_IN_NODE)
        } else {
            (Stage::Devstack, PRELOAD_IN_NODE)
        };
        // Another filesystem: mounted as a file instead.
        if std::fs::hard_link(&absolute, stage.dir(&staged).join(&file)).is_err() {
            binds.push(format!("{}:{in_node}/{file}:ro", absolute.display()));
        }
    }
    Ok(binds)
}

/// The server's published ports (its API server's, then `cluster.ports`):
/// the exposed port keys and their bindings. None for an agent.
fn published(settings: &Settings, api_port: Option<u16>) -> (Vec<String>, PortMap) {
    let mut port_bindings = HashMap::new();
    let mut exposed = Vec::new();
    if let Some(port) = api_port {
        let key = format!("{API_PORT}/tcp");
        exposed.push(key.clone());
        port_bindings.insert(
            key,
            Some(vec![PortBinding {
                host_ip: Some("127.0.0.1".into()),
                host_port: Some(port.to_string()),
            }]),
        );
        for mapping in &settings.cluster.ports {
            let key = format!("{}/{}", mapping.container_port, mapping.protocol);
            exposed.push(key.clone());
            port_bindings.insert(
                key,
                Some(vec![PortBinding {
                    host_ip: Some(mapping.bind_address.clone()),
                    host_port: Some(mapping.host_port.to_string()),
                }]),
            );
        }
    }
    (exposed, port_bindings)
}

/// The node's labels: its role, Kubernetes name and, on the server, its API
/// port and how many of its arguments are devstack's own.
fn new_node_labels(settings: &Settings, node: &NewNode<'_>) -> HashMap<String, String> {
    let mut labels = node_labels(settings, node.role);
    labels.insert(LABEL_NODE_NAME.into(), node.identity.to_string());
    if let Some(port) = node.api_port {
        labels.insert(LABEL_API_PORT.into(), port.to_string());
    }
    if let Some(count) = node.fixed_args {
        labels.insert(LABEL_FIXED_ARGS.into(), count.to_string());
    }
    labels
}

/// The container spec of a node: privileged, on the stack network (at
/// `node.ip` when given), `/run` a tmpfs.
fn container_body(
    settings: &Settings,
    node: NewNode<'_>,
    binds: Vec<String>,
) -> ContainerCreateBody {
    let labels = new_node_labels(settings, &node);
    let (exposed, port_bindings) = published(settings, node.api_port);
    let mut env = vec![format!("K3S_TOKEN={}", node.token)];
    if node.role == ROLE_AGENT {
        env.push(format!(
            "K3S_URL=https://{}:{API_PORT}",
            node_name(settings, "server", 0)
        ));
    }
    ContainerCreateBody {
        image: Some(settings.cluster.image.clone()),
        entrypoint: Some(node_entrypoint()),
        cmd: Some(node.args),
        env: Some(env),
        hostname: Some(node.identity.to_string()),
        networking_config: node.ip.map(|ip| docker::models::NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                settings.resource_prefix(),
                docker::models::EndpointSettings {
                    ipam_config: Some(docker::models::EndpointIpamConfig {
                        ipv4_address: Some(ip.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )])),
        }),
        labels: Some(labels),
        exposed_ports: Some(exposed),
        host_config: Some(HostConfig {
            privileged: Some(true),
            // As kind's nodes: K3s runs its own init and reaps its own
            // children, so an engine default of `"init": true` must not put
            // docker-init in front of it (on cgroup v2 K3s then cannot empty
            // the root cgroup), and a private cgroup namespace gives the
            // kubelet a cgroup tree rooted at the node.
            init: Some(false),
            cgroupns_mode: Some(HostConfigCgroupnsModeEnum::PRIVATE),
            binds: Some(binds),
            port_bindings: Some(port_bindings),
            network_mode: Some(settings.resource_prefix()),
            tmpfs: Some(HashMap::from([
                ("/run".to_string(), String::new()),
                ("/var/run".to_string(), String::new()),
            ])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn registries_yaml(settings: &Settings) -> String {
    let mut out = String::from("mirrors:\n");
    for (registry, endpoints) in &settings.cluster.registry_mirrors {
        out.push_str(&format!(
            "  {}:\n    endpoint:\n",
            serde_json::to_string(registry).expect("string")
        ));
        for endpoint in endpoints {
            out.push_str(&format!(
                "      - {}\n",
                serde_json::to_string(endpoint).expect("string")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::settings;
    use super::*;

    #[test]
    fn a_restored_server_keeps_its_kubernetes_name_and_answers_to_both_names() {
        let settings = settings("");
        let args = own_server_args(&settings, "devstack-old-server-0");
        assert!(args.contains(&"--node-name=devstack-old-server-0".to_string()));
        assert!(args.contains(&"--tls-san=devstack-old-server-0".to_string()));
        assert!(args.contains(&format!("--tls-san={}", node_name(&settings, "server", 0))));
        let own = own_server_args(&settings, &node_name(&settings, "server", 0));
        assert!(
            own.contains(&KUBE_PROXY_SYNC_AT_ONCE.to_string()),
            "{own:?}"
        );
    }

    #[test]
    fn nodes_state_init_false_and_a_private_cgroup_namespace_whatever_the_engine_defaults() {
        let settings = settings("");
        let node = NewNode::agent(&settings, "devstack-t-agent-0", "token");
        let body = container_body(&settings, node, Vec::new());
        let host = body.host_config.expect("a host config");
        assert_eq!(host.init, Some(false));
        assert_eq!(
            host.cgroupns_mode,
            Some(HostConfigCgroupnsModeEnum::PRIVATE)
        );
        assert_eq!(host.privileged, Some(true));
        let entrypoint = body.entrypoint.expect("an entrypoint").join(" ");
        assert!(
            entrypoint.contains(&evacuate_root_cgroup("/sys/fs/cgroup")),
            "{entrypoint}"
        );
        assert!(
            entrypoint.ends_with("exec /bin/k3s \"$@\" k3s"),
            "{entrypoint}"
        );
    }

    /// The evacuation run by a real shell on a directory laid out as a
    /// cgroup v2 root: the processes listed move to `init/`, and every
    /// controller is enabled for the children.
    #[test]
    fn the_root_cgroup_is_emptied_and_its_controllers_enabled_on_cgroup_v2() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().display().to_string();
        std::fs::write(
            root.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        std::fs::write(root.path().join("cgroup.procs"), "1\n7\n42\n").unwrap();
        let status = std::process::Command::new("/bin/sh")
            .args(["-c", &evacuate_root_cgroup(&path)])
            .status()
            .unwrap();
        assert!(status.success());
        let moved = std::fs::read_to_string(root.path().join("init/cgroup.procs")).unwrap();
        assert_eq!(moved, "1\n7\n42\n");
        let enabled = std::fs::read_to_string(root.path().join("cgroup.subtree_control")).unwrap();
        assert_eq!(enabled, "+cpuset +cpu +io +memory +pids\n");
    }

    #[test]
    fn a_cgroup_v1_root_is_left_alone() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.procs"), "1\n").unwrap();
        let status = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                &evacuate_root_cgroup(&root.path().display().to_string()),
            ])
            .status()
            .unwrap();
        assert!(status.success());
        assert!(!root.path().join("init").exists());
        assert!(!root.path().join("cgroup.subtree_control").exists());
    }

    #[test]
    fn cgroup_v1_is_allowed_only_on_cgroup_v1_hosts_and_kubelets_that_know_the_flag() {
        let settings = settings("");
        assert_eq!(
            host_args(&settings, Cgroup::V1),
            [KUBELET_ALLOWS_CGROUP_V1.to_string()],
            "{}",
            settings.cluster.image
        );
        assert!(host_args(&settings, Cgroup::V2).is_empty());
        assert!(host_args(&settings, Cgroup::Unknown).is_empty());
        let old = super::super::tests::settings("  image: rancher/k3s:v1.30.8-k3s1\n");
        assert!(host_args(&old, Cgroup::V1).is_empty());
        assert_eq!(
            k3s_version("registry.local:5000/rancher/k3s:v1.36.2-k3s1@sha256:ab"),
            Some((1, 36))
        );
        assert_eq!(k3s_version("k3s"), None);
    }

    #[tokio::test]
    async fn a_node_made_on_a_cgroup_v1_host_gets_the_flag_among_devstacks_own_arguments() {
        let f = super::super::engine_tests::fixture("");
        let server = node_name(&f.settings, "server", 0);
        let node = NewNode {
            name: &server,
            identity: &server,
            role: ROLE_SERVER,
            args: server_args(&f.settings, &server),
            token: "t",
            api_port: Some(6550),
            fixed_args: Some(own_server_args(&f.settings, &server).len()),
            start: false,
            ip: None,
            shared: None,
        };
        create_node(f.engine.as_ref(), &f.settings, node, &[])
            .await
            .unwrap();
        let made = f.engine.container(&server).unwrap();
        assert_eq!(made.cmd[0], "server");
        assert_eq!(made.cmd[1], KUBELET_ALLOWS_CGROUP_V1);
        assert_eq!(
            made.labels[LABEL_FIXED_ARGS],
            (own_server_args(&f.settings, &server).len() + 1).to_string()
        );

        f.engine
            .with(|s| s.host = crate::docker::fake::containerd_cgroup_v2_host());
        let agent = node_name(&f.settings, "agent", 0);
        let node = NewNode::agent(&f.settings, &agent, "t");
        create_node(f.engine.as_ref(), &f.settings, node, &[])
            .await
            .unwrap();
        let made = f.engine.container(&agent).unwrap();
        assert_eq!(made.cmd, agent_args(&f.settings, &agent));
    }
}
