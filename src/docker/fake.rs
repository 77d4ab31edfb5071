//! An in-memory [`Engine`] for unit tests: containers, volumes, networks and
//! images as plain maps, so converge, drift and rollback logic runs without
//! Docker. Only what devstack's logic reads is modelled; `exec` answers
//! through a handler the test installs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerConfig, ContainerCreateBody, ContainerInspectResponse, ContainerState,
    ContainerSummary, ContainerSummaryStateEnum, CreateImageInfo, ImageInspect, MountPoint,
    Network, NetworkCreateRequest, NetworkInspect, VolumeCreateRequest,
};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use super::engine::{Engine, EngineResult};
use super::host::{Cgroup, EngineHost, ImageStore};
use crate::error::Error;

#[derive(Debug, Clone, Default)]
pub struct FakeContainer {
    pub image: String,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub labels: HashMap<String, String>,
    pub binds: Vec<String>,
    pub running: bool,
    pub paused: bool,
    pub networks: BTreeSet<String>,
    /// Published ports: (port in the container, port on the host).
    pub ports: Vec<(u16, u16)>,
    /// Files written into the container (`upload`), by path.
    pub files: BTreeMap<String, PathBuf>,
    /// Tar archives extracted into the container (`upload_archive`), by
    /// directory; `download_archive` of that directory returns them.
    pub archives: BTreeMap<String, Vec<u8>>,
    /// The hostname it was created with.
    pub hostname: Option<String>,
    /// What `logs_tail` returns.
    pub log: String,
}

type ExecHandler = Box<dyn Fn(&str, &[&str]) -> (i64, String) + Send + Sync>;

pub struct State {
    pub containers: BTreeMap<String, FakeContainer>,
    pub volumes: BTreeMap<String, HashMap<String, String>>,
    pub networks: BTreeMap<String, HashMap<String, String>>,
    pub images: BTreeSet<String>,
    /// Every mutating call, in order: `create container x`, `start x`, ...
    pub calls: Vec<String>,
    /// A call (as recorded in `calls`) that fails instead.
    pub fail_on: Option<String>,
    /// What `host` answers.
    pub host: EngineHost,
}

impl Default for State {
    fn default() -> Self {
        State {
            containers: BTreeMap::new(),
            volumes: BTreeMap::new(),
            networks: BTreeMap::new(),
            images: BTreeSet::new(),
            calls: Vec::new(),
            fail_on: None,
            host: classic_cgroup_v1_host(),
        }
    }
}

/// Docker 20.10 on cgroup v1 with the classic store: the host shape whose
/// behaviour the tests written before [`EngineHost`] describe.
pub fn classic_cgroup_v1_host() -> EngineHost {
    EngineHost {
        product: "Docker Engine".into(),
        version: "20.10.24".into(),
        api: "1.41".into(),
        min_api: Some("1.12".into()),
        cgroup: Cgroup::V1,
        cgroup_driver: Some("cgroupfs".into()),
        image_store: ImageStore::Classic {
            driver: "overlay2".into(),
        },
        platform: "linux/amd64".into(),
        root_dir: None,
    }
}

/// Docker 29 on cgroup v2 with the containerd image store.
pub fn containerd_cgroup_v2_host() -> EngineHost {
    EngineHost {
        product: "Docker Engine".into(),
        version: "29.1.0".into(),
        api: "1.52".into(),
        min_api: Some("1.44".into()),
        cgroup: Cgroup::V2,
        cgroup_driver: Some("systemd".into()),
        image_store: ImageStore::Containerd {
            snapshotter: "overlayfs".into(),
        },
        platform: "linux/amd64".into(),
        root_dir: None,
    }
}

#[derive(Default)]
pub struct FakeEngine {
    pub state: Mutex<State>,
    exec: Mutex<Option<ExecHandler>>,
}

fn server_error(status_code: u16, message: impl Into<String>) -> DockerError {
    DockerError::DockerResponseServerError {
        status_code,
        message: message.into(),
    }
}

fn not_found(what: &str) -> DockerError {
    server_error(404, format!("No such object: {what}"))
}

/// Whether `labels` carry every `key=value` (or bare `key`) filter.
fn matches(labels: &HashMap<String, String>, filters: &[String]) -> bool {
    filters.iter().all(|f| match f.split_once('=') {
        Some((k, v)) => labels.get(k).map(String::as_str) == Some(v),
        None => labels.contains_key(f),
    })
}

impl FakeEngine {
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `exec` calls (the default answers every command with exit 0).
    pub fn on_exec(
        &self,
        handler: impl Fn(&str, &[&str]) -> (i64, String) + Send + Sync + 'static,
    ) {
        *self.exec.lock().unwrap() = Some(Box::new(handler));
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    pub fn calls(&self) -> Vec<String> {
        self.with(|s| s.calls.clone())
    }

    pub fn container(&self, name: &str) -> Option<FakeContainer> {
        self.with(|s| s.containers.get(name).cloned())
    }

    pub fn container_names(&self) -> Vec<String> {
        self.with(|s| s.containers.keys().cloned().collect())
    }

    pub fn volume_names(&self) -> Vec<String> {
        self.with(|s| s.volumes.keys().cloned().collect())
    }

    /// Records `call` and applies `f` to the container `name`.
    fn change(
        &self,
        call: String,
        name: &str,
        f: impl FnOnce(&mut FakeContainer),
    ) -> EngineResult<()> {
        self.call(call)?;
        self.with(|s| {
            s.containers
                .get_mut(name)
                .map(f)
                .ok_or_else(|| not_found(name))
        })
    }

    /// Records a mutating call; fails it when the test asked so.
    fn call(&self, what: String) -> EngineResult<()> {
        self.with(|s| {
            s.calls.push(what.clone());
            if s.fail_on.as_deref() == Some(what.as_str()) {
                return Err(server_error(500, format!("injected failure: {what}")));
            }
            Ok(())
        })
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Engine for FakeEngine {
    fn ping(&self) -> BoxFuture<'_, EngineResult<()>> {
        ready(Ok(()))
    }

    fn list_containers(
        &self,
        label_filters: Vec<String>,
    ) -> BoxFuture<'_, EngineResult<Vec<ContainerSummary>>> {
        let list = self.with(|s| {
            s.containers
                .iter()
                .filter(|(_, c)| matches(&c.labels, &label_filters))
                .map(|(name, c)| ContainerSummary {
                    id: Some(name.clone()),
                    names: Some(vec![format!("/{name}")]),
                    image: Some(c.image.clone()),
                    labels: Some(c.labels.clone()),
                    state: Some(match (c.running, c.paused) {
                        (_, true) => ContainerSummaryStateEnum::PAUSED,
                        (true, _) => ContainerSummaryStateEnum::RUNNING,
                        _ => ContainerSummaryStateEnum::EXITED,
                    }),
                    network_settings: Some(bollard::models::ContainerSummaryNetworkSettings {
                        networks: Some(
                            c.networks
                                .iter()
                                .map(|n| (n.clone(), Default::default()))
                                .collect(),
                        ),
                    }),
                    ports: Some(
                        c.ports
                            .iter()
                            .map(|(inside, host)| bollard::models::PortSummary {
                                private_port: *inside,
                                public_port: Some(*host),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    ..Default::default()
                })
                .collect()
        });
        ready(Ok(list))
    }

    fn inspect_container<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, EngineResult<ContainerInspectResponse>> {
        let found = self.with(|s| s.containers.get(name).cloned());
        ready(found.ok_or_else(|| not_found(name)).map(|c| {
            let mounts = c
                .binds
                .iter()
                .filter_map(|b| {
                    let mut parts = b.split(':');
                    let source = parts.next()?.to_string();
                    let destination = parts.next()?.to_string();
                    Some(MountPoint {
                        source: Some(source),
                        destination: Some(destination),
                        ..Default::default()
                    })
                })
                .collect();
            ContainerInspectResponse {
                name: Some(format!("/{name}")),
                config: Some(ContainerConfig {
                    image: Some(c.image.clone()),
                    cmd: Some(c.cmd.clone()),
                    env: Some(c.env.clone()),
                    labels: Some(c.labels.clone()),
                    ..Default::default()
                }),
                state: Some(ContainerState {
                    running: Some(c.running),
                    paused: Some(c.paused),
                    ..Default::default()
                }),
                mounts: Some(mounts),
                host_config: Some(bollard::models::HostConfig {
                    port_bindings: Some(
                        c.ports
                            .iter()
                            .map(|(inside, host)| {
                                let binding = bollard::models::PortBinding {
                                    host_ip: Some("127.0.0.1".into()),
                                    host_port: Some(host.to_string()),
                                };
                                (format!("{inside}/tcp"), Some(vec![binding]))
                            })
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }
        }))
    }

    fn create_container<'a>(
        &'a self,
        name: &'a str,
        body: ContainerCreateBody,
    ) -> BoxFuture<'a, EngineResult<()>> {
        let result = self
            .call(format!("create container {name}"))
            .and_then(|()| {
                self.with(|s| {
                    if s.containers.contains_key(name) {
                        return Err(server_error(409, format!("name {name} is already in use")));
                    }
                    let host = body.host_config.unwrap_or_default();
                    let ports: Vec<(u16, u16)> = host
                        .port_bindings
                        .iter()
                        .flatten()
                        .filter_map(|(key, bindings)| {
                            let inside: u16 = key.split('/').next()?.parse().ok()?;
                            let host: u16 = bindings
                                .as_ref()?
                                .first()?
                                .host_port
                                .as_ref()?
                                .parse()
                                .ok()?;
                            Some((inside, host))
                        })
                        .collect();
                    s.containers.insert(
                        name.to_string(),
                        FakeContainer {
                            image: body.image.unwrap_or_default(),
                            cmd: body.cmd.unwrap_or_default(),
                            env: body.env.unwrap_or_default(),
                            labels: body.labels.unwrap_or_default(),
                            binds: host.binds.unwrap_or_default(),
                            networks: host.network_mode.into_iter().collect(),
                            ports,
                            hostname: body.hostname,
                            ..Default::default()
                        },
                    );
                    Ok(())
                })
            });
        ready(result)
    }

    fn start_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        ready(self.change(format!("start {name}"), name, |c| c.running = true))
    }

    fn stop_container<'a>(
        &'a self,
        name: &'a str,
        _grace: std::time::Duration,
    ) -> BoxFuture<'a, EngineResult<()>> {
        ready(self.change(format!("stop {name}"), name, |c| c.running = false))
    }

    fn unpause_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        ready(self.change(format!("unpause {name}"), name, |c| c.paused = false))
    }

    fn pause_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        ready(self.change(format!("pause {name}"), name, |c| c.paused = true))
    }

    fn remove_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        let result = self
            .call(format!("remove container {name}"))
            .and_then(|()| {
                self.with(|s| match s.containers.remove(name) {
                    Some(_) => Ok(()),
                    None => Err(not_found(name)),
                })
            });
        ready(result)
    }

    fn exec<'a>(
        &'a self,
        container: &'a str,
        cmd: &'a [&'a str],
    ) -> BoxFuture<'a, EngineResult<(i64, String)>> {
        let running = self.with(|s| s.containers.get(container).map(|c| c.running));
        let result = match running {
            None => Err(not_found(container)),
            Some(false) => Err(server_error(
                409,
                format!("container {container} is not running"),
            )),
            Some(true) => Ok(match &*self.exec.lock().unwrap() {
                Some(handler) => handler(container, cmd),
                None => (0, String::new()),
            }),
        };
        ready(result)
    }

    fn download<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, EngineResult<Vec<u8>>> {
        ready(Err(not_found(&format!("{container}:{path}"))))
    }

    fn download_archive<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
    ) -> BoxStream<'a, EngineResult<Bytes>> {
        let found = self.with(|s| {
            s.containers
                .get(container)
                .and_then(|c| c.archives.get(path).cloned())
        });
        let item = found
            .map(Bytes::from)
            .ok_or_else(|| not_found(&format!("{container}:{path}")));
        Box::pin(futures::stream::iter([item]))
    }

    fn upload_archive<'a>(
        &'a self,
        container: &'a str,
        dir: &'a str,
        archive: BoxStream<'static, std::io::Result<Bytes>>,
    ) -> BoxFuture<'a, EngineResult<()>> {
        use futures::TryStreamExt;
        Box::pin(async move {
            let chunks: Vec<Bytes> = archive
                .try_collect()
                .await
                .map_err(|e| server_error(500, format!("reading the archive: {e}")))?;
            let bytes = chunks.concat();
            self.change(
                format!("upload archive {container}:{dir}"),
                container,
                |c| {
                    c.archives.insert(dir.to_string(), bytes);
                },
            )
        })
    }

    fn upload<'a>(
        &'a self,
        container: &'a str,
        to: &'a str,
        local: &'a Path,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let call = format!("upload {container}:{to}");
        let result = self.change(call, container, |c| {
            c.files.insert(to.to_string(), local.to_path_buf());
        });
        ready(result.map_err(|e| super::engine_error("upload", e)))
    }

    fn logs_tail<'a>(&'a self, container: &'a str, _lines: usize) -> BoxFuture<'a, String> {
        ready(self.with(|s| {
            s.containers
                .get(container)
                .map(|c| c.log.clone())
                .unwrap_or_default()
        }))
    }

    fn running_containers(&self) -> BoxFuture<'_, EngineResult<Vec<ContainerSummary>>> {
        let running = self.list_containers(Vec::new());
        Box::pin(async move {
            Ok(running
                .await?
                .into_iter()
                // As `docker ps`: paused containers are running ones.
                .filter(|c| {
                    matches!(
                        c.state,
                        Some(
                            ContainerSummaryStateEnum::RUNNING | ContainerSummaryStateEnum::PAUSED
                        )
                    )
                })
                .collect())
        })
    }

    fn container_logs(
        &self,
        container: &str,
        _follow: bool,
        _tail: Option<u64>,
        _since: i32,
    ) -> BoxStream<'static, EngineResult<Bytes>> {
        let log = self.with(|s| {
            s.containers
                .get(container)
                .map(|c| Bytes::from(c.log.clone()))
                .ok_or_else(|| not_found(container))
        });
        Box::pin(futures::stream::iter([log]))
    }

    fn create_volume(&self, request: VolumeCreateRequest) -> BoxFuture<'_, EngineResult<()>> {
        let name = request.name.unwrap_or_default();
        let result = self.call(format!("create volume {name}")).map(|()| {
            self.with(|s| {
                s.volumes.insert(name, request.labels.unwrap_or_default());
            })
        });
        ready(result)
    }

    fn list_volumes(&self, label_filters: Vec<String>) -> BoxFuture<'_, EngineResult<Vec<String>>> {
        let names = self.with(|s| {
            s.volumes
                .iter()
                .filter(|(_, labels)| matches(labels, &label_filters))
                .map(|(name, _)| name.clone())
                .collect()
        });
        ready(Ok(names))
    }

    fn remove_volume<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        let result = self.call(format!("remove volume {name}")).and_then(|()| {
            self.with(|s| match s.volumes.remove(name) {
                Some(_) => Ok(()),
                None => Err(not_found(name)),
            })
        });
        ready(result)
    }

    fn inspect_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<NetworkInspect>> {
        let result = self.with(|s| {
            let labels = s.networks.get(name).ok_or_else(|| not_found(name))?;
            let attached = s
                .containers
                .iter()
                .filter(|(_, c)| c.networks.contains(name))
                .map(|(n, _)| (n.clone(), Default::default()))
                .collect();
            Ok(NetworkInspect {
                name: Some(name.to_string()),
                labels: Some(labels.clone()),
                containers: Some(attached),
                ..Default::default()
            })
        });
        ready(result)
    }

    fn list_networks(
        &self,
        label_filters: Vec<String>,
    ) -> BoxFuture<'_, EngineResult<Vec<Network>>> {
        let networks = self.with(|s| {
            s.networks
                .iter()
                .filter(|(_, labels)| matches(labels, &label_filters))
                .map(|(name, labels)| Network {
                    name: Some(name.clone()),
                    labels: Some(labels.clone()),
                    ..Default::default()
                })
                .collect()
        });
        ready(Ok(networks))
    }

    fn create_network(&self, request: NetworkCreateRequest) -> BoxFuture<'_, EngineResult<()>> {
        let name = request.name.clone();
        let result = self.call(format!("create network {name}")).and_then(|()| {
            self.with(|s| {
                if s.networks.contains_key(&name) {
                    return Err(server_error(409, format!("network {name} exists")));
                }
                s.networks.insert(name, request.labels.unwrap_or_default());
                Ok(())
            })
        });
        ready(result)
    }

    fn remove_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        let result = self.call(format!("remove network {name}")).and_then(|()| {
            self.with(|s| match s.networks.remove(name) {
                Some(_) => Ok(()),
                None => Err(not_found(name)),
            })
        });
        ready(result)
    }

    fn connect_network<'a>(
        &'a self,
        network: &'a str,
        container: &'a str,
    ) -> BoxFuture<'a, EngineResult<()>> {
        let call = format!("connect {container} to {network}");
        ready(self.change(call, container, |c| {
            c.networks.insert(network.to_string());
        }))
    }

    fn inspect_image<'a>(
        &'a self,
        reference: &'a str,
    ) -> BoxFuture<'a, EngineResult<ImageInspect>> {
        let found = self.with(|s| s.images.contains(reference));
        ready(if found {
            Ok(ImageInspect {
                id: Some(format!("sha256:{}", hex::encode(reference))),
                repo_tags: Some(vec![reference.to_string()]),
                ..Default::default()
            })
        } else {
            Err(not_found(reference))
        })
    }

    fn pull_progress(
        &self,
        repository: &str,
        tag: &str,
    ) -> BoxStream<'static, EngineResult<CreateImageInfo>> {
        let result = self.call(format!("pull {repository}:{tag}")).map(|()| {
            self.with(|s| {
                s.images.insert(format!("{repository}:{tag}"));
            });
            CreateImageInfo {
                status: Some(format!(
                    "Status: Downloaded newer image for {repository}:{tag}"
                )),
                ..Default::default()
            }
        });
        Box::pin(futures::stream::iter([result]))
    }

    fn tag_image<'a>(
        &'a self,
        image: &'a str,
        repository: &'a str,
        tag: &'a str,
    ) -> BoxFuture<'a, EngineResult<()>> {
        let result = self
            .call(format!("tag {image} {repository}:{tag}"))
            .and_then(|()| {
                self.with(|s| {
                    if !s.images.contains(image) {
                        return Err(not_found(image));
                    }
                    s.images.insert(format!("{repository}:{tag}"));
                    Ok(())
                })
            });
        ready(result)
    }

    fn remove_image<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        let result = self
            .call(format!("remove image {reference}"))
            .and_then(|()| {
                self.with(|s| {
                    if s.images.remove(reference) {
                        Ok(())
                    } else {
                        Err(not_found(reference))
                    }
                })
            });
        ready(result)
    }

    fn load_image<'a>(&'a self, tarball: &'a Path) -> BoxFuture<'a, Result<(), Error>> {
        let result = self
            .call(format!("load {}", tarball.display()))
            .map_err(|e| super::engine_error("load", e));
        ready(result)
    }

    fn export_image<'a>(
        &'a self,
        reference: &'a str,
        dest: PathBuf,
        platform: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let call = match platform {
            Some(platform) => format!("export {reference} --platform {platform}"),
            None => format!("export {reference}"),
        };
        let result = self
            .call(call)
            .map_err(|e| super::engine_error("export", e))
            .and_then(|()| {
                std::fs::write(&dest, reference).map_err(|e| {
                    Error::internal(format!("write {}", dest.display())).with_source(e)
                })
            });
        ready(result)
    }

    fn host(&self) -> BoxFuture<'_, EngineResult<EngineHost>> {
        ready(Ok(self.with(|s| s.host.clone())))
    }
}
