//! The ESO webhook's serving certificate, made available the moment its pod
//! starts.
//!
//! The chart creates an empty Secret for the certificate; the
//! cert-controller fills it once its own pod is up, and then injects the CA
//! into the CRDs and the ValidatingWebhookConfigurations. A webhook pod that
//! starts before the Secret is filled checks its certificate files again
//! only 10 s later, and kubelet refreshes a pod's Secret volume only on its
//! periodic sync (a minute apart), so on a cold install the webhook, which
//! the operator level of the chain waits for, would become Ready 10-70 s
//! after its pod.
//!
//! Three things close that gap, for as long as the chain is awaited:
//! - devstack fills the empty Secret itself, with a CA and a serving
//!   certificate made the way the cert-controller makes them, so the
//!   webhook finds its certificate at its first look. The cert-controller
//!   then judges the certificate valid, keeps it, and injects its CA. The
//!   certificate is issued before the chart creates the Secret, since the
//!   pods mount it about a second after it appears and an RSA key can take
//!   most of that second on a busy machine.
//! - should a webhook pod still have mounted the Secret empty, it is
//!   annotated once the Secret holds a certificate: an update of the pod
//!   makes kubelet sync its volumes at once, in time if its container has
//!   not started yet.
//! - a webhook whose process already found no certificate sleeps 10 s
//!   before it looks again, whatever its volume holds by then; once the
//!   Secret holds a certificate such a pod is deleted, and its replacement
//!   starts with the certificate in 1-2 s.

use std::collections::{BTreeMap, HashSet};

use base64::Engine as _;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::SHARED_ESO_RELEASE;
use crate::error::Error;
use crate::k8s::wait;
use crate::k8s::{Budget, Verdict, Wait};

/// Label of the Secret the ESO chart creates (empty) for the webhook's
/// certificate.
const WEBHOOK_SECRET_SELECTOR: &str = "external-secrets.io/component=webhook";
/// The ESO webhook pods (the chart's selector label).
const WEBHOOK_POD_SELECTOR: &str = "app.kubernetes.io/name=external-secrets-webhook";
/// Set on a webhook pod to the version of the certificate Secret it was
/// made to reload.
const WEBHOOK_CERTS_ANNOTATION: &str = "devstack.dev/webhook-certificate";
/// Set on the certificate Secret devstack filled: the SHA-256 of the CA
/// certificate (PEM) it wrote, so anyone can tell whose CA is in use.
pub const ISSUED_CA_ANNOTATION: &str = "devstack.dev/webhook-ca-sha256";

/// The cert-controller accepts a CA only if it verifies for this name
/// (its `CAName`) and its key is PKCS#1 RSA, which it parses to sign.
const CA_NAME: &str = "external-secrets";

/// The Secret's keys, as the cert-controller and the webhook read them.
pub const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
pub const SERVER_CERT: &str = "tls.crt";
const SERVER_KEY: &str = "tls.key";

/// Keeps the webhook's certificate ready for its pods; never returns.
pub async fn keep_certificate_ready(client: &kube::Client) -> std::convert::Infallible {
    tokio::select! {
        never = issue_when_empty(client) => never,
        never = refresh_pods_when_filled(client) => never,
        never = replace_pods_waiting_for_certificate(client) => never,
    }
}

/// Waits until the webhook's Service has a Ready endpoint: every
/// ExternalSecret written is validated by it. The operator level's health
/// checks vouch for that only when the level reconciles, and an `up` of a
/// stack whose levels are Ready for the current revision leaves them
/// alone, and a webhook pod restarting meanwhile would make the profile's
/// ExternalSecrets fail ("no endpoints available"). Manifests that run ESO
/// without its webhook (no Service) have nothing to wait for.
pub async fn wait_serving(client: &kube::Client, budget: Budget) -> Result<(), Error> {
    let (namespace, release) = SHARED_ESO_RELEASE;
    let service = format!("{release}-webhook");
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let exists = services
        .get_opt(&service)
        .await
        .map_err(|e| Error::internal(format!("read Service {namespace}/{service}: {e}")))?;
    if exists.is_none() {
        return Ok(());
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    Wait::new(
        format!("the ESO webhook Service {namespace}/{service}"),
        "served by a Ready pod",
        budget,
    )
    .advice(format!(
        "`kubectl -n {namespace} get pods -l {WEBHOOK_POD_SELECTOR}` shows the webhook's pods"
    ))
    .list(
        slices,
        watcher::Config::default().labels(&format!("kubernetes.io/service-name={service}")),
        |slices| {
            let serving = slices
                .iter()
                .filter_map(|s| s.endpoints.as_ref())
                .flatten()
                .any(|endpoint| {
                    // An endpoint without a ready condition counts as ready (the API's rule).
                    endpoint
                        .conditions
                        .as_ref()
                        .and_then(|c| c.ready)
                        .unwrap_or(true)
                });
            if serving {
                Verdict::Done
            } else {
                Verdict::Waiting("no Ready endpoint".into())
            }
        },
    )
    .await?;
    wait_ca_injected(client, &service, budget).await
}

/// Waits until every validating webhook that calls the Service trusts the
/// CA in the certificate Secret. When the Secret gets a new certificate
/// (filled again, or rotated by the cert-controller) the webhook serves it
/// at once, but the webhooks trust it only once the cert-controller has
/// injected its CA; until then the API server refuses every ExternalSecret
/// ("certificate signed by unknown authority").
async fn wait_ca_injected(
    client: &kube::Client,
    service: &str,
    budget: Budget,
) -> Result<(), Error> {
    let namespace = SHARED_ESO_RELEASE.0;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let ca = secrets
        .list(&ListParams::default().labels(WEBHOOK_SECRET_SELECTOR))
        .await
        .map_err(|e| Error::internal(format!("read the ESO webhook certificate Secret: {e}")))?
        .items
        .into_iter()
        .filter(|s| s.metadata.name.as_deref() == Some(service))
        .find_map(|s| s.data?.remove(CA_CERT))
        .filter(|ca| !ca.0.is_empty());
    let Some(ca) = ca else {
        // Certificates from elsewhere (cert-manager): not ours to check.
        return Ok(());
    };
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    Wait::new(
        format!("the ESO webhooks calling {namespace}/{service}"),
        "trusting its certificate's CA",
        budget,
    )
    .advice(format!(
        "the cert-controller injects the CA: `kubectl -n {namespace} logs deploy/{}-cert-controller`",
        SHARED_ESO_RELEASE.1
    ))
    .list(configurations, watcher::Config::default(), |configurations| {
        let stale = configurations
            .iter()
            .flat_map(|c| c.webhooks.iter().flatten())
            .filter(|w| {
                w.client_config
                    .service
                    .as_ref()
                    .is_some_and(|s| s.namespace == namespace && s.name == service)
            })
            .filter(|w| w.client_config.ca_bundle.as_ref() != Some(&ca))
            .count();
        if stale == 0 {
            Verdict::Done
        } else {
            Verdict::Waiting(format!("{stale} webhook(s) without the CA"))
        }
    })
    .await
    .map(|_| ())
}

/// A CA and a serving certificate for `dns_name`, as PEM, keyed as the
/// webhook's Secret holds them.
pub struct CertificateBundle {
    pub files: BTreeMap<&'static str, String>,
}

impl CertificateBundle {
    pub fn issue(dns_name: &str) -> Result<CertificateBundle, Error> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose, PKCS_RSA_SHA256,
        };
        let failed = |what: &str, e: rcgen::Error| {
            Error::internal(format!("issue the ESO webhook certificate ({what}): {e}"))
        };
        let ca_key = KeyPair::generate_for(&PKCS_RSA_SHA256).map_err(|e| failed("CA key", e))?;
        let ca_pkcs8 = ca_key.serialize_der();
        let ca_pkcs1 = pkcs8_rsa_private_key(&ca_pkcs8)
            .ok_or_else(|| Error::internal("the generated CA key is not PKCS#8 RSA"))?;
        let mut ca =
            CertificateParams::new(vec![CA_NAME.to_string()]).map_err(|e| failed("CA name", e))?;
        ca.distinguished_name.push(DnType::CommonName, CA_NAME);
        ca.distinguished_name
            .push(DnType::OrganizationName, "devstack");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyCertSign,
        ];
        let ca_cert = ca.self_signed(&ca_key).map_err(|e| failed("CA", e))?;

        let server_key = KeyPair::generate().map_err(|e| failed("serving key", e))?;
        let mut server = CertificateParams::new(vec![dns_name.to_string()])
            .map_err(|e| failed("serving name", e))?;
        server.distinguished_name.push(DnType::CommonName, dns_name);
        server.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let issuer = Issuer::new(ca, ca_key);
        let server_cert = server
            .signed_by(&server_key, &issuer)
            .map_err(|e| failed("serving certificate", e))?;

        let files = BTreeMap::from([
            (CA_CERT, ca_cert.pem()),
            (CA_KEY, pem("RSA PRIVATE KEY", ca_pkcs1)),
            (SERVER_CERT, server_cert.pem()),
            (SERVER_KEY, server_key.serialize_pem()),
        ]);
        Ok(CertificateBundle { files })
    }

    pub fn ca_fingerprint(&self) -> String {
        hex::encode(Sha256::digest(self.files[CA_CERT].as_bytes()))
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// One DER element: its tag, its contents, and what follows it.
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let width = usize::from(first & 0x7f);
        if width == 0 || width > 4 || rest.len() < width {
            return None;
        }
        let len = rest[..width]
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b));
        (len, &rest[width..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

const DER_SEQUENCE: u8 = 0x30;
const DER_INTEGER: u8 = 0x02;
const DER_OCTET_STRING: u8 = 0x04;
/// rsaEncryption, 1.2.840.113549.1.1.1, as its DER OBJECT IDENTIFIER.
const RSA_ENCRYPTION_OID: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01,
];

/// The PKCS#1 RSAPrivateKey inside a PKCS#8 PrivateKeyInfo (RFC 5208:
/// version, algorithm, then the key as an OCTET STRING).
fn pkcs8_rsa_private_key(pkcs8: &[u8]) -> Option<&[u8]> {
    let (DER_SEQUENCE, info, _) = der_element(pkcs8)? else {
        return None;
    };
    let (DER_INTEGER, _version, rest) = der_element(info)? else {
        return None;
    };
    let (DER_SEQUENCE, algorithm, rest) = der_element(rest)? else {
        return None;
    };
    if !algorithm.starts_with(RSA_ENCRYPTION_OID) {
        return None;
    }
    let (DER_OCTET_STRING, key, _) = der_element(rest)? else {
        return None;
    };
    Some(key)
}

/// The webhook Service's name, which its certificate is for: the chart names
/// the Service and the Secret `<fullname>-webhook`, and the release's name
/// is its fullname.
fn expected_dns_name() -> String {
    let (namespace, release) = SHARED_ESO_RELEASE;
    format!("{release}-webhook.{namespace}.svc")
}

type Issuing = tokio::task::JoinHandle<Result<CertificateBundle, Error>>;

fn issue_in_background(dns_name: String) -> (String, Issuing) {
    let for_name = dns_name.clone();
    let issuing = tokio::task::spawn_blocking(move || CertificateBundle::issue(&dns_name));
    (for_name, issuing)
}

fn has_certificate(secret: &Secret) -> bool {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(SERVER_CERT))
        .is_some_and(|c| !c.0.is_empty())
}

/// Fills each empty webhook certificate Secret of the release's namespace.
/// The write is conditional on the Secret's version, so a certificate the
/// cert-controller wrote first is never replaced; and the cert-controller,
/// finding ours valid, keeps it.
async fn issue_when_empty(client: &kube::Client) -> std::convert::Infallible {
    let namespace = SHARED_ESO_RELEASE.0;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    // Issued ahead only when no certificate is there yet (a first install),
    // not on every `up` of a stack that has one.
    let mut ahead = match secrets
        .list(&ListParams::default().labels(WEBHOOK_SECRET_SELECTOR))
        .await
    {
        Ok(listed) if listed.items.iter().any(has_certificate) => None,
        _ => Some(issue_in_background(expected_dns_name())),
    };
    let mut empty = wait::watch(
        secrets.clone(),
        watcher::Config::default().labels(WEBHOOK_SECRET_SELECTOR),
    )
    .applied_objects()
    .filter_map(|secret| async move { secret.ok().filter(|s| !has_certificate(s)) })
    .boxed();
    loop {
        let Some(secret) = empty.next().await else {
            return futures::future::pending().await;
        };
        let (Some(name), Some(version)) = (
            secret.metadata.name.clone(),
            secret.metadata.resource_version.clone(),
        ) else {
            continue;
        };
        // The webhook Service is named like its Secret (the chart's
        // `<fullname>-webhook`); the cert-controller checks this name.
        let dns_name = format!("{name}.{namespace}.svc");
        let issuing = match ahead.take() {
            Some((for_name, issuing)) if for_name == dns_name => issuing,
            _ => issue_in_background(dns_name).1,
        };
        let issued = issuing.await;
        let bundle = match issued {
            Ok(Ok(bundle)) => bundle,
            Ok(Err(e)) => {
                tracing::warn!("{e}; the cert-controller will issue it instead");
                continue;
            }
            Err(e) => {
                tracing::warn!("issuing the ESO webhook certificate: {e}");
                continue;
            }
        };
        let data: BTreeMap<&str, ByteString> = bundle
            .files
            .iter()
            .map(|(key, pem)| (*key, ByteString(pem.clone().into_bytes())))
            .collect();
        let patch = json!({
            "metadata": {
                "resourceVersion": version,
                "annotations": {ISSUED_CA_ANNOTATION: bundle.ca_fingerprint()},
            },
            "data": data,
        });
        match secrets
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::debug!("filled the ESO webhook certificate Secret {namespace}/{name}");
                inject_ca(client, &name, &bundle.files[CA_CERT]).await;
            }
            // 409: the cert-controller got there first, which is as good.
            Err(e) => tracing::debug!("filling the ESO webhook certificate Secret {name}: {e}"),
        }
    }
}

/// Puts the CA devstack issued into the existing webhooks that call the
/// Service, as the cert-controller does on its next pass, minutes away when
/// the webhooks already exist (a Secret filled again). Webhooks the chart
/// has yet to create get the CA from the cert-controller when they appear.
async fn inject_ca(client: &kube::Client, service: &str, ca_pem: &str) {
    let namespace = SHARED_ESO_RELEASE.0;
    let ca = ByteString(ca_pem.as_bytes().to_vec());
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let Ok(listed) = api.list(&ListParams::default()).await else {
        return;
    };
    for configuration in listed.items {
        let stale: Vec<serde_json::Value> = configuration
            .webhooks
            .iter()
            .flatten()
            .filter(|w| {
                w.client_config
                    .service
                    .as_ref()
                    .is_some_and(|s| s.namespace == namespace && s.name == service)
                    && w.client_config.ca_bundle.as_ref() != Some(&ca)
            })
            .map(|w| json!({"name": w.name, "clientConfig": {"caBundle": ca}}))
            .collect();
        let Some(name) = configuration.metadata.name.filter(|_| !stale.is_empty()) else {
            continue;
        };
        // Strategic merge: webhooks are merged by name, the rest is kept.
        let patch = json!({"webhooks": stale});
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            tracing::debug!("injecting the ESO webhook CA into {name}: {e}");
        }
    }
}

/// Annotates each webhook pod that is not Ready with the Secret's version
/// whenever the Secret gains a certificate, so that kubelet syncs the pod's
/// Secret volume at once instead of on its next periodic sync.
async fn refresh_pods_when_filled(client: &kube::Client) -> std::convert::Infallible {
    let namespace = SHARED_ESO_RELEASE.0;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut filled = wait::watch(
        secrets,
        watcher::Config::default().labels(WEBHOOK_SECRET_SELECTOR),
    )
    .applied_objects()
    .filter_map(|secret| async move {
        let secret = secret.ok().filter(has_certificate)?;
        Some(secret.metadata.resource_version.unwrap_or_default())
    })
    .boxed();
    loop {
        let Some(version) = filled.next().await else {
            // The watch retries for ever; should it end, the periodic
            // kubelet sync still gets there.
            return futures::future::pending().await;
        };
        let Some(listed) = webhook_pods(&pods).await else {
            continue;
        };
        for pod in listed {
            let ready = pod_is_ready(&pod);
            let annotated = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(WEBHOOK_CERTS_ANNOTATION))
                == Some(&version);
            let Some(name) = pod.metadata.name.filter(|_| !ready && !annotated) else {
                continue;
            };
            let patch = json!({"metadata": {"annotations": {WEBHOOK_CERTS_ANNOTATION: version}}});
            if let Err(e) = pods
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::debug!("annotating webhook pod {name}: {e}");
            }
        }
    }
}

/// How soon a running webhook pod that is not Ready is looked at again.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(500);

/// What ESO's webhook logs when it found no certificate, before its 10 s
/// sleep, and what it logs each time it looks (`waitForCerts`).
const NO_CERTIFICATE_LOG: &str = "invalid certs. retrying";
const LOOKING_LOG: &str = "validating certs";

/// True when the webhook's log ends in its wait for a certificate: it found
/// none at its last look.
fn waiting_for_certificate(log: &str) -> bool {
    match (log.rfind(NO_CERTIFICATE_LOG), log.rfind(LOOKING_LOG)) {
        (Some(no_certificate), Some(looking)) => no_certificate > looking,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

async fn webhook_pods(pods: &Api<Pod>) -> Option<Vec<Pod>> {
    let listed = pods
        .list(&ListParams::default().labels(WEBHOOK_POD_SELECTOR))
        .await;
    listed.ok().map(|l| l.items)
}

fn pod_is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c.ready))
}

/// Deletes each webhook pod whose process waits for a certificate the
/// Secret already holds; looked at whenever a webhook pod or the Secret
/// changes, and again every 0.5 s while one runs unready (its process logs
/// its failed look after the event that showed it running). The
/// Deployment's replacement mounts the filled Secret.
async fn replace_pods_waiting_for_certificate(client: &kube::Client) -> std::convert::Infallible {
    let namespace = SHARED_ESO_RELEASE.0;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod_changes = wait::watch(
        pods.clone(),
        watcher::Config::default().labels(WEBHOOK_POD_SELECTOR),
    )
    .applied_objects()
    .map(|_| ());
    let secret_changes = wait::watch(
        secrets.clone(),
        watcher::Config::default().labels(WEBHOOK_SECRET_SELECTOR),
    )
    .applied_objects()
    .map(|_| ());
    let mut changes = futures::stream::select(pod_changes, secret_changes).boxed();
    let mut replaced: HashSet<String> = HashSet::new();
    // A pod that runs, not Ready, may log its failed look only after the
    // event that showed it running: look again shortly, without an event.
    let mut look_again = false;
    loop {
        if look_again {
            if let Ok(None) = tokio::time::timeout(LOOK_AGAIN, changes.next()).await {
                break;
            }
        } else if changes.next().await.is_none() {
            break;
        }
        look_again = false;
        let filled = secrets
            .list(&ListParams::default().labels(WEBHOOK_SECRET_SELECTOR))
            .await
            .is_ok_and(|listed| listed.items.iter().any(has_certificate));
        if !filled {
            continue;
        }
        let Some(listed) = webhook_pods(&pods).await else {
            continue;
        };
        for pod in listed {
            let running = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
                });
            let (Some(name), Some(uid)) = (pod.metadata.name.clone(), pod.metadata.uid.clone())
            else {
                continue;
            };
            if !running
                || pod_is_ready(&pod)
                || pod.metadata.deletion_timestamp.is_some()
                || replaced.contains(&uid)
            {
                continue;
            }
            look_again = true;
            let container = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .map(|c| c.name.clone());
            let params = LogParams {
                container,
                tail_lines: Some(50),
                ..LogParams::default()
            };
            let Ok(log) = pods.logs(&name, &params).await else {
                continue;
            };
            if !waiting_for_certificate(&log) {
                continue;
            }
            // Only the pod as looked at: one that has since looked again
            // and found its certificate (a new status, a new version) stays.
            let as_looked_at = DeleteParams::default().preconditions(Preconditions {
                uid: Some(uid.clone()),
                resource_version: pod.metadata.resource_version.clone(),
            });
            match pods.delete(&name, &as_looked_at).await {
                Ok(_) => {
                    tracing::debug!(
                        "replaced ESO webhook pod {name}: it waited 10 s for a certificate the Secret holds"
                    );
                    replaced.insert(uid);
                }
                Err(e) => tracing::debug!("replacing ESO webhook pod {name}: {e}"),
            }
        }
    }
    futures::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn der_of(pem: &str) -> Vec<u8> {
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("base64 PEM body")
    }

    /// The serving certificate verifies for the Service's name against the
    /// CA, and the CA against itself for the name the cert-controller
    /// checks, by an independent verifier (webpki), as ESO's Go code
    /// verifies them.
    #[test]
    fn issued_certificates_verify_as_the_cert_controller_checks_them() {
        use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
        let dns = "external-secrets-webhook.external-secrets.svc";
        let bundle = CertificateBundle::issue(dns).expect("issue");
        let ca_der = CertificateDer::from(der_of(&bundle.files[CA_CERT]));
        let anchor = webpki::anchor_from_trusted_cert(&ca_der).expect("CA parses");
        let verify = |cert: &CertificateDer<'_>, name: &str| {
            let cert = webpki::EndEntityCert::try_from(cert)?;
            cert.verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                std::slice::from_ref(&anchor),
                &[],
                UnixTime::now(),
                webpki::KeyUsage::server_auth(),
                None,
                None,
            )?;
            cert.verify_is_valid_for_subject_name(&ServerName::try_from(name).expect("name"))
        };
        let server_der = CertificateDer::from(der_of(&bundle.files[SERVER_CERT]));
        verify(&server_der, dns).expect("serving certificate verifies for the Service");
        assert!(
            verify(&server_der, "other.external-secrets.svc").is_err(),
            "the serving certificate must not verify for another name"
        );
        assert!(bundle.files[SERVER_KEY].starts_with("-----BEGIN PRIVATE KEY-----\n"));
        assert_eq!(bundle.ca_fingerprint().len(), 64);
    }

    /// ESO parses the CA key with Go's `x509.ParsePKCS1PrivateKey`: a PEM
    /// "RSA PRIVATE KEY" holding an RSAPrivateKey, nine INTEGERs from
    /// version 0 (RFC 8017 A.1.2), 2048-bit like ESO's own.
    #[test]
    fn ca_key_is_pkcs1_rsa() {
        let bundle = CertificateBundle::issue("x.y.svc").expect("issue");
        let key = &bundle.files[CA_KEY];
        assert!(
            key.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"),
            "{}",
            &key[..40]
        );
        assert!(key.ends_with("-----END RSA PRIVATE KEY-----\n"));
        assert!(key.lines().all(|l| l.len() <= 64));
        let der = der_of(key);
        let (tag, mut fields, rest) = der_element(&der).expect("one element");
        assert_eq!((tag, rest.len()), (DER_SEQUENCE, 0));
        let mut integers = Vec::new();
        while let Some((tag, value, rest)) = der_element(fields) {
            assert_eq!(tag, DER_INTEGER);
            integers.push(value);
            fields = rest;
        }
        assert_eq!(integers.len(), 9);
        assert_eq!(integers[0], [0]);
        let modulus = integers[1].strip_prefix(&[0]).unwrap_or(integers[1]);
        assert_eq!(modulus.len() * 8, 2048);
    }

    #[test]
    fn der_lengths_in_long_form_and_truncated_input() {
        let long: Vec<u8> = [0x04, 0x81, 0x80].into_iter().chain([7; 0x80]).collect();
        let (tag, value, rest) = der_element(&long).expect("long form");
        assert_eq!((tag, value.len(), rest.len()), (DER_OCTET_STRING, 0x80, 0));
        assert!(der_element(&long[..100]).is_none(), "truncated");
        assert!(der_element(&[0x30, 0x80]).is_none(), "indefinite length");
        assert!(pkcs8_rsa_private_key(&[0x30, 0x03, 0x02, 0x01, 0x00]).is_none());
    }

    /// Lines as ESO 2.9.0's webhook writes them (from a Kind run whose
    /// webhook mounted its Secret empty).
    #[test]
    fn a_webhook_waits_for_a_certificate_until_it_looks_again() {
        let looking = r#"{"level":"info","logger":"setup","msg":"validating certs"}"#;
        let none = r#"{"level":"error","logger":"setup","msg":"invalid certs. retrying...","error":"stat /tmp/certs/tls.crt: no such file or directory"}"#;
        let serving = r#"{"level":"info","logger":"controller-runtime.webhook","msg":"Serving webhook server","port":10250}"#;
        assert!(waiting_for_certificate(&format!("{looking}\n{none}\n")));
        assert!(
            waiting_for_certificate(&format!("{looking}\n{none}\n{looking}\n{none}\n")),
            "still none at its second look"
        );
        assert!(
            waiting_for_certificate(&format!("{none}\n")),
            "the looking line fell out of the tail"
        );
        assert!(!waiting_for_certificate(&format!(
            "{looking}\n{none}\n{looking}\n{serving}\n"
        )));
        assert!(!waiting_for_certificate(&format!("{looking}\n{serving}\n")));
        assert!(!waiting_for_certificate(""), "not started yet");
    }

    #[test]
    fn the_certificate_issued_ahead_is_for_the_charts_webhook_service() {
        assert_eq!(
            expected_dns_name(),
            "external-secrets-webhook.external-secrets.svc"
        );
    }
}
