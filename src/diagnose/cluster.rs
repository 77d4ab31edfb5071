//! Detectors for the cluster itself: an API that does not answer, nodes
//! NotReady or under pressure (the kubelet's image-GC warnings included),
//! and pods that cannot get their images.

use super::{Evidence, Finding, PodEvidence, age_secs, cluster_read, devstack, events_about};
use crate::profile::Settings;

/// Node conditions that mean the kubelet is short of something.
const PRESSURE: &[&str] = &["MemoryPressure", "DiskPressure", "PIDPressure"];
/// The kubelet's warnings when it cannot free disk space by removing images.
const IMAGE_GC_REASONS: &[&str] = &[
    "ImageGCFailed",
    "FreeDiskSpaceFailed",
    "EvictionThresholdMet",
];
/// How recent a kubelet warning must be to count (events live an hour).
const RECENT_SECS: i64 = 15 * 60;

/// The stack has no cluster, or its API server does not answer.
pub fn unreachable(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    let cluster = &evidence.cluster;
    let object = format!("cluster {}", settings.kube_context());
    let stopped: Vec<_> = cluster
        .node_containers
        .iter()
        .filter(|c| c.status != "running")
        .collect();
    let node_lines = cluster.node_containers.iter().flat_map(|c| {
        let mut lines = vec![format!(
            "node container {}: {}{}",
            c.name,
            c.status,
            c.exit_code
                .filter(|_| c.status != "running")
                .map(|code| format!(" (exit code {code})"))
                .unwrap_or_default()
        )];
        lines.extend(c.log_tail.iter().map(|l| format!("  log: {l}")));
        lines
    });
    let up = devstack(settings, "up");
    if !cluster.kubeconfig {
        return vec![
            Finding::new("cluster-unreachable", object, "the stack has no cluster")
                .evidence(node_lines)
                .cause(format!(
                    "stack `{}` has LocalStack but no kubeconfig: its cluster was never created or was removed",
                    settings.name
                ))
                .fix(Some(up), "creates the cluster and delivers Flux and ESO to it"),
        ];
    }
    let Some(error) = &cluster.api_error else {
        return Vec::new();
    };
    let cause = match stopped.first() {
        Some(node) => format!(
            "node container {} is {}{}",
            node.name,
            node.status,
            node.exit_code
                .map(|c| format!(" (exit code {c})"))
                .unwrap_or_default()
        ),
        None if cluster.node_containers.is_empty() => {
            "the cluster's node containers are gone".to_string()
        }
        None => "the node runs but its API server does not answer".to_string(),
    };
    let finding = Finding::new(
        "cluster-unreachable",
        object,
        "the cluster's API server does not answer",
    )
    .evidence(std::iter::once(format!("API: {error}")).chain(node_lines))
    .cause(cause);
    // Every node ended by a stop (`devstack stop`, `docker stop`, a machine
    // shut down) rather than a crash: the stack is stopped, and `start` is
    // the command that says so.
    let all_stopped = !cluster.node_containers.is_empty()
        && stopped.len() == cluster.node_containers.len()
        && stopped
            .iter()
            .all(|node| matches!(node.exit_code, None | Some(0 | 130 | 137 | 143)));
    vec![if all_stopped {
        finding.fix(
            Some(devstack(settings, "start")),
            "starts the stack's stopped containers and brings it back to a verified round trip",
        )
    } else {
        finding.fix(
            Some(up),
            "starts stopped nodes (or recreates a missing cluster) and converges the stack",
        )
    }]
}

/// Nodes NotReady, or under memory, disk or PID pressure, and kubelets that
/// warn they cannot free disk space.
pub fn nodes(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !cluster_read(evidence) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for node in &evidence.cluster.nodes {
        let object = format!("Node {}", node.name);
        let gc_events: Vec<String> = evidence
            .cluster
            .events
            .iter()
            .filter(|e| e.kind == "Node" && e.name == node.name)
            .filter(|e| IMAGE_GC_REASONS.contains(&e.reason.as_str()))
            .filter(|e| {
                e.last_seen
                    .as_deref()
                    .and_then(|t| age_secs(evidence, t))
                    .is_none_or(|age| age <= RECENT_SECS)
            })
            .map(|e| e.line())
            .collect();
        let ready = node.condition("Ready");
        if !ready.is_some_and(|c| c.is_true()) {
            let container = evidence
                .cluster
                .node_containers
                .iter()
                .find(|c| c.name == node.name);
            out.push(
                Finding::new(
                    "node-not-ready",
                    &object,
                    format!("node {} is NotReady", node.name),
                )
                .evidence(ready.map(|c| c.line()))
                .evidence(container.map(|c| format!("node container {}: {}", c.name, c.status)))
                .evidence(events_about(evidence, "Node", "", &node.name))
                .cause(match ready.and_then(|c| c.message.clone()) {
                    Some(message) => format!("its kubelet reports: {message}"),
                    None => "its kubelet stopped reporting".to_string(),
                })
                .fix(
                    Some(devstack(settings, "up")),
                    "starts a stopped node and waits for every node Ready",
                ),
            );
        }
        let pressed: Vec<_> = node
            .conditions
            .iter()
            .filter(|c| PRESSURE.contains(&c.type_.as_str()) && c.is_true())
            .collect();
        if pressed.is_empty() && gc_events.is_empty() {
            continue;
        }
        let names: Vec<&str> = pressed.iter().map(|c| c.type_.as_str()).collect();
        let symptom = if names.is_empty() {
            format!("the kubelet of node {} cannot free disk space", node.name)
        } else {
            format!("node {} is under {}", node.name, names.join(", "))
        };
        let disk = names.is_empty() || names.contains(&"DiskPressure");
        out.push(
            Finding::new("node-pressure", object, symptom)
                .evidence(pressed.iter().map(|c| c.line()))
                .evidence(gc_events)
                .cause(if disk {
                    "the Docker host's disk is nearly full: the kubelet removes images, then evicts pods"
                } else {
                    "the Docker host is short of memory or processes: the kubelet evicts pods"
                })
                .fix(
                    None,
                    if disk {
                        "free disk space on the Docker host (`docker system df` shows what uses it, `docker image prune` removes unused images), then run `devstack up`"
                    } else {
                        "stop other containers or give the Docker host more memory, then run `devstack up`"
                    },
                ),
        );
    }
    out
}

/// Pods waiting for an image their node cannot pull.
pub fn image_pull(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !cluster_read(evidence) {
        return Vec::new();
    }
    evidence
        .cluster
        .pods
        .iter()
        .filter_map(|pod| image_finding(evidence, settings, pod))
        .collect()
}

fn image_finding(evidence: &Evidence, settings: &Settings, pod: &PodEvidence) -> Option<Finding> {
    let container = pod.containers.iter().find(|c| c.image_unavailable())?;
    let pinned = crate::versions::FLUX_IMAGES
        .iter()
        .chain(crate::versions::ESO_IMAGES)
        .chain(crate::versions::K3S_SYSTEM_IMAGES)
        .any(|p| p.reference == container.image);
    let existing = settings.cluster.provider == crate::profile::Provider::Existing;
    let action = if existing {
        "the existing cluster's nodes pull their own images (devstack imports them only into nodes that are containers on this machine's Docker engine): give the nodes a registry they reach, or registry mirrors in their container runtime's configuration, then run `devstack up` again"
    } else if pinned {
        "imports the images devstack pins into the nodes, from its cache or the offline bundle (`devstack pull` fills the cache)"
    } else {
        "imports what devstack holds; an image it does not pin needs a registry the nodes reach (`images.mirrors` in the profile) or `images.preload`"
    };
    Some(
        Finding::new(
            "image-pull",
            format!("Pod {}/{}", pod.namespace, pod.name),
            format!(
                "pod {}/{} cannot get image {}",
                pod.namespace, pod.name, container.image
            ),
        )
        .evidence(pod.lines())
        .evidence(events_about(evidence, "Pod", &pod.namespace, &pod.name))
        .cause(format!(
            "the node cannot pull {} ({}){}",
            container.image,
            container.reason.as_deref().unwrap_or("image not available"),
            if settings.images.bundle.is_some() {
                ", and the offline bundle did not provide it"
            } else {
                ""
            }
        ))
        .fix((!existing).then(|| devstack(settings, "up")), action),
    )
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{only, settings, with};
    use serde_json::json;

    #[test]
    fn an_api_that_does_not_answer_names_the_stopped_node() {
        let evidence = with(|e| {
            e["cluster"]["apiError"] = json!(
                "client error (Connect): tcp connect error: Connection refused (os error 111)"
            );
            e["cluster"]["nodeContainers"] = json!([{"name": "devstack-ci-server-0", "status": "exited", "exitCode": 1,
                "logTail": ["time=\"2026-03-02T09:59:58Z\" level=fatal msg=\"the logging configuration should not be changed after setting it once\""]}]);
        });
        let finding = only(&evidence, "cluster-unreachable");
        assert_eq!(
            finding.cause,
            "node container devstack-ci-server-0 is exited (exit code 1)"
        );
        assert_eq!(finding.fix.command.as_deref(), Some("devstack up"));
        assert!(
            finding
                .evidence
                .iter()
                .any(|l| l.contains("logging configuration")),
            "{finding:#?}"
        );
        // Nothing in the cluster is judged when nothing was read.
        assert_eq!(super::super::detect(&evidence, &settings()).len(), 1);
    }

    #[test]
    fn nodes_ended_by_a_stop_are_started_again_by_start() {
        let evidence = with(|e| {
            e["cluster"]["apiError"] = json!("tcp connect error: Connection refused");
            e["cluster"]["nodeContainers"] = json!([
                {"name": "devstack-dev-control-plane", "status": "exited", "exitCode": 137, "logTail": []},
                {"name": "devstack-dev-worker", "status": "exited", "exitCode": 0, "logTail": []}
            ]);
        });
        let finding = only(&evidence, "cluster-unreachable");
        assert_eq!(finding.fix.command.as_deref(), Some("devstack start"));
    }

    #[test]
    fn a_stack_without_a_kubeconfig_has_no_cluster() {
        let evidence = with(|e| e["cluster"] = json!({"kubeconfig": false}));
        let finding = only(&evidence, "cluster-unreachable");
        assert_eq!(finding.symptom, "the stack has no cluster");
    }

    #[test]
    fn a_node_not_ready_and_one_under_disk_pressure() {
        let evidence = with(|e| {
            e["cluster"]["nodes"][0]["conditions"] = json!([
                {"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure", "message": "kubelet has disk pressure"},
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "container runtime network not ready"}
            ]);
            e["cluster"]["events"] = json!([{"namespace": "default", "kind": "Node", "name": "devstack-ci-server-0",
                "reason": "FreeDiskSpaceFailed", "count": 4, "lastSeen": "2026-03-02T09:58:00Z",
                "message": "Failed to garbage collect required amount of images. Attempted to free 2147483648 bytes, but only found 0 bytes eligible to free."}]);
        });
        let not_ready = only(&evidence, "node-not-ready");
        assert_eq!(
            not_ready.cause,
            "its kubelet reports: container runtime network not ready"
        );
        let pressure = only(&evidence, "node-pressure");
        assert_eq!(
            pressure.symptom,
            "node devstack-ci-server-0 is under DiskPressure"
        );
        assert!(
            pressure
                .evidence
                .iter()
                .any(|l| l.starts_with("event FreeDiskSpaceFailed (x4)")),
            "{pressure:#?}"
        );
        assert!(pressure.fix.command.is_none() && pressure.fix.action.contains("docker system df"));
    }

    #[test]
    fn image_gc_warnings_alone_are_a_finding_while_recent() {
        let event = |seen: &str| {
            with(|e| {
                e["cluster"]["events"] = json!([{"namespace": "default", "kind": "Node", "name": "devstack-ci-server-0",
                    "reason": "ImageGCFailed", "lastSeen": seen, "message": "failed to garbage collect required amount of images"}]);
            })
        };
        let finding = only(&event("2026-03-02T09:55:00Z"), "node-pressure");
        assert_eq!(
            finding.symptom,
            "the kubelet of node devstack-ci-server-0 cannot free disk space"
        );
        let old = super::super::detect(&event("2026-03-02T09:00:00Z"), &settings());
        assert!(old.is_empty(), "{old:#?}");
    }

    #[test]
    fn a_pod_pending_on_an_image_names_the_image() {
        let evidence = with(|e| {
            e["cluster"]["pods"].as_array_mut().unwrap().push(json!({
                "namespace": "default", "name": "app-7c9d-xyz", "phase": "Pending",
                "containers": [{"name": "app", "image": "registry.example/app:1", "state": "waiting",
                    "reason": "ImagePullBackOff", "message": "Back-off pulling image \"registry.example/app:1\""}]}));
        });
        let finding = only(&evidence, "image-pull");
        assert_eq!(
            finding.symptom,
            "pod default/app-7c9d-xyz cannot get image registry.example/app:1"
        );
        assert!(finding.fix.action.contains("images.mirrors"));
        assert_eq!(finding.fix.command.as_deref(), Some("devstack up"));

        // On an existing cluster devstack gives no image to nodes it cannot reach.
        let existing = settings()
            .with_provider(crate::profile::Provider::Existing)
            .unwrap();
        let findings = super::image_pull(&evidence, &existing);
        assert_eq!(findings.len(), 1, "{findings:#?}");
        assert_eq!(findings[0].fix.command, None);
        assert!(
            findings[0].fix.action.contains("pull their own images"),
            "{}",
            findings[0].fix.action
        );
    }
}
