//! Watches the chain (root -> CRDs -> operator -> CRs, plus the HelmRelease)
//! until every level is Ready for its source's current revision, nudging
//! each level the moment the one before it turns Ready, so no level sits in
//! Flux's 30 s dependency requeue or a retry interval. Records every failure
//! Flux reports on the way (Ready=False with a failure reason, and Warning
//! events), which is how the race shows.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde::Serialize;
use serde_json::{Value, json};

use super::{CHAIN, FLUX_NAMESPACE, HELM_RELEASE, ROOT_KUSTOMIZATION};
use crate::error::Error;
use crate::k8s::conditions::{self, Condition};
use crate::k8s::dynamic_api;
use crate::ui::Step;

pub const RECONCILE_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";

/// Ready reasons that mean "not yet", not "failed": waiting for a
/// dependency or for a source (the HelmRelease's chart) to be fetched.
const WAITING_REASONS: &[&str] = &[
    "Progressing",
    "ProgressingWithRetry",
    "DependencyNotReady",
    "SourceNotReady",
    "Succeeded",
    "ReconciliationSucceeded",
];

pub fn kustomizations(client: &kube::Client) -> Api<DynamicObject> {
    dynamic_api(
        client,
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some(FLUX_NAMESPACE),
    )
}

pub fn helm_releases(client: &kube::Client) -> Api<DynamicObject> {
    dynamic_api(
        client,
        "helm.toolkit.fluxcd.io/v2",
        "HelmRelease",
        Some(HELM_RELEASE.0),
    )
}

fn source_api(client: &kube::Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    dynamic_api(client, "source.toolkit.fluxcd.io/v1", kind, Some(ns))
}

/// The Ready condition of a Flux object.
pub fn ready_condition(object: &Value) -> Option<Condition> {
    conditions::condition(object, "Ready")
}

fn observed_current(object: &Value) -> bool {
    object["metadata"]["generation"].as_i64() == object["status"]["observedGeneration"].as_i64()
}

/// Asks Flux to reconcile `name` now; returns the request's token, which
/// the object reports as `status.lastHandledReconcileAt` once handled.
pub async fn request_reconcile(api: &Api<DynamicObject>, name: &str) -> Result<String, Error> {
    let token = chrono_like_now();
    let patch = json!({"metadata": {"annotations": {RECONCILE_ANNOTATION: token}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| token)
        .map_err(|e| Error::internal(format!("request a reconcile of {name}: {e}")))
}

/// Has a source fetch again now and waits until it has, so what was just
/// published is the artifact the Kustomizations see.
pub async fn refresh_source(
    client: &kube::Client,
    kind: &str,
    name: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let api = source_api(client, kind, FLUX_NAMESPACE);
    let token = request_reconcile(&api, name).await?;
    let started = Instant::now();
    loop {
        let object = api
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .map(|o| serde_json::to_value(o).unwrap_or_default());
        let condition = object.as_ref().and_then(ready_condition);
        if let Some(object) = &object
            && object["status"]["lastHandledReconcileAt"].as_str() == Some(token.as_str())
        {
            match &condition {
                Some(c) if c.is_true() => return Ok(()),
                Some(c) if c.status == "False" => {
                    return Err(Error::unhealthy(format!(
                        "{kind} {FLUX_NAMESPACE}/{name} cannot fetch ({})",
                        c.summary()
                    ))
                    .with_hint(match kind {
                        "Bucket" => "LocalStack must be running and reachable from pods: `devstack status`",
                        _ => "check the repository URL, branch and credentials in the profile's `gitops.git`",
                    }));
                }
                _ => {}
            }
        }
        if started.elapsed() >= timeout {
            let why = condition
                .map(|c| c.summary())
                .unwrap_or_else(|| "no status yet".into());
            return Err(Error::timeout(format!(
                "{kind} {FLUX_NAMESPACE}/{name} did not fetch within {}s ({why})",
                timeout.as_secs()
            ))
            .with_hint("check the source-controller: `kubectl -n flux-system logs deploy/source-controller`"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A unique, increasing token (Flux only compares it with the last handled one).
fn chrono_like_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:09}", now.as_secs(), now.subsec_nanos())
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LevelTiming {
    pub name: String,
    /// From the start of the wait until Ready for the current revision.
    pub ready_after_ms: u64,
    /// Whether devstack asked Flux to reconcile it early.
    pub nudged: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// `Kustomization flux-system/external-secrets-crs`.
    pub object: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainReport {
    pub levels: Vec<LevelTiming>,
    /// Distinct failures Flux reported while the chain converged.
    pub failures: Vec<Failure>,
    pub elapsed_ms: u64,
}

impl ChainReport {
    pub fn failed_reconciliations(&self) -> usize {
        self.failures.len()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct WaitOptions {
    pub timeout: Duration,
    /// Request reconciles as levels turn Ready (off only to measure Flux alone).
    pub nudge: bool,
    /// Stop at the first failure that retrying cannot fix (a manifest that
    /// does not build or apply for the current revision).
    pub fail_fast: bool,
}

/// One level of the chain as watched.
struct Level {
    name: &'static str,
    ready_at: Option<Duration>,
    /// The reconcile devstack requested of this level, if any: the level is
    /// settled only once Flux reports it handled (`lastHandledReconcileAt`).
    requested: Option<String>,
}

/// Whether Flux has finished the reconcile requested with `token` (none
/// requested: nothing to finish).
pub fn handled(object: &Value, token: Option<&str>) -> bool {
    token.is_none_or(|t| object["status"]["lastHandledReconcileAt"].as_str() == Some(t))
}

/// Waits until the root Kustomization, each level of the chain and the
/// HelmRelease are Ready for their sources' current revisions and have
/// finished every reconcile devstack asked for. `root_request` is the token
/// of the reconcile the caller requested of the root Kustomization.
///
/// Each level is nudged only once the level below has finished its own
/// requested reconcile and is Ready: a level reconciled while its dependency
/// is mid-reconcile fails its dependency check and waits for Flux's 30 s
/// requeue, which is how a careless nudge unsettles a healthy chain.
pub async fn wait_ready(
    client: &kube::Client,
    options: WaitOptions,
    root_request: Option<String>,
    step: &Step,
) -> Result<ChainReport, Error> {
    let started = Instant::now();
    let since = std::time::SystemTime::now() - Duration::from_secs(1);
    let ks = kustomizations(client);
    let hr = helm_releases(client);
    let mut levels: Vec<Level> = std::iter::once(ROOT_KUSTOMIZATION)
        .chain(CHAIN)
        .map(|name| Level {
            name,
            ready_at: None,
            requested: None,
        })
        .collect();
    levels[0].requested = root_request;
    let mut failures = BTreeSet::new();
    loop {
        let mut blocking: Option<String> = None;
        for i in 0..levels.len() {
            let name = levels[i].name;
            let object = ks.get_opt(name).await.ok().flatten();
            let Some(object) = object.map(|o| serde_json::to_value(o).unwrap_or_default()) else {
                blocking.get_or_insert(format!(
                    "Kustomization {FLUX_NAMESPACE}/{name} does not exist yet"
                ));
                continue;
            };
            let current = source_revision(client, &object).await;
            let condition = ready_condition(&object);
            if let Some(c) = &condition
                && c.status == "False"
                && !WAITING_REASONS.contains(&c.reason.as_deref().unwrap_or_default())
            {
                let reason = c.reason.clone().unwrap_or_default();
                let message = c.message.clone().unwrap_or_default();
                let failure = Failure {
                    object: format!("Kustomization {FLUX_NAMESPACE}/{name}"),
                    reason: reason.clone(),
                    message: message.clone(),
                };
                let attempted = object["status"]["lastAttemptedRevision"].as_str();
                if options.fail_fast
                    && matches!(reason.as_str(), "BuildFailed" | "ReconciliationFailed")
                    && current.is_some()
                    && attempted == current.as_deref()
                {
                    return Err(Error::user(format!(
                        "{} failed ({reason}): {message}",
                        failure.object
                    ))
                    .with_hint("fix the manifest and run `devstack sync`; `devstack status` shows the chain"));
                }
                failures.insert(failure);
            }
            let ready = condition.as_ref().is_some_and(Condition::is_true)
                && observed_current(&object)
                && current.is_some()
                && object["status"]["lastAppliedRevision"].as_str() == current.as_deref()
                && handled(&object, levels[i].requested.as_deref());
            if ready {
                if levels[i].ready_at.is_none() {
                    levels[i].ready_at = Some(started.elapsed());
                    step.progress(format!("{name} Ready"));
                    if options.nudge
                        && let Some(next) = levels.get_mut(i + 1)
                        && next.requested.is_none()
                    {
                        // The next level may not exist until this one applied
                        // it; then Flux reconciles it on creation anyway.
                        next.requested = request_reconcile(&ks, next.name).await.ok();
                    }
                }
            } else {
                levels[i].ready_at = None;
                let why = condition
                    .map(|c| c.summary())
                    .unwrap_or_else(|| "not reconciled yet".into());
                blocking.get_or_insert(format!("Kustomization {FLUX_NAMESPACE}/{name}: {why}"));
            }
        }
        let release = hr
            .get_opt(HELM_RELEASE.1)
            .await
            .ok()
            .flatten()
            .map(|o| serde_json::to_value(o).unwrap_or_default());
        let mut release_ready = false;
        if let Some(release) = &release {
            let condition = ready_condition(release);
            if let Some(c) = &condition {
                let reason = c.reason.clone().unwrap_or_default();
                if c.status == "False" && !WAITING_REASONS.contains(&reason.as_str()) {
                    failures.insert(Failure {
                        object: format!("HelmRelease {}/{}", HELM_RELEASE.0, HELM_RELEASE.1),
                        reason,
                        message: c.message.clone().unwrap_or_default(),
                    });
                }
                release_ready = c.is_true() && observed_current(release);
            }
        }
        for failure in warning_events(client, since).await {
            failures.insert(failure);
        }
        if blocking.is_none() && release_ready {
            break;
        }
        if started.elapsed() >= options.timeout {
            let what = blocking.unwrap_or_else(|| {
                format!(
                    "HelmRelease {}/{} is not Ready",
                    HELM_RELEASE.0, HELM_RELEASE.1
                )
            });
            return Err(Error::timeout(format!(
                "the External Secrets chain was not Ready within {}s: {what}",
                options.timeout.as_secs()
            ))
            .with_hint("raise `timeouts.eso`; `devstack status` shows each level, `kubectl -n flux-system get kustomizations,buckets` more"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(ChainReport {
        levels: levels
            .iter()
            .map(|l| LevelTiming {
                name: l.name.to_string(),
                ready_after_ms: l.ready_at.unwrap_or_default().as_millis() as u64,
                nudged: l.requested.is_some(),
            })
            .collect(),
        failures: failures.into_iter().collect(),
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// The artifact revision of the source a Kustomization reads.
pub async fn source_revision(client: &kube::Client, kustomization: &Value) -> Option<String> {
    let source = &kustomization["spec"]["sourceRef"];
    let kind = source["kind"].as_str()?;
    let name = source["name"].as_str()?;
    let ns = source["namespace"]
        .as_str()
        .or(kustomization["metadata"]["namespace"].as_str())?;
    let object = source_api(client, kind, ns).get_opt(name).await.ok()??;
    serde_json::to_value(object).ok()?["status"]["artifact"]["revision"]
        .as_str()
        .map(String::from)
}

/// Warning events Flux recorded for Kustomizations and HelmReleases since `since`.
async fn warning_events(client: &kube::Client, since: std::time::SystemTime) -> Vec<Failure> {
    let mut out = Vec::new();
    for ns in [FLUX_NAMESPACE, HELM_RELEASE.0] {
        let events: Api<Event> = Api::namespaced(client.clone(), ns);
        let Ok(list) = events
            .list(&ListParams::default().fields("type=Warning"))
            .await
        else {
            continue;
        };
        for event in list.items {
            let kind = event.involved_object.kind.as_deref().unwrap_or_default();
            if !matches!(kind, "Kustomization" | "HelmRelease") {
                continue;
            }
            let when = event
                .last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or(event.event_time.as_ref().map(|t| t.0));
            let recent = when.is_some_and(|t| std::time::SystemTime::from(t) >= since);
            let reason = event.reason.clone().unwrap_or_default();
            if !recent || WAITING_REASONS.contains(&reason.as_str()) {
                continue;
            }
            out.push(Failure {
                object: format!(
                    "{kind} {ns}/{}",
                    event.involved_object.name.as_deref().unwrap_or("?")
                ),
                reason,
                message: event.message.clone().unwrap_or_default(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn reconcile_tokens_increase() {
        let a = chrono_like_now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(chrono_like_now() > a);
    }
}
