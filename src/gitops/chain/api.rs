//! Flux's objects as the chain reads and asks them: the APIs of the
//! Kustomizations, the HelmRelease, its Deployments and the sources, and
//! the requests devstack sends them (reconcile, suspend, fetch now).

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::judge::{handled, ready_condition};
use crate::error::Error;
use crate::gitops::FLUX_NAMESPACE;
use crate::k8s::dynamic_api;
use crate::k8s::wait::{Budget, Verdict, Wait};

pub const RECONCILE_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";

pub fn kustomizations(client: &kube::Client) -> Api<DynamicObject> {
    dynamic_api(
        client,
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some(FLUX_NAMESPACE),
    )
}

/// The HelmReleases in `namespace` (the stack's ESO namespace).
pub fn helm_releases(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    dynamic_api(
        client,
        "helm.toolkit.fluxcd.io/v2",
        "HelmRelease",
        Some(namespace),
    )
}

/// The chart's Deployments the operator level health-checks: the
/// controller, its webhook (whose Service and certificate Secret share its
/// name) and its cert-controller.
pub fn eso_deployments(release: &str) -> [String; 3] {
    [
        release.to_string(),
        format!("{release}-webhook"),
        format!("{release}-cert-controller"),
    ]
}

pub(super) fn workloads(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    dynamic_api(client, "apps/v1", "Deployment", Some(namespace))
}

fn source_api(client: &kube::Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    dynamic_api(client, "source.toolkit.fluxcd.io/v1", kind, Some(ns))
}

/// Asks Flux to reconcile `name` now; returns the request's token, which
/// the object reports as `status.lastHandledReconcileAt` once handled.
pub async fn request_reconcile(api: &Api<DynamicObject>, name: &str) -> Result<String, Error> {
    let token = chrono_like_now();
    tracing::debug!("requesting a reconcile of {name} ({token})");
    let patch = json!({"metadata": {"annotations": {RECONCILE_ANNOTATION: token}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| token)
        .map_err(|e| Error::internal(format!("request a reconcile of {name}: {e}")))
}

/// Suspends (or resumes) a Flux source in flux-system; one that does not
/// exist yet is left alone.
pub async fn suspend_source(
    client: &kube::Client,
    kind: &str,
    name: &str,
    suspend: bool,
) -> Result<(), Error> {
    let api = source_api(client, kind, FLUX_NAMESPACE);
    // `null` removes the field: resumed, the object is as devstack applies it.
    let value = if suspend { json!(true) } else { Value::Null };
    let patch = json!({"spec": {"suspend": value}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(Error::internal(format!(
            "{} {kind} {FLUX_NAMESPACE}/{name}: {e}",
            if suspend { "suspend" } else { "resume" }
        ))),
    }
}

/// Has a source fetch again now and waits until it has, so what was just
/// published is the artifact the Kustomizations see.
pub async fn refresh_source(
    client: &kube::Client,
    kind: &str,
    name: &str,
    budget: Budget,
) -> Result<(), Error> {
    let api = source_api(client, kind, FLUX_NAMESPACE);
    let mut failed_fetches = 0;
    loop {
        let token = request_reconcile(&api, name).await?;
        let fetched = Wait::new(
            format!("{kind} {FLUX_NAMESPACE}/{name}"),
            "Ready with a fresh fetch",
            budget,
        )
        .advice(
            "check the source-controller: `kubectl -n flux-system logs deploy/source-controller`",
        )
        .object(api.clone(), name, |object| {
            let object = object.map(|o| serde_json::to_value(o).unwrap_or_default());
            source_verdict(kind, name, object.as_ref(), &token)
        })
        .await;
        match fetched {
            // A new stack's first fetch may come before the cluster's DNS
            // knows the LocalStack route; one failing through a few is real.
            Err(err)
                if err.kind() == crate::error::Kind::Unhealthy
                    && failed_fetches < FETCH_ATTEMPTS - 1 =>
            {
                failed_fetches += 1;
                tracing::debug!("fetch {failed_fetches} of {kind} {name} failed: {err}");
                tokio::time::sleep(FETCH_RETRY_DELAY).await;
            }
            other => return other.map(|_| ()),
        }
    }
}

/// Fetches a source gets before its failure stops `up`, and the pause
/// between them.
const FETCH_ATTEMPTS: u32 = 5;
const FETCH_RETRY_DELAY: Duration = Duration::from_secs(2);

/// Whether a source has handled the fetch requested with `token`, and how
/// that went.
fn source_verdict(kind: &str, name: &str, object: Option<&Value>, token: &str) -> Verdict {
    let Some(object) = object else {
        return Verdict::Waiting("does not exist".into());
    };
    let condition = ready_condition(object);
    let state = condition
        .as_ref()
        .map(|c| c.summary())
        .unwrap_or_else(|| "no status yet".into());
    if !handled(object, Some(token)) {
        return Verdict::Waiting(format!("fetch not handled yet; {state}"));
    }
    match &condition {
        Some(c) if c.is_true() => Verdict::Done,
        Some(c) if c.status == "False" => Verdict::Failed(
            Error::unhealthy(format!(
                "{kind} {FLUX_NAMESPACE}/{name} cannot fetch ({})",
                c.summary()
            ))
            .with_hint(match kind {
                "Bucket" => "LocalStack must be running and reachable from pods: `devstack status`",
                _ => {
                    "check the repository URL, branch and credentials in the profile's `gitops.git`"
                }
            }),
        ),
        _ => Verdict::Waiting(state),
    }
}

/// A unique, increasing token (Flux only compares it with the last handled one).
fn chrono_like_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:09}", now.as_secs(), now.subsec_nanos())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_done_only_once_it_handled_this_fetch() {
        let bucket = |token: &str, status: &str, reason: &str| {
            json!({"status": {"lastHandledReconcileAt": token, "conditions": [
                {"type": "Ready", "status": status, "reason": reason, "message": "m"}]}})
        };
        let waiting = |v: Verdict| match v {
            Verdict::Waiting(state) => state,
            other => panic!("{other:?}"),
        };
        // Ready from an earlier fetch is not this fetch.
        let old = bucket("1", "True", "Succeeded");
        assert_eq!(
            waiting(source_verdict("Bucket", "b", Some(&old), "2")),
            "fetch not handled yet; Succeeded: m"
        );
        let done = bucket("2", "True", "Succeeded");
        assert!(matches!(
            source_verdict("Bucket", "b", Some(&done), "2"),
            Verdict::Done
        ));
        let failed = bucket("2", "False", "BucketOperationFailed");
        let Verdict::Failed(err) = source_verdict("Bucket", "b", Some(&failed), "2") else {
            panic!("a failed fetch must fail the wait");
        };
        assert_eq!(err.kind(), crate::error::Kind::Unhealthy);
        assert!(err.message().contains("Bucket flux-system/b cannot fetch"));
        assert_eq!(
            waiting(source_verdict("Bucket", "b", None, "2")),
            "does not exist"
        );
    }

    #[test]
    fn reconcile_tokens_increase() {
        let a = chrono_like_now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(chrono_like_now() > a);
    }
}
