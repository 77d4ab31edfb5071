//! Detectors for LocalStack as the stack uses it: its container, the
//! in-cluster route pods reach it by, and the credentials ESO calls it with.

use serde_json::Value;

use super::{Evidence, Finding, cluster_read, devstack, read};
use crate::profile::Settings;

/// LocalStack missing, stopped, not answering, or without a service the stack uses.
pub fn container(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if settings.localstack.in_cluster() {
        return in_cluster(evidence, settings);
    }
    let ls = &evidence.localstack;
    let name = crate::localstack::container_name(settings);
    let object = format!("container {name}");
    let up = devstack(settings, "up");
    let restart = "restarts it; LocalStack keeps no state, so `up` also re-seeds its secrets and re-publishes the GitOps source";
    let Some(container) = &ls.container else {
        return vec![
            Finding::new("localstack-container", object, "LocalStack is missing")
                .cause(format!("container {name} does not exist"))
                .fix(
                    Some(up),
                    "creates it, seeds its secrets and re-publishes the GitOps source",
                ),
        ];
    };
    let logs = container.log_tail.iter().map(|l| format!("log: {l}"));
    if container.status != "running" {
        let cause = if container.oom_killed {
            "it ran out of memory (OOMKilled)".to_string()
        } else {
            match container.exit_code {
                Some(0) | None => {
                    "it was stopped (`docker stop`, or the Docker engine restarted)".to_string()
                }
                Some(code) => format!("it exited with code {code}"),
            }
        };
        let mut state = format!("container {name}: {}", container.status);
        if let Some(code) = container.exit_code {
            state.push_str(&format!(" (exit code {code})"));
        }
        return vec![
            Finding::new(
                "localstack-container",
                object,
                format!("LocalStack is {}", container.status),
            )
            .evidence(
                std::iter::once(state)
                    .chain(container.error.clone())
                    .chain(logs),
            )
            .cause(cause)
            .fix(Some(up), restart),
        ];
    }
    let recreate = format!(
        "{} && {}",
        devstack(settings, "localstack down"),
        devstack(settings, "up")
    );
    let recreate_action = "`devstack localstack logs` shows why; recreating it re-seeds its secrets and re-publishes the GitOps source";
    let state = format!(
        "container {name}: running{}",
        container
            .health
            .as_ref()
            .map(|h| format!(", {h}"))
            .unwrap_or_default()
    );
    serving(
        evidence,
        settings,
        &object,
        std::iter::once(state).chain(logs).collect(),
        (recreate, recreate_action),
    )
}

/// LocalStack in the cluster (`localstack.mode: in-cluster`): its
/// Deployment runs, answers through a port-forward, and serves the
/// profile's services.
fn in_cluster(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    let namespace = &settings.names.localstack_namespace();
    let name = settings.names.localstack_service();
    let object = format!("Deployment {namespace}/{name}");
    let up = devstack(settings, "up");
    let up_action =
        "re-applies LocalStack's level, re-seeds its secrets and re-publishes the GitOps source";
    if !cluster_read(evidence) || !read(evidence, &format!("Deployments in {namespace}")) {
        return Vec::new();
    }
    if let Some(why) = super::not_running(evidence, namespace, name) {
        return vec![
            Finding::new(
                "localstack-container",
                object,
                format!("LocalStack in the cluster: {}", why.symptom),
            )
            .evidence(why.evidence)
            .cause(why.cause)
            .fix(Some(up), up_action),
        ];
    }
    let logs = format!("`{}` shows its log", devstack(settings, "localstack logs"));
    serving(
        evidence,
        settings,
        &object,
        vec![format!("{object}: available")],
        (up, &format!("{logs}; {up_action}")),
    )
}

/// LocalStack runs: a finding when its health endpoint does not answer or
/// it reports a service the profile needs unavailable.
fn serving(
    evidence: &Evidence,
    settings: &Settings,
    object: &str,
    state: Vec<String>,
    (fix, action): (String, &str),
) -> Vec<Finding> {
    let ls = &evidence.localstack;
    if let Some(why) = &ls.health_error {
        return vec![
            Finding::new("localstack-container", object, "LocalStack does not answer")
                .evidence(state)
                .cause(format!("its health endpoint at {}: {why}", ls.endpoint))
                .fix(Some(fix), action),
        ];
    }
    let services = ls.services.clone().unwrap_or_default();
    let missing = crate::localstack::unavailable_services(settings, &services);
    if missing.is_empty() {
        return Vec::new();
    }
    let states: Vec<String> = missing
        .iter()
        .map(|s| {
            format!(
                "service {s}: {}",
                services.get(*s).map(String::as_str).unwrap_or("absent")
            )
        })
        .collect();
    let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
    vec![
        Finding::new(
            "localstack-container",
            object,
            format!("LocalStack does not serve {}", names.join(", ")),
        )
        .evidence(states.into_iter().chain(state))
        .cause(format!(
            "the profile's `localstack.services` needs them and LocalStack reports them unavailable at {}",
            ls.endpoint
        ))
        .fix(Some(fix), action),
    ]
}

/// The in-cluster `localstack` Service missing, or pointing elsewhere than
/// the container's address on the stack network.
pub fn route(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    let ls = &evidence.localstack;
    let running = ls.container.as_ref().is_some_and(|c| c.status == "running");
    let Some(ip) = ls.network_ip.as_ref().filter(|_| running) else {
        return Vec::new();
    };
    if !read(evidence, "the localstack Service") {
        return Vec::new();
    }
    let route = &evidence.cluster.localstack_route;
    let service = format!(
        "{}/{}",
        settings.names.localstack_namespace(),
        settings.names.localstack_service()
    );
    let fix = |f: Finding| {
        f.fix(
            Some(devstack(settings, "localstack up")),
            "points the in-cluster Service at the LocalStack container",
        )
    };
    let container = format!("LocalStack container on the stack network: {ip}");
    if !route.service {
        return vec![fix(Finding::new(
            "localstack-route",
            format!("Service {service}"),
            "pods have no route to LocalStack",
        )
        .evidence([container])
        .cause(format!(
            "Service {service}, which ESO and Flux reach LocalStack by ({}), does not exist",
            crate::k8s::localstack_in_cluster_url(&settings.names)
        )))];
    }
    if route.addresses.contains(ip) {
        return Vec::new();
    }
    let cause = if route.addresses.is_empty() {
        format!("Service {service} has no ready endpoint")
    } else {
        format!(
            "Service {service} still points at {}: LocalStack was recreated or restarted with a new address",
            route.addresses.join(", ")
        )
    };
    vec![fix(Finding::new(
        "localstack-route",
        format!("Service {service}"),
        "the in-cluster route to LocalStack points elsewhere",
    )
    .evidence([
        format!(
            "Service {service} ({}) -> [{}]",
            route.cluster_ip.as_deref().unwrap_or("no cluster IP"),
            route.addresses.join(", ")
        ),
        container,
    ])
    .cause(cause))]
}

/// A Secret the ClusterSecretStore takes its AWS credentials from that is
/// missing, or lacks the key it names.
pub fn credentials(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !cluster_read(evidence) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for store in &evidence.cluster.cluster_secret_stores {
        let store_name = store["metadata"]["name"].as_str().unwrap_or("?");
        for (secret_ns, secret_name, key) in references(store) {
            let what = format!("Secret {secret_ns}/{secret_name}");
            if !read(evidence, &what) {
                continue;
            }
            let Some(keys) = evidence
                .cluster
                .store_secrets
                .iter()
                .find(|s| s.namespace == secret_ns && s.name == secret_name)
            else {
                continue;
            };
            let problem = if !keys.exists {
                "does not exist".to_string()
            } else if !keys.keys.contains(&key) {
                format!("has no key `{key}` (it has: {})", keys.keys.join(", "))
            } else if keys.empty_keys.contains(&key) {
                format!("holds an empty `{key}`")
            } else {
                continue;
            };
            out.push(
                Finding::new(
                    "localstack-credentials",
                    what.clone(),
                    format!("the LocalStack credentials {what} {problem}"),
                )
                .evidence([format!(
                    "ClusterSecretStore {store_name} reads `{key}` of {what}"
                )])
                .cause(format!(
                    "ClusterSecretStore {store_name} authenticates to Secrets Manager with it, so ESO cannot call LocalStack"
                ))
                .fix(
                    Some(devstack(settings, "sync")),
                    "re-applies it from the GitOps manifests (the chain's root level)",
                ),
            );
            break;
        }
    }
    out
}

/// (namespace, name, key) of each credential a store's AWS auth refers to.
fn references(store: &Value) -> Vec<(String, String, String)> {
    let refs = &store["spec"]["provider"]["aws"]["auth"]["secretRef"];
    refs.as_object()
        .into_iter()
        .flat_map(|r| r.values())
        .filter_map(|r| {
            Some((
                r["namespace"].as_str()?.to_string(),
                r["name"].as_str()?.to_string(),
                r["key"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{only, with};
    use serde_json::json;

    #[test]
    fn a_stopped_localstack_is_restarted_by_up() {
        let evidence = with(|e| {
            e["localstack"] = json!({"container": {"name": "devstack-ci-localstack", "status": "exited", "exitCode": 0,
                "logTail": ["Received SIGTERM, shutting down"]}, "endpoint": "http://127.0.0.1:4566", "networkIp": "172.18.0.2"});
        });
        let finding = only(&evidence, "localstack-container");
        assert_eq!(finding.symptom, "LocalStack is exited");
        assert!(finding.cause.starts_with("it was stopped"));
        assert_eq!(finding.fix.command.as_deref(), Some("devstack up"));
        assert!(
            finding
                .evidence
                .contains(&"log: Received SIGTERM, shutting down".to_string())
        );
    }

    #[test]
    fn localstack_in_the_cluster_is_judged_by_its_deployment_and_health() {
        let mut settings = super::super::fixtures::settings();
        settings.localstack.mode = crate::profile::LocalStackMode::InCluster;
        let in_cluster = |available: u32, health_error: Option<&str>| {
            with(|e| {
                let container = e["localstack"]["container"].take();
                assert!(container.is_object());
                e["localstack"]["healthError"] = json!(health_error);
                e["cluster"]["deployments"].as_array_mut().unwrap().push(json!(
                    {"namespace": "localstack", "name": "localstack", "replicas": 1, "ready": available, "available": available}
                ));
            })
        };
        let findings = |evidence| super::super::detect(&evidence, &settings);
        assert!(
            findings(in_cluster(1, None)).is_empty(),
            "no container to miss"
        );
        let down = findings(in_cluster(0, None));
        assert_eq!(down.len(), 1, "{down:#?}");
        assert_eq!(down[0].object, "Deployment localstack/localstack");
        assert!(
            down[0].symptom.starts_with("LocalStack in the cluster:"),
            "{}",
            down[0].symptom
        );
        assert!(
            down[0].fix.command.as_deref().unwrap().ends_with(" up"),
            "{down:#?}"
        );
        let silent = findings(in_cluster(1, Some("connection refused")));
        assert_eq!(
            silent[0].symptom, "LocalStack does not answer",
            "{silent:#?}"
        );
        assert!(silent[0].cause.contains("connection refused"));
    }

    #[test]
    fn a_missing_or_oom_killed_or_silent_localstack() {
        let missing = with(|e| e["localstack"] = json!({"endpoint": "http://127.0.0.1:4566"}));
        assert_eq!(
            only(&missing, "localstack-container").symptom,
            "LocalStack is missing"
        );
        let killed = with(|e| {
            e["localstack"]["container"] = json!({"name": "devstack-ci-localstack", "status": "exited", "exitCode": 137, "oomKilled": true});
        });
        assert_eq!(
            only(&killed, "localstack-container").cause,
            "it ran out of memory (OOMKilled)"
        );
        let silent = with(|e| {
            e["localstack"]["services"] = json!(null);
            e["localstack"]["healthError"] = json!("health endpoint: operation timed out");
        });
        let finding = only(&silent, "localstack-container");
        assert_eq!(finding.symptom, "LocalStack does not answer");
        assert_eq!(
            finding.fix.command.as_deref(),
            Some("devstack localstack down && devstack up")
        );
        let degraded = with(|e| e["localstack"]["services"]["secretsmanager"] = json!("error"));
        let finding = only(&degraded, "localstack-container");
        assert_eq!(finding.symptom, "LocalStack does not serve secretsmanager");
        assert_eq!(finding.evidence[0], "service secretsmanager: error");
    }

    #[test]
    fn a_route_pointing_at_an_old_address_is_repointed() {
        let evidence =
            with(|e| e["cluster"]["localstackRoute"]["addresses"] = json!(["172.18.0.9"]));
        let finding = only(&evidence, "localstack-route");
        assert!(
            finding.cause.contains("still points at 172.18.0.9"),
            "{}",
            finding.cause
        );
        assert_eq!(
            finding.fix.command.as_deref(),
            Some("devstack localstack up")
        );
        let gone = with(|e| e["cluster"]["localstackRoute"] = json!({"service": false}));
        assert_eq!(
            only(&gone, "localstack-route").symptom,
            "pods have no route to LocalStack"
        );
        // Unread is not missing.
        let unread = with(|e| {
            e["cluster"]["localstackRoute"] = json!({"service": false});
            e["unread"] = json!({"the localstack Service": "forbidden"});
        });
        assert!(super::super::detect(&unread, &super::super::fixtures::settings()).is_empty());
    }

    #[test]
    fn credentials_missing_or_without_their_key() {
        let gone = with(
            |e| e["cluster"]["storeSecrets"][0] = json!({"namespace": "external-secrets", "name": "localstack-credentials", "exists": false}),
        );
        let finding = only(&gone, "localstack-credentials");
        assert_eq!(
            finding.symptom,
            "the LocalStack credentials Secret external-secrets/localstack-credentials does not exist"
        );
        assert_eq!(finding.fix.command.as_deref(), Some("devstack sync"));
        let keyless = with(|e| e["cluster"]["storeSecrets"][0]["keys"] = json!(["access-key-id"]));
        assert!(
            only(&keyless, "localstack-credentials")
                .symptom
                .contains("has no key `secret-access-key`")
        );
        let empty =
            with(|e| e["cluster"]["storeSecrets"][0]["emptyKeys"] = json!(["access-key-id"]));
        assert!(
            only(&empty, "localstack-credentials")
                .symptom
                .ends_with("holds an empty `access-key-id`")
        );
    }
}
