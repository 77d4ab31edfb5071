//! Detectors for the External Secrets Operator: its Deployments not
//! running, OOMKilled under many ExternalSecrets (runbook), and the
//! ClusterSecretStore not Ready with the provider unreachable (runbook).

use super::{
    Evidence, Finding, PodEvidence, condition_line, devstack, events_about, not_running, read,
};
use crate::gitops::{CHAIN, ChainPlan};
use crate::k8s::conditions::{self, one_line};
use crate::profile::Settings;

/// What a store's message says when ESO cannot reach the provider.
const UNREACHABLE: &[&str] = &[
    "dial tcp",
    "no such host",
    "connection refused",
    "i/o timeout",
    "context deadline exceeded",
    "could not validate provider",
    "unable to validate store",
    "RequestError: send request failed",
];

/// ESO's Deployments missing, scaled to zero, crashing or unschedulable.
/// A webhook that runs but is not ready, and a container killed for
/// memory, are left to the detectors that say why.
pub fn workloads(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    let plan = ChainPlan::of(settings);
    let (ns, _) = settings.names.helm_release();
    let ns = ns.as_str();
    if !read(evidence, &format!("Deployments in {ns}")) || !read(evidence, "helmrelease") {
        return Vec::new();
    }
    let deployed = evidence
        .cluster
        .helm_release
        .as_ref()
        .is_some_and(|r| r["status"]["history"][0]["status"] == "deployed");
    let deployments = plan.release_deployments();
    let webhook = deployments.get(1).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for name in deployments {
        let Some(why) = not_running(evidence, ns, &name) else {
            continue;
        };
        let missing = super::deployment(evidence, ns, &name).is_none();
        let oom = super::pods_of(evidence, ns, &name)
            .iter()
            .any(|p| p.containers.iter().any(|c| c.oom_killed()));
        if (missing && !deployed) || (why.merely_unready && name == webhook) || oom {
            continue;
        }
        let scaled = why.symptom.contains("scaled to 0");
        out.push(
            Finding::new(
                "eso-not-running",
                format!("Deployment {ns}/{name}"),
                format!("ESO's {}", why.symptom),
            )
            .evidence(why.evidence)
            .cause(why.cause)
            .fix(
                Some(devstack(settings, "up")),
                if scaled {
                    "gives each of ESO's Deployments scaled to zero its replica back, then proves the round trip"
                } else {
                    "re-applies the release and waits until ESO serves; the evidence above says why it does not start"
                },
            ),
        );
    }
    out
}

/// ESO's pods killed for memory: the controller under many
/// ExternalSecrets, or its webhook or cert-controller.
pub fn oom_killed(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    let (ns, _) = settings.names.helm_release();
    let ns = ns.as_str();
    let deployments = ChainPlan::of(settings).release_deployments();
    let (controller, webhook) = (&deployments[0], deployments.get(1));
    let count = evidence.cluster.external_secrets.len();
    let mut out = Vec::new();
    for name in &deployments {
        let pods: Vec<&PodEvidence> = super::pods_of(evidence, ns, name)
            .into_iter()
            .filter(|p| p.containers.iter().any(|c| c.oom_killed()))
            .collect();
        let Some(container) = pods
            .iter()
            .flat_map(|p| p.containers.iter())
            .find(|c| c.oom_killed())
        else {
            continue;
        };
        let limit = container
            .memory_limit
            .clone()
            .unwrap_or_else(|| "the node's memory".into());
        let (key, load) = if name == controller {
            (
                "resources",
                format!(" with {count} ExternalSecret(s) to reconcile"),
            )
        } else if Some(name) == webhook {
            ("webhook.resources", String::new())
        } else {
            ("certController.resources", String::new())
        };
        out.push(
            Finding::new(
                "eso-oom-killed",
                format!("Deployment {ns}/{name}"),
                format!("ESO's {name} is killed for memory (OOMKilled)"),
            )
            .evidence(pods.iter().flat_map(|p| p.lines()))
            .cause(format!(
                "its container {} needs more than its limit of {limit}{load}",
                container.name
            ))
            .fix(
                Some(devstack(settings, "sync")),
                format!(
                    "raise the limit in the profile, e.g. `eso.values: {}`, then run the command: it re-applies the values and Helm rolls the pods",
                    values_snippet(key)
                ),
            ),
        );
    }
    out
}

/// `webhook.resources` -> `{webhook: {resources: {limits: {memory: 512Mi}}}}`.
fn values_snippet(key: &str) -> String {
    key.split('.')
        .rev()
        .fold("{limits: {memory: 512Mi}}".to_string(), |inner, part| {
            format!("{{{part}: {inner}}}")
        })
}

/// The stack's ClusterSecretStore missing or not Ready, with the cause
/// read from the rest of the evidence: LocalStack down, the route wrong,
/// the credentials missing, ESO not running, or what ESO says.
pub fn store(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !read(evidence, "clustersecretstores") {
        return Vec::new();
    }
    let mut stores = vec![settings.names.store()];
    // The Parameter Store's, for a profile with parameters.
    if !settings.parameters.is_empty() {
        stores.push(settings.names.parameter_store());
    }
    stores
        .into_iter()
        .flat_map(|name| one_store(evidence, settings, name))
        .collect()
}

fn one_store(evidence: &Evidence, settings: &Settings, store_name: String) -> Vec<Finding> {
    let object = format!("ClusterSecretStore {store_name}");
    let Some(store) = evidence
        .cluster
        .cluster_secret_stores
        .iter()
        .find(|s| s["metadata"]["name"] == store_name.as_str())
    else {
        // The custom resources' level applies it: missing only once it applied.
        let applied = evidence.cluster.kustomizations.iter().any(|k| {
            k["metadata"]["name"] == settings.names.of(CHAIN[2]) && conditions::is_ready(k)
        });
        if !applied {
            return Vec::new();
        }
        return vec![
            Finding::new("store-not-ready", &object, format!("{object} is missing"))
                .cause("the chain's custom resources level applied, yet the store it names is gone")
                .fix(
                    Some(devstack(settings, "sync")),
                    "re-applies the chain's custom resources",
                ),
        ];
    };
    let ready = conditions::condition(store, "Ready");
    if ready.as_ref().is_some_and(|c| c.is_true()) {
        return Vec::new();
    }
    let message = one_line(
        ready
            .as_ref()
            .and_then(|c| c.message.as_deref())
            .unwrap_or_default(),
    );
    let (cause, command, action) = store_cause(evidence, settings, &message);
    vec![
        Finding::new("store-not-ready", &object, format!("{object} is not Ready"))
            .evidence(condition_line(store, "Ready").or(Some("no status yet".into())))
            .evidence(events_about(
                evidence,
                "ClusterSecretStore",
                "",
                &store_name,
            ))
            .cause(cause)
            .fix(Some(command), action),
    ]
}

/// (cause, command, what it does) for a store that is not Ready.
fn store_cause(
    evidence: &Evidence,
    settings: &Settings,
    message: &str,
) -> (String, String, String) {
    let ls = &evidence.localstack;
    let unreachable = "the provider is unreachable";
    if let Some(status) = match &ls.container {
        None => Some("missing"),
        Some(c) if c.status != "running" => Some(c.status.as_str()),
        Some(_) => None,
    } {
        return (
            format!("{unreachable}: LocalStack is {status}"),
            devstack(settings, "up"),
            "restarts LocalStack, re-seeds it and has ESO validate the store again".into(),
        );
    }
    let route = &evidence.cluster.localstack_route;
    if let Some(ip) = &ls.network_ip
        && !route.addresses.contains(ip)
    {
        return (
            format!(
                "{unreachable}: the in-cluster route to LocalStack ({}) does not point at its container ({ip})",
                crate::k8s::localstack_in_cluster_url(&settings.names)
            ),
            devstack(settings, "localstack up"),
            "points the in-cluster Service at the LocalStack container".into(),
        );
    }
    if let Some(secret) = evidence
        .cluster
        .store_secrets
        .iter()
        .find(|s| !s.exists || !s.empty_keys.is_empty())
    {
        return (
            format!(
                "its credentials Secret {}/{} is missing or incomplete",
                secret.namespace, secret.name
            ),
            devstack(settings, "sync"),
            "re-applies the credentials from the GitOps manifests".into(),
        );
    }
    if let Some(cause) = sts_failure(evidence, settings, message) {
        return cause;
    }
    let (namespace, controller) = settings.names.helm_release();
    if settings.eso.installs() && not_running(evidence, &namespace, &controller).is_some() {
        return (
            "ESO's controller does not run, so nothing validates the store".into(),
            devstack(settings, "up"),
            "restores ESO's controller and proves the round trip".into(),
        );
    }
    if UNREACHABLE.iter().any(|m| message.contains(m)) {
        return (
            format!(
                "{unreachable}: ESO cannot reach Secrets Manager at {}: {message}",
                crate::k8s::localstack_in_cluster_url(&settings.names)
            ),
            devstack(settings, "up"),
            "re-routes pods to LocalStack and has ESO validate the store again".into(),
        );
    }
    (
        if message.is_empty() {
            "ESO has not validated it yet".into()
        } else {
            format!("ESO does not accept it: {message}")
        },
        devstack(settings, "sync"),
        "re-applies the store from the GitOps manifests".into(),
    )
}

/// What ESO says when the web identity path fails: the ServiceAccount
/// without a role, or STS refusing `AssumeRoleWithWebIdentity`.
const STS_FAILURE: &[&str] = &[
    "AssumeRoleWithWebIdentity",
    "WebIdentityErr",
    "an IAM role must be associated with service account",
    "InvalidIdentityToken",
];

/// With `eso.auth: serviceAccount`, a store failing on STS: the role
/// missing or its trust policy wrong (from IAM), or what ESO says of STS.
fn sts_failure(
    evidence: &Evidence,
    settings: &Settings,
    message: &str,
) -> Option<(String, String, String)> {
    if settings.eso.auth != crate::profile::parameters::EsoAuth::ServiceAccount {
        return None;
    }
    // A missing role or a wrong trust policy is `role`'s finding, with its fix.
    if let Some(problem) = role_problem(evidence) {
        return Some((
            format!("`AssumeRoleWithWebIdentity` fails: {problem}"),
            devstack(settings, "seed"),
            "creates the role with the trust policy IRSA needs (or puts its policy right); ESO retries the store within a minute".into(),
        ));
    }
    if !STS_FAILURE.iter().any(|m| message.contains(m)) {
        return None;
    }
    if message.contains("an IAM role must be associated") {
        return Some((
            format!(
                "the controller's ServiceAccount has no `eks.amazonaws.com/role-arn` annotation: {message}"
            ),
            devstack(settings, "sync"),
            "re-applies ESO's values, which annotate its ServiceAccount with the role".into(),
        ));
    }
    Some((
        format!(
            "ESO's `AssumeRoleWithWebIdentity` at LocalStack's STS ({}) failed: {message}",
            crate::k8s::localstack_in_cluster_url(&settings.names)
        ),
        devstack(settings, "up"),
        "re-seeds the role, restores LocalStack's `sts` service and has ESO validate the store again".into(),
    ))
}

/// The role missing, or its trust policy not letting the controller in.
fn role_problem(evidence: &Evidence) -> Option<String> {
    let role = evidence.localstack.eso_role.as_ref()?;
    if role.error.is_some() {
        return None;
    }
    if !role.exists {
        return Some(format!(
            "the IAM role `{}` does not exist in LocalStack",
            role.name
        ));
    }
    role.trust_problem.as_ref().map(|why| {
        format!(
            "the trust policy of IAM role `{}` is wrong: {why}",
            role.name
        )
    })
}

/// With `eso.auth: serviceAccount`, the role missing or its trust policy
/// wrong, found in IAM even while the stores still hold their credentials.
pub fn role(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if settings.eso.auth != crate::profile::parameters::EsoAuth::ServiceAccount {
        return Vec::new();
    }
    let Some(problem) = role_problem(evidence) else {
        return Vec::new();
    };
    let name = evidence
        .localstack
        .eso_role
        .as_ref()
        .map(|r| r.name.clone())
        .unwrap_or_default();
    let (namespace, account) = crate::seed::role::service_account(settings);
    vec![
        Finding::new(
            "eso-role",
            format!("IAM role {name}"),
            format!("the role ESO assumes (`eso.auth: serviceAccount`) cannot be assumed: {problem}"),
        )
        .cause(format!(
            "ServiceAccount {namespace}/{account} names `{}`; STS lets its token assume the role only when the role exists and trusts it",
            crate::seed::role::role_arn(settings)
        ))
        .fix(
            Some(devstack(settings, "seed")),
            "creates the role with the trust policy IRSA needs (or puts its policy right)",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{only, settings, with};
    use super::super::{detect, fixtures::of};
    use serde_json::json;

    #[test]
    fn the_controller_scaled_to_zero_is_scaled_back_by_up() {
        let evidence = with(|e| {
            e["cluster"]["deployments"][4] =
                json!({"namespace": "external-secrets", "name": "external-secrets", "replicas": 0});
            e["cluster"]["pods"].as_array_mut().unwrap().remove(4);
        });
        let finding = only(&evidence, "eso-not-running");
        assert_eq!(
            finding.symptom,
            "ESO's external-secrets is scaled to 0 replicas"
        );
        assert_eq!(finding.fix.command.as_deref(), Some("devstack up"));
        assert!(finding.fix.action.contains("scaled to zero"));
    }

    #[test]
    fn an_oom_killed_controller_names_its_limit_and_the_key_to_raise() {
        let evidence = with(|e| {
            e["cluster"]["deployments"][4]["available"] = json!(0);
            e["cluster"]["pods"][4]["containers"][0] = json!({"name": "external-secrets", "image": "ghcr.io/external-secrets/external-secrets:v2.9.0",
                "state": "waiting", "reason": "CrashLoopBackOff", "restarts": 7, "lastReason": "OOMKilled", "lastExitCode": 137, "memoryLimit": "64Mi"});
        });
        let findings = detect(&evidence, &settings());
        // One finding, the runbook's: not also "not running".
        assert!(of(&findings, "eso-not-running").is_empty(), "{findings:#?}");
        let finding = only(&evidence, "eso-oom-killed");
        assert_eq!(
            finding.cause,
            "its container external-secrets needs more than its limit of 64Mi with 1 ExternalSecret(s) to reconcile"
        );
        assert!(
            finding
                .fix
                .action
                .contains("`eso.values: {resources: {limits: {memory: 512Mi}}}`"),
            "{}",
            finding.fix.action
        );
        let webhook = with(|e| {
            e["cluster"]["pods"][5]["containers"][0]["lastReason"] = json!("OOMKilled");
        });
        let finding = only(&webhook, "eso-oom-killed");
        assert!(
            finding
                .fix
                .action
                .contains("`eso.values: {webhook: {resources: {limits: {memory: 512Mi}}}}`"),
            "{}",
            finding.fix.action
        );
    }

    #[test]
    fn a_store_not_ready_blames_what_the_evidence_shows() {
        let not_ready = |e: &mut serde_json::Value| {
            e["cluster"]["clusterSecretStores"][0]["status"]["conditions"] = json!([{"type": "Ready", "status": "False",
                "reason": "InvalidProviderConfig", "message": "unable to validate store: could not validate provider: RequestError: send request failed caused by: Post \"http://localstack.localstack.svc.cluster.local:4566/\": dial tcp 10.43.12.7:4566: connect: connection refused"}]);
        };
        let down = with(|e| {
            not_ready(e);
            e["localstack"]["container"]["status"] = json!("exited");
        });
        let finding = only(&down, "store-not-ready");
        assert_eq!(
            finding.cause,
            "the provider is unreachable: LocalStack is exited"
        );
        assert_eq!(finding.fix.command.as_deref(), Some("devstack up"));
        let moved = with(|e| {
            not_ready(e);
            e["cluster"]["localstackRoute"]["addresses"] = json!(["172.18.0.9"]);
        });
        assert_eq!(
            only(&moved, "store-not-ready").fix.command.as_deref(),
            Some("devstack localstack up")
        );
        let other = with(not_ready);
        let finding = only(&other, "store-not-ready");
        assert!(finding.cause.starts_with("the provider is unreachable: ESO cannot reach Secrets Manager at http://localstack.localstack.svc.cluster.local:4566: unable to validate store"), "{}", finding.cause);
        let missing = with(|e| e["cluster"]["clusterSecretStores"] = json!([]));
        assert_eq!(
            only(&missing, "store-not-ready").symptom,
            "ClusterSecretStore localstack is missing"
        );
    }

    /// The ci profile in `eso.auth: serviceAccount` mode, with a parameter.
    fn irsa_settings() -> crate::profile::Settings {
        let text = include_str!("../../profiles/ci.yaml")
            .replace(
                "services: [secretsmanager, sts, s3]",
                "services: [secretsmanager, sts, s3, ssm, iam]",
            )
            .replace("verify:\n", "eso:\n  auth: serviceAccount\nparameters:\n  - {name: /ci/url, value: x, sync: {}}\nverify:\n");
        let loaded = crate::profile::load::parse_for_test(&text).unwrap();
        crate::profile::Settings::resolve(loaded, &Default::default()).unwrap()
    }

    #[test]
    fn a_missing_role_or_a_wrong_trust_policy_is_named_with_seed_as_its_fix() {
        let irsa = irsa_settings();
        let role = |exists: bool, problem: Option<&str>| {
            with(|e| {
                e["localstack"]["esoRole"] =
                    json!({"name": "ci-eso", "exists": exists, "trustProblem": problem});
            })
        };
        let findings = detect(&role(false, None), &irsa);
        let found = of(&findings, "eso-role");
        assert_eq!(found.len(), 1, "{findings:#?}");
        assert_eq!(
            found[0].symptom,
            "the role ESO assumes (`eso.auth: serviceAccount`) cannot be assumed: the IAM role `ci-eso` does not exist in LocalStack"
        );
        assert_eq!(found[0].fix.command.as_deref(), Some("devstack seed"));
        let findings = detect(
            &role(
                true,
                Some("no statement allows `sts:AssumeRoleWithWebIdentity`"),
            ),
            &irsa,
        );
        assert!(of(&findings, "eso-role")[0].symptom.ends_with(
            "the trust policy of IAM role `ci-eso` is wrong: no statement allows `sts:AssumeRoleWithWebIdentity`"
        ));
        assert!(of(&detect(&role(true, None), &irsa), "eso-role").is_empty());
        // Static keys: no role to look at.
        assert!(of(&detect(&role(false, None), &settings()), "eso-role").is_empty());
    }

    #[test]
    fn a_store_failing_on_sts_names_it() {
        let evidence = with(|e| {
            e["cluster"]["clusterSecretStores"][0]["status"]["conditions"] = json!([{"type": "Ready", "status": "False",
                "reason": "InvalidProviderConfig", "message": "operation error STS: AssumeRoleWithWebIdentity, https response error StatusCode: 403"}]);
        });
        let findings = detect(&evidence, &irsa_settings());
        let store = of(&findings, "store-not-ready");
        assert!(
            store[0]
                .cause
                .starts_with("ESO's `AssumeRoleWithWebIdentity` at LocalStack's STS"),
            "{findings:#?}"
        );
        assert_eq!(store[0].fix.command.as_deref(), Some("devstack up"));
    }
}
