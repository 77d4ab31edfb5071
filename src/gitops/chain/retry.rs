//! When a chain level (or the HelmRelease) is asked again: the failures
//! Flux reports that mean "not yet", the pause before asking again after
//! each, and the grace a health check gets before devstack nudges it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::k8s::conditions::Condition;

/// Ready reasons that mean "not yet", not "failed": waiting for a
/// dependency or for a source (the HelmRelease's chart) to be fetched.
const WAITING_REASONS: &[&str] = &[
    "Progressing",
    "ProgressingWithRetry",
    "DependencyNotReady",
    "SourceNotReady",
    "Succeeded",
    "ReconciliationSucceeded",
    // devstack's reconcile request ended a health check that would have
    // passed at its next poll; Flux starts it over at once.
    "HealthCheckCanceled",
];

/// Whether a Ready=False condition (or Warning event) means "not yet" rather
/// than "failed". kustomize-controller reports a source that exists but has
/// no artifact yet, or does not exist yet, as `ArtifactFailed` with these
/// messages and retries by itself: a Kustomization applied beside its new
/// Bucket shows it until the first fetch lands.
///
/// An apply whose dry-run could not reach an admission webhook waits too:
/// after a restart (or a restore) the operator level still reads Ready from
/// before, so the custom resources' level applies while the webhook's pod
/// is coming back; devstack asks for it again (`WEBHOOK_NOT_SERVING_PAUSE`).
/// A webhook that answers and denies is a failure.
///
/// A download the artifact server refused waits as well: devstack asks the
/// level (or the HelmRelease) again (see `artifact_server_not_serving`).
pub fn waiting(reason: &str, message: &str) -> bool {
    WAITING_REASONS.contains(&reason)
        || (reason == "ArtifactFailed"
            && (message.starts_with("Source artifact not found")
                || (message.starts_with("Source '") && message.ends_with("' not found"))
                || artifact_server_not_serving(message)))
        || (reason == "ReconciliationFailed" && webhook_not_serving(message))
}

/// A Flux controller's download of a source's artifact met the
/// source-controller not serving yet. After a restart (or a restore) the
/// controllers start together and the first downloads race the artifact
/// server; Flux's fetchers would wait 5 s before trying again, so
/// devstack's Flux install makes a download fail at once (`--http-retry=0`)
/// and the chain asks for the level (or the HelmRelease) again
/// (`REFUSED_DOWNLOAD_PAUSE`).
///
/// Refused, the message is Flux's HTTP client's (`GET URL giving up after
/// 1 attempt(s): ...`), in kustomize-controller's "failed to download
/// archive" and helm-controller's "Could not load chart" alike. Answered
/// 404 (a download that left the node before its kube-proxy knew the
/// artifact Service), each controller waits its 30 s dependency requeue,
/// which no new source revision cuts short.
pub(super) fn artifact_server_not_serving(message: &str) -> bool {
    const ANSWERED_NOT_FOUND: &[&str] = &[
        // kustomize-controller v1.9.5
        "Source is not ready, artifact not found",
        // helm-controller v1.6.4
        "Source not ready: artifact not found",
    ];
    (message.contains(" giving up after ")
        && ["connection refused", "no route to host"]
            .iter()
            .any(|m| message.contains(m)))
        || ANSWERED_NOT_FOUND.iter().any(|m| message.starts_with(m))
}

/// Between a download the artifact server refused and the request to try
/// again: a server that starts within it is not asked many times over.
const REFUSED_DOWNLOAD_PAUSE: Duration = Duration::from_millis(300);

/// How long a level may check health before devstack tells Flux that its
/// checks pass: Flux's first poll comes right after its apply and, with
/// everything healthy (a restart's re-apply), ends the check by itself; a
/// request then would cancel it and apply the level again.
const HEALTH_NUDGE_GRACE: Duration = Duration::from_millis(500);

/// Whether a level checking health since `since` has had its grace; if not,
/// `look_again` makes the chain look at it again when it has.
pub(super) fn grace_over(since: Instant, look_again: &mut Option<Instant>) -> bool {
    let due = since + HEALTH_NUDGE_GRACE;
    if due <= Instant::now() {
        return true;
    }
    *look_again = Some(look_again.map_or(due, |at| at.min(due)));
    false
}

/// Between an apply whose admission webhook did not answer and the request
/// to try again. Flux itself would try again only at the level's
/// `retryInterval` (1 min), and the API server may reach the webhook's new
/// pod a moment after the pod is Ready.
const WEBHOOK_NOT_SERVING_PAUSE: Duration = Duration::from_secs(1);

/// How long to wait before asking again for a level whose reconcile failed
/// on something about to serve; `None` for any other failure.
fn retry_pause(message: &str) -> Option<Duration> {
    if artifact_server_not_serving(message) {
        Some(REFUSED_DOWNLOAD_PAUSE)
    } else if webhook_not_serving(message) {
        Some(WEBHOOK_NOT_SERVING_PAUSE)
    } else {
        None
    }
}

/// `retry_pause` of a Ready=False condition whose failure counts as
/// waiting; `None` for any other condition.
pub(super) fn retry_pause_of(condition: &Condition) -> Option<Duration> {
    let message = condition.message.as_deref().unwrap_or_default();
    (condition.status == "False"
        && waiting(condition.reason.as_deref().unwrap_or_default(), message))
    .then(|| retry_pause(message))
    .flatten()
}

/// A TLS failure counts too: the webhook serves its certificate and the API
/// server trusts its CA only once ESO's cert-controller has written both,
/// and a call that leaves the node before kube-proxy knows the Service meets
/// whatever answers outside.
fn webhook_not_serving(message: &str) -> bool {
    const UNREACHABLE: &[&str] = &[
        "no endpoints available for service",
        "connect: connection refused",
        "context deadline exceeded",
        "i/o timeout",
        "tls: failed to verify certificate",
        "x509: certificate signed by unknown authority",
    ];
    message.contains("failed calling webhook") && UNREACHABLE.iter().any(|m| message.contains(m))
}

/// Reconcile requests to send again once their pause is over: the levels
/// (by index) and the HelmRelease (`None`) whose last reconcile met
/// something not serving yet.
#[derive(Default)]
pub(super) struct Asks {
    due: BTreeMap<Option<usize>, Instant>,
}

impl Asks {
    /// A target asked again after `pause`; one already waiting keeps its
    /// time (each look at the chain reports it again).
    pub(super) fn add(&mut self, target: Option<usize>, pause: Duration) {
        self.due
            .entry(target)
            .or_insert_with(|| Instant::now() + pause);
    }

    /// A target not to be asked again after all: asked for otherwise
    /// meanwhile, or reconciled again by Flux itself. A second request
    /// while Flux works on the first makes it start over (a level checking
    /// the health of what it applied cancels the check and applies again).
    pub(super) fn forget(&mut self, target: Option<usize>) {
        self.due.remove(&target);
    }

    /// When the next request is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// The targets whose pause is over, no longer waiting.
    pub(super) fn take_due(&mut self) -> Vec<Option<usize>> {
        let now = Instant::now();
        let due: Vec<_> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(target, _)| *target)
            .collect();
        for target in &due {
            self.due.remove(target);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_without_its_first_artifact_is_waiting_not_failed() {
        // kustomize-controller v1.9.5's messages for a source not fetched yet.
        assert!(waiting(
            "ArtifactFailed",
            "Source artifact not found, retrying in 30s"
        ));
        assert!(waiting(
            "ArtifactFailed",
            "Source 'Bucket/flux-system/devstack' not found"
        ));
        assert!(waiting("DependencyNotReady", "dependency not ready"));
        // A download the artifact server refused (kustomize-controller
        // v1.9.5 with `--http-retry=0`, its source-controller starting):
        // devstack asks again.
        assert!(waiting(
            "ArtifactFailed",
            "failed to download archive: GET http://10.43.150.30/bucket/flux-system/devstack/050d.tar.gz giving up after 1 attempt(s): Get \"http://10.43.150.30/bucket/flux-system/devstack/050d.tar.gz\": dial tcp 10.43.150.30:80: connect: connection refused"
        ));
        // helm-controller v1.6.4's, loading the chart (condition, event).
        let chart = "GET http://10.43.150.30/helmchart/flux-system/external-secrets/external-secrets-2.9.0.tgz giving up after 1 attempt(s): Get \"http://10.43.150.30/helmchart/flux-system/external-secrets/external-secrets-2.9.0.tgz\": dial tcp 10.43.150.30:80: connect: connection refused";
        assert!(waiting(
            "ArtifactFailed",
            &format!("Could not load chart: {chart}")
        ));
        assert!(waiting("ArtifactFailed", chart));
        // Answered 404 (a restore's downloads that left the node before its
        // kube-proxy knew the artifact Service): both controllers wait 30 s.
        assert!(artifact_server_not_serving(
            "Source is not ready, artifact not found, retrying in 30s"
        ));
        assert!(artifact_server_not_serving(
            "Source not ready: artifact not found. Retrying in 30s"
        ));
        assert!(waiting(
            "ArtifactFailed",
            "Source not ready: artifact not found. Retrying in 30s"
        ));
        // A download that failed otherwise is a failure, as is anything else.
        assert!(!waiting(
            "ArtifactFailed",
            "failed to download archive from http://10.43.150.30/x.tar.gz (status: 500 Internal Server Error)"
        ));
        assert!(!waiting(
            "ArtifactFailed",
            "failed to download artifact: HTTP status 500"
        ));
        assert!(!waiting(
            "ReconciliationFailed",
            "Source artifact not found"
        ));
    }

    #[test]
    fn a_webhook_not_serving_yet_is_waiting_and_one_that_denies_is_a_failure() {
        // kustomize-controller v1.9.5 on a restored stack, the webhook's pod
        // not back yet.
        assert!(waiting(
            "ReconciliationFailed",
            "ClusterSecretStore/localstack dry-run failed (InternalError): Internal error occurred: \
             failed calling webhook \"validate.clustersecretstore.external-secrets.io\": failed to \
             call webhook: Post \"https://external-secrets-webhook.external-secrets.svc:443/validate-\
             external-secrets-io-v1-clustersecretstore?timeout=5s\": no endpoints available for \
             service \"external-secrets-webhook\""
        ));
        assert!(!waiting(
            "ReconciliationFailed",
            "ClusterSecretStore/localstack dry-run failed (Forbidden): admission webhook \
             \"validate.clustersecretstore.external-secrets.io\" denied the request: \
             spec.provider: Required value"
        ));
        assert!(!waiting(
            "BuildFailed",
            "failed calling webhook: no endpoints available for service"
        ));
        // kube-apiserver v1.36.4 of a Kind cluster made by `kind create
        // cluster`: the call left the node before kube-proxy knew the Service.
        assert!(waiting(
            "ReconciliationFailed",
            "ClusterSecretStore/localstack dry-run failed (InternalError): Internal error occurred: \
             failed calling webhook \"validate.clustersecretstore.external-secrets.io\": failed to \
             call webhook: Post \"https://external-secrets-webhook.external-secrets.svc:443/validate-\
             external-secrets-io-v1-clustersecretstore?timeout=5s\": tls: failed to verify \
             certificate: x509: certificate is valid for deb.debian.org, not \
             external-secrets-webhook.external-secrets.svc"
        ));
    }

    #[test]
    fn a_level_that_met_something_not_serving_is_asked_again_soon() {
        assert_eq!(
            retry_pause("Source is not ready, artifact not found, retrying in 30s"),
            Some(REFUSED_DOWNLOAD_PAUSE)
        );
        assert_eq!(
            retry_pause(
                "ClusterSecretStore/localstack dry-run failed: failed calling webhook \
                 \"validate.clustersecretstore.external-secrets.io\": ... connect: connection refused"
            ),
            Some(WEBHOOK_NOT_SERVING_PAUSE)
        );
        // Only a Ready=False whose failure counts as waiting is asked again.
        let not_found = "Source not ready: artifact not found. Retrying in 30s";
        let ready = |status: &str, reason: &str| {
            Condition::new("Ready", status, Some(reason), Some(not_found))
        };
        assert_eq!(
            retry_pause_of(&ready("False", "ArtifactFailed")),
            Some(REFUSED_DOWNLOAD_PAUSE)
        );
        assert_eq!(retry_pause_of(&ready("Unknown", "ArtifactFailed")), None);
        assert_eq!(retry_pause_of(&ready("False", "InstallFailed")), None);
        // A webhook that answers and denies waits for a fix, not a retry.
        assert_eq!(
            retry_pause(
                "admission webhook \"validate.clustersecretstore.external-secrets.io\" denied \
                 the request: spec.provider: Required value"
            ),
            None
        );
    }

    #[test]
    fn a_health_nudge_waits_for_flux_s_own_first_check() {
        let mut look_again = None;
        let just_now = Instant::now();
        assert!(!grace_over(just_now, &mut look_again));
        assert_eq!(look_again, Some(just_now + HEALTH_NUDGE_GRACE));
        // The earliest of two levels held back is looked at first.
        let earlier = just_now - HEALTH_NUDGE_GRACE / 2;
        assert!(!grace_over(earlier, &mut look_again));
        assert_eq!(look_again, Some(earlier + HEALTH_NUDGE_GRACE));
        assert!(!grace_over(just_now, &mut look_again));
        assert_eq!(look_again, Some(earlier + HEALTH_NUDGE_GRACE));
        // A level checking health for longer is nudged at once.
        let mut none = None;
        assert!(grace_over(just_now - HEALTH_NUDGE_GRACE, &mut none));
        assert_eq!(none, None);
    }

    #[test]
    fn a_request_to_try_again_waits_its_own_pause_once() {
        let mut asks = Asks::default();
        asks.add(Some(1), Duration::ZERO);
        asks.add(None, Duration::from_secs(60));
        let first = asks.next_due().expect("due");
        // Reported again while it waits: it keeps its time.
        asks.add(Some(1), Duration::from_secs(60));
        assert_eq!(asks.next_due(), Some(first));
        assert_eq!(asks.take_due(), vec![Some(1)]);
        assert!(
            asks.take_due().is_empty(),
            "the HelmRelease's pause is not over"
        );
        assert!(asks.next_due().expect("still waiting") > first);
        asks.forget(None);
        assert_eq!(asks.next_due(), None);
    }
}
