//! Logs of a stack's components: which sources each one has (the LocalStack
//! container, ESO's and Flux's pods, the cluster's node containers), each
//! read as lines through the Docker or the Kubernetes API, and all of them
//! merged into one stream whose lines name their source.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::stream::{self, BoxStream, Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};

use crate::docker::{self, Engine};
use crate::error::Error;
use crate::profile::Settings;
use crate::{gitops, k8s, localstack};

/// A part of the stack with logs of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Component {
    /// The LocalStack container.
    Localstack,
    /// The External Secrets Operator's controller, webhook and cert-controller pods.
    Eso,
    /// One pod of each Flux controller the profile installs.
    Flux,
    /// The cluster's node containers (K3s or Kind).
    Node,
}

impl Component {
    pub const ALL: [Component; 4] = [
        Component::Localstack,
        Component::Eso,
        Component::Flux,
        Component::Node,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Component::Localstack => "localstack",
            Component::Eso => "eso",
            Component::Flux => "flux",
            Component::Node => "node",
        }
    }
}

/// Which part of each source's log to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Only the last N lines of each source; all of them when `None`.
    pub tail: Option<u64>,
    /// Keep reading new lines until the caller stops.
    pub follow: bool,
    /// Only lines written within this long before now.
    pub since: Option<Duration>,
}

/// Where a source's lines are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A Docker container, by name.
    Container(String),
    /// One container of a pod, through the Kubernetes API.
    Pod {
        namespace: String,
        pod: String,
        container: String,
    },
}

/// One log: a container's or a pod container's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// `localstack`, `eso/webhook`, `flux/source-controller`, `node/server-0`.
    pub label: String,
    pub origin: Origin,
}

/// When a line was written, as the engine or the kubelet stamped it (UTC).
/// Orders lines of different sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// `YYYY-MM-DDTHH:MM:SS`, which sorts as it reads.
    seconds: [u8; 19],
    nanos: u32,
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seconds = std::str::from_utf8(&self.seconds).map_err(|_| std::fmt::Error)?;
        write!(f, "{seconds}.{:09}Z", self.nanos)
    }
}

/// Splits the RFC 3339 UTC stamp (`2025-01-02T03:04:05.123456789Z `) that
/// Docker and the kubelet put in front of each line when asked, from the
/// line. A line without one is returned whole.
pub fn split_stamp(line: &str) -> (Option<Stamp>, &str) {
    let Some((word, rest)) = line.split_once(' ') else {
        return (None, line);
    };
    match parse_stamp(word) {
        Some(stamp) => (Some(stamp), rest),
        None => (None, line),
    }
}

fn parse_stamp(word: &str) -> Option<Stamp> {
    let b = word.as_bytes();
    let body = word.strip_suffix('Z')?;
    if body.len() < 19 {
        return None;
    }
    let shape_ok = b[..19].iter().enumerate().all(|(i, c)| match i {
        4 | 7 => *c == b'-',
        10 => *c == b'T',
        13 | 16 => *c == b':',
        _ => c.is_ascii_digit(),
    });
    if !shape_ok {
        return None;
    }
    let nanos = match &body[19..] {
        "" => 0,
        fraction => {
            let digits = fraction.strip_prefix('.')?;
            if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|c| c.is_ascii_digit())
            {
                return None;
            }
            format!("{digits:0<9}").parse().ok()?
        }
    };
    Some(Stamp {
        seconds: b[..19].try_into().ok()?,
        nanos,
    })
}

/// One line of a source's log, without its line break and stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub source: Arc<str>,
    pub stamp: Option<Stamp>,
    pub text: String,
}

/// A source whose log could not be read (any more).
#[derive(Debug)]
pub struct Failure {
    pub source: Arc<str>,
    pub error: Error,
}

/// Lines of one or more sources, in the order they arrive.
pub type Lines = BoxStream<'static, Result<Line, Failure>>;

/// The labels Kind puts on every container of a cluster: the cluster's
/// name, and the node's role in it.
const KIND_CLUSTER_LABEL: &str = "io.x-k8s.kind.cluster";
const KIND_ROLE_LABEL: &str = "io.x-k8s.kind.role";

/// The names the operator's Deployments' logs go under, in the order of
/// [`gitops::ChainPlan::release_deployments`].
const ESO_PARTS: [&str; 3] = ["controller", "webhook", "cert-controller"];

/// The sources of a stack's components, and the clients that read them.
pub struct StackLogs {
    docker: Arc<dyn Engine>,
    kube: Option<kube::Client>,
    /// Every source found, in the order of the components asked for.
    pub sources: Vec<Source>,
    /// The components that have no source, each with why.
    pub missing: Vec<(Component, Error)>,
}

impl StackLogs {
    /// Finds the sources of `components` in the stack. A component without
    /// any (LocalStack not created, no cluster, ESO not installed) is
    /// listed in `missing`, not an error: the others still have logs.
    /// `follow` gives the Kubernetes client no read timeout, as a followed
    /// log may stay quiet for minutes.
    pub async fn find(
        docker: Arc<dyn Engine>,
        settings: &Settings,
        components: &[Component],
        follow: bool,
    ) -> StackLogs {
        let mut logs = StackLogs {
            docker,
            kube: None,
            sources: Vec::new(),
            missing: Vec::new(),
        };
        for &component in components {
            let found = match component {
                Component::Localstack => logs.localstack(settings, follow).await,
                Component::Node => logs.nodes(settings).await,
                Component::Eso => logs.eso(settings, follow).await,
                Component::Flux => logs.flux(settings, follow).await,
            };
            match found {
                Ok(sources) => logs.sources.extend(sources),
                Err(error) => logs.missing.push((component, error)),
            }
        }
        logs
    }

    async fn localstack(
        &mut self,
        settings: &Settings,
        follow: bool,
    ) -> Result<Vec<Source>, Error> {
        if settings.localstack.mode == crate::profile::LocalStackMode::InCluster {
            let client = self.client(settings, follow).await?;
            let namespace = &settings.names.localstack_namespace();
            let name = settings.names.localstack_service();
            let pods = deployment_pods(&client, namespace, name).await?;
            let pending = pods.iter().filter(|p| is_pending(p)).count();
            let sources = pod_sources(Component::Localstack.as_str(), name, &pods);
            if sources.is_empty() {
                return Err(no_pods(settings, "LocalStack", namespace, pending));
            }
            return Ok(sources);
        }
        let name = localstack::container_name(settings);
        if docker::inspect(self.docker.as_ref(), &name)
            .await?
            .is_none()
        {
            return Err(Error::unhealthy(format!(
                "stack `{}` has no LocalStack (no container {name})",
                settings.name
            ))
            .with_hint(
                "start it with `devstack localstack up`, or the whole stack with `devstack up`",
            ));
        }
        Ok(vec![Source {
            label: Component::Localstack.as_str().into(),
            origin: Origin::Container(name),
        }])
    }

    /// K3s nodes carry the stack's labels, Kind's the cluster's name.
    async fn nodes(&self, settings: &Settings) -> Result<Vec<Source>, Error> {
        use crate::cluster::k3s::{ROLE_AGENT, ROLE_SERVER};
        let k3s = docker::find_containers(
            self.docker.as_ref(),
            docker::stack_filter(Some(&settings.name)),
        )
        .await?
        .into_iter()
        .filter_map(|c| {
            let role = c.labels.as_ref()?.get(docker::LABEL_ROLE)?;
            let rank = [ROLE_SERVER, ROLE_AGENT].iter().position(|r| r == role)?;
            Some((rank, docker::container_name_of(&c)))
        });
        let kind_filter = format!(
            "{KIND_CLUSTER_LABEL}={}",
            crate::cluster::kind::cluster_name(settings)
        );
        let kind = docker::find_containers(self.docker.as_ref(), vec![kind_filter])
            .await?
            .into_iter()
            .map(|c| {
                let role = c.labels.as_ref().and_then(|l| l.get(KIND_ROLE_LABEL));
                let rank = match role.map(String::as_str) {
                    Some("control-plane") => 0,
                    Some("worker") => 1,
                    _ => 2,
                };
                (rank, docker::container_name_of(&c))
            });
        let mut nodes: Vec<(usize, String)> = k3s.chain(kind).collect();
        if nodes.is_empty() {
            return Err(Error::unhealthy(format!(
                "stack `{}` has no cluster (no node containers)",
                settings.name
            ))
            .with_hint("create the stack with `devstack up`"));
        }
        nodes.sort_by(|a, b| (a.0, a.1.len(), &a.1).cmp(&(b.0, b.1.len(), &b.1)));
        let prefix = format!("{}-", settings.resource_prefix());
        Ok(nodes
            .into_iter()
            .map(|(_, name)| Source {
                label: format!("node/{}", name.strip_prefix(&prefix).unwrap_or(&name)),
                origin: Origin::Container(name),
            })
            .collect())
    }

    async fn client(&mut self, settings: &Settings, follow: bool) -> Result<kube::Client, Error> {
        if let Some(client) = &self.kube {
            return Ok(client.clone());
        }
        let client = if follow {
            k8s::stack_streaming_client(settings).await?
        } else {
            k8s::stack_client(settings).await?
        };
        self.kube = Some(client.clone());
        Ok(client)
    }

    async fn eso(&mut self, settings: &Settings, follow: bool) -> Result<Vec<Source>, Error> {
        let client = self.client(settings, follow).await?;
        let (mut sources, mut pending) = (Vec::new(), 0);
        // The cluster's own ESO: its controller, which serves the stack.
        let (namespace, deployments): (String, Vec<(String, &str)>) = match &settings.eso.cluster {
            Some(eso) => (
                eso.namespace.clone(),
                vec![(eso.deployment.clone(), "controller")],
            ),
            None => {
                let plan = gitops::ChainPlan::of(settings);
                let deployments = plan.release_deployments().into_iter().zip(ESO_PARTS);
                (plan.names.helm_release().0, deployments.collect())
            }
        };
        let namespace = namespace.as_str();
        for (deployment, name) in deployments {
            let pods = deployment_pods(&client, namespace, &deployment).await?;
            pending += pods.iter().filter(|p| is_pending(p)).count();
            sources.extend(pod_sources(&format!("eso/{name}"), &deployment, &pods));
        }
        if sources.is_empty() {
            let what = "External Secrets Operator";
            return Err(no_pods(settings, what, namespace, pending));
        }
        Ok(sources)
    }

    async fn flux(&mut self, settings: &Settings, follow: bool) -> Result<Vec<Source>, Error> {
        let client = self.client(settings, follow).await?;
        let namespace = gitops::FLUX_NAMESPACE;
        let (mut sources, mut pending) = (Vec::new(), 0);
        for controller in &settings.flux.components {
            let pods = deployment_pods(&client, namespace, controller).await?;
            pending += pods.iter().filter(|p| is_pending(p)).count();
            let label = format!("flux/{controller}");
            sources.extend(pod_sources(&label, controller, &pods));
        }
        if sources.is_empty() {
            return Err(no_pods(settings, "Flux controller", namespace, pending));
        }
        Ok(sources)
    }

    /// Every source's lines, merged as they arrive. A source that cannot
    /// be read yields one [`Failure`] and ends; the others go on.
    pub fn stream(&self, options: Options) -> Lines {
        let streams: Vec<Lines> = self
            .sources
            .iter()
            .map(|source| self.open(source, options))
            .collect();
        stream::select_all(streams).boxed()
    }

    fn open(&self, source: &Source, options: Options) -> Lines {
        let label: Arc<str> = source.label.as_str().into();
        let chunks = match &source.origin {
            Origin::Container(name) => container_chunks(self.docker.as_ref(), name, options),
            Origin::Pod {
                namespace,
                pod,
                container,
            } => match &self.kube {
                Some(client) => pod_chunks(client, namespace, pod, container, options),
                None => stream::once(async {
                    Err(Error::internal("no Kubernetes client for a pod's log"))
                })
                .boxed(),
            },
        };
        lines_of(chunks)
            .map(move |line| match line {
                Ok(text) => {
                    let (stamp, text) = split_stamp(&text);
                    Ok(Line {
                        source: label.clone(),
                        stamp,
                        text: text.to_string(),
                    })
                }
                Err(error) => Err(Failure {
                    source: label.clone(),
                    error,
                }),
            })
            .boxed()
    }
}

/// How long finding a Deployment's pods may take: the client of a followed
/// log has no read timeout of its own.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The pods of a Deployment, by its selector; none when it does not exist.
async fn deployment_pods(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<Pod>, Error> {
    tokio::time::timeout(LOOKUP_TIMEOUT, pods_by_selector(client, namespace, name))
        .await
        .unwrap_or_else(|_| {
            Err(Error::unhealthy(format!(
                "the cluster did not answer within {}s (Deployment {namespace}/{name})",
                LOOKUP_TIMEOUT.as_secs()
            ))
            .with_hint("`devstack status` shows whether the cluster answers"))
        })
}

async fn pods_by_selector(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<Pod>, Error> {
    let api_error = |e: kube::Error| {
        Error::unhealthy(format!("cannot read Deployment {namespace}/{name}: {e}"))
            .with_hint("`devstack status` shows whether the cluster answers")
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let Some(deployment) = deployments.get_opt(name).await.map_err(api_error)? else {
        return Ok(Vec::new());
    };
    let selector = deployment
        .spec
        .selector
        .match_labels
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    if selector.is_empty() {
        return Ok(Vec::new());
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut pods = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(api_error)?
        .items;
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(pods)
}

/// A pod not scheduled or not started yet: no log to read.
fn is_pending(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
}

/// The error of a component whose pods are all missing or pending.
fn no_pods(settings: &Settings, what: &str, namespace: &str, pending: usize) -> Error {
    let why = match pending {
        0 => format!("no {what} pod runs in namespace {namespace}"),
        n => format!(
            "no {what} pod has started yet ({n} Pending in namespace {namespace}; a Pending pod has no log)"
        ),
    };
    Error::unhealthy(format!("stack `{}`: {why}", settings.name)).with_hint(
        "`devstack status` says what is missing; `devstack up` (or `devstack sync`) installs it",
    )
}

/// One source per container of each pod not pending, labelled `base`,
/// then the pod (without the Deployment's name) when there are several,
/// then the container when a pod has several.
fn pod_sources(base: &str, deployment: &str, pods: &[Pod]) -> Vec<Source> {
    let mut sources = Vec::new();
    let pods: Vec<&Pod> = pods.iter().filter(|p| !is_pending(p)).collect();
    for pod in &pods {
        let (Some(name), Some(namespace), Some(spec)) = (
            pod.metadata.name.as_deref(),
            pod.metadata.namespace.as_deref(),
            pod.spec.as_ref(),
        ) else {
            continue;
        };
        let mut label = base.to_string();
        if pods.len() > 1 {
            let short = name
                .strip_prefix(deployment)
                .map(|s| s.trim_start_matches('-'))
                .unwrap_or(name);
            label = format!("{label}/{short}");
        }
        for container in &spec.containers {
            let label = if spec.containers.len() > 1 {
                format!("{label}/{}", container.name)
            } else {
                label.clone()
            };
            sources.push(Source {
                label,
                origin: Origin::Pod {
                    namespace: namespace.to_string(),
                    pod: name.to_string(),
                    container: container.name.clone(),
                },
            });
        }
    }
    sources
}

type Chunks = BoxStream<'static, Result<Bytes, Error>>;

fn unix_seconds_ago(ago: Duration) -> i32 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    i32::try_from(now.saturating_sub(ago).as_secs()).unwrap_or(i32::MAX)
}

fn container_chunks(docker: &dyn Engine, name: &str, options: Options) -> Chunks {
    let what = format!("logs of {name}");
    let since = options.since.map_or(0, unix_seconds_ago);
    docker
        .container_logs(name, options.follow, options.tail, since)
        .map(move |chunk| chunk.map_err(|e| docker::engine_error(&what, e)))
        .boxed()
}

fn pod_chunks(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    container: &str,
    options: Options,
) -> Chunks {
    use futures::AsyncReadExt;
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = LogParams {
        container: Some(container.to_string()),
        follow: options.follow,
        tail_lines: options.tail.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        since_seconds: options
            .since
            .map(|d| i64::try_from(d.as_secs().max(1)).unwrap_or(i64::MAX)),
        timestamps: true,
        ..LogParams::default()
    };
    let what = format!("log of pod {namespace}/{pod} (container {container})");
    let pod = pod.to_string();
    let opened = async move {
        api.log_stream(&pod, &params)
            .await
            .map(|reader| (Box::pin(reader), what.clone()))
            .map_err(|e| Error::unhealthy(format!("cannot read the {what}: {e}")))
    };
    stream::once(opened)
        .flat_map(|opened| match opened {
            Err(e) => stream::once(async { Err(e) }).boxed(),
            Ok(reader) => stream::unfold(Some(reader), |state| async move {
                let (mut reader, what) = state?;
                let mut buf = vec![0u8; 16 * 1024];
                match reader.read(&mut buf).await {
                    Ok(0) => None,
                    Ok(n) => {
                        buf.truncate(n);
                        Some((Ok(Bytes::from(buf)), Some((reader, what))))
                    }
                    Err(e) => Some((
                        Err(Error::unhealthy(format!("the {what} broke off: {e}"))),
                        None,
                    )),
                }
            })
            .boxed(),
        })
        .boxed()
}

/// Cuts a stream of chunks into lines (a line may span chunks; invalid
/// UTF-8 is replaced, not fatal). Ends after the first error.
pub fn lines_of(
    chunks: impl Stream<Item = Result<Bytes, Error>> + Send + 'static,
) -> BoxStream<'static, Result<String, Error>> {
    let ended = stream::once(async { None });
    chunks
        .map(Some)
        .chain(ended)
        .scan((Vec::<u8>::new(), false), |(pending, failed), chunk| {
            let mut out: Vec<Result<String, Error>> = Vec::new();
            if *failed {
                return futures::future::ready(None);
            }
            match chunk {
                Some(Ok(bytes)) => {
                    pending.extend_from_slice(&bytes);
                    while let Some(at) = pending.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=at).collect();
                        out.push(Ok(text_of(&line[..at])));
                    }
                }
                Some(Err(e)) => {
                    *failed = true;
                    if !pending.is_empty() {
                        out.push(Ok(text_of(&std::mem::take(pending))));
                    }
                    out.push(Err(e));
                }
                None if !pending.is_empty() => out.push(Ok(text_of(&std::mem::take(pending)))),
                None => {}
            }
            futures::future::ready(Some(stream::iter(out)))
        })
        .flatten()
        .boxed()
}

fn text_of(line: &[u8]) -> String {
    String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)).into_owned()
}

/// Lines of several sources in the order they were written: by stamp, a
/// line without one right after the line before it in its source, lines
/// of the same moment in the order they came.
pub fn in_written_order(mut lines: Vec<Line>) -> Vec<Line> {
    let mut last: std::collections::HashMap<Arc<str>, Stamp> = Default::default();
    let mut keyed: Vec<(Option<Stamp>, Line)> = lines
        .drain(..)
        .map(|line| {
            let key = match line.stamp {
                Some(stamp) => {
                    last.insert(line.source.clone(), stamp);
                    Some(stamp)
                }
                None => last.get(&line.source).copied(),
            };
            (key, line)
        })
        .collect();
    keyed.sort_by_key(|(key, _)| *key);
    keyed.into_iter().map(|(_, line)| line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_split_off_and_ordered_whatever_their_precision() {
        let (stamp, text) = split_stamp("2025-01-02T03:04:05.5Z hello world");
        assert_eq!(text, "hello world");
        let half = stamp.unwrap();
        assert_eq!(half.to_string(), "2025-01-02T03:04:05.500000000Z");
        let (whole, _) = split_stamp("2025-01-02T03:04:05Z x");
        let (nanos, _) = split_stamp("2025-01-02T03:04:05.123456789Z x");
        assert!(whole.unwrap() < nanos.unwrap() && nanos.unwrap() < half);
        for plain in [
            "no stamp here",
            "2025-01-02 03:04:05 x",
            "2025-01-02T03:04:05.Z x",
            "2025-01-02T03:04:05.1234567891Z x",
            "2025-01-02T03:04:05+01:00 x",
            "",
        ] {
            assert_eq!(split_stamp(plain), (None, plain), "{plain:?}");
        }
    }

    fn chunks(parts: Vec<Result<&'static [u8], &'static str>>) -> Chunks {
        stream::iter(
            parts
                .into_iter()
                .map(|p| p.map(Bytes::from_static).map_err(Error::internal)),
        )
        .boxed()
    }

    async fn collect(chunks: Chunks) -> Vec<Result<String, String>> {
        lines_of(chunks)
            .map(|l| l.map_err(|e| e.message().to_string()))
            .collect()
            .await
    }

    #[tokio::test]
    async fn lines_span_chunks_and_the_last_needs_no_line_break() {
        let lines = collect(chunks(vec![
            Ok(b"a\nb"),
            Ok(b"c\r\n"),
            Ok(b""),
            Ok(b"\n\xff"),
            Ok(b"d"),
        ]))
        .await;
        assert_eq!(
            lines,
            [
                Ok("a".into()),
                Ok("bc".into()),
                Ok("".into()),
                Ok("\u{fffd}d".into())
            ]
        );
    }

    #[tokio::test]
    async fn a_broken_stream_keeps_its_lines_and_ends_with_its_error() {
        let lines = collect(chunks(vec![Ok(b"a\npart"), Err("gone"), Ok(b"never\n")])).await;
        assert_eq!(
            lines,
            [Ok("a".into()), Ok("part".into()), Err("gone".into())]
        );
    }

    fn line(source: &str, text: &str) -> Line {
        let (stamp, text) = split_stamp(text);
        Line {
            source: source.into(),
            stamp,
            text: text.into(),
        }
    }

    #[test]
    fn merged_lines_follow_their_stamps_and_unstamped_lines_stay_with_their_source() {
        let lines = vec![
            line("a", "2025-01-01T00:00:02Z a2"),
            line("a", "a2-continued"),
            line("a", "2025-01-01T00:00:04Z a4"),
            line("b", "2025-01-01T00:00:01.5Z b1"),
            line("b", "2025-01-01T00:00:02Z b2"),
            line("b", "2025-01-01T00:00:03Z b3"),
        ];
        let texts: Vec<String> = in_written_order(lines)
            .into_iter()
            .map(|l| l.text)
            .collect();
        assert_eq!(texts, ["b1", "a2", "a2-continued", "b2", "b3", "a4"]);
    }

    fn pod(name: &str, containers: &[&str]) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": containers.iter().map(|c| serde_json::json!({"name": c})).collect::<Vec<_>>()},
        }))
        .unwrap()
    }

    #[test]
    fn a_component_without_pods_says_whether_they_are_pending() {
        let settings = crate::profile::Settings::builtin(&Default::default()).unwrap();
        let none = no_pods(&settings, "Flux controller", "flux-system", 0);
        assert_eq!(none.kind(), crate::error::Kind::Unhealthy);
        assert!(
            none.message()
                .contains("no Flux controller pod runs in namespace flux-system")
        );
        let pending = no_pods(&settings, "Flux controller", "flux-system", 2);
        assert!(
            pending.message().contains("2 Pending"),
            "{}",
            pending.message()
        );
        assert!(pending.hint().unwrap().contains("`devstack status`"));
    }

    #[test]
    fn pending_pods_have_no_source() {
        let mut waiting = pod("x-1-a", &["main"]);
        waiting.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        });
        let labels: Vec<String> = pod_sources("flux/x", "x", &[waiting, pod("x-1-b", &["main"])])
            .into_iter()
            .map(|s| s.label)
            .collect();
        assert_eq!(labels, ["flux/x"]);
    }

    #[test]
    fn pods_and_containers_are_named_only_when_there_are_several() {
        let one = pod_sources("eso/webhook", "ew", &[pod("ew-7d9-abc", &["webhook"])]);
        assert_eq!(
            one,
            [Source {
                label: "eso/webhook".into(),
                origin: Origin::Pod {
                    namespace: "ns".into(),
                    pod: "ew-7d9-abc".into(),
                    container: "webhook".into()
                }
            }]
        );
        let labels: Vec<String> = pod_sources(
            "flux/x",
            "x",
            &[pod("x-1-a", &["main", "sidecar"]), pod("x-1-b", &["main"])],
        )
        .into_iter()
        .map(|s| s.label)
        .collect();
        assert_eq!(
            labels,
            ["flux/x/1-a/main", "flux/x/1-a/sidecar", "flux/x/1-b"]
        );
    }
}
