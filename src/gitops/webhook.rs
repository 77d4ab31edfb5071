//! The ESO webhook's serving certificate, made available the moment its pod
//! starts.
//!
//! The chart creates an empty Secret for the certificate; the
//! cert-controller fills it once its own pod is up, and then injects the CA
//! into the CRDs and the ValidatingWebhookConfigurations. A webhook pod that
//! starts before the Secret is filled checks its certificate files again
//! only 10 s later, and kubelet refreshes a pod's Secret volume only on its
//! periodic sync (a minute apart), so on a cold install the webhook, which
//! the operator level of the chain waits for, used to become Ready 10-70 s
//! after its pod.
//!
//! Two things close that gap, for as long as the chain is awaited:
//! - devstack fills the empty Secret itself, with a CA and a serving
//!   certificate made the way the cert-controller makes them, so the
//!   webhook finds its certificate at its first look. The cert-controller
//!   then judges the certificate valid, keeps it, and injects its CA.
//! - should a webhook pod still have mounted the Secret empty, it is
//!   annotated once the Secret holds a certificate: an update of the pod
//!   makes kubelet sync its volumes at once.

use std::collections::BTreeMap;

use base64::Engine as _;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::HELM_RELEASE;
use crate::error::Error;
use crate::k8s::wait;

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
const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const SERVER_CERT: &str = "tls.crt";
const SERVER_KEY: &str = "tls.key";

/// Keeps the webhook's certificate ready for its pods; never returns.
pub async fn keep_certificate_ready(client: &kube::Client) -> std::convert::Infallible {
    let filled = issue_when_empty(client);
    let refreshed = refresh_pods_when_filled(client);
    futures::pin_mut!(filled, refreshed);
    futures::future::select(filled, refreshed)
        .await
        .factor_first()
        .0
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
    let namespace = HELM_RELEASE.0;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
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
        let issued = tokio::task::spawn_blocking(move || CertificateBundle::issue(&dns_name)).await;
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
                tracing::debug!("filled the ESO webhook certificate Secret {namespace}/{name}")
            }
            // 409: the cert-controller got there first, which is as good.
            Err(e) => tracing::debug!("filling the ESO webhook certificate Secret {name}: {e}"),
        }
    }
}

/// Annotates each webhook pod that is not Ready with the Secret's version
/// whenever the Secret gains a certificate, so that kubelet syncs the pod's
/// Secret volume at once instead of on its next periodic sync.
async fn refresh_pods_when_filled(client: &kube::Client) -> std::convert::Infallible {
    let namespace = HELM_RELEASE.0;
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
        let Ok(listed) = pods
            .list(&ListParams::default().labels(WEBHOOK_POD_SELECTOR))
            .await
        else {
            continue;
        };
        for pod in listed.items {
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c.ready));
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
}
