//! Detectors for ESO's admission webhook (the webhook runbook): its TLS
//! certificate not generated, the webhook not serving, and the caBundle of
//! the webhooks that call it not matching its CA. Certificates are compared
//! by fingerprint; no key is ever read.

use super::{Evidence, Finding, devstack, not_running, pods_of, read, short};
use crate::gitops::SHARED_ESO_RELEASE;
use crate::gitops::chain::eso_deployments;
use crate::profile::Settings;

/// The fix for every webhook finding: what `up` does to the webhook.
const UP_ACTION: &str = "restores a cert-controller scaled to zero, fills an empty certificate Secret, waits until the webhook serves and the CA is in every webhook that calls it, then proves the round trip";

/// The webhook's Service exists (the manifests run one) and was read.
fn webhook_read(evidence: &Evidence) -> bool {
    read(evidence, "the ESO webhook") && evidence.cluster.webhook.service.is_some()
}

/// One line on the cert-controller, which issues and injects the certificate.
fn cert_controller_line(evidence: &Evidence) -> String {
    let name = &eso_deployments(SHARED_ESO_RELEASE.1)[2];
    match not_running(evidence, SHARED_ESO_RELEASE.0, name) {
        None => format!("{name} runs"),
        Some(why) => format!("{}: {}", why.symptom, why.cause),
    }
}

/// The certificate Secret missing, or without a CA or serving certificate.
pub fn certificate(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !webhook_read(evidence) {
        return Vec::new();
    }
    let webhook = &evidence.cluster.webhook;
    let service = webhook.service.clone().unwrap_or_default();
    let object = format!("Secret {}/{service}", SHARED_ESO_RELEASE.0);
    let (symptom, state) = match &webhook.certificate {
        None => (
            "the ESO webhook's certificate Secret is missing".to_string(),
            format!("{object} does not exist"),
        ),
        Some(c) if c.ca.is_empty() || c.serving.is_empty() => (
            "the ESO webhook has no TLS certificate".to_string(),
            format!(
                "{object}: ca.crt {}, tls.crt {}",
                if c.ca.is_empty() { "empty" } else { "present" },
                if c.serving.is_empty() {
                    "empty"
                } else {
                    "present"
                }
            ),
        ),
        Some(_) => return Vec::new(),
    };
    vec![
        Finding::new("webhook-certificate", object, symptom)
            .evidence([
                state,
                format!(
                    "Service {}/{service}: {} ready endpoint(s)",
                    SHARED_ESO_RELEASE.0, webhook.ready_endpoints
                ),
                cert_controller_line(evidence),
            ])
            .cause(format!(
                "the certificate was not generated: the cert-controller issues it, and {}",
                cert_controller_line(evidence)
            ))
            .fix(Some(devstack(settings, "up")), UP_ACTION),
    ]
}

/// The webhook Service without a ready endpoint while its certificate is
/// in place and its pods run (a webhook scaled down or crashing is
/// `eso-not-running`'s).
pub fn not_serving(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !webhook_read(evidence) {
        return Vec::new();
    }
    let webhook = &evidence.cluster.webhook;
    let complete = webhook
        .certificate
        .as_ref()
        .is_some_and(|c| !c.ca.is_empty() && !c.serving.is_empty());
    if webhook.ready_endpoints > 0 || !complete {
        return Vec::new();
    }
    let name = &eso_deployments(SHARED_ESO_RELEASE.1)[1];
    let why = not_running(evidence, SHARED_ESO_RELEASE.0, name);
    if why.as_ref().is_some_and(|w| !w.merely_unready) {
        return Vec::new();
    }
    let service = webhook.service.clone().unwrap_or_default();
    let pods = pods_of(evidence, SHARED_ESO_RELEASE.0, name);
    vec![
        Finding::new(
            "webhook-not-serving",
            format!("Service {}/{service}", SHARED_ESO_RELEASE.0),
            "the ESO webhook does not serve",
        )
        .evidence([format!(
            "Service {}/{service}: no ready endpoint ({} not ready)",
            SHARED_ESO_RELEASE.0, webhook.not_ready_endpoints
        )])
        .evidence(pods.iter().flat_map(|p| p.lines()))
        .cause("its pod runs but fails its readiness probe, so the API server cannot validate any ExternalSecret or store (the log lines say why)")
        .fix(Some(devstack(settings, "up")), UP_ACTION),
    ]
}

/// Webhooks calling the ESO webhook whose caBundle does not hold the CA of
/// its certificate: the API server refuses every ExternalSecret and store.
pub fn ca_bundle(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !webhook_read(evidence) {
        return Vec::new();
    }
    let webhook = &evidence.cluster.webhook;
    let Some(ca) = webhook.certificate.as_ref().filter(|c| !c.ca.is_empty()) else {
        return Vec::new();
    };
    let stale: Vec<String> = webhook
        .callers
        .iter()
        .filter(|w| !w.ca_bundle.iter().any(|f| ca.ca.contains(f)))
        .map(|w| match w.ca_bundle.as_slice() {
            [] => format!("{}: caBundle empty", w.name),
            held => format!(
                "{}: caBundle holds {}",
                w.name,
                held.iter().map(|f| short(f)).collect::<Vec<_>>().join(", ")
            ),
        })
        .collect();
    if stale.is_empty() {
        return Vec::new();
    }
    let service = webhook.service.clone().unwrap_or_default();
    vec![
        Finding::new(
            "webhook-ca-bundle",
            format!("the webhooks calling {}/{service}", SHARED_ESO_RELEASE.0),
            "the ESO webhook's caBundle does not match its certificate",
        )
        .evidence(stale)
        .evidence([
            format!(
                "Secret {}/{}: CA {}{}",
                SHARED_ESO_RELEASE.0,
                ca.secret,
                short(&ca.ca[0]),
                if ca.issued_by_devstack { " (issued by devstack)" } else { "" }
            ),
            cert_controller_line(evidence),
        ])
        .cause(format!(
            "the API server does not trust the webhook's certificate (x509: certificate signed by unknown authority), so it refuses every ExternalSecret and store written; the cert-controller injects the CA into these webhooks, and {}",
            cert_controller_line(evidence)
        ))
        .fix(Some(devstack(settings, "up")), UP_ACTION),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{only, settings, with};
    use super::super::{detect, fixtures::of};
    use serde_json::json;

    #[test]
    fn an_emptied_ca_bundle_with_the_cert_controller_down() {
        let evidence = with(|e| {
            for caller in e["cluster"]["webhook"]["callers"].as_array_mut().unwrap() {
                caller["caBundle"] = json!([]);
            }
            e["cluster"]["deployments"][6]["replicas"] = json!(0);
            e["cluster"]["deployments"][6]["available"] = json!(0);
            e["cluster"]["pods"].as_array_mut().unwrap().remove(6);
        });
        let finding = only(&evidence, "webhook-ca-bundle");
        assert_eq!(
            finding.evidence[0],
            "secretstore-validate/validate.secretstore.external-secrets.io: caBundle empty"
        );
        assert!(finding.cause.ends_with("external-secrets-cert-controller is scaled to 0 replicas: Deployment external-secrets/external-secrets-cert-controller asks for no pod (scaled down by hand), so nothing runs it"), "{}", finding.cause);
        assert_eq!(finding.fix.command.as_deref(), Some("devstack up"));
        // The scaled-down cert-controller is a finding of its own.
        assert_eq!(
            of(&detect(&evidence, &settings()), "eso-not-running").len(),
            1
        );
    }

    #[test]
    fn a_ca_bundle_of_another_ca_shows_both_fingerprints() {
        let evidence = with(|e| {
            e["cluster"]["webhook"]["callers"][1]["caBundle"] =
                json!(["aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44"]);
        });
        let finding = only(&evidence, "webhook-ca-bundle");
        assert_eq!(
            finding.evidence,
            [
                "externalsecret-validate/validate.externalsecret.external-secrets.io: caBundle holds sha256:aa11bb22cc33",
                "Secret external-secrets/external-secrets-webhook: CA sha256:3f9a1c0d2b4e (issued by devstack)",
                "external-secrets-cert-controller runs",
            ]
        );
    }

    #[test]
    fn a_certificate_never_generated() {
        let evidence = with(|e| {
            e["cluster"]["webhook"]["certificate"]["ca"] = json!([]);
            e["cluster"]["webhook"]["certificate"]["serving"] = json!([]);
            e["cluster"]["webhook"]["readyEndpoints"] = json!(0);
            e["cluster"]["webhook"]["notReadyEndpoints"] = json!(1);
            e["cluster"]["deployments"][5]["available"] = json!(0);
            e["cluster"]["pods"][5]["containers"][0]["ready"] = json!(false);
            e["cluster"]["pods"][5]["logTail"] = json!([
                "{\"level\":\"error\",\"msg\":\"invalid certs. retrying...\",\"error\":\"stat /tmp/certs/tls.crt: no such file or directory\"}"
            ]);
        });
        let findings = detect(&evidence, &settings());
        let finding = only(&evidence, "webhook-certificate");
        assert_eq!(finding.symptom, "the ESO webhook has no TLS certificate");
        assert_eq!(
            finding.evidence[0],
            "Secret external-secrets/external-secrets-webhook: ca.crt empty, tls.crt empty"
        );
        // One finding says it: no "not serving" and no "not running" beside it.
        assert_eq!(findings.len(), 1, "{findings:#?}");
    }

    #[test]
    fn a_webhook_pod_that_never_turns_ready() {
        let evidence = with(|e| {
            e["cluster"]["webhook"]["readyEndpoints"] = json!(0);
            e["cluster"]["webhook"]["notReadyEndpoints"] = json!(1);
            e["cluster"]["deployments"][5]["available"] = json!(0);
            e["cluster"]["pods"][5]["containers"][0]["ready"] = json!(false);
        });
        let finding = only(&evidence, "webhook-not-serving");
        assert_eq!(
            finding.evidence[0],
            "Service external-secrets/external-secrets-webhook: no ready endpoint (1 not ready)"
        );
    }
}
