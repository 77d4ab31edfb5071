//! Watches the chain (root -> CRDs -> operator -> CRs, plus the HelmRelease)
//! until every level is Ready for its source's current revision, nudging
//! each level the moment the one before it turns Ready, so no level sits in
//! Flux's 30 s dependency requeue or a retry interval, and asking Flux to
//! check a level's health again the moment what it checks is healthy, so
//! no level waits for Flux's next 5 s health poll. Records every failure
//! Flux reports on the way (Ready=False with a failure reason, and Warning
//! events), which is how the race shows.

mod api;
mod follow;
mod judge;
mod retry;

use serde::Serialize;

pub use api::{
    RECONCILE_ANNOTATION, eso_deployments, helm_releases, kustomizations, refresh_source,
    request_reconcile, source_revision, suspend_source,
};
pub use judge::{handled, ready_condition};
pub use retry::waiting;

use judge::{applied, observed_current};

use super::ChainPlan;
use crate::error::Error;
use crate::k8s::wait::Budget;
use crate::ui::Step;

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

#[derive(Debug, Clone)]
pub struct WaitOptions {
    /// What of the chain the stack delivers: with devstack's own ESO its
    /// HelmRelease, and with ESO's shared parts the webhook's certificate.
    /// LocalStack's level in the cluster is followed (and nudged in turn)
    /// when no CRD level comes before the operator: nudged before it is
    /// Ready, the level that depends on it would sit in Flux's 30 s
    /// dependency requeue.
    pub plan: ChainPlan,
    /// Bounds the wait (`timeouts.eso`, shared with the steps before it).
    pub budget: Budget,
    /// Request reconciles as levels turn Ready (off only to measure Flux alone).
    pub nudge: bool,
    /// Stop at the first failure that retrying cannot fix (a manifest that
    /// does not build or apply for the current revision).
    pub fail_fast: bool,
    /// Levels to nudge even when already Ready for the current revision:
    /// those that substitute a fact that changed, which no revision tells.
    /// Any other settled level is left alone: after a restart every level
    /// is, and re-applying the ESO CRDs alone costs seconds.
    pub nudge_settled: std::collections::BTreeSet<String>,
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
///
/// The chain is looked at again after every change its watches report.
/// Meanwhile the ESO webhook's certificate is made ready for its pods
/// (see [`super::webhook`]); the wait ends once the webhook also serves.
pub async fn wait_ready(
    client: &kube::Client,
    options: WaitOptions,
    root_request: Option<String>,
    step: &Step,
) -> Result<ChainReport, Error> {
    let budget = options.budget;
    if !options.plan.installs_eso_shared {
        return follow::watch_chain(client, options, root_request, step).await;
    }
    let ready_and_serving = async {
        let report = follow::watch_chain(client, options, root_request, step).await?;
        super::webhook::wait_serving(client, budget).await?;
        Ok(report)
    };
    tokio::select! {
        report = ready_and_serving => report,
        never = super::webhook::keep_certificate_ready(client) => match never {},
    }
}

/// Whether the chain has applied before, for its current spec, what its
/// sources hold now, with the HelmRelease it installs deployed for its
/// current spec: a restart or a restore, where Flux only re-applies the
/// same objects. A level not found, or not reconciled yet, says no.
pub async fn applied_before(client: &kube::Client, plan: &ChainPlan) -> bool {
    let ks = kustomizations(client);
    for name in std::iter::once(plan.root()).chain(plan.chain_levels()) {
        let Ok(Some(object)) = ks.get_opt(&name).await else {
            return false;
        };
        let object = serde_json::to_value(object).unwrap_or_default();
        if !applied(&object, source_revision(client, &object).await.as_deref()) {
            return false;
        }
    }
    let Some((namespace, release)) = plan.release() else {
        return true;
    };
    // Its own reconcile after a restart may be under way (or have met a
    // source not serving yet): what counts is the spec it last handled and
    // the release that stands installed.
    match helm_releases(client, &namespace).get_opt(&release).await {
        Ok(Some(release)) => {
            let release = serde_json::to_value(release).unwrap_or_default();
            observed_current(&release) && release["status"]["history"][0]["status"] == "deployed"
        }
        _ => false,
    }
}
