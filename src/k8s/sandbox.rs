//! Pods whose sandbox failed, given a fresh start.

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
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        last = Some(Instant::now());
        handled.insert(uid);
        if pods.delete(&name, &params).await.is_ok() {
            recreated(&name);
        }
        if handled.len() >= MAX_RECREATED {
            return;
        }
    }
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
