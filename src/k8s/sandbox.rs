//! Pods given a fresh start instead of waiting out kubelet's back-off.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod};
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::runtime::watcher::{self, Event};

/// kubelet's event reason for a pod sandbox it could not create.
const FAILED_SANDBOX: &str = "FailedCreatePodSandBox";

/// Past this many recreations the failure is not the start-up race, and the
/// caller's wait reports it.
const MAX_RECREATED: usize = 5;

/// A pod network that is still not there gets this long before the next pod
/// meets it.
const SPACING: Duration = Duration::from_secs(1);

/// Deletes each pod in `namespace` matching `labels` whose sandbox failed,
/// so that its controller replaces it at once, and calls `recreated` with
/// its name. kubelet retries a failed sandbox only after its pod worker's
/// backoff (10-15 s); a new pod gets a sandbox as soon as the node's pod
/// network can host it. A new K3s cluster meets this with CoreDNS: it is
/// scheduled the moment the node is Ready, before flannel has written the
/// node's subnet file.
///
/// Runs until dropped, or returns after [`MAX_RECREATED`] recreations.
/// Errors are not its to report: the caller's wait for the pods bounds it.
pub async fn recreate_pods_whose_sandbox_failed(
    client: &kube::Client,
    namespace: &str,
    labels: &str,
    recreated: impl Fn(&str),
) {
    let events: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default()
        .fields(&format!("involvedObject.kind=Pod,reason={FAILED_SANDBOX}"));
    let mut stream = super::wait::watch(events, config);
    let mut handled = BTreeSet::new();
    let mut last: Option<Instant> = None;
    while let Some(event) = stream.next().await {
        let (Ok(Event::Apply(event)) | Ok(Event::InitApply(event))) = event else {
            continue;
        };
        let (Some(name), Some(uid)) = (event.involved_object.name, event.involved_object.uid)
        else {
            continue;
        };
        if handled.contains(&uid) || !without_sandbox(&pods, &name, &uid, labels).await {
            continue;
        }
        if let Some(wait) = last.and_then(|at| SPACING.checked_sub(at.elapsed())) {
            tokio::time::sleep(wait).await;
        }
        last = Some(Instant::now());
        handled.insert(uid.clone());
        if pods.delete(&name, &by_uid(uid)).await.is_ok() {
            recreated(&name);
        }
        if handled.len() >= MAX_RECREATED {
            return;
        }
    }
}

/// Runs `wait` while [`recreate_pods_whose_sandbox_failed`] watches the pods
/// in `namespace` matching `labels`: the wait ends with its own result.
pub async fn wait_recreating_failed_sandboxes<T>(
    wait: impl std::future::Future<Output = T>,
    client: &kube::Client,
    namespace: &str,
    labels: &str,
    recreated: impl Fn(&str),
) -> T {
    tokio::pin!(wait);
    let recreate = recreate_pods_whose_sandbox_failed(client, namespace, labels, recreated);
    tokio::select! {
        biased;
        result = &mut wait => return result,
        () = recreate => {}
    }
    wait.await
}

/// For `limit`, deletes each pod in `namespaces` that is waiting to restart
/// a container that failed, once per pod (its controller replaces it at
/// once), and calls `recreated` with its namespace and name. A K3s node
/// that starts again (restored, or its container restarted) starts its
/// pods before its API server serves its own certificate:
/// controllers that talk to the API server exit at once ("certificate ...
/// doesn't contain any IP SANs") and kubelet restarts them only after 10 s,
/// then 20 s. Start it once the API server serves.
pub async fn recreate_crashed_pods(
    client: kube::Client,
    namespaces: &[&str],
    limit: Duration,
    recreated: impl Fn(&str),
) {
    let started = Instant::now();
    let mut handled = BTreeSet::new();
    while started.elapsed() < limit && handled.len() < MAX_RECREATED * 4 {
        for namespace in namespaces {
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let Ok(list) = pods.list(&ListParams::default()).await else {
                continue;
            };
            for pod in list.items {
                let (Some(name), Some(uid)) = (pod.metadata.name.clone(), pod.metadata.uid.clone())
                else {
                    continue;
                };
                if handled.contains(&uid) || !restarting_after_failure(&pod) {
                    continue;
                }
                handled.insert(uid.clone());
                if pods.delete(&name, &by_uid(uid)).await.is_ok() {
                    recreated(&format!("{namespace}/{name}"));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn by_uid(uid: String) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    }
}

/// A Deployment's pod (restarted, never completed) waiting out kubelet's
/// back-off to restart a container that failed. Not merely one that
/// exited: the containers a node ran before it stopped read as exited
/// until kubelet starts them again.
fn restarting_after_failure(pod: &Pod) -> bool {
    let owned = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "ReplicaSet");
    let backing_off = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .any(|w| w.reason.as_deref() == Some("CrashLoopBackOff"));
    owned && backing_off
}

/// Whether pod `name` is still the one with `uid`, matches `labels` and has
/// no container running (its sandbox was never made).
async fn without_sandbox(pods: &Api<Pod>, name: &str, uid: &str, labels: &str) -> bool {
    let selection = ListParams::default()
        .labels(labels)
        .fields(&format!("metadata.name={name}"));
    let Ok(list) = pods.list(&selection).await else {
        return false;
    };
    list.items
        .iter()
        .any(|pod| pod.metadata.uid.as_deref() == Some(uid) && pending_without_containers(pod))
}

fn pending_without_containers(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return true;
    };
    let running = status.container_statuses.iter().flatten().any(|c| {
        c.state
            .as_ref()
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    });
    status.phase.as_deref().is_none_or(|p| p == "Pending") && !running
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, PodStatus,
    };

    fn pod(phase: &str, state: ContainerState) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "coredns".into(),
                    state: Some(state),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_replica_set_pod_in_back_off_is_recreated() {
        use k8s_openapi::api::core::v1::ContainerStateTerminated;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owned = |state: ContainerState| {
            let mut pod = pod("Running", state);
            pod.metadata.owner_references = Some(vec![OwnerReference {
                kind: "ReplicaSet".into(),
                ..Default::default()
            }]);
            pod
        };
        let back_off = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let exited = |code: i32| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        };
        let running = ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        };
        assert!(restarting_after_failure(&owned(back_off.clone())));
        // As the node left it, before kubelet restarts it.
        assert!(!restarting_after_failure(&owned(exited(255))));
        assert!(!restarting_after_failure(&owned(exited(0))));
        assert!(!restarting_after_failure(&owned(running)));
        // Not a Deployment's: a Job's or a bare pod is left alone.
        assert!(!restarting_after_failure(&pod("Running", back_off)));
    }

    #[test]
    fn only_a_pending_pod_with_no_container_started_is_recreated() {
        let creating = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let running = ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        };
        assert!(pending_without_containers(&pod(
            "Pending",
            creating.clone()
        )));
        assert!(!pending_without_containers(&pod(
            "Pending",
            running.clone()
        )));
        assert!(!pending_without_containers(&pod("Running", running)));
        assert!(!pending_without_containers(&pod("Failed", creating)));
        assert!(pending_without_containers(&Pod::default()));
    }
}
