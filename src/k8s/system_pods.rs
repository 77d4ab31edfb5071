//! A new cluster's own pods (the control plane's static pods, CoreDNS,
//! kube-proxy, the CNI, the storage provisioner) and its nodes on the
//! Cluster step's timeline, each from its creation to Ready, as Flux's pods
//! are on Flux's step: where the seconds between "the nodes exist" and "the
//! cluster serves" go.
//!
//! The spans are backdated: a pod's start is its creation time, or when
//! its first container started if that was earlier (a static pod's mirror
//! is created only once its kubelet reaches the API server the pod itself
//! runs), so a watch started once the kubeconfig exists still shows what
//! happened before. Those times are second-precision; a Ready the watch
//! sees happen is placed to the millisecond. A static pod turns Ready only
//! when kubeadm's startup probe first passes (10 s after its start, then
//! every 10 s): long after it serves.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::runtime::watcher::Event;
use tokio::sync::oneshot;

use crate::timeline::Timeline;
use crate::ui::Step;

/// Where a new cluster's own pods run: kube-system (control plane, CoreDNS,
/// kube-proxy, kindnet), the kit's flannel, Kind's local-path provisioner.
const NAMESPACES: [&str; 3] = ["kube-system", "kube-flannel", "local-path-storage"];

/// How long a watch failing without a break ends the lingering watch: a
/// single failure is a watch restarting (a new API server drops its watch
/// streams), failures for seconds a cluster going away.
const GIVE_UP: Duration = Duration::from_secs(10);

/// The key prefix of CoreDNS's pods (`k8s-app: kube-dns`, named after
/// their Deployment on kubeadm and K3s alike).
const COREDNS_POD: &str = "pod/kube-system/coredns-";

/// How long the watch goes on once the step that started it is done with
/// it: CoreDNS turns Ready beside Flux's install, after the Cluster step.
const LINGER: Duration = Duration::from_secs(120);

/// Watches while it lives; dropped, the watch goes on until everything it
/// saw is Ready (or gone) and CoreDNS among it (K3s creates CoreDNS only
/// after its node is Ready), at most [`LINGER`], or until the watch has
/// failed for [`GIVE_UP`] (the cluster was removed).
pub struct SystemPodsWatch {
    _wrap_up: Option<oneshot::Sender<()>>,
}

/// Starts putting the cluster's own pods and its nodes on `step`'s timeline
/// (nothing when the run records no timeline).
pub fn watch(client: &kube::Client, step: &Step) -> SystemPodsWatch {
    let Some((timeline, parent)) = step.timeline() else {
        return SystemPodsWatch { _wrap_up: None };
    };
    let (wrap_up, wrapped_up) = oneshot::channel();
    tokio::spawn(follow(
        client.clone(),
        Tracker::new(timeline.clone(), parent),
        wrapped_up,
    ));
    SystemPodsWatch {
        _wrap_up: Some(wrap_up),
    }
}

enum Change {
    Pod(Box<Event<Pod>>),
    Node(Box<Event<Node>>),
}

async fn follow(client: kube::Client, mut tracker: Tracker, mut wrapped_up: oneshot::Receiver<()>) {
    let pods = super::wait::watch(Api::<Pod>::all(client.clone()), Default::default())
        .map(|e| e.map(|e| Change::Pod(Box::new(e))));
    let nodes = super::wait::watch(Api::<Node>::all(client), Default::default())
        .map(|e| e.map(|e| Change::Node(Box::new(e))));
    let mut changes = futures::stream::select(pods, nodes);
    let (mut pods_listed, mut nodes_listed) = (false, false);
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut failing_since: Option<std::time::Instant> = None;
    loop {
        let change = tokio::select! {
            change = changes.next() => change,
            _ = &mut wrapped_up, if deadline.is_none() => {
                deadline = Some(tokio::time::Instant::now() + LINGER);
                if pods_listed && nodes_listed && tracker.settled() {
                    return;
                }
                continue;
            }
            () = tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)),
                if deadline.is_some() => return,
        };
        let failed = matches!(change, Some(Err(_)));
        match change {
            None => return,
            // The watch retries by itself.
            Some(Err(e)) => tracing::debug!("watching the cluster's own pods: {e}"),
            Some(Ok(Change::Pod(event))) => {
                pods_listed |= tracker.apply(*event, observed_pod);
            }
            Some(Ok(Change::Node(event))) => {
                nodes_listed |= tracker.apply(*event, observed_node);
            }
        }
        failing_since = failed.then(|| failing_since.unwrap_or_else(std::time::Instant::now));
        let gone = failing_since.is_some_and(|since| since.elapsed() >= GIVE_UP);
        if deadline.is_some() && (gone || (pods_listed && nodes_listed && tracker.settled())) {
            return;
        }
    }
}

/// A pod or node as the timeline needs it.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    key: String,
    span: String,
    created: SystemTime,
    /// When its Ready condition last turned True, if it is True.
    ready_since: Option<SystemTime>,
}

fn wall(time: &Time) -> SystemTime {
    SystemTime::from(time.0)
}

/// Pods of [`NAMESPACES`] that are meant to turn Ready (not a Job's).
fn observed_pod(pod: &Pod) -> Option<Observed> {
    let namespace = pod.metadata.namespace.as_deref()?;
    if !NAMESPACES.contains(&namespace) {
        return None;
    }
    let owned_by_job = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Job");
    if owned_by_job {
        return None;
    }
    let name = pod.metadata.name.clone()?;
    let status = pod.status.as_ref();
    let containers_started = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|c| [c.state.as_ref(), c.last_state.as_ref()])
        .flatten()
        .filter_map(|state| {
            let running = state.running.as_ref().and_then(|r| r.started_at.as_ref());
            let ended = state
                .terminated
                .as_ref()
                .and_then(|t| t.started_at.as_ref());
            running.or(ended)
        });
    let created = pod
        .metadata
        .creation_timestamp
        .iter()
        .chain(status.and_then(|s| s.start_time.as_ref()))
        .chain(containers_started)
        .map(wall)
        .min()?;
    let ready_since = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or_else(SystemTime::now, wall)
        });
    Some(Observed {
        key: format!("pod/{namespace}/{name}"),
        span: format!("pod {name} created -> Ready"),
        created,
        ready_since,
    })
}

/// A node, from its registration with the API server to Ready.
fn observed_node(node: &Node) -> Option<Observed> {
    let name = node.metadata.name.clone()?;
    let created = node.metadata.creation_timestamp.as_ref().map(wall)?;
    let ready_since = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or_else(SystemTime::now, wall)
        });
    Some(Observed {
        key: format!("node/{name}"),
        span: format!("node {name} registered -> Ready"),
        created,
        ready_since,
    })
}

struct Tracked {
    span: usize,
    ended: bool,
    ready: bool,
}

/// One span per pod or node seen, opened when first seen (backdated to its
/// creation) and ended at its first Ready, or as failed when it goes away
/// before (a replaced pod).
struct Tracker {
    timeline: Timeline,
    parent: usize,
    seen: HashMap<String, Tracked>,
}

impl Tracker {
    fn new(timeline: Timeline, parent: usize) -> Self {
        Tracker {
            timeline,
            parent,
            seen: HashMap::new(),
        }
    }

    /// Applies one watch event; true once the initial list is complete.
    fn apply<K>(&mut self, event: Event<K>, observe: impl Fn(&K) -> Option<Observed>) -> bool {
        match event {
            Event::Init => false,
            Event::InitDone => true,
            Event::InitApply(object) | Event::Apply(object) => {
                if let Some(observed) = observe(&object) {
                    self.seen(observed);
                }
                false
            }
            Event::Delete(object) => {
                if let Some(observed) = observe(&object) {
                    self.gone(&observed.key);
                }
                false
            }
        }
    }

    fn seen(&mut self, observed: Observed) {
        let timeline = &self.timeline;
        let parent = self.parent;
        let tracked = self.seen.entry(observed.key).or_insert_with(|| Tracked {
            span: timeline.record(
                observed.span,
                Some(parent),
                timeline.ms_at_wall(observed.created),
                None,
                None,
            ),
            ended: false,
            ready: false,
        });
        let Some(ready) = observed.ready_since.filter(|_| !tracked.ended) else {
            return;
        };
        // The condition's time is truncated to the second: when the watch
        // sees the change within that second, now is the closer time.
        let now = timeline.now_ms();
        let condition = timeline.ms_at_wall(ready);
        let at = if condition <= now && now - condition <= 1000 {
            now
        } else {
            condition
        };
        timeline.end_at(tracked.span, at, true);
        tracked.ended = true;
        tracked.ready = true;
    }

    fn gone(&mut self, key: &str) {
        if let Some(tracked) = self.seen.get_mut(key)
            && !tracked.ended
        {
            self.timeline
                .end_at(tracked.span, self.timeline.now_ms(), false);
            tracked.ended = true;
        }
    }

    /// Everything seen is Ready or gone, and CoreDNS, the last of a new
    /// cluster's own pods to turn Ready, is among them.
    fn settled(&self) -> bool {
        self.seen.values().all(|t| t.ended)
            && self
                .seen
                .iter()
                .any(|(key, t)| key.starts_with(COREDNS_POD) && t.ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStatus, NodeCondition, NodeStatus,
        PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    /// `seconds` from now, at the API's second precision.
    fn at(seconds: i64) -> Time {
        let t = Timestamp::now()
            .checked_add(SignedDuration::from_secs(seconds))
            .unwrap();
        Time(Timestamp::from_second(t.as_second()).unwrap())
    }

    fn pod(
        namespace: &str,
        name: &str,
        created: i64,
        started: Option<i64>,
        ready: Option<i64>,
    ) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some(namespace.into());
        pod.metadata.name = Some(name.into());
        pod.metadata.creation_timestamp = Some(at(created));
        pod.status = Some(PodStatus {
            start_time: started.map(at),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready.is_some() { "True" } else { "False" }.into(),
                last_transition_time: ready.map(at),
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod
    }

    fn node(name: &str, created: i64, ready: Option<i64>) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        node.metadata.creation_timestamp = Some(at(created));
        node.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready.is_some() { "True" } else { "False" }.into(),
                last_transition_time: ready.map(at),
                ..Default::default()
            }]),
            ..Default::default()
        });
        node
    }

    fn near(ms: Option<u64>, want: u64) -> bool {
        ms.is_some_and(|ms| ms.abs_diff(want) <= 1100)
    }

    #[test]
    fn pods_and_nodes_become_backdated_spans_under_the_step() {
        let timeline = Timeline::new();
        let step = timeline.start("Cluster kind", None);
        let mut tracker = Tracker::new(timeline.clone(), step);

        // A static pod: its container ran 3 s before its mirror pod was
        // created; seen already Ready.
        let mut etcd = pod("kube-system", "etcd-cp", 6, Some(7), Some(9));
        etcd.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(at(4)),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        assert!(!tracker.apply(Event::InitApply(etcd), observed_pod));
        // CoreDNS, Pending when first seen, then replaced before Ready.
        let pending = pod("kube-system", "coredns-a", 8, None, None);
        tracker.apply(Event::InitApply(pending.clone()), observed_pod);
        // Not the cluster's own: a Job's pod and a workload's.
        let mut job = pod("kube-system", "helm-install-x", 1, None, None);
        job.metadata.owner_references = Some(vec![OwnerReference {
            kind: "Job".into(),
            ..Default::default()
        }]);
        tracker.apply(Event::InitApply(job), observed_pod);
        let app = pod("default", "app", 1, None, None);
        tracker.apply(Event::InitApply(app), observed_pod);
        assert!(tracker.apply(Event::<Pod>::InitDone, observed_pod));
        tracker.apply(Event::Apply(node("worker", 12, None)), observed_node);
        assert!(!tracker.settled());

        tracker.apply(Event::Delete(pending), observed_pod);
        // Ready as the watch sees it: now, to the millisecond.
        tracker.apply(Event::Apply(node("worker", 12, Some(0))), observed_node);
        assert!(!tracker.settled(), "no CoreDNS Ready yet");
        let replacement = pod("kube-system", "coredns-b", 14, None, Some(20));
        tracker.apply(Event::Apply(replacement), observed_pod);
        assert!(tracker.settled());

        let spans = timeline.spans();
        let find = |name: &str| spans.iter().find(|s| s.name == name).unwrap();
        assert_eq!(spans.len(), 5, "{spans:?}");
        assert!(spans.iter().skip(1).all(|s| s.parent == Some(step)));
        let etcd = find("pod etcd-cp created -> Ready");
        assert!(near(Some(etcd.start_ms), 4_000), "{etcd:?}");
        assert!(near(etcd.end_ms, 9_000), "{etcd:?}");
        assert_eq!(etcd.ok, Some(true));
        let coredns = find("pod coredns-a created -> Ready");
        assert_eq!(coredns.ok, Some(false), "replaced before Ready");
        let worker = find("node worker registered -> Ready");
        assert!(near(Some(worker.start_ms), 12_000), "{worker:?}");
        assert_eq!(
            worker.duration_ms(),
            Some(0),
            "Ready never ends before its start"
        );

        // A second Ready (a restart) keeps the first.
        let before = find("pod etcd-cp created -> Ready").end_ms;
        let etcd_again = pod("kube-system", "etcd-cp", 6, Some(7), Some(30));
        tracker.apply(Event::Apply(etcd_again), observed_pod);
        let spans = timeline.spans();
        assert_eq!(spans[1].end_ms, before);
    }
}
