//! A local TCP port forwarded to a pod through the Kubernetes API (the
//! `portforward` subresource over a WebSocket), as `kubectl port-forward`
//! does but without kubectl.
//!
//! Seeding, verify and `env` talk to an in-cluster LocalStack. When the
//! cluster's pods are not reachable from this machine (a remote cluster, a
//! VM or Docker network that is not routed to the host), the API server is
//! the one way in: a [`PortForward`] gives them a `http://127.0.0.1:PORT`
//! that reaches the pod.
//!
//! Each accepted connection opens its own forward stream, so one failed
//! connection does not take the others down, and a pod replaced by its
//! controller is found again on the next connection.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Portforwarder};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::error::Error;

/// A listener on `127.0.0.1` whose connections are forwarded to a Ready pod
/// matching a label selector. Dropping it closes the listener and every
/// forwarded connection.
pub struct PortForward {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    accept_loop: JoinHandle<()>,
}

/// What the accept loop and its connections share with the handle.
struct Shared {
    client: kube::Client,
    namespace: String,
    selector: String,
    remote_port: u16,
    /// The pod connections go to, until connecting to it fails.
    pod: Mutex<Option<String>>,
    last_error: Mutex<Option<String>>,
}

impl PortForward {
    /// Listens on `127.0.0.1:local_port` (a free port when `None`) and
    /// forwards each connection to `remote_port` of a Running and Ready pod
    /// matching `selector` in `namespace`.
    ///
    /// Only binding can fail here: pods are looked up per connection, so a
    /// forward opened before its pod is Ready works once the pod is.
    pub async fn open(
        client: kube::Client,
        namespace: &str,
        selector: &str,
        remote_port: u16,
        local_port: Option<u16>,
    ) -> Result<PortForward, Error> {
        // Bound before any API call, so a taken port is reported as such
        // whatever state the cluster is in.
        let listener = bind(local_port).await?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| Error::internal("port-forward listener address").with_source(e))?;
        let shared = Arc::new(Shared {
            client,
            namespace: namespace.to_string(),
            selector: selector.to_string(),
            remote_port,
            pod: Mutex::new(None),
            last_error: Mutex::new(None),
        });
        let accept_loop = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(PortForward {
            local_addr,
            shared,
            accept_loop,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://127.0.0.1:PORT`, for clients of an HTTP service (LocalStack).
    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// The pod connections currently go to, once one has been chosen.
    pub fn pod(&self) -> Option<String> {
        self.shared.pod.lock().unwrap().clone()
    }

    /// Why the most recent connection that failed was closed (no Ready pod,
    /// the API refused the forward, the pod refused the port). A client only
    /// sees its connection closed; this says why.
    pub fn last_error(&self) -> Option<String> {
        self.shared.last_error.lock().unwrap().clone()
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        // The connections live in the accept loop's JoinSet, which aborts
        // them when the loop is dropped.
        self.accept_loop.abort();
    }
}

async fn bind(local_port: Option<u16>) -> Result<TcpListener, Error> {
    let port = local_port.unwrap_or(0);
    TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .await
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Error::prerequisite(format!(
                    "cannot forward 127.0.0.1:{port}: the port is already in use"
                ))
                .with_hint("pick another port with --port, or leave --port out for a free one")
            } else {
                Error::internal(format!("cannot listen on 127.0.0.1:{port}")).with_source(e)
            }
        })
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => {
                    connections.spawn(forward_connection(socket, shared.clone()));
                }
                Err(e) => {
                    // Accept errors (too many open files, a connection reset
                    // before it was accepted) concern one connection; the
                    // listener still works.
                    shared.fail(format!("accept on the forwarded port: {e}"));
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            // Reaps finished connections, so the set holds the live ones.
            Some(_) = connections.join_next() => {}
        }
    }
}

/// Pipes one local connection to a new forward stream, until either side
/// closes it or the pod reports an error on the port.
async fn forward_connection(mut socket: TcpStream, shared: Arc<Shared>) {
    let Some(mut forwarder) = shared.connect().await else {
        return;
    };
    let port = shared.remote_port;
    let (Some(mut stream), Some(error)) = (
        forwarder.inner.take_stream(port),
        forwarder.inner.take_error(port),
    ) else {
        shared.fail(format!("the forward to port {port} has no stream"));
        return;
    };
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut socket, &mut stream) => {
            if let Err(e) = copied {
                tracing::debug!("port-forward connection ended: {e}");
            }
        }
        // `None` only says the forward ended, which the copy sees too.
        Some(message) = error => {
            shared.fail(format!(
                "pod {}/{} port {port}: {message}",
                shared.namespace, forwarder.pod
            ));
        }
    }
}

/// Stops the forward's WebSocket task when the connection ends or is
/// aborted: kube's [`Portforwarder`] leaves it running when dropped.
struct Forwarder {
    inner: Portforwarder,
    pod: String,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.inner.abort();
    }
}

impl Shared {
    fn fail(&self, reason: String) {
        tracing::debug!("port-forward: {reason}");
        *self.last_error.lock().unwrap() = Some(reason);
    }

    /// A forward to the cached pod, or to a pod looked up again when there
    /// is none or connecting to it failed (it was replaced or deleted).
    async fn connect(&self) -> Option<Forwarder> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let cached = self.pod.lock().unwrap().clone();
        if let Some(pod) = cached {
            match pods.portforward(&pod, &[self.remote_port]).await {
                Ok(inner) => return Some(Forwarder { inner, pod }),
                Err(e) => {
                    tracing::debug!("port-forward to pod {pod} failed, looking again: {e}");
                    // Only if no other connection has replaced it meanwhile.
                    let mut current = self.pod.lock().unwrap();
                    if current.as_deref() == Some(pod.as_str()) {
                        *current = None;
                    }
                }
            }
        }
        let pod = self.lookup(&pods).await?;
        match pods.portforward(&pod, &[self.remote_port]).await {
            Ok(inner) => Some(Forwarder { inner, pod }),
            Err(e) => {
                self.fail(format!(
                    "port-forward to pod {}/{pod} port {}: {e}",
                    self.namespace, self.remote_port
                ));
                None
            }
        }
    }

    /// Chooses a Ready pod and caches it; `None` (with the reason recorded)
    /// when there is none.
    async fn lookup(&self, pods: &Api<Pod>) -> Option<String> {
        let listed = match pods
            .list(&ListParams::default().labels(&self.selector))
            .await
        {
            Ok(listed) => listed,
            Err(e) => {
                self.fail(format!(
                    "list pods {} in namespace {}: {e}",
                    self.selector, self.namespace
                ));
                return None;
            }
        };
        let Some(pod) = ready_pod(&listed.items) else {
            self.fail(format!(
                "no Ready pod matches {} in namespace {} ({} found)",
                self.selector,
                self.namespace,
                listed.items.len()
            ));
            return None;
        };
        *self.pod.lock().unwrap() = Some(pod.clone());
        Some(pod)
    }
}

/// The pod to forward to: Running, not being deleted, with `Ready=True`.
/// The newest such pod wins (during a rollout the old one is on its way
/// out); equal ages are broken by name, so the choice is stable.
fn ready_pod(pods: &[Pod]) -> Option<String> {
    pods.iter()
        .filter(|pod| pod_ready(pod))
        .filter_map(|pod| {
            let name = pod.metadata.name.as_ref()?;
            Some((pod.metadata.creation_timestamp.as_ref(), name))
        })
        .max_by(|(a_created, a_name), (b_created, b_name)| {
            // Newest first, then the smallest name.
            a_created.cmp(b_created).then_with(|| b_name.cmp(a_name))
        })
        .map(|(_, name)| name.clone())
}

fn pod_ready(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use tokio::io::AsyncReadExt;

    fn pod(name: &str, created: i64, phase: &str, ready: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: ready.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn the_ready_pod_is_chosen_and_not_ready_ones_are_skipped() {
        let pods = [
            pod("a-starting", 300, "Running", "False"),
            pod("b-ready", 100, "Running", "True"),
            pod("c-pending", 400, "Pending", "False"),
        ];
        assert_eq!(ready_pod(&pods).as_deref(), Some("b-ready"));
    }

    #[test]
    fn a_terminating_pod_is_skipped() {
        let mut terminating = pod("a-old", 200, "Running", "True");
        terminating.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(500).unwrap()));
        let pods = [terminating, pod("b-new", 100, "Running", "True")];
        assert_eq!(ready_pod(&pods).as_deref(), Some("b-new"));
    }

    #[test]
    fn the_newest_ready_pod_wins_and_equal_ages_go_by_name() {
        let pods = [
            pod("old", 100, "Running", "True"),
            pod("new-b", 200, "Running", "True"),
            pod("new-a", 200, "Running", "True"),
        ];
        assert_eq!(ready_pod(&pods).as_deref(), Some("new-a"));
    }

    #[test]
    fn no_ready_pod_is_none() {
        assert_eq!(ready_pod(&[]), None);
        let mut no_status = pod("a", 100, "Running", "True");
        no_status.status = None;
        let pods = [no_status, pod("b", 100, "Running", "Unknown")];
        assert_eq!(ready_pod(&pods), None);
    }

    /// A client whose API server refuses connections: building it does not
    /// connect, so it stands for a cluster that is not there.
    fn unreachable_client() -> kube::Client {
        super::super::install_crypto_provider();
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap()
    }

    #[tokio::test]
    async fn a_port_in_use_is_an_error_naming_it() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let err =
            match PortForward::open(unreachable_client(), "ns", "app=x", 4566, Some(port)).await {
                Err(err) => err,
                Ok(_) => panic!("port {port} is taken"),
            };
        assert_eq!(err.kind(), crate::error::Kind::Prerequisite);
        assert!(err.message().contains(&port.to_string()), "{err:?}");
        assert!(err.hint().unwrap().contains("--port"), "{err:?}");
    }

    #[tokio::test]
    async fn a_connection_without_a_pod_is_closed_with_the_reason_kept() {
        let forward = PortForward::open(unreachable_client(), "ns", "app=x", 4566, None)
            .await
            .unwrap();
        assert_eq!(forward.url(), format!("http://{}", forward.local_addr()));
        let mut socket = TcpStream::connect(forward.local_addr()).await.unwrap();
        let mut buf = [0u8; 1];
        // Closed (EOF) or reset: either way no byte arrives.
        let read = socket.read(&mut buf).await;
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        let reason = forward.last_error().expect("the reason is kept");
        assert!(reason.contains("app=x"), "{reason}");
        assert_eq!(forward.pod(), None);
    }

    #[tokio::test]
    async fn dropping_the_forward_closes_its_port() {
        let forward = PortForward::open(unreachable_client(), "ns", "app=x", 4566, None)
            .await
            .unwrap();
        let addr = forward.local_addr();
        drop(forward);
        // The abort takes effect when the runtime next polls the loop.
        for _ in 0..100 {
            if TcpStream::connect(addr).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("{addr} still accepts connections after the drop");
    }
}
