//! Reading Flux's objects: whether a level is Ready for its source's
//! current revision, applying it, checking health (and whether what it
//! checks is healthy), and which failures Flux reports count.

use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::api::DynamicObject;
use serde_json::Value;

use super::Failure;
use super::retry::waiting;
use crate::k8s::conditions::{self, Condition};
use crate::k8s::wait::Objects;

/// The Ready condition of a Flux object.
pub fn ready_condition(object: &Value) -> Option<Condition> {
    conditions::condition(object, "Ready")
}

pub(super) fn observed_current(object: &Value) -> bool {
    object["metadata"]["generation"].as_i64() == object["status"]["observedGeneration"].as_i64()
}

/// Whether Flux has finished the reconcile requested with `token` (none
/// requested: nothing to finish).
pub fn handled(object: &Value, token: Option<&str>) -> bool {
    token.is_none_or(|t| object["status"]["lastHandledReconcileAt"].as_str() == Some(t))
}

/// Whether a Kustomization is Ready with `current`, its source's revision,
/// applied for its current spec.
pub(super) fn settled(kustomization: &Value, current: Option<&str>) -> bool {
    ready_condition(kustomization)
        .as_ref()
        .is_some_and(Condition::is_true)
        && applied(kustomization, current)
}

/// Whether a Kustomization's last apply was of `current`, its source's
/// revision, for its current spec (Ready or not since).
pub(super) fn applied(kustomization: &Value, current: Option<&str>) -> bool {
    observed_current(kustomization)
        && current.is_some()
        && kustomization["status"]["lastAppliedRevision"].as_str() == current
}

/// Whether Flux is applying the source's current revision to a
/// Kustomization of the current spec right now. Flux marks it Reconciling
/// (reason Progressing, the revision in the message) only once its
/// dependencies passed, so it turns Ready on its own: a nudge would queue a
/// second reconcile behind it, seconds each when a restarted controller
/// reconciles every level at once (after a restart or a snapshot restore).
pub(super) fn applying_current(kustomization: &Value, current: Option<&str>) -> bool {
    let Some(current) = current else {
        return false;
    };
    crate::k8s::conditions::condition(kustomization, "Reconciling").is_some_and(|c| {
        c.is_true()
            && c.reason.as_deref() == Some("Progressing")
            && c.message.as_deref().is_some_and(|m| m.contains(current))
    }) && observed_current(kustomization)
}

/// A Kustomization Flux has not reported on yet: just created (by the
/// level before it), which Flux reconciles anyway. A reconcile request
/// would land in that first reconcile and, with the health-check gate
/// devstack's Flux install sets, cancel its check and apply the level twice.
pub(super) fn not_reconciled_yet(kustomization: &Value) -> bool {
    kustomization["status"]["conditions"]
        .as_array()
        .is_none_or(Vec::is_empty)
}

/// Whether Flux handled the reconcile requested with `token` by finding a
/// dependency not Ready: it then waits its 30 s dependency requeue, which a
/// new request, once the dependency is Ready, cuts short.
pub(super) fn dependency_requeued(kustomization: &Value, token: Option<&str>) -> bool {
    token.is_some()
        && handled(kustomization, token)
        && ready_condition(kustomization)
            .is_some_and(|c| !c.is_true() && c.reason.as_deref() == Some("DependencyNotReady"))
}

/// Whether kustomize-controller is waiting on a Kustomization's health
/// checks (it polls them every 5 s) for its current spec. The condition
/// carries the generation it is about: `status.observedGeneration` is only
/// written once the reconcile ends, so a new level has none while checking.
pub(super) fn checking_health(kustomization: &Value) -> bool {
    kustomization["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == "Healthy"
                && c["status"] == "Unknown"
                && c["reason"] == "Progressing"
                && c["observedGeneration"].as_i64().is_some()
                && c["observedGeneration"].as_i64()
                    == kustomization["metadata"]["generation"].as_i64()
        })
}

/// Whether every object a Kustomization's `healthChecks` names is healthy
/// as kstatus (Flux's health check) judges it, from what the chain watches:
/// the HelmRelease (Ready for its current spec) and the Deployments in its
/// namespace (rolled out and available). A check on anything else is not
/// judged here: false.
pub(super) fn health_checks_pass(
    kustomization: &Value,
    release: (&str, &str),
    releases: &Objects<DynamicObject>,
    deployments: &Objects<DynamicObject>,
) -> bool {
    let Some(checks) = kustomization["spec"]["healthChecks"].as_array() else {
        return false;
    };
    let own_namespace = kustomization["metadata"]["namespace"].as_str();
    let value = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_default();
    !checks.is_empty()
        && checks.iter().all(|check| {
            let group = check["apiVersion"]
                .as_str()
                .and_then(|v| v.split_once('/'))
                .map_or("", |(group, _)| group);
            let name = check["name"].as_str().unwrap_or_default();
            let namespace = check["namespace"].as_str().or(own_namespace);
            match (group, check["kind"].as_str()) {
                ("helm.toolkit.fluxcd.io", Some("HelmRelease"))
                    if (namespace, name) == (Some(release.0), release.1) =>
                {
                    releases
                        .get(name)
                        .map(value)
                        .is_some_and(|release| release_is_ready(&release))
                }
                ("apps", Some("Deployment")) if namespace == Some(release.0) => deployments
                    .get(name)
                    .map(value)
                    .is_some_and(|d| deployment_current(&d)),
                _ => false,
            }
        })
}

/// The HelmRelease is Ready for its current spec and no reconcile of it is
/// under way: kstatus (Flux's health check) reads `Reconciling` as in
/// progress, whatever Ready says: after a restart the release keeps Ready
/// from before while helm-controller fetches its chart again, and a health
/// nudge sent then would leave the level to Flux's next poll, 5 s later.
pub(super) fn release_is_ready(release: &Value) -> bool {
    let underway = |type_: &str| conditions::condition(release, type_).is_some_and(|c| c.is_true());
    conditions::is_ready(release)
        && observed_current(release)
        && !underway("Reconciling")
        && !underway("Stalled")
}

/// kstatus's "Current" for a Deployment: its current spec rolled out, every
/// wanted replica updated, ready and available, none left over. Stricter
/// than `k8s::deployment_available` (Available with one pod serving), on
/// purpose: a nudge must not come before Flux's own check would pass.
fn deployment_current(deployment: &Value) -> bool {
    let status = &deployment["status"];
    let wanted = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
    let count = |field: &str| status[field].as_i64().unwrap_or(0);
    status["observedGeneration"].as_i64() >= deployment["metadata"]["generation"].as_i64()
        && [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ]
        .iter()
        .all(|field| count(field) == wanted)
        && conditions::condition(deployment, "Available").is_some_and(|c| c.is_true())
}

/// The failure a Warning event records, if it is about a Kustomization or
/// HelmRelease, happened since `since` and is not a "not yet" reason.
pub(super) fn warning_failure(event: &CoreEvent, since: std::time::SystemTime) -> Option<Failure> {
    let kind = event.involved_object.kind.as_deref().unwrap_or_default();
    if !matches!(kind, "Kustomization" | "HelmRelease") {
        return None;
    }
    let when = event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or(event.event_time.as_ref().map(|t| t.0));
    let recent = when.is_some_and(|t| std::time::SystemTime::from(t) >= since);
    let reason = event.reason.clone().unwrap_or_default();
    if !recent || waiting(&reason, event.message.as_deref().unwrap_or_default()) {
        return None;
    }
    let ns = event
        .involved_object
        .namespace
        .as_deref()
        .or(event.metadata.namespace.as_deref())
        .unwrap_or("?");
    Some(Failure {
        object: format!(
            "{kind} {ns}/{}",
            event.involved_object.name.as_deref().unwrap_or("?")
        ),
        reason,
        message: event.message.clone().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    const OURS: (&str, &str) = ("external-secrets", "external-secrets");

    fn objects(items: Vec<Value>) -> Objects<DynamicObject> {
        let mut set = Objects::default();
        set.replace(
            items
                .into_iter()
                .map(|v| serde_json::from_value(v).expect("a Kubernetes object"))
                .collect(),
        );
        set
    }

    fn deployment(name: &str, generation: i64, observed: i64, ready: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "external-secrets", "generation": generation},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": observed, "replicas": 1, "updatedReplicas": 1,
                "readyReplicas": ready, "availableReplicas": ready,
                "conditions": [{"type": "Available", "status": if ready == 1 { "True" } else { "False" }}]}})
    }

    fn operator_level(healthy: &str, reason: &str) -> Value {
        json!({"metadata": {"name": "external-secrets-operator", "namespace": "flux-system", "generation": 1},
            "spec": {
                "healthChecks": [
                    {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                     "name": "external-secrets", "namespace": "external-secrets"},
                    {"apiVersion": "apps/v1", "kind": "Deployment",
                     "name": "external-secrets-webhook", "namespace": "external-secrets"}],
},
            "status": {"conditions": [
                {"type": "Ready", "status": "Unknown", "reason": "Progressing", "message": "Running health checks", "observedGeneration": 1},
                {"type": "Healthy", "status": healthy, "reason": reason, "message": "Running health checks", "observedGeneration": 1}]}})
    }

    #[test]
    fn a_level_is_told_its_health_checks_pass_only_when_every_named_object_is_healthy() {
        let release = |ready: &str| {
            objects(vec![
                json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "external-secrets", "namespace": "external-secrets", "generation": 2},
                "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": ready}]}}),
            ])
        };
        let level = operator_level("Unknown", "Progressing");
        assert!(checking_health(&level));
        let available = objects(vec![deployment("external-secrets-webhook", 3, 3, 1)]);
        assert!(health_checks_pass(
            &level,
            OURS,
            &release("True"),
            &available
        ));
        // Any named object not healthy, or not there: no.
        assert!(!health_checks_pass(
            &level,
            OURS,
            &release("False"),
            &available
        ));
        // Ready from before while helm-controller reconciles it again (a
        // restart): not yet, as kstatus reads it.
        for underway in ["Reconciling", "Stalled"] {
            let mut again = release("True");
            let mut object = serde_json::to_value(again.get("external-secrets").unwrap()).unwrap();
            object["status"]["conditions"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": underway, "status": "True", "reason": "Progressing"}));
            again = objects(vec![object]);
            assert!(
                !health_checks_pass(&level, OURS, &again, &available),
                "{underway}"
            );
        }
        assert!(!health_checks_pass(
            &level,
            OURS,
            &objects(vec![]),
            &available
        ));
        for not_yet in [
            deployment("external-secrets-webhook", 3, 3, 0),
            deployment("external-secrets-webhook", 4, 3, 1),
            deployment("another", 3, 3, 1),
        ] {
            assert!(!health_checks_pass(
                &level,
                OURS,
                &release("True"),
                &objects(vec![not_yet])
            ));
        }
        // A check on a kind the chain does not watch is never judged passed.
        let mut foreign = level.clone();
        foreign["spec"]["healthChecks"][1] = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "x", "namespace": "external-secrets"});
        assert!(!health_checks_pass(
            &foreign,
            OURS,
            &release("True"),
            &available
        ));
        // Nor are no checks at all (a `wait: true` level).
        let mut none = level.clone();
        none["spec"]["healthChecks"] = json!([]);
        assert!(!health_checks_pass(
            &none,
            OURS,
            &release("True"),
            &available
        ));
    }

    #[test]
    fn only_a_running_health_check_for_the_current_spec_is_nudged() {
        assert!(!checking_health(&operator_level("True", "Succeeded")));
        assert!(!checking_health(&operator_level(
            "False",
            "HealthCheckFailed"
        )));
        let mut stale = operator_level("Unknown", "Progressing");
        stale["metadata"]["generation"] = json!(2);
        assert!(!checking_health(&stale));
        // The canceled check's Ready=False is "not yet".
        assert!(waiting(
            "HealthCheckCanceled",
            "New reconciliation triggered by ConfigMap/flux-system/x"
        ));
    }

    #[test]
    fn settled_means_ready_for_the_current_revision_and_spec() {
        let ks = |ready: &str, applied: &str, generation: i64| {
            json!({"metadata": {"generation": generation}, "status": {"observedGeneration": 2,
                "lastAppliedRevision": applied,
                "conditions": [{"type": "Ready", "status": ready, "reason": "r", "message": "m"}]}})
        };
        assert!(settled(&ks("True", "sha256:a", 2), Some("sha256:a")));
        assert!(!settled(&ks("True", "sha256:a", 2), Some("sha256:b")));
        assert!(!settled(&ks("True", "sha256:a", 3), Some("sha256:a")));
        assert!(!settled(&ks("False", "sha256:a", 2), Some("sha256:a")));
        assert!(!settled(&ks("True", "sha256:a", 2), None));
    }

    #[test]
    fn a_level_applying_the_current_revision_needs_no_nudge() {
        let ks = |status: &str, reason: &str, message: &str, generation: i64| {
            json!({"metadata": {"generation": generation}, "status": {"observedGeneration": 2,
                "conditions": [{"type": "Reconciling", "status": status, "reason": reason, "message": message}]}})
        };
        let applying = "Detecting drift for revision sha256:a with a timeout of 5m0s";
        assert!(applying_current(
            &ks("True", "Progressing", applying, 2),
            Some("sha256:a")
        ));
        // Another revision, a newer spec, no source yet, or not reconciling.
        assert!(!applying_current(
            &ks("True", "Progressing", applying, 2),
            Some("sha256:b")
        ));
        assert!(!applying_current(
            &ks("True", "Progressing", applying, 3),
            Some("sha256:a")
        ));
        assert!(!applying_current(
            &ks("True", "Progressing", applying, 2),
            None
        ));
        assert!(!applying_current(
            &ks("False", "Succeeded", applying, 2),
            Some("sha256:a")
        ));
    }

    #[test]
    fn a_request_flux_sent_to_its_dependency_requeue_is_asked_again() {
        let ks = |handled: &str, status: &str, reason: &str| {
            json!({"status": {"lastHandledReconcileAt": handled, "conditions": [
                {"type": "Ready", "status": status, "reason": reason, "message": "dependency not ready"}]}})
        };
        assert!(dependency_requeued(
            &ks("t1", "False", "DependencyNotReady"),
            Some("t1")
        ));
        // Not our request, none of ours, or another outcome.
        assert!(!dependency_requeued(
            &ks("t0", "False", "DependencyNotReady"),
            Some("t1")
        ));
        assert!(!dependency_requeued(
            &ks("t1", "False", "DependencyNotReady"),
            None
        ));
        assert!(!dependency_requeued(
            &ks("t1", "True", "ReconciliationSucceeded"),
            Some("t1")
        ));
        assert!(!dependency_requeued(
            &ks("t1", "False", "HealthCheckFailed"),
            Some("t1")
        ));
    }

    #[test]
    fn a_level_flux_has_not_reported_on_is_not_nudged() {
        assert!(not_reconciled_yet(&json!({"metadata": {"generation": 1}})));
        assert!(not_reconciled_yet(&json!({"status": {"conditions": []}})));
        assert!(!not_reconciled_yet(&json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "DependencyNotReady"}]}})));
    }

    #[test]
    fn generation_must_be_observed() {
        assert!(observed_current(
            &json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}})
        ));
        assert!(!observed_current(
            &json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}})
        ));
    }

    #[test]
    fn warning_events_become_failures_only_when_recent_and_relevant() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let since = std::time::SystemTime::now() - Duration::from_secs(60);
        let event = |kind: &str, reason: &str, age: u64| {
            let mut e = CoreEvent::default();
            e.metadata.namespace = Some("flux-system".into());
            e.involved_object.kind = Some(kind.into());
            e.involved_object.name = Some("external-secrets-crs".into());
            e.reason = Some(reason.into());
            e.message = Some("webhook refused".into());
            let at = std::time::SystemTime::now() - Duration::from_secs(age);
            e.last_timestamp = Some(Time(at.try_into().unwrap()));
            e
        };
        assert_eq!(
            warning_failure(&event("Kustomization", "ReconciliationFailed", 1), since),
            Some(Failure {
                object: "Kustomization flux-system/external-secrets-crs".into(),
                reason: "ReconciliationFailed".into(),
                message: "webhook refused".into(),
            })
        );
        assert_eq!(
            warning_failure(&event("Kustomization", "ReconciliationFailed", 600), since),
            None
        );
        assert_eq!(warning_failure(&event("Pod", "BackOff", 1), since), None);
        assert_eq!(
            warning_failure(&event("HelmRelease", "Progressing", 1), since),
            None
        );
    }
}
