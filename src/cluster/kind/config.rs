//! The Kind cluster config devstack writes from the profile, and the
//! containerd `hosts.toml` files of its registry mirrors.

use std::path::PathBuf;

use serde::Serialize;

use super::{MARKER_IN_NODE, REGISTRY_CONFIG_DIR, ROLE_CONTROL_PLANE, ROLE_WORKER, cluster_name};
use crate::docker::Cgroup;
use crate::error::Error;
use crate::profile::Settings;

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
/// node image, and only on cgroup v1 hosts: elsewhere the kubelet's default
/// is right, and saying nothing keeps the config what kind users know.
const KUBELET_CGROUP_V1_PATCH: &str = "kind: KubeletConfiguration\nfailCgroupV1: false\n";

/// Flux's downloads and ESO's webhook go through Services of pods just turned
/// Ready: kube-proxy programs them within 0.1 s, not 1 s (0 reads as unset).
const KUBE_PROXY_SYNC_AT_ONCE_PATCH: &str =
    "kind: KubeProxyConfiguration\niptables:\n  minSyncPeriod: 100ms\n";

/// kubeadm makes about 16 RSA-2048 keys, one after another, while the
/// control plane's components wait for them and kind's other node competes
/// for the CPU; ECDSA P-256 keys take microseconds each. The field is
/// kubeadm's v1beta4 (Kubernetes >= 1.31); the patch names that version, so
/// kind applies it only where it writes a v1beta4 config (kind >= v0.32 for
/// Kubernetes >= 1.36) and leaves an older config as it is.
const ECDSA_KEYS_PATCH: &str = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nencryptionAlgorithm: ECDSA-P256\n";

/// The first Kubernetes whose kubeadm knows `encryptionAlgorithm`.
const ECDSA_KEYS_SINCE: (u64, u64, u64) = (1, 31, 0);

/// Whether the node image's kubeadm can make ECDSA keys; an image whose tag
/// names no version is left to kubeadm's default.
fn ecdsa_keys_supported(image: &str) -> bool {
    crate::versions::kubernetes_of_image(image).is_some_and(|v| v >= ECDSA_KEYS_SINCE)
}

/// The directory whose bind mount marks a kind cluster as this stack's.
/// Absolute but not canonicalized: Docker records the source as given, and
/// the same settings must compute the same path on every run.
pub fn owner_marker_dir(settings: &Settings) -> PathBuf {
    let dir = crate::state::stack_dir(settings).join("kind-owner");
    std::path::absolute(&dir).unwrap_or(dir)
}

/// Writes the stack's owner marker (the directory the nodes mount, holding
/// the stack's name) and returns its directory.
pub(super) fn write_owner_marker(settings: &Settings) -> Result<PathBuf, Error> {
    let marker = owner_marker_dir(settings);
    std::fs::create_dir_all(&marker)
        .and_then(|()| std::fs::write(marker.join("stack"), format!("{}\n", settings.name)))
        .map_err(|e| {
            Error::internal(format!("cannot create {}", marker.display()))
                .with_source(e)
                .with_hint("make devstack's state directory (DEVSTACK_HOME) writable")
        })?;
    Ok(marker)
}

/// The Kind cluster config (`kind.x-k8s.io/v1alpha4`) for the profile.
///
/// Registry mirrors only switch containerd to `hosts.toml` files here; the
/// files themselves are written into the nodes after creation. The older
/// inline `registry.mirrors` table cannot be used: containerd refuses to
/// start its CRI plugin when it is combined with `config_path`, which
/// recent kind node images set by default.
pub fn config_yaml(settings: &Settings, api_port: u16, cgroup: Cgroup) -> String {
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
        kubeadm_config_patches: (cgroup == Cgroup::V1)
            .then_some(KUBELET_CGROUP_V1_PATCH)
            .into_iter()
            .chain([KUBE_PROXY_SYNC_AT_ONCE_PATCH])
            .chain(ecdsa_keys_supported(image).then_some(ECDSA_KEYS_PATCH))
            .collect(),
        containerd_config_patches: patches,
    };
    serde_saphyr::to_string(&config).expect("the kind config is plain strings and numbers")
}

/// containerd's `hosts.toml` for one mirrored registry: the mirrors in
/// order, then the registry itself as the fallback.
pub(super) fn hosts_toml(registry: &str, endpoints: &[String]) -> String {
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
pub(super) fn validate_mirrors(settings: &Settings) -> Result<(), Error> {
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

#[cfg(test)]
mod tests {
    use super::super::cluster_name;
    use super::*;
    use crate::error::Kind;
    use crate::profile::schema::PortMappingSpec;
    use crate::profile::{Overrides, Provider};
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
        let yaml = config_yaml(settings, port, Cgroup::V1);
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
                    "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nencryptionAlgorithm: ECDSA-P256\n",
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
        let text = config_yaml(&settings, 6443, Cgroup::V1);
        assert_eq!(text, config_yaml(&settings, 6443, Cgroup::V1));
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
- |
  apiVersion: kubeadm.k8s.io/v1beta4
  kind: ClusterConfiguration
  encryptionAlgorithm: ECDSA-P256
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

    #[test]
    fn cgroup_v1_is_allowed_only_on_cgroup_v1_hosts() {
        let settings = kind_settings();
        for cgroup in [Cgroup::V2, Cgroup::Unknown] {
            let yaml = config_yaml(&settings, 6443, cgroup);
            assert!(!yaml.contains("failCgroupV1"), "{cgroup:?}:\n{yaml}");
            assert!(yaml.contains("KubeProxyConfiguration"), "{yaml}");
        }
        assert!(config_yaml(&settings, 6443, Cgroup::V1).contains("failCgroupV1: false"));
    }

    #[test]
    fn ecdsa_keys_only_where_the_node_image_kubeadm_knows_them() {
        let mut settings = kind_settings();
        let ecdsa = |settings: &Settings| {
            config_yaml(settings, 6443, Cgroup::V2).contains("encryptionAlgorithm: ECDSA-P256")
        };
        assert!(ecdsa(&settings), "{}", settings.cluster.image);
        for image in [
            "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed",
            "kindest/node:v1.37.0",
            "kindest/node:v1.31.0",
        ] {
            settings.cluster.image = image.into();
            assert!(ecdsa(&settings), "{image}");
        }
        for image in [
            "kindest/node:v1.30.13",
            "kindest/node:latest",
            "registry.example/node",
        ] {
            settings.cluster.image = image.into();
            assert!(!ecdsa(&settings), "{image}");
        }
    }
}
