//! Detectors for ExternalSecrets: the secret they read missing in LocalStack
//! (the ResourceNotFoundException runbook), and every other reason one does
//! not sync: a key nobody seeds, a property the secret lacks, a store that
//! does not exist, an ExternalSecret the profile declares that is missing.

use serde_json::Value;

use super::{Evidence, Finding, condition_line, devstack, events_about, object_name, read};
use crate::k8s::conditions::{self, one_line};
use crate::profile::Settings;

/// What ESO (through the AWS SDK) says when the secret does not exist.
const NOT_FOUND: &[&str] = &[
    "ResourceNotFoundException",
    "can't find the specified secret",
    "Secrets Manager can't find",
];
/// What ESO says when the secret exists without the property asked for.
const NO_PROPERTY: &[&str] = &[
    "does not exist in secret",
    "cannot find property",
    "property",
];
/// What ESO says when the store an ExternalSecret names does not exist.
const NO_STORE: &[&str] = &[
    "could not get ClusterSecretStore",
    "could not get SecretStore",
    "not found",
];

/// An ExternalSecret and what it reads.
struct Reads<'a> {
    object: &'a Value,
    name: String,
    namespace: String,
    /// The store kind and name it names.
    store: (String, String),
    /// The remote keys it reads (not ARNs).
    keys: Vec<String>,
}

fn reads(object: &Value) -> Reads<'_> {
    let spec = &object["spec"];
    let store = &spec["secretStoreRef"];
    let keys = spec["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["remoteRef"]["key"].as_str())
        .chain(
            spec["dataFrom"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["extract"]["key"].as_str()),
        )
        .filter(|k| !k.starts_with("arn:"))
        .map(String::from)
        .collect();
    Reads {
        object,
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or("?")
            .to_string(),
        namespace: object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("?")
            .to_string(),
        store: (
            store["kind"].as_str().unwrap_or("SecretStore").to_string(),
            store["name"].as_str().unwrap_or("?").to_string(),
        ),
        keys,
    }
}

/// The ExternalSecrets to judge: every one but the round trip's probes.
fn external_secrets(evidence: &Evidence) -> Vec<Reads<'_>> {
    evidence
        .cluster
        .external_secrets
        .iter()
        .map(reads)
        .filter(|r| !r.name.starts_with(crate::verify::PROBE_PREFIX))
        .collect()
}

/// Reads the stack's own store.
fn on_our_store(es: &Reads, settings: &Settings) -> bool {
    es.store.0 == "ClusterSecretStore" && es.store.1 == settings.names.store()
}

/// The condition's message and the ExternalSecret's Warning events, as one text.
fn what_eso_says(evidence: &Evidence, es: &Reads) -> (Vec<String>, String) {
    let events = events_about(evidence, "ExternalSecret", &es.namespace, &es.name);
    let mut lines: Vec<String> = condition_line(es.object, "Ready").into_iter().collect();
    lines.extend(events);
    let text = lines.join("\n");
    (lines, text)
}

/// Keys `es` reads that Secrets Manager does not hold (when its names are known).
fn absent_keys(evidence: &Evidence, es: &Reads) -> Vec<String> {
    let Some(names) = &evidence.localstack.secret_names else {
        return Vec::new();
    };
    es.keys
        .iter()
        .filter(|k| !names.contains(k))
        .cloned()
        .collect()
}

fn declared(settings: &Settings, key: &str) -> bool {
    settings.secrets.iter().any(|s| s.name == key)
}

/// One finding per ExternalSecret on the store that reads a key the profile
/// declares and LocalStack does not hold, for the first such key: from the
/// names LocalStack lists, else (when they could not be read) from what ESO
/// says (`not_found`).
fn missing_findings(
    evidence: &Evidence,
    on_store: impl Fn(&Reads) -> bool,
    names: Option<&Vec<String>>,
    not_found: &[&str],
    declared: impl Fn(&str) -> bool,
    finding: impl Fn(&Reads, Vec<String>, &str) -> Finding,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for es in external_secrets(evidence).iter().filter(|es| on_store(es)) {
        let (lines, said) = what_eso_says(evidence, es);
        let absent = |key: &&String| {
            declared(key)
                && match names {
                    Some(names) => !names.contains(key),
                    None => not_found.iter().any(|m| said.contains(m)),
                }
        };
        let Some(key) = es.keys.iter().find(absent) else {
            continue;
        };
        out.push(finding(es, lines, key));
    }
    out
}

/// `es` reads `what`, which LocalStack does not hold; `devstack seed`
/// restores it.
fn missing_finding(
    es: &Reads,
    settings: &Settings,
    lines: Vec<String>,
    detector: &'static str,
    what: String,
    cause: String,
    fix: &str,
) -> Finding {
    // A Ready ExternalSecret hides the loss until its next refresh.
    let syncing = if conditions::is_ready(es.object) {
        "; it still holds the last value, and its next refresh fails"
    } else {
        ""
    };
    Finding::new(
        detector,
        format!("ExternalSecret {}/{}", es.namespace, es.name),
        format!(
            "ExternalSecret {}/{} reads {what}, which LocalStack does not hold",
            es.namespace, es.name
        ),
    )
    .evidence(lines)
    .cause(format!("{cause}{syncing}"))
    .fix(Some(devstack(settings, "seed")), fix)
}

/// ExternalSecrets reading a secret the profile seeds that LocalStack does
/// not hold (deleted, or LocalStack lost it): runbook "ExternalSecrets not
/// syncing: secret missing in LocalStack (ResourceNotFoundException)".
pub fn missing_in_localstack(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !read(evidence, "externalsecrets") {
        return Vec::new();
    }
    missing_findings(
        evidence,
        |es| on_our_store(es, settings),
        evidence.localstack.secret_names.as_ref(),
        NOT_FOUND,
        |key| declared(settings, key),
        |es, lines, key| {
            missing_finding(
                es,
                settings,
                lines,
                "secret-missing-in-localstack",
                format!("`{key}`"),
                format!(
                    "Secrets Manager in LocalStack has no secret `{key}` (ResourceNotFoundException): the profile seeds it, and it was deleted or LocalStack lost its state"
                ),
                "writes the profile's secrets to LocalStack again; ESO syncs at its next retry",
            )
        },
    )
}

/// What ESO says when a parameter does not exist.
const PARAMETER_NOT_FOUND: &[&str] = &["ParameterNotFound"];

/// Reads the stack's Parameter Store store.
fn on_parameter_store(es: &Reads, settings: &Settings) -> bool {
    !settings.parameters.is_empty()
        && es.store.0 == "ClusterSecretStore"
        && es.store.1 == settings.names.parameter_store()
}

fn declared_parameter(settings: &Settings, key: &str) -> bool {
    settings.parameters.iter().any(|p| p.name == key)
}

/// The profile's parameters an ExternalSecret reads that LocalStack's
/// Parameter Store does not hold (deleted, or LocalStack lost its state),
/// found as a deleted secret is: from the names SSM lists, else from what
/// ESO says (ParameterNotFound).
pub fn parameter_missing_in_localstack(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if settings.parameters.is_empty() || !read(evidence, "externalsecrets") {
        return Vec::new();
    }
    missing_findings(
        evidence,
        |es| on_parameter_store(es, settings),
        evidence.localstack.parameter_names.as_ref(),
        PARAMETER_NOT_FOUND,
        |key| declared_parameter(settings, key),
        |es, lines, key| {
            missing_finding(
                es,
                settings,
                lines,
                "parameter-missing-in-localstack",
                format!("parameter `{key}`"),
                format!(
                    "SSM Parameter Store in LocalStack has no parameter `{key}` (ParameterNotFound): the profile seeds it, and it was deleted or LocalStack lost its state"
                ),
                "writes the profile's secrets and parameters to LocalStack again; ESO syncs at its next retry",
            )
        },
    )
}

/// ExternalSecrets that do not sync for another reason, and the profile's
/// ExternalSecrets that are missing.
pub fn failing(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !read(evidence, "externalsecrets") {
        return Vec::new();
    }
    let mut out = missing_from_profile(evidence, settings);
    let stores: Vec<&str> = evidence
        .cluster
        .cluster_secret_stores
        .iter()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    let store_ready = evidence
        .cluster
        .cluster_secret_stores
        .iter()
        .any(|s| s["metadata"]["name"] == settings.names.store() && conditions::is_ready(s));
    for es in external_secrets(evidence) {
        if let Some(finding) = judge(evidence, settings, &es, &stores, store_ready) {
            out.push(finding);
        }
    }
    out
}

fn judge(
    evidence: &Evidence,
    settings: &Settings,
    es: &Reads,
    stores: &[&str],
    store_ready: bool,
) -> Option<Finding> {
    let object = format!("ExternalSecret {}/{}", es.namespace, es.name);
    let (lines, said) = what_eso_says(evidence, es);
    let our_store = settings.names.store();
    let finding = |symptom: String, cause: String| {
        Finding::new("external-secret-failing", &object, symptom)
            .evidence(lines.clone())
            .cause(cause)
    };
    let (kind, store) = &es.store;
    if kind == "ClusterSecretStore"
        && read(evidence, "clustersecretstores")
        && !stores.contains(&store.as_str())
    {
        return Some(
            finding(
                format!("{object} names a store that does not exist"),
                format!(
                    "ClusterSecretStore `{store}` does not exist (the stack's is `{our_store}`)"
                ),
            )
            .fix(
                None,
                format!(
                    "set `spec.secretStoreRef` of {object} to ClusterSecretStore `{our_store}`"
                ),
            ),
        );
    }
    let wrong: Vec<String> = absent_keys(evidence, es)
        .into_iter()
        .filter(|k| !declared(settings, k))
        .collect();
    if let (Some(key), true) = (wrong.first(), on_our_store(es, settings)) {
        let names = evidence.localstack.secret_names.clone().unwrap_or_default();
        let close = crate::profile::load::closest_match(key, &names)
            .map(|c| format!(" (did you mean `{c}`?)"))
            .unwrap_or_default();
        return Some(
            finding(
                format!("{object} reads `{key}`, which does not exist"),
                format!("neither LocalStack nor the profile has a secret `{key}`{close}"),
            )
            .fix(
                Some(devstack(settings, "seed")),
                format!("add `- name: {key}` (with its value) to the profile's `secrets` and run the command, or correct the key in {object}"),
            ),
        );
    }
    // A parameter the profile seeds that is gone is `parameter_missing_in_localstack`'s.
    if on_parameter_store(es, settings)
        && es.keys.iter().any(|k| declared_parameter(settings, k))
        && (PARAMETER_NOT_FOUND.iter().any(|m| said.contains(m))
            || evidence
                .localstack
                .parameter_names
                .as_ref()
                .is_some_and(|names| es.keys.iter().any(|k| !names.contains(k))))
    {
        return None;
    }
    let synced = conditions::condition(es.object, "Ready").is_some_and(|c| {
        c.is_true() && c.reason.as_deref() == Some(crate::verify::REASON_SECRET_SYNCED)
    });
    let ready = conditions::condition(es.object, "Ready");
    // Not reconciled yet, synced, or failing because the store is (its own finding).
    if ready.is_none() || synced || (on_our_store(es, settings) && !store_ready) {
        return None;
    }
    // The runbook's case is `secret-missing-in-localstack`'s.
    if NOT_FOUND.iter().any(|m| said.contains(m)) && es.keys.iter().any(|k| declared(settings, k)) {
        return None;
    }
    let message = one_line(lines.last().map(String::as_str).unwrap_or_default());
    let (cause, action) = if NOT_FOUND.iter().any(|m| said.contains(m)) {
        (
            format!("the secret it reads does not exist in LocalStack: {message}"),
            format!(
                "add the secret to the profile's `secrets` and run `{}`, or correct the key in {object}",
                devstack(settings, "seed")
            ),
        )
    } else if NO_PROPERTY.iter().any(|m| said.contains(m)) {
        (
            format!("the secret exists, but not the property it asks for: {message}"),
            format!(
                "correct `remoteRef.property` in {object}, or add the field to the secret's `json` in the profile"
            ),
        )
    } else if NO_STORE.iter().any(|m| said.contains(m)) {
        (
            format!("the store it names cannot be used: {message}"),
            format!("set `spec.secretStoreRef` of {object} to ClusterSecretStore `{our_store}`"),
        )
    } else {
        (
            format!("ESO cannot sync it: {message}"),
            "the evidence says why; `devstack verify` proves the secret path with a probe of its own".to_string(),
        )
    };
    Some(finding(format!("{object} does not sync"), cause).fix(None, action))
}

/// The ExternalSecrets the profile declares (`sync:`) that do not exist.
fn missing_from_profile(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    let present: Vec<String> = evidence
        .cluster
        .external_secrets
        .iter()
        .map(object_name)
        .collect();
    crate::profile::parameters::sync_targets(settings)
        .into_iter()
        .filter_map(|target| {
            let (ns, name, what) = (target.namespace, target.name, target.of);
            let object = format!("{ns}/{name}");
            (!present.contains(&object)).then(|| {
                Finding::new(
                    "external-secret-failing",
                    format!("ExternalSecret {object}"),
                    format!("ExternalSecret {object} is missing"),
                )
                .cause(format!(
                    "the profile declares it for {what} and nothing created it"
                ))
                .fix(
                    Some(devstack(settings, "sync")),
                    "applies the profile's ExternalSecrets",
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{only, settings, with};
    use super::super::{detect, fixtures::of};
    use serde_json::json;

    #[test]
    fn a_seeded_secret_deleted_in_localstack_is_seeded_again() {
        // Still Synced: its next refresh fails.
        let deleted = with(|e| e["localstack"]["secretNames"] = json!([]));
        let finding = only(&deleted, "secret-missing-in-localstack");
        assert_eq!(
            finding.symptom,
            "ExternalSecret default/app-token reads `ci/app/token`, which LocalStack does not hold"
        );
        assert!(
            finding.cause.ends_with("its next refresh fails"),
            "{}",
            finding.cause
        );
        assert_eq!(finding.fix.command.as_deref(), Some("devstack seed"));
        // Failing, with ESO's event, and no other finding for it.
        let failing = with(|e| {
            e["localstack"]["secretNames"] = json!([]);
            e["cluster"]["externalSecrets"][0]["status"]["conditions"] = json!([{"type": "Ready", "status": "False",
                "reason": "SecretSyncedError", "message": "could not get secret data from provider"}]);
            e["cluster"]["events"].as_array_mut().unwrap().push(json!({"namespace": "default", "kind": "ExternalSecret",
                "name": "app-token", "reason": "UpdateFailed", "count": 3, "lastSeen": "2026-03-02T09:59:30Z",
                "message": "error processing spec.data[0] (key: ci/app/token), err: Secrets Manager can't find the specified secret."}));
        });
        let findings = detect(&failing, &settings());
        assert_eq!(findings.len(), 1, "{findings:#?}");
        assert!(
            findings[0]
                .evidence
                .iter()
                .any(|l| l.contains("(x3): error processing spec.data[0]"))
        );
    }

    #[test]
    fn an_external_secret_naming_a_key_nobody_seeds() {
        let evidence = with(|e| {
            e["cluster"]["externalSecrets"].as_array_mut().unwrap().push(json!({
                "apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
                "metadata": {"name": "typo", "namespace": "default"},
                "spec": {"secretStoreRef": {"kind": "ClusterSecretStore", "name": "localstack"},
                         "data": [{"secretKey": "value", "remoteRef": {"key": "ci/app/tokn"}}]},
                "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "SecretSyncedError",
                                           "message": "could not get secret data from provider"}]}}));
        });
        let finding = only(&evidence, "external-secret-failing");
        assert_eq!(
            finding.symptom,
            "ExternalSecret default/typo reads `ci/app/tokn`, which does not exist"
        );
        assert_eq!(
            finding.cause,
            "neither LocalStack nor the profile has a secret `ci/app/tokn` (did you mean `ci/app/token`?)"
        );
        assert_eq!(finding.fix.command.as_deref(), Some("devstack seed"));
        assert!(finding.fix.action.contains("`- name: ci/app/tokn`"));
    }

    #[test]
    fn a_missing_property_and_a_missing_store() {
        let property = with(|e| {
            let es = &mut e["cluster"]["externalSecrets"][0];
            es["spec"]["data"][0]["remoteRef"]["property"] = json!("password");
            es["status"]["conditions"] = json!([{"type": "Ready", "status": "False", "reason": "SecretSyncedError",
                "message": "could not get secret data from provider"}]);
            e["cluster"]["events"] = json!([{"namespace": "default", "kind": "ExternalSecret", "name": "app-token",
                "reason": "UpdateFailed", "message": "error processing spec.data[0] (key: ci/app/token), err: key password does not exist in secret ci/app/token"}]);
        });
        let finding = only(&property, "external-secret-failing");
        assert!(
            finding
                .cause
                .starts_with("the secret exists, but not the property it asks for"),
            "{}",
            finding.cause
        );
        let store = with(|e| {
            e["cluster"]["externalSecrets"][0]["spec"]["secretStoreRef"]["name"] = json!("aws")
        });
        let finding = only(&store, "external-secret-failing");
        assert_eq!(
            finding.cause,
            "ClusterSecretStore `aws` does not exist (the stack's is `localstack`)"
        );
        assert!(finding.fix.command.is_none());
    }

    #[test]
    fn the_profiles_external_secret_missing_and_probes_ignored() {
        let gone = with(|e| {
            let all = e["cluster"]["externalSecrets"].as_array_mut().unwrap();
            let mut probe = all.remove(0);
            probe["metadata"]["name"] = json!("devstack-verify-1a2b");
            probe["spec"]["data"][0]["remoteRef"]["key"] = json!("devstack-verify-1a2b");
            all.push(probe);
        });
        let findings = detect(&gone, &settings());
        let found = of(&findings, "external-secret-failing");
        assert_eq!(found.len(), 1, "{findings:#?}");
        assert_eq!(
            found[0].symptom,
            "ExternalSecret default/app-token is missing"
        );
    }

    #[test]
    fn a_seeded_parameter_deleted_in_localstack_is_seeded_again() {
        let text = include_str!("../../profiles/ci.yaml")
            .replace(
                "verify:\n",
                "parameters:\n  - {name: /ci/url, value: x, sync: {}}\nverify:\n",
            )
            .replace(
                "services: [secretsmanager, sts, s3]",
                "services: [secretsmanager, sts, s3, ssm]",
            );
        let loaded = crate::profile::load::parse_for_test(&text).unwrap();
        let settings = crate::profile::Settings::resolve(loaded, &Default::default()).unwrap();
        let reading = |names: serde_json::Value| {
            with(|e| {
                e["cluster"]["externalSecrets"].as_array_mut().unwrap().push(json!({"apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
                    "metadata": {"name": "ci-url", "namespace": "default"},
                    "spec": {"secretStoreRef": {"kind": "ClusterSecretStore", "name": "localstack-parameters"},
                             "data": [{"secretKey": "value", "remoteRef": {"key": "/ci/url"}}]},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "SecretSynced"}]}}));
                e["localstack"]["parameterNames"] = names;
            })
        };
        let findings = detect(&reading(json!([])), &settings);
        let found = of(&findings, "parameter-missing-in-localstack");
        assert_eq!(found.len(), 1, "{findings:#?}");
        assert_eq!(
            found[0].symptom,
            "ExternalSecret default/ci-url reads parameter `/ci/url`, which LocalStack does not hold"
        );
        assert_eq!(found[0].fix.command.as_deref(), Some("devstack seed"));
        let held = detect(&reading(json!(["/ci/url"])), &settings);
        assert!(of(&held, "parameter-missing-in-localstack").is_empty());
    }
}
