//! The seam between devstack and the Docker engine: every engine call
//! devstack makes, as one trait, so that the code outside `src/docker`
//! holds an `Arc<dyn Engine>` and never bollard's client, and runs in unit
//! tests against an in-memory engine. `bollard::Docker` implements it one
//! call each.
//!
//! Calls that fail in the engine return bollard's error untouched, so the
//! callers keep telling "not found" and "conflict" apart the same way for
//! the real engine and the fake one. The few that also read or write host
//! files (image tarballs) return devstack errors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, CreateImageInfo, ImageInspect,
    Network, NetworkConnectRequest, NetworkCreateRequest, NetworkInspect, VolumeCreateRequest,
};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::io::AsyncWriteExt;

use super::host::{EngineHost, platform_json};
use crate::error::Error;

pub type EngineResult<T> = Result<T, DockerError>;

/// What devstack asks of a container engine.
pub trait Engine: Send + Sync {
    /// Whether the engine answers at all.
    fn ping(&self) -> BoxFuture<'_, EngineResult<()>>;

    /// Containers, running or not, carrying every `label=value` filter.
    fn list_containers(
        &self,
        label_filters: Vec<String>,
    ) -> BoxFuture<'_, EngineResult<Vec<ContainerSummary>>>;
    fn inspect_container<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, EngineResult<ContainerInspectResponse>>;
    fn create_container<'a>(
        &'a self,
        name: &'a str,
        body: ContainerCreateBody,
    ) -> BoxFuture<'a, EngineResult<()>>;
    fn start_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>>;
    /// Sends the container its stop signal and kills it after `grace`.
    fn stop_container<'a>(
        &'a self,
        name: &'a str,
        grace: std::time::Duration,
    ) -> BoxFuture<'a, EngineResult<()>>;
    fn unpause_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>>;
    /// Freezes every process of a running container (its files then hold
    /// still, as after a power cut, until it is unpaused).
    fn pause_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>>;
    /// Force-removes a container and its anonymous volumes.
    fn remove_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>>;
    /// Runs `cmd` in a running container; its exit code and stdout.
    fn exec<'a>(
        &'a self,
        container: &'a str,
        cmd: &'a [&'a str],
    ) -> BoxFuture<'a, EngineResult<(i64, String)>>;
    /// The file or directory at `path` in a container, as a tar archive.
    fn download<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, EngineResult<Vec<u8>>>;
    /// The file or directory at `path` in a container (running, paused or
    /// never started), as a tar archive streamed as the engine writes it.
    fn download_archive<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
    ) -> BoxStream<'a, EngineResult<Bytes>>;
    /// Extracts a tar archive into the existing directory `dir` of a
    /// container (named volumes mounted there included), streamed.
    fn upload_archive<'a>(
        &'a self,
        container: &'a str,
        dir: &'a str,
        archive: BoxStream<'static, std::io::Result<Bytes>>,
    ) -> BoxFuture<'a, EngineResult<()>>;
    /// Copies the host file `local` into the container at `path`, whose
    /// directory exists.
    fn upload<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
        local: &'a Path,
    ) -> BoxFuture<'a, Result<(), Error>>;
    /// The last `lines` lines of a container's output (empty when unknown).
    fn logs_tail<'a>(&'a self, container: &'a str, lines: usize) -> BoxFuture<'a, String>;
    /// The running containers, whoever started them.
    fn running_containers(&self) -> BoxFuture<'_, EngineResult<Vec<ContainerSummary>>>;
    /// A container's stdout and stderr, each line timestamped: its last
    /// `tail` lines (all with `None`) written from `since` (Unix seconds; 0
    /// for the start) on, then, when `follow`, what it writes until the
    /// stream is dropped.
    fn container_logs(
        &self,
        container: &str,
        follow: bool,
        tail: Option<u64>,
        since: i32,
    ) -> BoxStream<'static, EngineResult<Bytes>>;

    fn create_volume(&self, request: VolumeCreateRequest) -> BoxFuture<'_, EngineResult<()>>;
    /// Names of the volumes carrying every `label=value` filter.
    fn list_volumes(&self, label_filters: Vec<String>) -> BoxFuture<'_, EngineResult<Vec<String>>>;
    fn remove_volume<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>>;

    fn inspect_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<NetworkInspect>>;
    /// Networks carrying every `label=value` filter.
    fn list_networks(
        &self,
        label_filters: Vec<String>,
    ) -> BoxFuture<'_, EngineResult<Vec<Network>>>;
    fn create_network(&self, request: NetworkCreateRequest) -> BoxFuture<'_, EngineResult<()>>;
    fn remove_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>>;
    fn connect_network<'a>(
        &'a self,
        network: &'a str,
        container: &'a str,
    ) -> BoxFuture<'a, EngineResult<()>>;

    fn inspect_image<'a>(&'a self, reference: &'a str)
    -> BoxFuture<'a, EngineResult<ImageInspect>>;
    /// The image's ID, when the engine has it.
    fn image_id<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, EngineResult<String>> {
        Box::pin(async move { Ok(self.inspect_image(reference).await?.id.unwrap_or_default()) })
    }
    /// Pulls `repository:tag`, as the engine reports its progress.
    fn pull_progress(
        &self,
        repository: &str,
        tag: &str,
    ) -> BoxStream<'static, EngineResult<CreateImageInfo>>;
    /// Pulls `repository:tag` to the end.
    fn pull_image<'a>(&'a self, repo: &'a str, tag: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        let mut progress = self.pull_progress(repo, tag);
        Box::pin(async move {
            while let Some(item) = progress.next().await {
                item?;
            }
            Ok(())
        })
    }
    /// Names `image` also `repository:tag`.
    fn tag_image<'a>(
        &'a self,
        image: &'a str,
        repository: &'a str,
        tag: &'a str,
    ) -> BoxFuture<'a, EngineResult<()>>;
    /// Removes one reference to an image, unforced: an image a container
    /// uses or another reference names stays.
    fn remove_image<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, EngineResult<()>>;
    /// `docker load` of a tarball on the host.
    fn load_image<'a>(&'a self, tarball: &'a Path) -> BoxFuture<'a, Result<(), Error>>;
    /// `docker save` of one image into a file on the host; of its
    /// `platform` alone when given ([`EngineHost::export_platform`]).
    fn export_image<'a>(
        &'a self,
        reference: &'a str,
        dest: PathBuf,
        platform: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Error>>;
    /// What kind of engine and host this is.
    fn host(&self) -> BoxFuture<'_, EngineResult<EngineHost>>;
}

fn label_filter(labels: Vec<String>) -> Option<HashMap<String, Vec<String>>> {
    Some(HashMap::from([("label".to_string(), labels)]))
}

impl Engine for Docker {
    fn ping(&self) -> BoxFuture<'_, EngineResult<()>> {
        Box::pin(async move { Docker::ping(self).await.map(drop) })
    }

    fn list_containers(
        &self,
        label_filters: Vec<String>,
    ) -> BoxFuture<'_, EngineResult<Vec<ContainerSummary>>> {
        Box::pin(async move {
            let options = bollard::query_parameters::ListContainersOptions {
                all: true,
                filters: label_filter(label_filters),
                ..Default::default()
            };
            Docker::list_containers(self, Some(options)).await
        })
    }

    fn inspect_container<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, EngineResult<ContainerInspectResponse>> {
        Box::pin(Docker::inspect_container(
            self,
            name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        ))
    }

    fn create_container<'a>(
        &'a self,
        name: &'a str,
        body: ContainerCreateBody,
    ) -> BoxFuture<'a, EngineResult<()>> {
        Box::pin(async move {
            let options = bollard::query_parameters::CreateContainerOptions {
                name: Some(name.to_string()),
                ..Default::default()
            };
            Docker::create_container(self, Some(options), body)
                .await
                .map(drop)
        })
    }

    fn start_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        Box::pin(Docker::start_container(
            self,
            name,
            None::<bollard::query_parameters::StartContainerOptions>,
        ))
    }

    fn stop_container<'a>(
        &'a self,
        name: &'a str,
        grace: std::time::Duration,
    ) -> BoxFuture<'a, EngineResult<()>> {
        let options = bollard::query_parameters::StopContainerOptions {
            t: Some(grace.as_secs().try_into().unwrap_or(i32::MAX)),
            signal: None,
        };
        Box::pin(Docker::stop_container(self, name, Some(options)))
    }

    fn unpause_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        Box::pin(Docker::unpause_container(self, name))
    }

    fn pause_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        Box::pin(Docker::pause_container(self, name))
    }

    fn remove_container<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        let options = bollard::query_parameters::RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        Box::pin(Docker::remove_container(self, name, Some(options)))
    }

    fn exec<'a>(
        &'a self,
        container: &'a str,
        cmd: &'a [&'a str],
    ) -> BoxFuture<'a, EngineResult<(i64, String)>> {
        use bollard::exec::{StartExecOptions, StartExecResults};
        Box::pin(async move {
            let config = bollard::models::ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(cmd.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            };
            let exec = self.create_exec(container, config).await?;
            let mut stdout = String::new();
            if let StartExecResults::Attached { mut output, .. } =
                self.start_exec(&exec.id, None::<StartExecOptions>).await?
            {
                while let Some(chunk) = output.next().await {
                    if let bollard::container::LogOutput::StdOut { message } = chunk? {
                        stdout.push_str(&String::from_utf8_lossy(&message));
                    }
                }
            }
            let code = self.inspect_exec(&exec.id).await?.exit_code.unwrap_or(-1);
            Ok((code, stdout))
        })
    }

    fn download<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, EngineResult<Vec<u8>>> {
        Box::pin(async move {
            let options = bollard::query_parameters::DownloadFromContainerOptions {
                path: path.to_string(),
            };
            let mut stream = self.download_from_container(container, Some(options));
            let mut bytes = Vec::new();
            while let Some(chunk) = stream.next().await {
                bytes.extend_from_slice(&chunk?);
            }
            Ok(bytes)
        })
    }

    fn download_archive<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
    ) -> BoxStream<'a, EngineResult<Bytes>> {
        let options = bollard::query_parameters::DownloadFromContainerOptions {
            path: path.to_string(),
        };
        Box::pin(self.download_from_container(container, Some(options)))
    }

    fn upload_archive<'a>(
        &'a self,
        container: &'a str,
        dir: &'a str,
        archive: BoxStream<'static, std::io::Result<Bytes>>,
    ) -> BoxFuture<'a, EngineResult<()>> {
        Box::pin(async move {
            let options = bollard::query_parameters::UploadToContainerOptions {
                path: dir.to_string(),
                ..Default::default()
            };
            self.upload_to_container(container, Some(options), bollard::body_try_stream(archive))
                .await
        })
    }

    fn upload<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
        local: &'a Path,
    ) -> BoxFuture<'a, Result<(), Error>> {
        use tokio::io::AsyncReadExt;
        Box::pin(async move {
            let (dir, name) = path.rsplit_once('/').unwrap_or((".", path));
            let unreadable = |e: std::io::Error| {
                Error::internal(format!("cannot read {}", local.display())).with_source(e)
            };
            let file = tokio::fs::File::open(local).await.map_err(unreadable)?;
            let size = file.metadata().await.map_err(unreadable)?.len();
            // The engine takes a tar archive: one header, the file streamed
            // as it is (image tarballs are large), padding and the end mark.
            let mut header = tar::Header::new_gnu();
            header
                .set_path(name)
                .map_err(|e| Error::internal(format!("file name {name}")).with_source(e))?;
            header.set_size(size);
            header.set_mode(0o644);
            header.set_cksum();
            let padding = (512 - size % 512) % 512;
            let trailer = vec![0u8; padding as usize + 1024];
            let archive = std::io::Cursor::new(header.as_bytes().to_vec())
                .chain(file)
                .chain(std::io::Cursor::new(trailer));
            let options = bollard::query_parameters::UploadToContainerOptions {
                path: dir.to_string(),
                ..Default::default()
            };
            self.upload_to_container(
                container,
                Some(options),
                bollard::body_try_stream(tokio_util::io::ReaderStream::new(archive)),
            )
            .await
            .map_err(|e| super::engine_error(format!("copy {name} into {container}:{dir}"), e))
        })
    }

    fn logs_tail<'a>(&'a self, container: &'a str, lines: usize) -> BoxFuture<'a, String> {
        Box::pin(async move {
            let options = bollard::query_parameters::LogsOptions {
                stdout: true,
                stderr: true,
                tail: lines.to_string(),
                ..Default::default()
            };
            let mut stream = self.logs(container, Some(options));
            let mut out = String::new();
            while let Some(Ok(chunk)) = stream.next().await {
                out.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            }
            out
        })
    }

    fn running_containers(&self) -> BoxFuture<'_, EngineResult<Vec<ContainerSummary>>> {
        Box::pin(Docker::list_containers(
            self,
            None::<bollard::query_parameters::ListContainersOptions>,
        ))
    }

    fn container_logs(
        &self,
        container: &str,
        follow: bool,
        tail: Option<u64>,
        since: i32,
    ) -> BoxStream<'static, EngineResult<Bytes>> {
        let options = bollard::query_parameters::LogsOptions {
            stdout: true,
            stderr: true,
            follow,
            timestamps: true,
            tail: tail.map_or_else(|| "all".to_string(), |n| n.to_string()),
            since,
            ..Default::default()
        };
        self.logs(container, Some(options))
            .map(|chunk| chunk.map(|c| c.into_bytes()))
            .boxed()
    }

    fn create_volume(&self, request: VolumeCreateRequest) -> BoxFuture<'_, EngineResult<()>> {
        Box::pin(async move { Docker::create_volume(self, request).await.map(drop) })
    }

    fn list_volumes(&self, label_filters: Vec<String>) -> BoxFuture<'_, EngineResult<Vec<String>>> {
        Box::pin(async move {
            let options = bollard::query_parameters::ListVolumesOptions {
                filters: label_filter(label_filters),
            };
            let list = Docker::list_volumes(self, Some(options)).await?;
            Ok(list
                .volumes
                .unwrap_or_default()
                .into_iter()
                .map(|v| v.name)
                .collect())
        })
    }

    fn remove_volume<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        Box::pin(Docker::remove_volume(
            self,
            name,
            Some(bollard::query_parameters::RemoveVolumeOptions { force: true }),
        ))
    }

    fn inspect_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<NetworkInspect>> {
        Box::pin(Docker::inspect_network(
            self,
            name,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        ))
    }

    fn list_networks(
        &self,
        label_filters: Vec<String>,
    ) -> BoxFuture<'_, EngineResult<Vec<Network>>> {
        let options = bollard::query_parameters::ListNetworksOptions {
            filters: label_filter(label_filters),
        };
        Box::pin(Docker::list_networks(self, Some(options)))
    }

    fn create_network(&self, request: NetworkCreateRequest) -> BoxFuture<'_, EngineResult<()>> {
        Box::pin(async move { Docker::create_network(self, request).await.map(drop) })
    }

    fn remove_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        Box::pin(Docker::remove_network(self, name))
    }

    fn connect_network<'a>(
        &'a self,
        network: &'a str,
        container: &'a str,
    ) -> BoxFuture<'a, EngineResult<()>> {
        let request = NetworkConnectRequest {
            container: container.to_string(),
            endpoint_config: None,
        };
        Box::pin(Docker::connect_network(self, network, request))
    }

    fn inspect_image<'a>(
        &'a self,
        reference: &'a str,
    ) -> BoxFuture<'a, EngineResult<ImageInspect>> {
        Box::pin(Docker::inspect_image(self, reference))
    }

    fn pull_progress(
        &self,
        repository: &str,
        tag: &str,
    ) -> BoxStream<'static, EngineResult<CreateImageInfo>> {
        let options = bollard::query_parameters::CreateImageOptions {
            from_image: Some(repository.to_string()),
            tag: Some(tag.to_string()),
            ..Default::default()
        };
        self.create_image(Some(options), None, None).boxed()
    }

    fn tag_image<'a>(
        &'a self,
        image: &'a str,
        repository: &'a str,
        tag: &'a str,
    ) -> BoxFuture<'a, EngineResult<()>> {
        let options = bollard::query_parameters::TagImageOptions {
            repo: Some(repository.to_string()),
            tag: Some(tag.to_string()),
        };
        Box::pin(Docker::tag_image(self, image, Some(options)))
    }

    fn remove_image<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, EngineResult<()>> {
        let options = bollard::query_parameters::RemoveImageOptions {
            force: false,
            noprune: false,
            platforms: None,
        };
        Box::pin(async move {
            Docker::remove_image(self, reference, Some(options), None)
                .await
                .map(drop)
        })
    }

    fn load_image<'a>(&'a self, tarball: &'a Path) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let file = tokio::fs::File::open(tarball).await.map_err(|e| {
                Error::user(format!(
                    "cannot open image tarball {}: {e}",
                    tarball.display()
                ))
                .with_hint("rebuild the bundle with `make kit`")
            })?;
            let body = tokio_util::io::ReaderStream::new(file);
            let options = bollard::query_parameters::ImportImageOptions {
                quiet: true,
                ..Default::default()
            };
            let mut stream = self.import_image_stream(options, body, None);
            while let Some(item) = stream.next().await {
                let info = item
                    .map_err(|e| super::engine_error(format!("load {}", tarball.display()), e))?;
                if let Some(err) = info.error_detail.and_then(|d| d.message) {
                    return Err(Error::internal(format!(
                        "load {}: {err}",
                        tarball.display()
                    )));
                }
            }
            Ok(())
        })
    }

    fn export_image<'a>(
        &'a self,
        reference: &'a str,
        dest: PathBuf,
        platform: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let write_error =
                |e: std::io::Error| Error::internal(format!("write {}: {e}", dest.display()));
            let mut file = tokio::fs::File::create(&dest).await.map_err(write_error)?;
            // bollard's export takes no options: the platform rides on the
            // request's query, added by a modifier on a clone of the client.
            let client = match platform {
                Some(platform) => {
                    let query = format!(
                        "platform={}",
                        super::host::url_encoded(&platform_json(platform))
                    );
                    self.clone().with_request_modifier(move |mut request| {
                        let uri = request.uri().to_string();
                        if uri.ends_with("/get")
                            && let Ok(with_query) = format!("{uri}?{query}").parse()
                        {
                            *request.uri_mut() = with_query;
                        }
                        request
                    })
                }
                None => self.clone(),
            };
            let mut stream = Docker::export_image(&client, reference);
            while let Some(chunk) = stream.next().await {
                let chunk =
                    chunk.map_err(|e| super::engine_error(format!("export {reference}"), e))?;
                file.write_all(&chunk).await.map_err(write_error)?;
            }
            file.flush().await.map_err(write_error)
        })
    }

    fn host(&self) -> BoxFuture<'_, EngineResult<EngineHost>> {
        Box::pin(async move {
            let (info, version) = futures::try_join!(self.info(), self.version())?;
            Ok(EngineHost::from_answers(
                &info,
                &version,
                &self.client_version().to_string(),
            ))
        })
    }
}
